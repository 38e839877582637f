"""Alembic, run from Python: upgrades and downgrades under the schema lock, in one
transaction.

The repository's ``migrations/`` folder is the Alembic script directory; the wheel
carries the same files as ``chatledger/migrations``. ``alembic upgrade head`` from the
repository root, ``chatledger upgrade`` and ``auto_upgrade`` run the same revisions,
the same way:

* **serialised**: under a schema lock of the server, held for the whole upgrade
  (PostgreSQL ``pg_advisory_xact_lock``, MySQL/MariaDB ``GET_LOCK``, SQLite
  ``BEGIN IMMEDIATE``; see :attr:`chatledger.dialects.Backend.migration_transaction`), and
  inside one process one Alembic run at a time (Alembic's ``context`` and ``op`` are
  process-wide). Whoever waits re-reads the revision once granted the lock, and finds
  nothing left to do. The wait is bounded (:data:`LOCK_TIMEOUT`), then
  ``SchemaNotReady`` says who holds what;
* **atomic** on PostgreSQL and SQLite: the whole upgrade, every revision and the
  version rows, is one transaction, so a revision failing halfway leaves the database
  exactly as it was. MySQL/MariaDB commit every DDL statement by itself: a revision
  failing there leaves the statements before the failure applied, and the version
  row at the last revision that completed;
* **bookkept in tables of chatledger's own**: the revision in :data:`VERSION_TABLE`
  (so an application's own Alembic keeps ``alembic_version``), and its
  ``compatible_from`` (the rolling-deploy rule) in :data:`COMPATIBILITY_TABLE`. A
  revision recorded by an older chatledger in ``alembic_version`` moves over on the
  next upgrade; until then it is read from there;
* **guarded**: no migration runs over zett-agent's own tables (``env.py`` refuses,
  naming ``chatledger adopt``), and :func:`downgrade_database` drops no table that
  holds rows unless told to, not even rows a writer commits while it runs;
* **also offline**: :func:`write_upgrade_sql` writes an upgrade as a script for the
  database's own client, the schema lock included (:mod:`chatledger.offline`).

**The deploy API**, for an application's deploy code (a wheel install is enough: the
revisions ship inside the package): :func:`upgrade`, :func:`check`, :func:`current`
and :func:`downgrade` do what the ``chatledger`` commands of those names do (the CLI
calls them), and say in their docstrings which exit status each outcome is.
**Beside an application's own Alembic**: :func:`include_name` and
:func:`include_object`, the hooks its ``env.py`` passes to ``context.configure()``
(:mod:`chatledger.app_alembic`).

The revisions and their conventions: :mod:`chatledger.revisions`. What a database
records and whether this chatledger can use it: :mod:`chatledger.versioning`; both are
re-exported here.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic import context as alembic_context
from alembic import op as alembic_op
from alembic.script import ScriptDirectory
from sqlalchemy import func, inspect, select, table
from sqlalchemy.engine import URL, Connection

from . import dialects, integrity
from .app_alembic import (
    AppHooks,
    app_hooks,
    app_version_tables,
    chatledger_tables,
    env_passes_hooks,
    find_env_py,
    include_name,
    include_object,
)
from .dsn import DSN_ENV, as_argument, default_sqlite_path, display, resolve_dsn, sqlite_file
from .errors import DowngradeRefused, SchemaNotReady
from .kinds import SessionKind, beside
from .options import MAX_LOCK_TIMEOUT
from .revisions import (
    Revisions,
    alembic_config,
    downgrade_steps,
    head_revision,
    imports_chatledger,
    is_known,
    revisions,
    script_location,
    tables_dropped,
)
from .schema import metadata
from .versioning import (
    COMPATIBILITY_TABLE,
    LEGACY_VERSION_TABLE,
    VERSION_TABLE,
    SchemaState,
    Standing,
    adopt_legacy_revision,
    context_options,
    current_revision,
    describe,
    read_state,
    record_compatibility,
    standing,
    upgrade_advice,
)

__all__ = [
    "CHECK_PAST_COUNTER",
    "CHECK_STATUS",
    "COMPATIBILITY_TABLE",
    "LEGACY_VERSION_TABLE",
    "LOCK_TIMEOUT",
    "VERSION_TABLE",
    "AppHooks",
    "Check",
    "Current",
    "Revisions",
    "SchemaState",
    "Standing",
    "Upgrade",
    "adopt_legacy_revision",
    "alembic_config",
    "app_hooks",
    "app_version_tables",
    "apply_upgrade",
    "chatledger_tables",
    "check",
    "context_options",
    "current",
    "current_revision",
    "database_revision",
    "database_state",
    "default_notice",
    "describe",
    "downgrade",
    "downgrade_database",
    "downgrade_steps",
    "existing_database",
    "head_revision",
    "imports_chatledger",
    "include_name",
    "include_object",
    "is_known",
    "read_state",
    "record_compatibility",
    "revisions",
    "run_alembic_from_command_line",
    "run_locked",
    "run_on_connection",
    "script_location",
    "standing",
    "tables_dropped",
    "upgrade",
    "upgrade_advice",
    "upgrade_database",
    "upgrade_schema",
    "write_upgrade_sql",
]

T = TypeVar("T")

#: Seconds an upgrade waits for the schema lock (another process upgrading) by default.
LOCK_TIMEOUT = 300.0

#: One Alembic run per process at a time: ``alembic.context`` and ``alembic.op`` are
#: module-wide proxies, so two runs at once (two stores, two threads) use each other's
#: connections and deadlock or fail.
_ALEMBIC_RUN = threading.Lock()


async def run_on_connection(url: URL, work: Callable[[Connection], T]) -> T:
    """Run ``work`` on a fresh async connection to ``url``, in one committed transaction
    (no schema lock: for reads and tests).

    Raises:
        ConfigurationError: the server refused the connection or a read (no such
            database, login, privilege), worded as the stores word it.
    """
    from sqlalchemy.pool import NullPool

    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = dialects.create_engine(url, poolclass=NullPool)
    try:
        with dialects.database_errors(url):
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
        ConfigurationError: the server refused the connection (no such database, login),
            worded as the stores word it; a statement it refuses is ``work``'s own failure.
    """
    from sqlalchemy.pool import NullPool

    _check_lock_timeout(lock_timeout)
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = dialects.create_engine(url, poolclass=NullPool, connect_args=dict(connect_args or {}))
    dialects.configure_migration_engine(engine, lock_timeout=lock_timeout)
    try:
        with dialects.database_errors(url, statements=False):
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
    if not (isinstance(lock_timeout, int | float) and 0 < lock_timeout <= MAX_LOCK_TIMEOUT):
        raise ValueError(
            f"lock_timeout must be a positive number of seconds up to {MAX_LOCK_TIMEOUT:g}, "
            f"not {lock_timeout!r}"
        )


