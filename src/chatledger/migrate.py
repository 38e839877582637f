"""Alembic, run from Python: the shipped revisions, chatledger's own version tables, the
schema lock, and whether this chatledger can use a database.

The repository's ``migrations/`` folder is the Alembic script directory; the wheel
carries the same files as ``chatledger/migrations``. ``alembic upgrade head`` from the
repository root, ``chatledger upgrade`` and ``auto_upgrade`` run the same revisions,
the same way:

* **serialised**: under a schema lock of the server, held for the whole upgrade
  (PostgreSQL ``pg_advisory_xact_lock``, MySQL/MariaDB ``GET_LOCK``, SQLite
  ``BEGIN IMMEDIATE``; see :data:`chatledger.dialects.MIGRATION_TRANSACTIONS`), and
  inside one process one Alembic run at a time (Alembic's ``context`` and ``op`` are
  process-wide). Whoever waits re-reads the revision once granted the lock, and finds
  nothing left to do. The wait is bounded (:data:`LOCK_TIMEOUT`), then
  ``SchemaNotReady`` says who holds what;
* **atomic** on PostgreSQL and SQLite: the whole upgrade, every revision and the
  version rows, is one transaction, so a revision failing halfway leaves the database
  exactly as it was. MySQL/MariaDB commit every DDL statement by itself: a revision
  failing there leaves the statements before the failure applied, and the version
  row at the last revision that completed;
* **bookkept in tables of chatledger's own**: the revision in
  :data:`VERSION_TABLE` (so an application's own Alembic keeps ``alembic_version``),
  and the rolling-deploy rule below in :data:`COMPATIBILITY_TABLE`. A revision
  recorded by an older chatledger in ``alembic_version`` moves over on the next
  upgrade; until then it is read from there.

Conventions every revision file in ``migrations/versions/`` follows (checked when the
revisions are loaded, and by ``tests/test_revisions.py``):

* **Frozen.** It imports nothing from ``chatledger``: its column types are plain
  SQLAlchemy types, with ``with_variant`` for what :mod:`chatledger.types` renders per
  dialect, defined in the file itself, so a later change of the live types cannot
  change what an old revision creates.
* **Linear.** ``down_revision`` is the previous head (a string), no branches, no merges.
* **``compatible_from``** (a string): the oldest revision whose code runs correctly on
  the schema this revision leaves. An *expand* revision (old code keeps reading and
  writing correctly: a new nullable column, a new index, a new table) keeps its
  predecessor's value; a *contract* revision (anything older code would get wrong)
  names itself, or the head of an earlier release whose code already copes with the
  change. The template's default is the revision itself, the safe choice.

The upgrade records the ``compatible_from`` of the revision the database reaches;
code that does not ship a revision can still read it there. See :func:`standing`.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from sqlalchemy import Column, MetaData, String, Table, delete, insert, inspect, select
from sqlalchemy.engine import URL, Connection

from . import dialects
from .dsn import display, resolve_dsn, sqlite_file
from .errors import SchemaNotReady

T = TypeVar("T")

logger = logging.getLogger("chatledger")

#: chatledger's Alembic version table; the application's own Alembic keeps ``alembic_version``.
VERSION_TABLE = "chatledger_alembic_version"
#: Where chatledger kept its revision before it had a version table of its own.
LEGACY_VERSION_TABLE = "alembic_version"
#: One row: the database's revision and its ``compatible_from``, for code that does not
#: ship that revision.
COMPATIBILITY_TABLE = "chatledger_compatibility"
#: Seconds an upgrade waits for the schema lock (another process upgrading) by default.
LOCK_TIMEOUT = 300.0
#: The tables chatledger's first revision creates: a revision in ``alembic_version`` is
#: chatledger's only when they exist too (an application's own history may use the same ids).
_FIRST_TABLES = frozenset({"agent_sessions", "raw_messages", "session_snapshots", "rein_sessions"})

_compatibility = Table(
    COMPATIBILITY_TABLE,
    MetaData(),
    Column("revision", String(32), primary_key=True),
    Column("compatible_from", String(32), nullable=False),
    mysql_engine="InnoDB",
)
# Alembic's own version-table layout.
_legacy_versions = Table(LEGACY_VERSION_TABLE, MetaData(), Column("version_num", String(32), nullable=False))
_versions = Table(VERSION_TABLE, MetaData(), Column("version_num", String(32), nullable=False))

#: One Alembic run per process at a time: ``alembic.context`` and ``alembic.op`` are
#: module-wide proxies, so two runs at once (two stores, two threads) use each other's
#: connections and deadlock or fail.
_ALEMBIC_RUN = threading.Lock()


# -- the shipped revisions --------------------------------------------------------------


@cache
def script_location() -> Path:
    """The Alembic script directory: inside the installed package, or the source
    checkout's ``migrations/`` for an editable install."""
    packaged = Path(__file__).with_name("migrations")
    if (packaged / "env.py").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if (checkout / "env.py").is_file():
        return checkout
    raise RuntimeError("chatledger's migrations are missing from this installation")


