"""chatledger's revision as a database records it, and whether this chatledger can use it.

chatledger keeps its revision in a version table of its own, :data:`VERSION_TABLE`
(so an application migrating the same database with its own Alembic keeps
``alembic_version``), and beside it the ``compatible_from`` of that revision in
:data:`COMPATIBILITY_TABLE`, which code that does not ship the revision can read:
the expand/contract rule of rolling deploys (see :func:`standing`). A revision an
older chatledger recorded in ``alembic_version`` is read from there and moved over on
the next upgrade (:func:`adopt_legacy_revision`); so is one beside an empty
:data:`VERSION_TABLE`, what a move cut short leaves on MySQL/MariaDB.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import ScriptDirectory
from sqlalchemy import Column, MetaData, String, Table, delete, insert, inspect, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.schema import CreateTable, DropTable

from .dsn import as_argument, display, sqlite_file
from .errors import SchemaNotReady
from .revisions import Revisions, head_revision, revisions

logger = logging.getLogger("chatledger")

#: chatledger's Alembic version table; the application's own Alembic keeps ``alembic_version``.
VERSION_TABLE = "chatledger_alembic_version"
#: Where chatledger kept its revision before it had a version table of its own.
LEGACY_VERSION_TABLE = "alembic_version"
#: One row: the database's revision and its ``compatible_from``, for code that does not
#: ship that revision.
COMPATIBILITY_TABLE = "chatledger_compatibility"
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
    revision = _one_revision(connection, _versions) if VERSION_TABLE in tables else None
    if revision is None:
        # An empty version table counts as absent: on MySQL/MariaDB the move's CREATE
        # TABLE commits on its own, so a move cut short leaves it empty beside the
        # legacy row, and the next upgrade moves that row again.
        legacy = _legacy_revision(connection, tables, revisions(location))
        if legacy is not None:
            return SchemaState(legacy, revisions(location).compatible_from[legacy], legacy=True)
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
    lock; returns the revision moved, if any. An empty :data:`VERSION_TABLE` (a move
    cut short on MySQL/MariaDB, whose CREATE TABLE commits implicitly) counts as absent."""
    tables = set(inspect(connection).get_table_names())
    if VERSION_TABLE in tables and _one_revision(connection, _versions) is not None:
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
    if ctx.as_sql:
        _record_offline(ctx, step, heads)
        return
    if not heads:  # at base: gone, as a downgrade to base drops every chatledger table
        _compatibility.drop(ctx.connection, checkfirst=True)
        return
    (revision,) = heads
    _record(ctx.connection, revision, revisions(ctx.script.dir).compatible_from[revision])


def _record_offline(ctx: MigrationContext, step: MigrationInfo, heads: set[str]) -> None:
    """:func:`record_compatibility` as SQL statements (``--sql``): a script cannot look
    at the catalog, so the table is created by the step that leaves base (the database
    had no chatledger table before it) and is there for every later one."""
    assert ctx.script is not None
    if not heads:
        ctx.execute(DropTable(_compatibility, if_exists=True))
        return
    if not step.source_revision_ids:
        ctx.execute(CreateTable(_compatibility))
    (revision,) = heads
    ctx.execute(delete(_compatibility))
    compatible_from = revisions(ctx.script.dir).compatible_from[revision]
    ctx.execute(insert(_compatibility).values(revision=revision, compatible_from=compatible_from))


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


def upgrade_advice(url: URL) -> str:
    """How to upgrade ``url``'s database, for a message: on a server, with the schema
    owner's DSN (the runtime role that met the database behind cannot run DDL, and its
    password, masked, could not be pasted); a SQLite file, which has no roles, by its URL."""
    if sqlite_file(url) is not None:
        return f"with `chatledger upgrade --dsn {as_argument(url)}`"
    return (
        "with the schema owner's DSN: `chatledger upgrade --dsn OWNER_DSN` (in deploy code "
        "`chatledger.migrate.upgrade(OWNER_DSN)`)"
    )


def describe(
    url: URL, state: SchemaState, location: str | Path | None = None, *, remedy: str | None = None
) -> str:
    """One line on ``state``'s standing; for the ones that refuse, the command that fixes it.

    ``remedy`` replaces the advice to upgrade of a database that is behind (what to do
    with a database holding zett-agent's own tables: :func:`chatledger.adoption.adopt_hint`).
    """
    head = head_revision(location)
    where = f"database {display(url)}"
    kind = standing(state, location)
    if kind is Standing.AT_HEAD:
        note = f" (recorded in {LEGACY_VERSION_TABLE}; `chatledger upgrade` moves it)" if state.legacy else ""
        return f"{where} is at head ({head}){note}"
    if kind is Standing.BEHIND:
        advice = remedy or f"upgrade it {upgrade_advice(url)}"
        return f"{where} is at revision {state.revision or '<none>'}, chatledger needs {head}; {advice}"
    if kind is Standing.AHEAD_COMPATIBLE:
        return (
            f"{where} is at revision {state.revision}, newer than this chatledger's {head}, and "
            f"compatible with it: chatledger code of revision {state.compatible_from} and newer can use it"
        )
    needs = (
        f"chatledger code of revision {state.compatible_from} or newer"
        if state.compatible_from
        else "a newer chatledger"
    )
    return (
        f"{where} is at revision {state.revision}, which this chatledger does not know (its newest "
        f"is {head}); that schema needs {needs}: a newer chatledger migrated it; upgrade chatledger"
    )