def _busy_message(url: URL, lock_timeout: float, where: str) -> str:
    return (
        f"database {display(url)}: tables busy: waited {lock_timeout:g} s for a lock on chatledger's "
        f"tables, which another transaction holds (an open transaction that read or wrote them); "
        f"{where}. End that transaction (commit or roll back) and run it again, or wait longer "
        "(--lock-timeout)"
    )


async def _applied_since(url: URL, started: list[str | None], location: str | Path | None) -> str:
    """After a migration stopped by a busy table: what stays applied, in words."""
    if not started:
        return "nothing was applied"
    now = (await database_state(url, location)).revision
    if now == started[0]:
        return "nothing was applied"
    return (
        f"the revisions before it stay applied (MySQL/MariaDB commit every DDL statement on its own): "
        f"the database is now at {now}"
    )


def _lock_message(url: URL, lock_timeout: float, lock: str) -> str:
    return (
        f"database {display(url)}: waited {lock_timeout:g} s for the schema lock ({lock}), which "
        "another process holds while it migrates the database; try again once it is done, or "
        "wait longer (--lock-timeout)"
    )


@contextmanager
def _alembic_proxies_kept() -> Iterator[None]:
    """Keep an application's running Alembic working across a chatledger run inside it
    (its ``env.py`` calling :func:`upgrade`): ``alembic.context`` and ``alembic.op`` are
    process-wide proxies every Alembic run installs on entry and removes on exit
    (``ModuleClsProxy._install_proxy``/``_remove_proxy``), so the ones active before
    chatledger's run are installed again after it, and any it left behind removed."""
    modules = (alembic_context, alembic_op)
    before = [getattr(module, "_proxy", None) for module in modules]
    try:
        yield
    finally:
        for module, proxy in zip(modules, before, strict=True):
            left = getattr(module, "_proxy", None)
            if proxy is not None:
                proxy._install_proxy()
            elif left is not None:
                left._remove_proxy()


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
            with _alembic_proxies_kept():
                return asyncio.run(
                    run_locked(url, work, connect_args=connect_args, lock_timeout=lock_timeout)
                )
        finally:
            _ALEMBIC_RUN.release()

    return await asyncio.to_thread(in_thread)