def alembic_config(connection: Connection | None = None, location: str | Path | None = None) -> Config:
    """An Alembic ``Config`` for the revisions in ``location`` (default: the shipped ones).

    With ``connection``, ``env.py`` runs the migrations on that (synchronous facade
    of an async) connection, inside the caller's transaction, which holds the schema
    lock; without, it opens the database named by ``-x dsn=...``, ``CHATLEDGER_DSN`` or
    the embedded default and takes the lock itself.
    """
    config = Config()
    config.set_main_option("script_location", str(location or script_location()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@dataclass(frozen=True)
class Revisions:
    """A linear revision history and each revision's ``compatible_from``."""

    #: The script directory's path.
    location: str
    #: Revision ids, oldest first; the last is the head.
    order: tuple[str, ...]
    #: Revision id -> its ``compatible_from``.
    compatible_from: Mapping[str, str]

    @property
    def head(self) -> str:
        return self.order[-1]

    def knows(self, revision: str | None) -> bool:
        """Whether ``revision`` is one of these (exactly; no partial ids)."""
        return revision in self.compatible_from


def revisions(location: str | Path | None = None) -> Revisions:
    """The revisions in ``location`` (default: the ones this chatledger ships), checked
    against the conventions of this module's docstring.

    Raises:
        RuntimeError: no revision, a branch or merge, or a revision without a valid
            ``compatible_from`` (a string naming itself or an earlier revision).
    """
    return _revisions(str(location or script_location()))


@cache
def _revisions(location: str) -> Revisions:
    script = ScriptDirectory.from_config(alembic_config(location=location))
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"{location}: the revision history must have exactly one head, not {heads}")
    chain: list[str] = []
    compatible: dict[str, str] = {}
    current: str | None = heads[0]
    while current is not None:
        found = script.get_revision(current)
        assert found is not None
        down = found.down_revision
        if not (down is None or isinstance(down, str)) or found.is_merge_point or found.is_branch_point:
            raise RuntimeError(
                f"{found.path}: chatledger's revision history is linear (no branches or merges)"
            )
        value = getattr(found.module, "compatible_from", None)
        if not isinstance(value, str):
            raise RuntimeError(f"{found.path}: declares no compatible_from (a revision id string)")
        chain.append(current)
        compatible[current] = value
        current = down
    if len(chain) != len(list(script.walk_revisions())):
        raise RuntimeError(f"{location}: revisions outside the one line from base to head")
    chain.reverse()
    for position, revision in enumerate(chain):
        if compatible[revision] not in chain[: position + 1]:
            raise RuntimeError(
                f"revision {revision}: compatible_from {compatible[revision]!r} is neither itself nor "
                "an earlier revision"
            )
    return Revisions(location, tuple(chain), compatible)


def head_revision(location: str | Path | None = None) -> str:
    """The newest revision this chatledger ships (or ``location`` holds)."""
    return revisions(location).head


def is_known(revision: str, location: str | Path | None = None) -> bool:
    """Whether this chatledger ships ``revision`` (a newer one may have migrated the database)."""
    return revisions(location).knows(revision)


def imports_chatledger(path: Path) -> list[str]:
    """The ``chatledger`` modules a revision file imports (it must import none)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "chatledger"]
        elif isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] == "chatledger"
        ):
            found.append("." * node.level + (node.module or ""))
    return found


# -- what the database records ----------------------------------------------------------


@dataclass(frozen=True)
class SchemaState:
    """chatledger's revision as a database records it."""

    #: The revision the database is at; ``None`` for one chatledger never migrated.
    revision: str | None
    #: The oldest revision whose code runs on that schema, as recorded with it;
    #: ``None`` when nothing is recorded for that revision.
    compatible_from: str | None
    #: The revision is still in ``alembic_version``, where chatledger kept it before it
    #: had a table of its own; the next upgrade moves it.
    legacy: bool = False


def read_state(connection: Connection, location: str | Path | None = None) -> SchemaState:
    """Read chatledger's revision and the recorded ``compatible_from``; writes nothing."""
    tables = set(inspect(connection).get_table_names())
    if VERSION_TABLE in tables:
        revision = _one_revision(connection, _versions)
    else:
        legacy = _legacy_revision(connection, tables, revisions(location))
        if legacy is not None:
            return SchemaState(legacy, revisions(location).compatible_from[legacy], legacy=True)
        revision = None
    compatible = None
    if revision is not None and COMPATIBILITY_TABLE in tables:
        row = connection.execute(select(_compatibility.c.revision, _compatibility.c.compatible_from)).first()
        if row is not None and row.revision == revision:
            compatible = row.compatible_from
    return SchemaState(revision, compatible)


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (see :func:`read_state`), or ``None`` for one
    chatledger never migrated."""
    return read_state(connection).revision


def _one_revision(connection: Connection, table: Table) -> str | None:
    found = list(connection.scalars(select(table.c.version_num)))
    if len(found) > 1:
        raise SchemaNotReady(f"{table.name} holds several revisions, {found}; chatledger's history is linear")
    return found[0] if found else None


def _legacy_revision(connection: Connection, tables: set[str], known: Revisions) -> str | None:
    """chatledger's revision in ``alembic_version``: a row naming a revision chatledger
    ships, in a database that has chatledger's tables; other rows are an application's."""
    if LEGACY_VERSION_TABLE not in tables or not tables >= _FIRST_TABLES:
        return None
    ours = [rev for rev in connection.scalars(select(_legacy_versions.c.version_num)) if known.knows(rev)]
    return ours[0] if len(ours) == 1 else None


def adopt_legacy_revision(connection: Connection, script: ScriptDirectory) -> str | None:
    """Move chatledger's revision from ``alembic_version`` into :data:`VERSION_TABLE`
    (only a row naming a revision chatledger ships; ``alembic_version`` is dropped only
    when that leaves it empty). Runs in the migration's transaction, under the schema
    lock; returns the revision moved, if any."""
    tables = set(inspect(connection).get_table_names())
    if VERSION_TABLE in tables:
        return None
    known = revisions(script.dir)
    revision = _legacy_revision(connection, tables, known)
    if revision is None:
        return None
    MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).stamp(script, revision)
    connection.execute(delete(_legacy_versions).where(_legacy_versions.c.version_num == revision))
    if connection.scalar(select(_legacy_versions.c.version_num).limit(1)) is None:
        _legacy_versions.drop(connection)
    _record(connection, revision, known.compatible_from[revision])
    logger.info("moved chatledger's revision %s from %s to %s", revision, LEGACY_VERSION_TABLE, VERSION_TABLE)
    return revision


def _record(connection: Connection, revision: str, compatible_from: str) -> None:
    """Make :data:`COMPATIBILITY_TABLE` hold just ``(revision, compatible_from)``."""
    _compatibility.create(connection, checkfirst=True)
    connection.execute(delete(_compatibility))
    connection.execute(insert(_compatibility).values(revision=revision, compatible_from=compatible_from))


def record_compatibility(
    ctx: MigrationContext, step: MigrationInfo, heads: set[str], run_args: dict[str, Any]
) -> None:
    """Alembic ``on_version_apply`` hook: after every revision applied (upgrade, downgrade
    or stamp), in the same transaction, record the ``compatible_from`` of the revision
    the database is now at."""
    assert ctx.connection is not None and ctx.script is not None
    if len(heads) > 1:
        raise RuntimeError(f"chatledger's revision history is linear, the database has heads {heads}")
    if not heads:  # at base: gone, as a downgrade to base drops every chatledger table
        _compatibility.drop(ctx.connection, checkfirst=True)
        return
    (revision,) = heads
    _record(ctx.connection, revision, revisions(ctx.script.dir).compatible_from[revision])


def context_options(metadata: MetaData) -> dict[str, Any]:
    """Options of ``context.configure`` (``env.py``) and of ``MigrationContext.configure``
    (the drift comparison): chatledger's version table, the compatibility record, and an
    autogenerate that compares chatledger's own tables only (an application's tables,
    its ``alembic_version`` and chatledger's bookkeeping tables are not drift)."""
    tables = frozenset(metadata.tables)

    def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
        return type_ != "table" or name in tables

    return {
        "version_table": VERSION_TABLE,
        "on_version_apply": record_compatibility,
        "include_name": include_name,
        "compare_type": True,
    }


# -- can this chatledger use it ---------------------------------------------------------


class Standing(Enum):
    """A database's revision against this chatledger's head."""

    #: At this chatledger's head: go.
    AT_HEAD = "at head"
    #: Unmigrated, or at an older revision: upgrade first.
    BEHIND = "behind"
    #: At a newer revision whose recorded ``compatible_from`` this chatledger ships: go.
    AHEAD_COMPATIBLE = "ahead, compatible"
    #: At a newer revision this chatledger cannot run on: upgrade chatledger.
    AHEAD_INCOMPATIBLE = "ahead, incompatible"


def standing(state: SchemaState, location: str | Path | None = None) -> Standing:
    """Where ``state`` stands for this chatledger (the expand/contract rule).

    A revision this chatledger does not ship is a newer one (the history is linear).
    The database is usable then only when its recorded ``compatible_from`` is a
    revision this chatledger ships, so at or before its head.
    """
    known = revisions(location)
    if state.revision == known.head:
        return Standing.AT_HEAD
    if state.revision is None or known.knows(state.revision):
        return Standing.BEHIND
    if state.compatible_from is not None and known.knows(state.compatible_from):
        return Standing.AHEAD_COMPATIBLE
    return Standing.AHEAD_INCOMPATIBLE


def describe(url: URL, state: SchemaState, location: str | Path | None = None) -> str:
    """One line on ``state``'s standing; for the ones that refuse, the command that fixes it."""
    head = head_revision(location)
    where = f"database {display(url)}"
    kind = standing(state, location)
    if kind is Standing.AT_HEAD:
        note = f" (recorded in {LEGACY_VERSION_TABLE}; `chatledger upgrade` moves it)" if state.legacy else ""
        return f"{where} is at head ({head}){note}"
    if kind is Standing.BEHIND:
        return (
            f"{where} is at revision {state.revision or '<none>'}, chatledger needs {head}; run "
            "`alembic upgrade head` (with CHATLEDGER_DSN set) from the chatledger repository, or "
            "`chatledger upgrade --dsn DSN`, as the schema owner"
        )
    if kind is Standing.AHEAD_COMPATIBLE:
        return (
            f"{where} is at revision {state.revision}, newer than this chatledger's {head}, and "
            f"compatible with it: that schema serves chatledger from revision {state.compatible_from} on"
        )
    needs = (
        f"chatledger from revision {state.compatible_from} on"
        if state.compatible_from
        else "a newer chatledger"
    )
    return (
        f"{where} is at revision {state.revision}, which this chatledger does not know (its newest "
        f"is {head}); that schema needs {needs}: a newer chatledger migrated it; upgrade chatledger"
    )


# -- running migrations ---------------------------------------------------------------


async def run_on_connection(url: URL, work: Callable[[Connection], T]) -> T:
    """Run ``work`` on a fresh async connection to ``url``, in one committed transaction
    (no schema lock: for reads and tests)."""
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            return await connection.run_sync(work)
    finally:
        await engine.dispose()


async def run_locked(
    url: URL,
    work: Callable[[Connection], T],
    *,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> T:
    """Run ``work`` in one transaction holding the schema lock, on a connection of its own.

    On PostgreSQL and SQLite that transaction is atomic, DDL included; see
    :func:`chatledger.dialects.migration_transaction`.

    Raises:
        SchemaNotReady: the lock was not granted within ``lock_timeout`` seconds.
        ValueError: ``lock_timeout`` is not a positive number of seconds.
    """
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    _check_lock_timeout(lock_timeout)
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, poolclass=NullPool, connect_args=dict(connect_args or {}))
    dialects.configure_migration_engine(engine, lock_timeout=lock_timeout)
    try:
        async with (
            engine.connect() as connection,
            dialects.migration_transaction(connection, lock_timeout) as locked,
        ):
            return await locked.run_sync(work)
    except dialects.SchemaLockTimeout as error:
        raise SchemaNotReady(_lock_message(url, lock_timeout, str(error))) from error
    finally:
        await engine.dispose()


def _check_lock_timeout(lock_timeout: float) -> None:
    # 0 and negative values mean "no wait" to some servers and "forever" to others.
    if not (isinstance(lock_timeout, int | float) and 0 < lock_timeout < float("inf")):
        raise ValueError(f"lock_timeout must be a positive number of seconds, not {lock_timeout!r}")


def _lock_message(url: URL, lock_timeout: float, lock: str) -> str:
    return (
        f"database {display(url)}: waited {lock_timeout:g} s for the schema lock ({lock}), which "
        "another process holds while it migrates the database; try again once it is done, or "
        "wait longer (--lock-timeout)"
    )


async def _alembic(
    url: URL,
    work: Callable[[Connection], T],
    connect_args: Mapping[str, Any] | None,
    lock_timeout: float,
) -> T:
    """:func:`run_locked` for work that runs Alembic: in a thread of its own with an event
    loop of its own, once no other Alembic run of this process is under way. The
    thread finishes the migration (or rolls it back) even if the caller is cancelled."""

    _check_lock_timeout(lock_timeout)

    def in_thread() -> T:
        if not _ALEMBIC_RUN.acquire(timeout=lock_timeout):
            raise SchemaNotReady(_lock_message(url, lock_timeout, "another migration in this process"))
        try:
            return asyncio.run(run_locked(url, work, connect_args=connect_args, lock_timeout=lock_timeout))
        finally:
            _ALEMBIC_RUN.release()

    return await asyncio.to_thread(in_thread)


async def upgrade_schema(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> SchemaState:
    """Upgrade the database a DSN names (see :func:`chatledger.dsn.resolve_dsn`) to
    ``revision``, serialised and atomic as this module's docstring says; return its
    state afterwards. A database at a revision the scripts do not know (a newer
    chatledger migrated it) is left as it is.

    Raises:
        SchemaNotReady: the schema lock was not granted within ``lock_timeout`` seconds.
        ValueError: ``lock_timeout`` is not a positive number of seconds.
        alembic.util.CommandError: ``revision`` is not a valid target.
    """
    url = resolve_dsn(dsn)

    def work(connection: Connection) -> SchemaState:
        state = read_state(connection, script_location)
        if state.revision is not None and not is_known(state.revision, script_location):
            return state
        command.upgrade(alembic_config(connection, script_location), revision)
        return read_state(connection, script_location)

    return await _alembic(url, work, connect_args, lock_timeout)


async def upgrade_database(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> str | None:
    """:func:`upgrade_schema`, returning the revision the database is at afterwards.

    Raises:
        SchemaNotReady: as :func:`upgrade_schema`; or the database is at a newer
            revision this chatledger cannot run on (upgrade chatledger).
    """
    url = resolve_dsn(dsn)
    state = await upgrade_schema(
        url, revision, script_location=script_location, connect_args=connect_args, lock_timeout=lock_timeout
    )
    if standing(state, script_location) is Standing.AHEAD_INCOMPATIBLE:
        raise SchemaNotReady(describe(url, state, script_location))
    return state.revision


async def downgrade_database(
    dsn: str | URL | None,
    revision: str,
    *,
    script_location: str | Path | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> str | None:
    """Downgrade the database a DSN names to ``revision`` (``"base"`` drops every chatledger
    table), under the schema lock, atomically where DDL is transactional; return the
    revision it is at afterwards."""
    url = resolve_dsn(dsn)

    def work(connection: Connection) -> str | None:
        command.downgrade(alembic_config(connection, script_location), revision)
        return read_state(connection, script_location).revision

    return await _alembic(url, work, None, lock_timeout)


async def database_state(
    dsn: str | URL | None = None, script_location: str | Path | None = None
) -> SchemaState:
    """The state of the database a DSN names; reads only."""
    return await run_on_connection(resolve_dsn(dsn), lambda conn: read_state(conn, script_location))


async def database_revision(dsn: str | URL | None = None) -> str | None:
    """The revision of the database a DSN names; ``None`` when it has none."""
    return (await database_state(dsn)).revision


def run_alembic_from_command_line(url: URL, work: Callable[[Connection], None], lock_timeout: float) -> None:
    """``env.py`` under the ``alembic`` command: ``work`` under the schema lock, in one transaction."""
    asyncio.run(run_locked(url, work, lock_timeout=lock_timeout))