@dataclass(frozen=True)
class Upgrade:
    """What an upgrade found and did."""

    #: The state before, read under the schema lock.
    before: SchemaState
    #: The state after.
    after: SchemaState
    #: The revisions applied, oldest first; empty when there was nothing to do.
    applied: tuple[str, ...]
    #: The database (``repr`` and :attr:`summary` mask its password).
    url: URL

    @property
    def summary(self) -> str:
        """What the upgrade did, in the one line ``chatledger upgrade`` prints: ``applied
        0001, 0002 to URL: now at head (0002)``, or ``URL is already at head (0002):
        nothing to apply``."""
        head = head_revision()
        reached = self.after.revision
        at = f"head ({head})" if reached == head else f"revision {reached or '<none>'}"
        moved = (
            f"; moved its revision from {LEGACY_VERSION_TABLE} to {VERSION_TABLE}"
            if self.before.legacy and not self.after.legacy
            else ""
        )
        if self.applied:
            return f"applied {', '.join(self.applied)} to {display(self.url)}: now at {at}{moved}"
        if standing(self.after) is Standing.AHEAD_COMPATIBLE:
            return f"{describe(self.url, self.after)}: nothing to apply"
        return f"{display(self.url)} is already at {at}: nothing to apply{moved}"


def _between(known: Revisions, before: str | None, after: str | None) -> tuple[str, ...]:
    """The revisions after ``before`` up to ``after`` (the history is linear)."""
    start = known.order.index(before) + 1 if known.knows(before) else 0
    end = known.order.index(after) + 1 if known.knows(after) else start
    return known.order[start:end]


async def apply_upgrade(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> Upgrade:
    """Upgrade the database a DSN names (see :func:`chatledger.dsn.resolve_dsn`) to
    ``revision``, serialised and atomic as this module's docstring says; return what it
    found and did. A database at a revision the scripts do not know (a newer
    chatledger migrated it) is left as it is.

    Raises:
        SchemaNotReady: the schema lock was not granted within ``lock_timeout`` seconds;
            or the database holds zett-agent's own tables (``chatledger adopt``).
        ValueError: ``lock_timeout`` is not a positive number of seconds.
        alembic.util.CommandError: ``revision`` is not a valid target.
    """
    url = resolve_dsn(dsn)
    started: list[str | None] = []

    def work(connection: Connection) -> Upgrade:
        before = read_state(connection, script_location)
        if before.revision is not None and not is_known(before.revision, script_location):
            return Upgrade(before, before, (), url)
        started.append(before.revision)
        command.upgrade(alembic_config(connection, script_location), revision)
        after = read_state(connection, script_location)
        applied = _between(revisions(script_location), before.revision, after.revision)
        return Upgrade(before, after, applied, url)

    try:
        return await _alembic(url, work, connect_args, lock_timeout)
    except dialects.MigrationBusy as busy:
        where = await _applied_since(url, started, script_location)
        raise SchemaNotReady(_busy_message(url, lock_timeout, where)) from busy


async def upgrade_schema(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> SchemaState:
    """:func:`apply_upgrade`, returning the database's state afterwards."""
    done = await apply_upgrade(
        dsn, revision, script_location=script_location, connect_args=connect_args, lock_timeout=lock_timeout
    )
    return done.after


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


def write_upgrade_sql(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> None:
    """Write the SQL of an upgrade to ``revision`` (``START:END`` for one from revision
    ``START``; else from an empty database) for the dialect of the DSN, to stdout,
    without connecting: Alembic's offline mode, see :mod:`chatledger.offline`.

    Raises:
        ValueError: ``lock_timeout`` is not a positive number of seconds.
        alembic.util.CommandError: ``revision`` is not a valid target, or a step cannot
            be rendered without the live database.
    """
    _check_lock_timeout(lock_timeout)
    url = resolve_dsn(dsn)
    config = alembic_config(location=script_location, url=url, lock_timeout=lock_timeout)
    with _ALEMBIC_RUN, _alembic_proxies_kept():
        command.upgrade(config, revision, sql=True)


async def downgrade_database(
    dsn: str | URL | None,
    revision: str,
    *,
    script_location: str | Path | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
    drop_rows: bool = False,
) -> str | None:
    """Downgrade the database a DSN names to ``revision`` (``"base"`` drops every chatledger
    table), under the schema lock, atomically where DDL is transactional; return the
    revision it is at afterwards.

    No table holding rows is dropped unless ``drop_rows``: their rows are counted first
    (a refusal then changes nothing), and again under a lock that keeps every writer out
    until they are dropped (:attr:`chatledger.dialects.Backend.drop_guard`), around each
    step that drops tables: an append open meanwhile commits before the count and is
    counted, a later one fails, unacknowledged, once the table is gone.

    Raises:
        DowngradeRefused: the downgrade would drop tables that hold rows and
            ``drop_rows`` is false; names them with their rows. Refused before the first
            change, unless the rows came in while the steps before the drops ran: on
            MySQL/MariaDB those steps stay committed, and the message says where the
            database is then.
        SchemaNotReady: the schema lock, or the lock on the tables to drop, was not
            granted within ``lock_timeout`` seconds.
        ValueError: ``lock_timeout`` is not a positive number of seconds.
    """
    url = resolve_dsn(dsn)
    started: list[str] = []  # the revision it started from, once a first step ran

    def work(connection: Connection) -> str | None:
        location = script_location
        adopt_legacy_revision(connection, ScriptDirectory.from_config(alembic_config(location=location)))
        current = read_state(connection, location).revision
        steps = downgrade_steps(current, revision, location) if current is not None else []
        if not any(tables for _, tables in steps):  # no table dropped: nothing to count or guard
            command.downgrade(alembic_config(connection, location), revision)
            return read_state(connection, location).revision
        assert current is not None
        target = _below(steps[-1][0], location)
        present = set(inspect(connection).get_table_names())
        dropped = [name for name in tables_dropped(current, target, location) if name in present]
        if not drop_rows:
            _refuse_dropping_rows(connection, url, current, revision, dropped)
        # Each step that drops tables runs under a guard of its own, the steps between
        # outside any: on MySQL/MariaDB a guarded session may use only the tables it
        # locked, under their own names, and the frozen revisions' data steps use aliases.
        for index, (step, tables) in enumerate(steps):
            later = steps[index + 1] if index + 1 < len(steps) else None
            if not tables and later is not None and not later[1]:
                continue  # the run of steps that drop nothing goes on: one downgrade for it
            below = _below(step, location)
            if not tables:
                command.downgrade(alembic_config(connection, location), below)
            else:
                present = set(inspect(connection).get_table_names())  # earlier steps may have made some
                guarded = [name for name in tables if name in present]
                touched = sorted(present & {*metadata.tables, *guarded, VERSION_TABLE, COMPATIBILITY_TABLE})
                with dialects.guard_drops(connection, guarded, touched, lock_timeout):
                    if not drop_rows:
                        _refuse_dropping_rows(connection, url, current, revision, guarded)
                    command.downgrade(alembic_config(connection, location), below)
            if not started:
                started.append(current)
        return read_state(connection, location).revision

    try:
        return await _alembic(url, work, None, lock_timeout)
    except DowngradeRefused as refused:
        where = await _moved_since(url, started, script_location)
        if where is None:
            raise
        raise DowngradeRefused(
            str(refused).replace("nothing was changed", where), tables=refused.tables
        ) from None
    except dialects.MigrationBusy as busy:
        where = await _moved_since(url, started, script_location) or "nothing was changed"
        raise SchemaNotReady(_busy_message(url, lock_timeout, where)) from busy
    except dialects.TablesBusy as busy:
        where = await _moved_since(url, started, script_location) or "nothing was dropped"
        raise SchemaNotReady(
            f"database {display(url)}: waited {lock_timeout:g} s to lock the tables the downgrade "
            f"drops ({', '.join(busy.tables)}), which open transactions use; {where}. Stop the services "
            "that write to it first (a downgrade drops their tables) and run it again, or wait longer "
            "(--lock-timeout)"
        ) from busy


def _below(revision: str, location: str | Path | None) -> str:
    """The revision a downgrade undoing ``revision`` reaches: its predecessor, or base."""
    order = revisions(location).order
    index = order.index(revision)
    return order[index - 1] if index else "base"


async def _moved_since(url: URL, started: list[str], location: str | Path | None) -> str | None:
    """After a failed downgrade whose first steps committed on their own (MySQL/MariaDB):
    where the database is now, in words; ``None`` when it is where it started."""
    if not started:
        return None
    now = (await database_state(url, location)).revision
    if now == started[0]:
        return None
    return (
        f"the steps before the drops stay committed (MySQL/MariaDB commit every DDL statement on its "
        f"own): the database is at revision {now or '<none>'} now"
    )


def _refuse_dropping_rows(
    connection: Connection, url: URL, current: str, target: str, tables: list[str]
) -> None:
    rows = {
        name: int(connection.scalar(select(func.count()).select_from(table(name))) or 0) for name in tables
    }
    held = {name: count for name, count in rows.items() if count}
    if held:
        listed = ", ".join(f"{name} ({count} row{'s' if count > 1 else ''})" for name, count in held.items())
        raise DowngradeRefused(
            f"downgrading database {display(url)} from {current} to {target} would drop tables that "
            f"hold rows: {listed}; nothing was changed. Drop them with `chatledger downgrade --yes` "
            "(drop_rows=True), after a backup",
            tables=held,
        )


# -- the deploy API: the schema commands as calls ---------------------------------------
#
# What ``chatledger upgrade``, ``check``, ``current`` and ``downgrade`` do, for an
# application's deploy code (the CLI calls these). Each is a coroutine:
# ``asyncio.run(chatledger.migrate.upgrade(dsn))`` from synchronous code.

#: :func:`check`'s status (``chatledger check``'s exit status) per standing: 0 this
#: chatledger can use the database, 1 it is behind (upgrade it), 3 it is at a newer
#: revision this chatledger cannot run on (upgrade chatledger).
CHECK_STATUS: Mapping[Standing, int] = {
    Standing.AT_HEAD: 0,
    Standing.AHEAD_COMPATIBLE: 0,
    Standing.BEHIND: 1,
    Standing.AHEAD_INCOMPATIBLE: 3,
}
#: :func:`check`'s status for a usable schema whose sessions hold raw messages past
#: their counter row (written outside chatledger): appends to them fail.
CHECK_PAST_COUNTER = 4


def existing_database(dsn: str | URL | None = None) -> URL:
    """The database a DSN names (:func:`chatledger.dsn.resolve_dsn`), for a call that
    reads or changes an existing one.

    Raises:
        ValueError: the DSN is invalid, or names a SQLite file that does not exist
            (``no such file: PATH``; the file is not created).
    """
    url = resolve_dsn(dsn)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise ValueError(f"no such file: {path}")
    return url


async def upgrade(
    dsn: str | URL | None = None, revision: str = "head", *, lock_timeout: float = LOCK_TIMEOUT
) -> Upgrade:
    """``chatledger upgrade``: upgrade the database a DSN names (default
    ``CHATLEDGER_DSN``, else the embedded SQLite file) to ``revision``, serialised and
    atomic as this module's docstring says, with the revisions this package ships (no
    repository checkout needed). Run it as the schema owner. Upgrading a database already
    at ``revision`` does nothing; :attr:`Upgrade.summary` says what was done.

    The command exits 2 on each error below.

    Raises:
        SchemaNotReady: the schema lock was not granted within ``lock_timeout`` seconds;
            the database holds zett-agent's own tables (``chatledger adopt``); or it is at
            a newer revision this chatledger cannot run on (upgrade chatledger).
        ConfigurationError: the server refused the connection (no such database, login).
        ValueError: an invalid DSN, or ``lock_timeout`` not a positive number of seconds.
        alembic.util.CommandError: ``revision`` is not a valid target.
    """
    url = resolve_dsn(dsn)
    done = await apply_upgrade(url, revision, lock_timeout=lock_timeout)
    if standing(done.after) is Standing.AHEAD_INCOMPATIBLE:
        raise SchemaNotReady(describe(url, done.after))
    return done


async def downgrade(
    dsn: str | URL | None,
    revision: str,
    *,
    drop_rows: bool = False,
    lock_timeout: float = LOCK_TIMEOUT,
) -> str | None:
    """``chatledger downgrade REVISION`` (``--yes``: ``drop_rows=True``):
    :func:`downgrade_database` on an existing database; returns the revision it is at
    afterwards (``None`` at base).

    Raises:
        DowngradeRefused: tables holding rows would be dropped and ``drop_rows`` is false
            (exit status 1); see :func:`downgrade_database`.
        SchemaNotReady, ConfigurationError, alembic.util.CommandError: as :func:`upgrade`
            (exit status 2).
        ValueError: an invalid DSN, a SQLite file that does not exist, or a bad
            ``lock_timeout`` (exit status 2).
    """
    url = existing_database(dsn)
    return await downgrade_database(url, revision, lock_timeout=lock_timeout, drop_rows=drop_rows)


@dataclass(frozen=True)
class Current:
    """What :func:`current` read."""

    url: URL
    #: chatledger's revision as the database records it.
    state: SchemaState
    #: The newest revision this chatledger ships.
    head: str
    #: ``state`` against ``head``.
    standing: Standing
    #: For a database without a chatledger revision, what to do: ``chatledger adopt``
    #: for zett-agent's own tables, else ``chatledger upgrade``; ``None`` otherwise.
    remedy: str | None

    @property
    def lines(self) -> list[str]:
        """The lines ``chatledger current`` prints."""
        lines = [f"database  {display(self.url)}"]
        if self.state.revision is None:
            lines.append(f"current   no chatledger schema: {self.remedy}")
        else:
            where = f" (in {LEGACY_VERSION_TABLE})" if self.state.legacy else ""
            lines.append(f"current   {self.state.revision}{where}")
            # Code of a later revision needs the database upgraded first.
            usable = (
                f"chatledger code of revisions {self.state.compatible_from} to {self.state.revision}"
                if self.state.compatible_from
                else "not recorded"
            )
            lines.append(f"usable by {usable}")
        return [*lines, f"head      {self.head}", f"standing  {self.standing.value}"]


async def current(dsn: str | URL | None = None) -> Current:
    """``chatledger current``: the revision of an existing database, what it serves, the
    head and the standing; reads only.

    The command exits 2 on each error below.

    Raises:
        ValueError: an invalid DSN, or a SQLite file that does not exist.
        ConfigurationError: the server refused the connection or the read.
    """
    from .adoption import state_and_hint  # imports this module

    url = existing_database(dsn)
    state, hint = await run_on_connection(url, state_and_hint)
    remedy = (hint or f"upgrade it {upgrade_advice(url)}") if state.revision is None else None
    return Current(url, state, head_revision(), standing(state), remedy)


@dataclass(frozen=True)
class Check:
    """What :func:`check` found."""

    url: URL
    #: chatledger's revision as the database records it.
    state: SchemaState
    #: ``state`` against this chatledger's head.
    standing: Standing
    #: ``chatledger check``'s exit status: :data:`CHECK_STATUS`, or
    #: :data:`CHECK_PAST_COUNTER`; 0 when this chatledger can use the database.
    status: int
    #: One line: the standing, the command that fixes it, and any note below.
    message: str
    #: Sessions with raw messages past their counter row (the first few; see
    #: :mod:`chatledger.integrity`).
    past_counter: tuple[integrity.PastCounter, ...]
    #: An application's own Alembic version tables beside chatledger's
    #: (:func:`chatledger.app_alembic.app_version_tables`); the message then names the
    #: hooks its ``env.py`` needs.
    app_version_tables: tuple[str, ...]
    #: Where chatledger's tables differ from what the head revision creates
    #: (:func:`chatledger.drift.schema_drift`), for a database at head; the status is
    #: then :data:`chatledger.drift.DRIFT_STATUS` and
    #: :func:`chatledger.drift.fix_script` gives the SQL that fixes it.
    drift: tuple[Drift, ...] = ()
    #: A framework's own tables beside chatledger's, by kind (:func:`chatledger.kinds.beside`):
    #: its tools were given this database's plain URL. The message then names the import
    #: that moves their sessions in.
    beside: tuple[tuple[str, tuple[str, ...]], ...] = ()


#: Where an application's Alembic configuration is looked for when ``check`` is given
#: none: Alembic's own default, in the current directory.
DEFAULT_APP_ALEMBIC = Path("alembic.ini")


async def check(dsn: str | URL | None = None, *, app_alembic: str | Path | None = None) -> Check:
    """``chatledger check``: whether this chatledger can use an existing database (at its
    head, or at a newer revision compatible with it), and whether any session holds raw
    messages written past its counter row; reads only. The result's ``status`` is the
    exit status (0 usable, 1 behind, 3 too new, 4 raw messages past the counter, 5
    schema drift: a database at head whose tables differ from what the head revision
    creates, in ``drift``), its ``message`` the line the command prints. An
    application's Alembic version table beside chatledger's adds the hooks its
    ``env.py`` needs to the message (the status stays), unless that ``env.py`` passes
    them already: ``app_alembic`` is its ``alembic.ini``, migration directory or
    ``env.py`` (default: ``alembic.ini`` in the current directory, if there is one).
    A framework's own tables beside chatledger's (ADK's) add the import that moves
    their sessions in.

    The command exits 2 on each error below.

    Raises:
        ValueError: an invalid DSN, or a SQLite file that does not exist; an
            ``app_alembic`` with no ``env.py``.
        ConfigurationError: the server refused the connection or the read.
        SchemaNotReady: the version table holds several revisions.
    """
    from .adoption import state_and_hint  # imports this module

    url = existing_database(dsn)
    env_py = _app_env_py(app_alembic)

    def read(
        connection: Connection,
    ) -> tuple[
        SchemaState,
        str | None,
        list[integrity.PastCounter],
        bool,
        list[str],
        list[tuple[SessionKind, list[str]]],
    ]:
        state, hint = state_and_hint(connection)
        past: list[integrity.PastCounter] = []
        more = False
        if not CHECK_STATUS[standing(state)]:  # a schema this chatledger can read
            past, more = integrity.past_counter(connection)
        return state, hint, past, more, app_version_tables(connection), beside(connection)

    state, hint, past, more, apps, strays = await run_on_connection(url, read)
    kind = standing(state)
    status = CHECK_STATUS[kind]
    message = describe(url, state, remedy=hint)
    if past:
        status = CHECK_PAST_COUNTER
        message += f", but {integrity.describe_past_counter(past, more)}"
    drift: list[Drift] = []
    if kind is Standing.AT_HEAD:
        from .drift import DRIFT_STATUS, describe_drift, describe_notes, schema_comparison

        compared = await schema_comparison(url)
        drift = list(compared.drift)
        if drift:
            # Before a raw log past its counter: the schema is fixed first.
            message += (
                f"{'; and' if status else ', but'} {describe_drift(drift)}. The SQL that fixes it is "
                "on standard output; run it as the schema owner, after a backup"
            )
            status = DRIFT_STATUS
        if compared.notes:
            message += f". {describe_notes(compared.notes)}"
    if apps and not (env_py is not None and env_passes_hooks(env_py)):
        message += f". {_app_alembic_note(apps, env_py)}"
    for stray, tables in strays:
        message += f". {_beside_note(url, stray, tables)}"
    found = tuple((stray.name, tuple(tables)) for stray, tables in strays)
    return Check(url, state, kind, status, message, tuple(past), tuple(apps), tuple(drift), found)


def _app_env_py(app_alembic: str | Path | None) -> Path | None:
    """The application's ``env.py`` that ``check`` reads for the hooks: from
    ``app_alembic`` (which must lead to one), else from ``./alembic.ini`` if present."""
    if app_alembic is None:
        found = find_env_py(DEFAULT_APP_ALEMBIC) if DEFAULT_APP_ALEMBIC.is_file() else None
        # chatledger's own alembic.ini (a checkout of chatledger) is no application's.
        ours = Path(script_location()).resolve() / "env.py"
        return None if found is None or found.resolve() == ours else found
    found = find_env_py(app_alembic)
    if found is None:
        raise ValueError(
            f"app_alembic: no Alembic env.py at {app_alembic} (give the application's alembic.ini, "
            "its migration directory or its env.py)"
        )
    return found


def _app_alembic_note(tables: list[str], env_py: Path | None) -> str:
    named = ", ".join(tables)
    which = (
        f"that application's env.py ({env_py}) lacks chatledger's hooks: it must pass"
        if env_py is not None
        else "unless it does already, that application's env.py must pass"
    )
    unread = "" if env_py is not None else " (chatledger check --app-alembic PATH reads it and says)"
    return (
        f"Beside it, {named} {'is' if len(tables) == 1 else 'are'} an application's own Alembic version "
        f"table{'s' if len(tables) > 1 else ''}: {which} "
        "include_name=chatledger.migrate.include_name and include_object=chatledger.migrate.include_object "
        "to context.configure(), or its autogenerate drops chatledger's tables "
        f'(README, "Deploying: migrations"){unread}'
    )


def _beside_note(url: URL, kind: SessionKind, tables: list[str]) -> str:
    assert kind.moves_in is not None and kind.moves_in.beside is not None
    own, source = kind.moves_in.beside, as_argument(url)
    return (
        f"It also holds {own.what} ({', '.join(tables)}), which chatledger does not read: "
        f"{kind.label}'s tools were given this database's plain URL. Move their sessions in with "
        f"chatledger import {kind.moves_in.flag} {source} --dsn {source}, and {own.then}"
    )


def default_notice(dsn: str | URL | None, *, option: str = "--dsn") -> str | None:
    """When neither ``dsn`` nor ``CHATLEDGER_DSN`` names a database: the sentence saying
    that the embedded SQLite default is used, and where it is; else ``None``."""
    if dsn or os.environ.get(DSN_ENV):
        return None
    return (
        f"no {option} given and ${DSN_ENV} is not set: using the embedded database, "
        f"the SQLite file {default_sqlite_path()}"
    )


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
    try:
        asyncio.run(run_locked(url, work, lock_timeout=lock_timeout))
    except dialects.MigrationBusy as busy:
        where = "what was applied: see chatledger check (MySQL/MariaDB commit every DDL statement on its own)"
        raise SchemaNotReady(_busy_message(url, lock_timeout, where)) from busy


# -- schema drift: chatledger.drift, re-exported ------------------------------------------
# Whether chatledger's tables are what the head revision creates (``chatledger check``).

from .drift import Drift as Drift  # noqa: E402
from .drift import schema_drift as schema_drift  # noqa: E402
