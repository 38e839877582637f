"""The one module of per-dialect statements and behaviour.

Everything that differs between SQLite, PostgreSQL and MySQL/MariaDB beyond a
column type (those live in :mod:`chatledger.types`) is a table entry here, keyed by
SQLAlchemy's dialect name (and by driver where a dialect has two: PostgreSQL's asyncpg
and psycopg, :data:`RULES_BY_DRIVER`): the append (sequence allocation and insert), the
rein-session upsert, the meaning of each error code (transient and safe to retry, a
lost connection, a configuration the server refuses, a statement too large, a table
or column missing from the schema, a read-only or full database; any other code is a
:class:`chatledger.errors.DatabaseError`: :func:`database_error` maps every one), the
filter on a list of any length (:attr:`DialectRules.any_of`), the isolation of a
snapshot-consistent read, the greater of two instants (``updated_at`` never moves
back), the byte order of ids and whether ``LIKE`` is exact (an id prefix's match), the
schema lock of
migrations (online, and in the scripts of ``--sql``), the table locks of a downgrade
that drops tables, and the set-up of every new connection (lock timeouts; SQLite's
pragmas, explicit transactions and the clean-up of a cancelled statement; Galera's
causal reads).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import math
import re
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
    nullcontext,
    suppress,
)
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    String,
    and_,
    any_,
    bindparam,
    case,
    event,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import URL, Connection, ExceptionContext
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .dsn import as_argument, display
from .errors import (
    ChatledgerError,
    ConfigurationError,
    ConstraintViolation,
    DatabaseError,
    DatabaseUnwritable,
    SchemaNotReady,
    StatementTooLarge,
    StorageUnavailable,
    missing_extra,
)
from .options import LedgerOptions
from .schema import raw_messages_table, rein_sessions_table, sessions_table

logger = logging.getLogger("chatledger")

#: Appends one raw message: allocates the next sequence of its session on the counter
#: row (creating the session on its first append) and inserts the message with it, in
#: the caller's transaction. Returns the sequence, or ``None`` (nothing written) when
#: the stored parent differs from the given one or the session is a tombstone (the
#: caller reads the row to tell which). Arguments: the connection, the session row's
#: values, the message row without ``sequence``, and the time now.
Appender = Callable[[AsyncConnection, dict[str, Any], dict[str, Any], datetime], Awaitable[int | None]]

#: Saves one rein session row (``id``, ``session_json``, ``write_id``, ``created_at``,
#: ``updated_at``) in one race-free statement and returns its new version: 1 when
#: inserted, the stored version + 1 when it overwrites a row (a live session or a
#: tombstone, whose versions the id goes on counting after). With ``only_if_absent``
#: a live session is left alone and ``None`` is returned; a tombstone counts as absent.
#: ``updated_at`` becomes the later of the stored and the given instant; ``created_at``
#: is kept, but on a tombstone, where the save starts the id anew.
ReinSaver = Callable[[AsyncConnection, dict[str, Any], bool], Awaitable[int | None]]


#: The counter row's columns an append binds (``s_<name>`` parameters); the rest start
#: at constants: the first append is sequence 1, no checkpoint, fields version 1.
_SESSION_BINDS = (
    "id",
    "parent_session_id",
    "title",
    "agent_name",
    "session_type",
    "created_at",
    "updated_at",
)
_SESSION_START = {
    "last_sequence": 1,
    "base_sequence": 0,
    "snapshot_version": 0,
    "compacted_through_sequence": 0,
    "fields_version": 1,
}
#: The message row's columns but ``sequence`` (``m_<name>`` parameters).
_MESSAGE_COLUMNS = tuple(column.name for column in raw_messages_table.c if column.name != "sequence")


def _session_row(insert: Callable[..., Any], last_sequence: Any = None) -> Any:
    """``INSERT INTO agent_sessions`` of a new counter row, its values bound as ``s_<name>``."""
    table = sessions_table
    values: dict[str, Any] = {
        name: bindparam(f"s_{name}", type_=table.c[name].type) for name in _SESSION_BINDS
    }
    values.update(_SESSION_START)
    if last_sequence is not None:
        values["last_sequence"] = last_sequence
    return insert(table).values(values)


#: The session fields an append given them sets on an existing session, as zett's own
#: store does (``None`` keeps the stored value).
_APPEND_FIELDS = ("title", "agent_name")


def _field_updates(new: Any) -> list[tuple[str, Any]]:
    """An append's assignments of the given session fields to an existing counter row.

    Each field given (not NULL in ``new``, the row the append would have inserted)
    replaces the stored one, and ``fields_version`` goes up by one when that changes
    anything: a compare-and-set read before (``update_session``'s
    ``expected_version``) then conflicts instead of overwriting the append's value.
    Absent or unchanged values change nothing, so the append costs no statement more.
    ``fields_version`` comes first: MySQL assigns left to right, each assignment
    seeing the ones before it, so it must compare against the stored fields.
    """
    table = sessions_table
    changed = or_(
        *(and_(new[name].is_not(None), new[name].is_distinct_from(table.c[name])) for name in _APPEND_FIELDS)
    )
    return [
        ("fields_version", table.c.fields_version + case((changed, 1), else_=0)),
        *((name, func.coalesce(new[name], table.c[name])) for name in _APPEND_FIELDS),
    ]


def _counter_upsert(insert: Callable[..., Any], greatest: Callable[..., Any]) -> Any:
    """PostgreSQL and SQLite: ``INSERT .. ON CONFLICT (id) DO UPDATE`` on the counter row,
    ``RETURNING`` the new sequence.

    The conflict clause takes the row lock, so concurrent appenders to one session
    queue behind each other's transaction (and behind a delete, which updates the
    row first); its WHERE leaves the row alone (and returns nothing) when the parent
    does not match or the session is a tombstone. The given title and agent name
    update the row in the same statement (:func:`_field_updates`).
    """
    table = sessions_table
    statement = _session_row(insert)
    return statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={
            **dict(_field_updates(statement.excluded)),
            "last_sequence": table.c.last_sequence + 1,
            "updated_at": greatest(table.c.updated_at, statement.excluded.updated_at),
        },
        where=table.c.parent_session_id.is_not_distinct_from(statement.excluded.parent_session_id)
        & table.c.deleted_at.is_(None),
    ).returning(table.c.last_sequence)


#: (parameter, value's key) of an append's parameters, named once rather than per call.
_SESSION_PARAMS = tuple((f"s_{name}", name) for name in _SESSION_BINDS)
_MESSAGE_PARAMS = tuple((f"m_{name}", name) for name in _MESSAGE_COLUMNS)


def _append_params(values: dict[str, Any], row: dict[str, Any], now: datetime) -> dict[str, Any]:
    params = {param: values.get(name) for param, name in _SESSION_PARAMS}
    params["s_created_at"] = params["s_updated_at"] = now
    params.update({param: row[name] for param, name in _MESSAGE_PARAMS})
    return params


# Built once: SQLAlchemy then reuses their cache keys and compiled forms on every append.
_POSTGRESQL_APPEND = (
    raw_messages_table.insert()
    .from_select(
        [*_MESSAGE_COLUMNS, "sequence"],
        select(
            *(bindparam(f"m_{name}", type_=raw_messages_table.c[name].type) for name in _MESSAGE_COLUMNS),
            (counter := _counter_upsert(postgresql.insert, func.greatest).cte("counter")).c.last_sequence,
        ),
    )
    .returning(raw_messages_table.c.sequence)
)
# SQLite's scalar max() with two arguments is GREATEST.
_SQLITE_COUNTER = _counter_upsert(sqlite.insert, func.max)


def _mysql_counter() -> Any:
    """MySQL: ``INSERT .. ON DUPLICATE KEY UPDATE`` on the counter row, the new sequence
    handed back through ``LAST_INSERT_ID(expr)`` (0 on a parent mismatch or a tombstone).

    A refused append leaves ``updated_at`` and the given fields changed too: the caller
    raises, which rolls the transaction back. The assignments run in list order
    (:func:`_field_updates`)."""
    table = sessions_table
    statement = _session_row(mysql.insert, last_sequence=func.last_insert_id(1))
    return statement.on_duplicate_key_update(
        [
            *_field_updates(statement.inserted),
            (
                "last_sequence",
                func.if_(
                    table.c.parent_session_id.is_not_distinct_from(statement.inserted.parent_session_id)
                    & table.c.deleted_at.is_(None),
                    func.last_insert_id(table.c.last_sequence + 1),
                    table.c.last_sequence + func.last_insert_id(0),
                ),
            ),
            ("updated_at", func.greatest(table.c.updated_at, statement.inserted.updated_at)),
        ]
    )


_MYSQL_COUNTER = _mysql_counter()
_MESSAGE_INSERT = raw_messages_table.insert().values(
    {
        name: bindparam(name if name == "sequence" else f"m_{name}", type_=column.type)
        for name, column in raw_messages_table.c.items()
    }
)


async def _append_postgresql(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """PostgreSQL: one statement, a data-modifying CTE. The counter upsert feeds the
    message INSERT .. SELECT; on a parent mismatch or a tombstone the CTE is empty, so
    is the insert."""
    result = await conn.execute(_POSTGRESQL_APPEND, _append_params(values, row, now))
    sequence: int | None = result.scalar_one_or_none()
    return sequence


async def _append_sqlite(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """SQLite: the counter upsert, then the insert (SQLite has no DML in a CTE)."""
    params = _append_params(values, row, now)
    sequence: int | None = (await conn.execute(_SQLITE_COUNTER, params)).scalar_one_or_none()
    if sequence is not None:
        await conn.execute(_MESSAGE_INSERT, {**params, "sequence": sequence})
    return sequence


async def _append_mysql(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """MySQL/MariaDB: ``INSERT .. ON DUPLICATE KEY UPDATE`` with ``LAST_INSERT_ID(expr)``
    on the counter row, then the insert.

    ``LAST_INSERT_ID(expr)`` hands the new counter value back in the OK packet, so
    the allocation costs one round trip. On a parent mismatch or a tombstone the
    counter is left as it is and ``LAST_INSERT_ID(0)`` reports 0, which no real
    sequence is.
    """
    params = _append_params(values, row, now)
    sequence = (await conn.execute(_MYSQL_COUNTER, params)).lastrowid
    if not sequence:
        return None
    await conn.execute(_MESSAGE_INSERT, {**params, "sequence": sequence})
    return int(sequence)


async def _save_rein_returning(
    insert: Callable[..., Any],
    greatest: Callable[..., Any],
    conn: AsyncConnection,
    values: dict[str, Any],
    only_if_absent: bool,
) -> int | None:
    """PostgreSQL and SQLite: ``INSERT .. ON CONFLICT (id) DO UPDATE .. RETURNING``; with
    ``only_if_absent`` the update's WHERE admits only a tombstone.

    The conflict clause takes the row lock, so concurrent first saves of one id never
    raise a duplicate-key error: one inserts, the others overwrite after it.
    """
    table = rein_sessions_table
    statement = insert(table).values({**values, "version": 1})
    new = statement.excluded
    tombstone = table.c.session_json.is_(None)
    statement = statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={
            "version": table.c.version + 1,
            "session_json": new.session_json,
            "write_id": new.write_id,
            "created_at": case((tombstone, new.created_at), else_=table.c.created_at),
            "updated_at": greatest(table.c.updated_at, new.updated_at),
        },
        where=tombstone if only_if_absent else None,
    )
    return (await conn.execute(statement.returning(table.c.version))).scalar_one_or_none()


async def _save_rein_postgresql(
    conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    return await _save_rein_returning(postgresql.insert, func.greatest, conn, values, only_if_absent)


async def _save_rein_sqlite(
    conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    return await _save_rein_returning(sqlite.insert, func.max, conn, values, only_if_absent)


async def _save_rein_mysql(conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool) -> int | None:
    """MySQL/MariaDB: ``INSERT .. ON DUPLICATE KEY UPDATE`` with ``LAST_INSERT_ID(expr)``,
    as :func:`_append_mysql` does: the new version comes back in the OK
    packet, and 0 (no real version) reports a row left alone.

    MySQL runs the assignments left to right, each seeing the ones before it, so
    ``session_json``, which says whether the stored row is a tombstone, is assigned last.
    """
    table = rein_sessions_table
    statement = mysql.insert(table).values({**values, "version": func.last_insert_id(1)})
    new = statement.inserted
    tombstone = table.c.session_json.is_(None)

    def written(value: Any, stored: Any) -> Any:
        return func.if_(tombstone, value, stored) if only_if_absent else value

    version = (
        func.if_(
            tombstone, func.last_insert_id(table.c.version + 1), table.c.version + func.last_insert_id(0)
        )
        if only_if_absent
        else func.last_insert_id(table.c.version + 1)
    )
    statement = statement.on_duplicate_key_update(
        [
            ("created_at", func.if_(tombstone, new.created_at, table.c.created_at)),
            ("write_id", written(new.write_id, table.c.write_id)),
            ("updated_at", written(func.greatest(table.c.updated_at, new.updated_at), table.c.updated_at)),
            ("version", version),
            ("session_json", written(new.session_json, table.c.session_json)),
        ]
    )
    saved = (await conn.execute(statement)).lastrowid
    return int(saved) if saved else None


class Failure(enum.Enum):
    """What a database error means for the transaction that met it."""

    #: Rolled back for a reason a retry can cure: a serialization failure, a deadlock,
    #: a lock wait past the lock timeout, a busy SQLite file, a stale cached statement.
    TRANSIENT = "transient"
    #: The connection was lost, or could not be opened (the server is down, starting,
    #: shutting down, or out of connection slots). Nothing was committed -- unless it
    #: happened while the COMMIT was under way, when the outcome is unknown.
    CONNECTION = "connection"
    #: The server refused this configuration: no such database, a wrong user or
    #: password, a missing privilege. Retrying cannot help.
    CONFIGURATION = "configuration"
    #: A statement or value larger than the server accepts.
    TOO_LARGE = "too large"
    #: A table or column the statement names does not exist: the database's schema
    #: is not the one the migrations create (older, hand-made, or changed by hand).
    SCHEMA = "schema"
    #: The database refuses writes: a read-only server, database, transaction or file.
    READ_ONLY = "read-only"
    #: The database is out of space: disk, tablespace or page limit full.
    FULL = "full"
    #: A constraint of the schema refused a row (a duplicate key): the DBAPI's
    #: ``IntegrityError`` class (PEP 249), whatever its code.
    CONSTRAINT = "constraint"
    #: Anything else, known or not: a code none of the rules lists.
    OTHER = "other"


#: Set-up statements of a new connection, given the store's options.
SessionSetup = Callable[[LedgerOptions], tuple[str, ...]]
#: Driver ``connect()`` arguments, given the store's options.
ConnectArgs = Callable[[LedgerOptions], dict[str, Any]]
#: Set-up of a connection of an engine the caller owns, on its first use by a ledger:
#: applies what keeps to the database file, checks the rest (raising ``ConfigurationError``).
ForeignCheck = Callable[[Connection], None]
#: Run at the start of every ledger transaction on a connection of an engine the caller
#: owns, right after SQLAlchemy began it and the engine's own ``begin`` listeners ran:
#: checks that the transaction is one (``ConfigurationError`` naming the fix if not)
#: and, on SQLite, emits the explicit ``BEGIN <mode>``.
ForeignBegin = Callable[[AsyncConnection], Awaitable[None]]


def _no_setup(_options: LedgerOptions) -> tuple[str, ...]:
    return ()


def _no_connect_args(_options: LedgerOptions) -> dict[str, Any]:
    return {}


def _no_pgbouncer_args() -> dict[str, Any]:
    return {}


def _no_check(_conn: Connection) -> None:
    return None


# -- the schema's collations, as the catalog has them (chatledger.drift) ----------------

#: Each column of a table by name, with its character set and collation as the
#: database has them; ``None`` for none (a non-text column) or the database's
#: default (a column that names no collation of its own).
Collations = dict[str, tuple[str | None, str | None]]
#: Reads :data:`Collations` of a table, on a connection in its transaction.
CollationReader = Callable[[Connection, str], Collations]


def _no_collations(_conn: Connection, _table: str) -> Collations:
    return {}


def _no_table_collation(_conn: Connection, _table: str) -> str | None:
    return None


def _column_collations_postgresql(conn: Connection, table: str) -> Collations:
    """Each column's collation from ``pg_attribute.attcollation``: ``None`` when it has
    none (0) or takes the database's default (``pg_catalog."default"``); the table is
    found as chatledger's statements find it, by the search path."""
    rows = conn.execute(
        text(
            "SELECT a.attname, CASE WHEN c.collname = 'default' AND c.collnamespace = "
            "'pg_catalog'::regnamespace THEN NULL ELSE c.collname END "
            "FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation "
            "WHERE a.attrelid = to_regclass(quote_ident(:name)) AND a.attnum > 0 AND NOT a.attisdropped"
        ),
        {"name": table},
    )
    return {str(column): (None, None if collation is None else str(collation)) for column, collation in rows}


def _column_collations_mysql(conn: Connection, table: str) -> Collations:
    rows = conn.execute(
        text(
            "SELECT column_name, character_set_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = :name"
        ),
        {"name": table},
    )
    return {str(column): (charset, collation) for column, charset, collation in rows}


def _table_collation_mysql(conn: Connection, table: str) -> str | None:
    found = conn.execute(
        text(
            "SELECT table_collation FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name = :name"
        ),
        {"name": table},
    ).scalar()
    return None if found is None else str(found)


#: SQLite's message for a collation its connection does not have (``sqlite3.c``).
_UNKNOWN_COLLATION = re.compile(r"no such collation sequence: (.+)")


def _column_collations_sqlite(conn: Connection, table: str) -> Collations:
    """Each column's collation as its ``CREATE TABLE`` declares it (``COLLATE``; none, or
    ``BINARY``, is ``None``). SQLite has no catalog of column collations (``PRAGMA
    table_xinfo`` has none), so SQLite's own parser reads the statement: it is run in
    an empty in-memory database, where an index over every column reports each one's
    collation (``PRAGMA index_xinfo``, column ``coll``). The database itself is only
    read. A collation this process has not registered is registered there as a name."""
    import sqlite3

    created = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"), {"name": table}
    ).scalar()
    if created is None:
        return {}
    probe = sqlite3.connect(":memory:")
    registered: set[str] = set()
    try:
        while True:
            try:
                probe.execute(str(created))
                break
            except sqlite3.OperationalError as error:
                unknown = _UNKNOWN_COLLATION.fullmatch(str(error))
                if unknown is None or unknown[1] in registered:
                    return {}  # a definition only its own extensions take: not compared
                registered.add(unknown[1])
                probe.create_collation(unknown[1], lambda left, right: (left > right) - (left < right))
        (name,) = probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchone()
        # Generated and hidden columns left out: an index on one evaluates its expression.
        columns = [
            row[1] for row in probe.execute("SELECT * FROM pragma_table_xinfo(?)", (name,)) if not row[6]
        ]
        if not columns:
            return {}
        quote = conn.dialect.identifier_preparer.quote_identifier
        probe.execute(f"CREATE INDEX probe ON {quote(name)} ({', '.join(map(quote, columns))})")
        found = probe.execute("SELECT name, coll FROM pragma_index_xinfo('probe') WHERE key = 1").fetchall()
    finally:
        probe.close()
    return {
        str(column): (None, None if str(coll).upper() == "BINARY" else str(coll)) for column, coll in found
    }


def _sync(conn: AsyncConnection) -> Connection:
    """The synchronous ``Connection`` under ``conn``: its DBAPI connection and options
    are read from it without a round trip or a greenlet."""
    sync = conn.sync_connection
    if sync is None:  # pragma: no cover - only a closed AsyncConnection has none
        raise RuntimeError("the connection is closed")
    return sync


_AUTOCOMMIT_FIX = (
    "chatledger runs every call as one transaction, so that a refused or failed write "
    "leaves nothing behind: create the engine without autocommit (no autocommit=True in "
    "its connect_args, no isolation_level='AUTOCOMMIT'), or give the store an engine of its own"
)


async def _refuse_autocommit(conn: AsyncConnection) -> None:
    """A server connection whose driver commits every statement on its own (aiomysql's
    or psycopg's ``autocommit=True`` connect argument, ``SET autocommit = 1`` on a
    pooled connection) is refused before the transaction's first statement: its
    "transaction" would commit statement by statement.

    Read from the driver's state with SQLAlchemy's ``detect_autocommit_setting``,
    which costs no round trip (aiomysql reads the server status of the last reply), so
    every transaction is checked, on whichever pooled connection it runs."""
    dbapi_connection = _sync(conn).connection.dbapi_connection
    if dbapi_connection is not None and conn.dialect.detect_autocommit_setting(dbapi_connection):
        raise ConfigurationError(
            f"the engine's connection runs in autocommit mode ({conn.dialect.driver} commits every "
            f"statement on its own); {_AUTOCOMMIT_FIX}"
        )


@dataclass(frozen=True)
class DialectRules:
    """What one backend needs done its own way."""

    #: The append: sequence allocation on the counter row and the message insert.
    append_message: Appender
    #: The race-free upsert of one rein session row.
    save_rein_session: ReinSaver
    #: The greater of its arguments, in one SQL expression (NULL if any is NULL):
    #: ``GREATEST``, or SQLite's scalar, multi-argument ``max()``.
    greatest: Callable[..., ColumnElement[Any]]
    #: Driver error codes of failures that roll the whole transaction back and are
    #: safe to retry: serialization failures, deadlocks, lock timeouts, busy files.
    transient_codes: frozenset[str | int]
    #: Whether a listing of live sessions (``deleted_at IS NULL``) names ``deleted_at``
    #: first in its ORDER BY, so that the planner reads the page straight off the activity
    #: index ``(deleted_at, updated_at, id)`` without sorting: PostgreSQL does not take
    #: ``IS NULL`` for an equality when it matches an index's order, and needs it named;
    #: MariaDB sorts when it is named. (Checked with EXPLAIN in tests/test_explain.py.)
    order_live_by_tombstone: bool = False
    #: Driver exception class names (of the DBAPI error or the driver error under it)
    #: that are transient whatever their code.
    transient_exceptions: frozenset[str] = frozenset()
    #: (SQLSTATE, server routine) pairs that are transient: a code the server shares
    #: with failures that are not, told apart by the routine that raised it (the
    #: error's ``diag.source_function``, which does not depend on the server's language).
    transient_routines: frozenset[tuple[str, str]] = frozenset()
    #: Error codes read from the driver's message when the driver gives none (psycopg's
    #: failures to connect carry the server's message but no SQLSTATE): the first
    #: pattern found in the message names the code.
    message_codes: tuple[tuple[re.Pattern[str], str | int], ...] = ()
    #: Driver error codes that say the server cannot serve the call right now: it
    #: refused or dropped the connection, is starting up or shutting down, or has no
    #: connection slot left. Retried like a lost connection.
    unavailable_codes: frozenset[str | int] = frozenset()
    #: Driver exception class names (of the DBAPI error or the driver error under it)
    #: that say the same whatever their code: no server of a multi-host DSN serves the
    #: session it asks for (``target_session_attrs``), as while a cluster promotes a
    #: standby. Retried like a lost connection.
    unavailable_exceptions: frozenset[str] = frozenset()
    #: Driver error codes of a configuration the server refuses, each with the hint
    #: of what to fix; ``{database}`` and ``{user}`` name the DSN's.
    configuration_hints: dict[str | int, str] = field(default_factory=dict)
    #: Driver error codes of a statement or value larger than the server accepts.
    too_large_codes: frozenset[str | int] = frozenset()
    #: Driver error codes of a table or column that does not exist: the schema is not
    #: the one chatledger's migrations create.
    schema_codes: frozenset[str | int] = frozenset()
    #: Parts of driver messages that say the same, where the code does not (SQLite
    #: reports every such error as its generic ``SQLITE_ERROR``).
    schema_messages: tuple[str, ...] = ()
    #: Driver error codes of a database that refuses writes (read-only).
    read_only_codes: frozenset[str | int] = frozenset()
    #: Driver error codes of a database out of space.
    full_codes: frozenset[str | int] = frozenset()
    #: What to do about a read-only database, for :class:`chatledger.errors.DatabaseUnwritable`.
    read_only_hint: str = (
        "point the DSN at a writable primary (not a replica or standby), or make the database writable again"
    )
    #: What to do about a full database.
    full_hint: str = "free disk space on the database server, or raise its storage limit"
    #: How an error code is named in a message ("SQLSTATE", "error", "SQLite result code").
    code_name: str = "error"
    #: Driver error codes of a table that does not exist (any more): a migration
    #: dropped it between the listing of the tables and the read. None on SQLite,
    #: whose read transaction lists and reads from one snapshot.
    missing_table_codes: frozenset[str | int] = frozenset()
    #: Execution options of a snapshot-consistent read transaction: its isolation is
    #: stated here, never inherited from the server's default.
    snapshot_read: dict[str, Any] = field(default_factory=dict)
    #: Execution options of a write transaction.
    write: dict[str, Any] = field(default_factory=dict)
    #: ``create_async_engine`` options of this backend.
    engine_options: dict[str, Any] = field(default_factory=dict)
    #: Driver ``connect()`` arguments from the store's options (sent with the login).
    connect_args: ConnectArgs = _no_connect_args
    #: Statements run once on every new connection, from the store's options.
    session_setup: SessionSetup = _no_setup
    #: Transactions begin with an explicit ``BEGIN <mode>`` from the ``begin`` event
    #: (on an engine the caller owns: from :attr:`foreign_begin`), the mode taken from
    #: the ``chatledger_sqlite_begin`` execution option (SQLite).
    explicit_begin: bool = False
    #: Largest statement the server takes, in bytes, when no query says otherwise:
    #: PostgreSQL's 1 GB field limit, SQLite's default ``SQLITE_MAX_LENGTH``.
    statement_limit: int = 1_000_000_000
    #: Query reading the server's own limit (MySQL's ``max_allowed_packet``).
    statement_limit_query: str | None = None
    #: A server behind a socket, with a sized pool (a SQLite file has none).
    server: bool = True
    #: The async driver these rules are for (SQLAlchemy's driver name).
    driver: str = ""
    #: The chatledger extra that installs the driver (``pip install 'chatledger[...]'``).
    driver_extra: str = ""
    #: Driver ``connect()`` arguments behind PgBouncer's transaction pooling.
    pgbouncer_connect_args: Callable[[], dict[str, Any]] = _no_pgbouncer_args
    #: Set-up and checks of a connection of an engine the caller owns (``engine=``).
    check_foreign: ForeignCheck = _no_check
    #: The start of every ledger transaction on an engine the caller owns.
    foreign_begin: ForeignBegin = _refuse_autocommit
    #: The collation under which ``<`` and ``>=`` order ids by their bytes (UTF-8: by
    #: code point), named on an id prefix's range (:func:`chatledger.selection.id_prefix`):
    #: PostgreSQL's ``C`` (a database's default may be a language's, under which
    #: ``TMP-keep`` sorts between ``tmp-`` and ``tmp.``; the primary key serves the
    #: range only if its collation is ``C`` too), SQLite's ``BINARY`` (its default,
    #: which the primary key uses); ``None`` where the id type orders by bytes itself
    #: (MySQL's ``VARBINARY``).
    byte_order_collation: str | None = None
    #: Whether ``LIKE`` compares case and every character as it is (PostgreSQL under its
    #: deterministic collations; MySQL/MariaDB on binary ids, where it also never pads
    #: spaces). SQLite's ``LIKE`` folds ASCII case: there a prefix is checked with
    #: ``substr`` and ``=`` (:func:`chatledger.selection.id_prefix`).
    literal_like: bool = True
    #: Each column's character set and collation in a table (:data:`Collations`), for
    #: the schema drift check (:mod:`chatledger.drift`): ``information_schema`` on
    #: MySQL/MariaDB, ``pg_attribute`` on PostgreSQL, the ``CREATE TABLE`` on SQLite.
    column_collations: CollationReader = _no_collations
    #: A table's default collation, which its columns without one of their own take
    #: (MySQL/MariaDB); ``None`` where a table has none.
    table_collation: Callable[[Connection, str], str | None] = _no_table_collation
    #: The collation a schema fix names to give a column the database's default
    #: (PostgreSQL's ``"default"``); ``None``: a type without ``COLLATE`` does.
    default_collation: str | None = None
    #: ``ALTER TABLE`` cannot change a column or a constraint: a schema fix rebuilds the
    #: table, copying its rows (SQLite; Alembic's batch mode).
    rebuilds_tables: bool = False

    #: ``column IN values`` for a list of integers of any length, without one bound
    #: parameter per value (servers and drivers cap those: asyncpg at 32,767, SQLite
    #: at 32,766): see :func:`_any_of_array` and its siblings.
    any_of: Callable[[ColumnElement[int], Sequence[int]], ColumnElement[bool]] = field(
        default=lambda column, values: column.in_(values)
    )

    def latest(self, stored: ColumnElement[datetime], now: datetime) -> ColumnElement[datetime]:
        """The later of a stored instant and ``now``, computed in the statement: what an
        ``updated_at`` is set to, so that it never moves back, whatever the writer's
        clock says or however long its retries took."""
        return self.greatest(stored, bindparam(None, now, type_=stored.type), type_=stored.type)


def _any_of_array(column: ColumnElement[int], values: Sequence[int]) -> ColumnElement[bool]:
    """PostgreSQL: ``column = ANY(:values)``, the values bound as one integer array."""
    return column == any_(bindparam(None, list(values), type_=postgresql.ARRAY(BigInteger)))


def _any_of_json(column: ColumnElement[int], values: Sequence[int]) -> ColumnElement[bool]:
    """SQLite: ``column IN (SELECT value FROM json_each(:values))``, the values bound as
    one JSON array (JSON is built into SQLite from 3.38)."""
    each = func.json_each(bindparam(None, json.dumps(list(values)), type_=String)).table_valued("value")
    return column.in_(select(each.c.value))


def _any_of_literals(column: ColumnElement[int], values: Sequence[int]) -> ColumnElement[bool]:
    """MySQL/MariaDB: ``column IN (1, 2, …)``; aiomysql renders the values into the
    statement text itself (no server-side parameters, so no parameter limit), bounded
    by ``max_allowed_packet`` only, which a list of integers meets first at millions."""
    return column.in_(values)


def _lock_timeout_ms(options: LedgerOptions) -> str:
    return f"{max(1, round(options.lock_timeout * 1000))}ms"


def _postgresql_connect_args(options: LedgerOptions) -> dict[str, Any]:
    """asyncpg sends ``server_settings`` with the login: no round trip of their own.
    PgBouncer refuses startup parameters it does not track, so none go through it."""
    if options.pgbouncer:
        return {}
    return {"server_settings": {"lock_timeout": _lock_timeout_ms(options)}}


def _psycopg_connect_args(options: LedgerOptions) -> dict[str, Any]:
    """psycopg (libpq) sends ``options`` with the login, as asyncpg its
    ``server_settings``: no round trip of their own; not through PgBouncer either."""
    if options.pgbouncer:
        return {}
    return {"options": f"-c lock_timeout={_lock_timeout_ms(options)}"}


def _asyncpg_pgbouncer_args() -> dict[str, Any]:
    """asyncpg behind PgBouncer's transaction pooling: every prepared statement gets a
    unique name and none is cached, since consecutive transactions may run on
    different server connections. From SQLAlchemy's asyncpg documentation,
    "Prepared Statement Name with PGBouncer"."""
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": lambda: f"__asyncpg_{uuid.uuid4()}__",
    }


def _psycopg_pgbouncer_args() -> dict[str, Any]:
    """psycopg behind PgBouncer's transaction pooling: no server-side prepared
    statements (``prepare_threshold=None``), for the same reason; psycopg's
    documentation, "Server-side binding / Prepared statements"."""
    return {"prepare_threshold": None}


def merge_connect_args(ours: dict[str, Any], *given: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's ``connect()`` arguments: ``ours`` (from the rules), then each of
    ``given`` (the DSN's query, the caller's ``connect_args``) over them, one by one.

    Two are merged rather than replaced, so that the caller's settings win without
    losing ours: asyncpg's ``server_settings`` (a dict) and libpq's ``options`` (a
    string of ``-c name=value``; PostgreSQL takes the last of a name)."""
    merged = dict(ours)
    for arguments in given:
        for name, value in arguments.items():
            if name == "server_settings" and isinstance(value, Mapping):
                value = {**merged.get(name, {}), **value}
            elif name == "options" and isinstance(value, str) and name in merged:
                value = f"{merged[name]} {value}"
            merged[name] = value
    return merged


def _mysql_session_setup(options: LedgerOptions) -> tuple[str, ...]:
    # innodb_lock_wait_timeout takes whole seconds, at least 1.
    return (f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(options.lock_timeout))}",)


#: Bytes SQLite's WAL file is cut back to when it is reset (``PRAGMA journal_size_limit``).
#: A WAL only grows while a checkpoint cannot copy its frames into the database: a reader
#: whose snapshot is older than them holds them ("checkpoint starvation"), and the
#: file keeps that size, reused from its start, unless the limit is set (SQLite's
#: documentation, "Write-Ahead Logging" and "PRAGMA journal_size_limit"). Twice the WAL
#: of SQLite's default ``wal_autocheckpoint`` (1000 pages of 4 KiB), so that the file of
#: a store in steady use is never cut; only one grown past it.
SQLITE_WAL_LIMIT = 8 * 1024 * 1024


def _sqlite_session_setup(options: LedgerOptions) -> tuple[str, ...]:
    # journal_size_limit costs the append nothing: SQLite applies it in the commit that
    # restarts the WAL from its start, once a checkpoint has copied every frame (the
    # autocheckpoint, run by the first commit after the last old reader ended), and only
    # on a connection that set it (it is per connection).
    return (
        f"PRAGMA busy_timeout = {max(1, round(options.lock_timeout * 1000))}",
        "PRAGMA journal_mode = WAL",
        f"PRAGMA journal_size_limit = {SQLITE_WAL_LIMIT}",
        f"PRAGMA synchronous = {options.sqlite_synchronous}",
    )


def _check_foreign_mysql(conn: Connection) -> None:
    """An engine the caller made: its connections must talk utf8mb4 and read at
    REPEATABLE READ, as the ones chatledger makes do (see the rules below)."""
    charsets = conn.exec_driver_sql(
        "SELECT @@character_set_client, @@character_set_connection, @@character_set_results"
    ).one()
    if any(charset != "utf8mb4" for charset in charsets):
        raise ConfigurationError(
            f"the engine's connections use the character sets {', '.join(map(str, charsets))}; chatledger "
            "talks utf8mb4 to MySQL: create the engine from a URL with ?charset=utf8mb4"
        )
    level = conn.get_isolation_level()
    if level != "REPEATABLE READ":
        raise ConfigurationError(
            f"the engine's connections run at {level}; chatledger's transactions on MySQL/MariaDB "
            "need REPEATABLE READ: create the engine with isolation_level='REPEATABLE READ'"
        )


def _check_foreign_sqlite(conn: Connection) -> None:
    """An engine the caller made: the file goes to WAL mode, as chatledger's own
    connections put it (the mode is the file's, kept for every connection)."""
    if str(conn.exec_driver_sql("PRAGMA journal_mode").scalar()).lower() != "wal":
        conn.exec_driver_sql("PRAGMA journal_mode = WAL")


async def _begin_sqlite_foreign(conn: AsyncConnection) -> None:
    """SQLite, on an engine the caller made: the ledger's transaction begins with an
    explicit ``BEGIN <chatledger_sqlite_begin>`` (``IMMEDIATE`` when the option is not
    given, none when it is ``None``), as on chatledger's own engines
    (:func:`configure_engine`).

    Emitted here, after the engine's own ``begin`` listeners (SQLAlchemy runs those
    of an engine copy first, then the engine's). An engine set up by SQLAlchemy's
    recipe for transactional SQLite (pysqlite / aiosqlite documentation,
    "Serializable isolation / Savepoints / Transactional DDL": ``isolation_level =
    None`` on connect and a ``begin`` listener emitting ``BEGIN``), or sqlite3's
    ``autocommit=False`` (Python 3.12+, which opens a transaction by itself), has
    the connection in a transaction by now, one that has run nothing of the
    ledger's and holds no lock: it is rolled back first, so that the ledger's
    transaction begins in its own mode, and the journal mode can change outside a
    transaction.

    Raises:
        ConfigurationError: sqlite3 runs in ``autocommit=True`` mode (Python 3.12+),
            in which ``commit()`` and ``rollback()`` do nothing: the ledger's
            transactions would never end.
    """
    sync = _sync(conn)
    driver: Any = sync.connection.driver_connection  # aiosqlite's Connection
    if sys.version_info >= (3, 12):
        await _refuse_sqlite_autocommit(sync.info, driver)
    if driver.in_transaction:
        await conn.exec_driver_sql("ROLLBACK")
    mode = sync.get_execution_options().get("chatledger_sqlite_begin", "IMMEDIATE")
    if mode:
        await conn.exec_driver_sql(f"BEGIN {mode}")


#: ``info`` key of a pooled SQLite connection (kept across checkouts): whether its
#: sqlite3 connection runs in ``autocommit=True`` mode.
_SQLITE_AUTOCOMMIT = "chatledger_sqlite_autocommit"


async def _refuse_sqlite_autocommit(info: dict[str, Any], driver: Any) -> None:
    """Refuse a sqlite3 connection in ``autocommit=True`` mode (Python 3.12+). sqlite3
    lets only its own thread read the mode, so it is read in aiosqlite's (as SQLAlchemy
    sets ``isolation_level`` there), once per connection: it is set on connect."""
    if _SQLITE_AUTOCOMMIT not in info:
        mode = await driver._execute(getattr, driver._conn, "autocommit", None)
        info[_SQLITE_AUTOCOMMIT] = mode is True
    if info[_SQLITE_AUTOCOMMIT]:
        raise ConfigurationError(
            "the engine's sqlite3 connections run with autocommit=True, in which commit() does "
            f"nothing; {_AUTOCOMMIT_FIX} (isolation_level=None works)"
        )


_PRIVILEGE_HINT_POSTGRESQL = (
    "the role {user} lacks a privilege the runtime role needs; grant it as the database owner "
    '(README, "Two roles: owner and runtime"): GRANT CONNECT ON DATABASE {database} TO {user}; '
    "GRANT USAGE ON SCHEMA public TO {user}; "
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {user}; "
    "the tables an upgrade creates need it too, chatledger's bookkeeping included: "
    "GRANT SELECT ON chatledger_alembic_version, chatledger_compatibility TO {user};"
)
_PRIVILEGE_HINT_MYSQL = (
    "the user {user} lacks a privilege the runtime role needs; grant it as an admin "
    '(README, "Two roles: owner and runtime"): '
    "GRANT SELECT, INSERT, UPDATE, DELETE ON `{database}`.* TO '{user}'@'%'; "
    "with grants per table, chatledger's bookkeeping tables need it too: "
    "GRANT SELECT ON `{database}`.chatledger_alembic_version TO '{user}'@'%'; "
    "GRANT SELECT ON `{database}`.chatledger_compatibility TO '{user}'@'%';"
)
_DATABASE_HINT = (
    'the database {database} does not exist: create it (README, "Deploying: migrations") '
    "or correct its name in the DSN"
)
_LOGIN_HINT = "the server refused the login: check the user/password in the DSN (user {user})"
_PROTOCOL_HINT = (
    "the server, or a connection pooler in front of it, refused the connection's start-up "
    "settings; behind PgBouncer in transaction pooling mode pass pgbouncer=True"
)

RULES: dict[str, DialectRules] = {
    "postgresql": DialectRules(
        column_collations=_column_collations_postgresql,
        default_collation="default",
        append_message=_append_postgresql,
        save_rein_session=_save_rein_postgresql,
        greatest=func.greatest,
        order_live_by_tombstone=True,
        # serialization_failure, deadlock_detected, lock_not_available (lock_timeout),
        # query_canceled: statement_timeout (or a cancel request) ended the statement,
        # most often in a lock wait, and the transaction is rolled back as for 55P03.
        transient_codes=frozenset({"40001", "40P01", "55P03", "57014"}),
        # A prepared statement cached on a pooled connection whose result type an
        # online migration changed (SQLSTATE 0A000 of this class only): the
        # transaction was rolled back and SQLAlchemy has dropped the stale caches.
        transient_exceptions=frozenset({"InvalidCachedStatementError"}),
        # SQLSTATE class 08 (connection exceptions), too_many_connections,
        # admin_shutdown, crash_shutdown, cannot_connect_now (starting up / shutting down)
        # ... and idle_in_transaction_session_timeout, idle_session_timeout (the server
        # closed the connection).
        unavailable_codes=frozenset(
            {
                "08000",
                "08001",
                "08003",
                "08004",
                "08006",
                "53300",
                "57P01",
                "57P02",
                "57P03",
                "25P03",
                "57P05",
            }
        ),
        # asyncpg's answer when no host of a multi-host DSN is the primary (a failover
        # under way): the cluster may promote one within the retry budget. (psycopg's is
        # an OperationalError of the connection, a CONNECTION failure already.)
        unavailable_exceptions=frozenset({"TargetServerAttributeNotMatched"}),
        # read_only_sql_transaction (default_transaction_read_only, a hot standby)
        read_only_codes=frozenset({"25006"}),
        full_codes=frozenset({"53100"}),  # disk_full
        code_name="SQLSTATE",
        any_of=_any_of_array,
        configuration_hints={
            "3D000": _DATABASE_HINT,  # invalid_catalog_name
            "28000": _LOGIN_HINT,  # invalid_authorization_specification (unknown role)
            "28P01": _LOGIN_HINT,  # invalid_password
            "42501": _PRIVILEGE_HINT_POSTGRESQL,  # insufficient_privilege
            # protocol_violation: what PgBouncer answers to a startup parameter it does
            # not track (the store's lock_timeout), and no server sends to a valid client.
            "08P01": _PROTOCOL_HINT,
        },
        # Stated by asyncpg's BEGIN itself (BEGIN ISOLATION LEVEL REPEATABLE READ READ
        # ONLY): one snapshot for every statement of the read, and no extra round trip.
        snapshot_read={"isolation_level": "REPEATABLE READ", "postgresql_readonly": True},
        connect_args=_postgresql_connect_args,
        driver="asyncpg",
        driver_extra="postgres",
        pgbouncer_connect_args=_asyncpg_pgbouncer_args,
        # program_limit_exceeded
        too_large_codes=frozenset({"54000"}),
        schema_codes=frozenset({"42703", "42P01"}),  # undefined_column, undefined_table
        missing_table_codes=frozenset({"42P01"}),  # undefined_table
        byte_order_collation="C",
    ),
    "mysql": DialectRules(
        column_collations=_column_collations_mysql,
        table_collation=_table_collation_mysql,
        append_message=_append_mysql,
        save_rein_session=_save_rein_mysql,
        greatest=func.greatest,
        # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, and ER_CHECKREAD ("Record has changed
        # since it was read"): MariaDB's snapshot isolation (innodb_snapshot_isolation,
        # on by default from 11.8) rolls a write back with it when another transaction
        # changed the row after this one's snapshot.
        # ... and statements their time limit ended, most often in a lock wait:
        # ER_STATEMENT_TIMEOUT (MariaDB max_statement_time), ER_QUERY_TIMEOUT (MySQL
        # max_execution_time), ER_QUERY_INTERRUPTED (KILL QUERY). The statement was
        # rolled back, and the ledger rolls its whole transaction back before a retry.
        transient_codes=frozenset({1213, 1205, 1020, 1969, 3024, 1317}),
        # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, ER_OPTION_PREVENTS_STATEMENT
        # (read_only, super_read_only), ER_READ_ONLY_MODE (innodb_read_only),
        # ER_OPEN_AS_READONLY
        read_only_codes=frozenset({1792, 1290, 1836, 1036}),
        # ER_RECORD_FILE_FULL ("The table is full"), ER_DISK_FULL
        full_codes=frozenset({1114, 1021}),
        any_of=_any_of_literals,
        # ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED (MariaDB), client
        # errors CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR, CR_SERVER_GONE_ERROR,
        # CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED, and ER_CLIENT_INTERACTION_TIMEOUT
        # ... and ER_UNKNOWN_COM_ERROR, Galera's "WSREP has not yet prepared node for
        # application use": the node is joining or outside the primary component.
        unavailable_codes=frozenset({1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031, 1047}),
        configuration_hints={
            1049: _DATABASE_HINT,  # ER_BAD_DB_ERROR
            1045: _LOGIN_HINT,  # ER_ACCESS_DENIED_ERROR
            1698: _LOGIN_HINT,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR (no password given)
            1044: _PRIVILEGE_HINT_MYSQL,  # ER_DBACCESS_DENIED_ERROR
            1142: _PRIVILEGE_HINT_MYSQL,  # ER_TABLEACCESS_DENIED_ERROR
            1143: _PRIVILEGE_HINT_MYSQL,  # ER_COLUMNACCESS_DENIED_ERROR
            1227: _PRIVILEGE_HINT_MYSQL,  # ER_SPECIFIC_ACCESS_DENIED_ERROR
        },
        # Every connection's session is set to REPEATABLE READ when it opens, whatever
        # the server's default (transaction_isolation may be READ-COMMITTED): InnoDB
        # then reads one consistent snapshot from a transaction's first read on, and
        # the appends' locking was designed for that level. Per connection, not per
        # transaction, so no call pays a round trip for it.
        engine_options={"isolation_level": "REPEATABLE READ"},
        session_setup=_mysql_session_setup,
        statement_limit_query="SELECT @@max_allowed_packet",
        driver="aiomysql",
        driver_extra="mysql",
        check_foreign=_check_foreign_mysql,
        # ER_NET_PACKET_TOO_LARGE
        too_large_codes=frozenset({1153}),
        schema_codes=frozenset({1054, 1146}),  # ER_BAD_FIELD_ERROR, ER_NO_SUCH_TABLE
        missing_table_codes=frozenset({1146}),  # ER_NO_SUCH_TABLE
    ),
    "sqlite": DialectRules(
        append_message=_append_sqlite,
        save_rein_session=_save_rein_sqlite,
        greatest=func.max,
        # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes, reduced below)
        transient_codes=frozenset({5, 6}),
        # SQLITE_READONLY (a mode=ro or immutable URI, PRAGMA query_only, a file this
        # process may not write), SQLITE_CANTOPEN (the file, or the -wal / -shm files a
        # WAL database needs even to be read, cannot be opened: the same, seen earlier)
        read_only_codes=frozenset({8, 14}),
        full_codes=frozenset({13}),  # SQLITE_FULL: the disk, or max_page_count
        read_only_hint=(
            "this process cannot write the SQLite file or the directory it is in (file or "
            "directory permissions, a read-only mount, a mode=ro or immutable URI, PRAGMA "
            "query_only); in WAL mode SQLite writes the -wal and -shm files beside the file even "
            "to read it: give this process write access to the file and its directory"
        ),
        full_hint="free disk space where the SQLite file lives, or raise PRAGMA max_page_count",
        code_name="SQLite result code",
        any_of=_any_of_json,
        # A deferred read transaction in WAL mode sees one snapshot and blocks no writer.
        snapshot_read={"chatledger_sqlite_begin": "DEFERRED"},
        # A write takes the write lock when it begins, before its first statement, so
        # everything it reads is current and two writers never deadlock upgrading a
        # read lock.
        write={"chatledger_sqlite_begin": "IMMEDIATE"},
        session_setup=_sqlite_session_setup,
        explicit_begin=True,
        server=False,
        driver="aiosqlite",
        check_foreign=_check_foreign_sqlite,
        foreign_begin=_begin_sqlite_foreign,
        # SQLITE_TOOBIG
        too_large_codes=frozenset({18}),
        # SQLITE_ERROR's messages for a missing column (in a read, in an INSERT) or table
        schema_messages=("no such column", "has no column named", "no such table"),
        byte_order_collation="BINARY",
        literal_like=False,
        column_collations=_column_collations_sqlite,
        rebuilds_tables=True,
    ),
}

#: psycopg's failures to connect carry no SQLSTATE, only the server's message (libpq
#: gives the error of a connection attempt as text): the codes the messages stand for,
#: then 08001 (sqlclient_unable_to_establish_sqlconnection) for any other failure to
#: connect -- refused, reset, timed out, no such host -- which is retried. The
#: messages are PostgreSQL's (and PgBouncer's) English ones; a server sending them in
#: another language has its refusals retried until ``retry_timeout``, then reported
#: with the server's words. Errors with a SQLSTATE never get here.
_PSYCOPG_CONNECT_CODES: tuple[tuple[re.Pattern[str], str | int], ...] = tuple(
    (re.compile(pattern, re.DOTALL), code)
    for pattern, code in (
        (r'database ".*" does not exist', "3D000"),
        (r'role ".*" does not exist', "28000"),
        (r"password authentication failed|no password supplied|no pg_hba\.conf entry", "28P01"),
        (r"permission denied for database", "42501"),
        (r"unsupported startup parameter", "08P01"),
        (r"too many clients|connection slots are reserved", "53300"),
        (r"the database system is (?:starting up|shutting down|in recovery)", "57P03"),
        (r"^connection failed:|connection to server .* failed", "08001"),
    )
)

#: psycopg 3, async (SQLAlchemy's ``postgresql+psycopg`` under ``create_async_engine``):
#: PostgreSQL's rules, with the driver's own ways of sending the lock timeout, of
#: going through PgBouncer, and of reporting what asyncpg reports by its own classes.
RULES_BY_DRIVER: dict[tuple[str, str], DialectRules] = {
    (name, found.driver): found for name, found in RULES.items()
} | {
    ("postgresql", "psycopg"): replace(
        RULES["postgresql"],
        # psycopg prepares a statement on its fifth run; one whose result type an
        # online migration changed fails with SQLSTATE 0A000, which other unsupported
        # features share: told apart by the server routine that raised it, as asyncpg
        # tells its InvalidCachedStatementError apart. The ROLLBACK clears psycopg's
        # prepared statements, so the retry prepares anew.
        transient_exceptions=frozenset(),
        transient_routines=frozenset({("0A000", "RevalidateCachedQuery")}),
        message_codes=_PSYCOPG_CONNECT_CODES,
        connect_args=_psycopg_connect_args,
        driver="psycopg",
        driver_extra="psycopg",
        pgbouncer_connect_args=_psycopg_pgbouncer_args,
    ),
}


def create_engine(url: URL, **options: Any) -> AsyncEngine:
    """SQLAlchemy's ``create_async_engine``, with a missing driver reported as the extra
    that installs it.

    Raises:
        ImportError: the URL's driver is not installed; the message gives the
            ``pip install 'chatledger[...]'`` line.
        ValueError: a dialect or driver chatledger does not serve.
    """
    found = rules(url.get_backend_name(), url.get_driver_name())
    try:
        return create_async_engine(url, **options)
    except ImportError as error:  # also psycopg without its binary or C part
        raise ImportError(missing_extra(f"the {found.driver} driver", found.driver_extra)) from error


def rules(dialect_name: str, driver: str | None = None) -> DialectRules:
    """The rules of a dialect and one of its async drivers (``None``: the dialect's
    default driver); ``ValueError`` for a backend or driver chatledger does not serve."""
    try:
        found = RULES[dialect_name]
    except KeyError:
        raise ValueError(f"dialect {dialect_name!r} is not supported") from None
    if driver is None or driver == found.driver:
        return found
    try:
        return RULES_BY_DRIVER[(dialect_name, driver)]
    except KeyError:
        raise ValueError(f"driver {driver!r} of {dialect_name} is not supported") from None


def _rules_of(dialect: str | DialectRules) -> DialectRules:
    return dialect if isinstance(dialect, DialectRules) else rules(dialect)


def error_code(error: DBAPIError, found: DialectRules | None = None) -> str | int | None:
    """The driver's error code of a wrapped DBAPI error: the primary result code on
    SQLite, the server error number on MySQL (PyMySQL also sets a SQLSTATE, which is
    coarser, so the number comes first), SQLSTATE on PostgreSQL; else the code the
    message stands for by ``found.message_codes``."""
    orig = error.orig
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        return sqlite_code & 0xFF
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    sqlstate = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "__cause__", None), "sqlstate", None)
    if sqlstate:
        return str(sqlstate)
    if isinstance(orig, Exception) and "database is locked" in str(orig):
        return 5
    if found is not None and found.message_codes and isinstance(orig, Exception):
        message = str(orig)
        for pattern, code in found.message_codes:
            if pattern.search(message):
                return code
    return None


def _class_names(error: BaseException | None) -> set[str]:
    """The class names of ``error`` and of the errors it was raised from (the
    driver's own error under SQLAlchemy's adapted DBAPI one)."""
    names: set[str] = set()
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        names.update(kind.__name__ for kind in type(error).__mro__)
        error = error.__cause__
    return names


def _server_routine(orig: BaseException | None) -> str | None:
    """The server routine that raised a PostgreSQL error (the error field "R"), as
    psycopg reports it (``diag.source_function``)."""
    routine = getattr(getattr(orig, "diag", None), "source_function", None)
    return routine if isinstance(routine, str) else None


def classify(dialect: str | DialectRules, error: DBAPIError) -> Failure:
    """What ``error`` means: see :class:`Failure`. The codes are the rules' of the
    dialect (a name: its default driver's) or of the driver given."""
    found = _rules_of(dialect)
    code = error_code(error, found)
    if code in found.too_large_codes:
        return Failure.TOO_LARGE
    if code in found.configuration_hints:
        return Failure.CONFIGURATION
    if code in found.schema_codes or any(part in str(error.orig) for part in found.schema_messages):
        return Failure.SCHEMA
    if (
        code in found.transient_codes
        or found.transient_exceptions & _class_names(error.orig)
        or (found.transient_routines and (code, _server_routine(error.orig)) in found.transient_routines)
    ):
        return Failure.TRANSIENT
    if (
        error.connection_invalidated
        or isinstance(error.orig, OSError)
        or code in found.unavailable_codes
        or found.unavailable_exceptions & _class_names(error.orig)
    ):
        return Failure.CONNECTION
    if code in found.read_only_codes:
        return Failure.READ_ONLY
    if code in found.full_codes:
        return Failure.FULL
    if isinstance(error, IntegrityError):
        return Failure.CONSTRAINT
    return Failure.OTHER


def missing_table(dialect: str | DialectRules, error: DBAPIError) -> bool:
    """Whether ``error`` is of a table that does not exist (any more)."""
    found = _rules_of(dialect)
    return error_code(error, found) in found.missing_table_codes


def configuration_hint(dialect: str | DialectRules, error: DBAPIError, url: URL) -> str:
    """What to fix for a :attr:`Failure.CONFIGURATION` error, naming the DSN's database
    and user."""
    found = _rules_of(dialect)
    template = found.configuration_hints.get(error_code(error, found) or "", "check the DSN")
    return template.format(database=url.database or "?", user=url.username or "?")


def configuration_error(dialect: str | DialectRules, error: DBAPIError, url: URL) -> ConfigurationError:
    """The one wording of a :attr:`Failure.CONFIGURATION` error, from the stores and the
    schema commands alike: the database (password masked), what to fix
    (:func:`configuration_hint`), and the server's own words."""
    return ConfigurationError(
        f"{display(url)}: {configuration_hint(dialect, error, url)}. The server said: {error.orig}"
    )


def _server_words(error: BaseException) -> str:
    """The driver's (the server's) own message of ``error``, on one line, without
    SQLAlchemy's statement and help link."""
    orig = getattr(error, "orig", None)
    words = str(orig if orig is not None else error) or type(orig or error).__name__
    if orig is None:  # SQLAlchemy's own message: its first line, without the help link
        words = words.split("\n")[0]
    return " ".join(words.split())


def database_error(dialect: str | DialectRules, error: SQLAlchemyError, url: URL) -> ChatledgerError:
    """The chatledger error of any SQLAlchemy error ``error`` met on the database at
    ``url`` (raise it ``from error``): the one total mapping from a database's refusal
    to what the caller sees, for every path that does not retry (the importer, the
    schema commands, the CLI). :class:`chatledger.engine.Ledger` retries the transient
    ones first and then uses this mapping for the rest.

    By :func:`classify`:

    - ``TRANSIENT``, ``CONNECTION``; a pool timeout: :class:`StorageUnavailable`
      (nothing committed, unless a COMMIT was under way: try again);
    - ``CONFIGURATION``: :func:`configuration_error`;
    - ``TOO_LARGE``: :class:`StatementTooLarge` (a ``ValueError``);
    - ``SCHEMA``: :class:`SchemaNotReady`, naming ``chatledger check``;
    - ``READ_ONLY``, ``FULL``: :class:`DatabaseUnwritable`, with what to do;
    - ``CONSTRAINT``: :class:`ConstraintViolation`;
    - ``OTHER``, and SQLAlchemy's own errors without a driver error
      (``ResourceClosedError``, ``InvalidRequestError``...): :class:`DatabaseError`.

    Every :class:`DatabaseError` carries the code (SQLSTATE, MySQL error number,
    SQLite result code; ``None`` if there is none) and the driver's message.
    """
    found = _rules_of(dialect)
    where = display(url)
    if isinstance(error, PoolTimeout):
        return StorageUnavailable(f"no connection to {where} became free: {_server_words(error)}")
    if not isinstance(error, DBAPIError):
        words = _server_words(error)
        return DatabaseError(
            f"{where}: the call failed in SQLAlchemy ({type(error).__name__}): {words}",
            server_message=words,
        )
    code = error_code(error, found)
    words = _server_words(error)
    failure = classify(found, error)
    said = f"{found.code_name} {code}: {words}" if code is not None else f"{type(error).__name__}: {words}"
    if failure is Failure.CONFIGURATION:
        return configuration_error(found, error, url)
    if failure in (Failure.TRANSIENT, Failure.CONNECTION):
        return StorageUnavailable(
            f"{where} could not complete the call (it was rolled back, or the connection was lost); "
            f"try again. The server said ({said})"
        )
    if failure is Failure.TOO_LARGE:
        return StatementTooLarge(
            f"{where} refused the statement as too large; nothing was written ({said})",
            code=code,
            server_message=words,
        )
    if failure is Failure.SCHEMA:
        return SchemaNotReady(
            f"database {where} lacks a table or column this chatledger uses (an older, hand-made "
            f"or hand-changed schema); run `chatledger check --dsn {as_argument(url)}` to see where it "
            "stands, then `chatledger upgrade` with the schema owner's DSN. The server said "
            f"({said})"
        )
    if failure in (Failure.READ_ONLY, Failure.FULL):
        reason = failure.value
        hint = found.read_only_hint if failure is Failure.READ_ONLY else found.full_hint
        return DatabaseUnwritable(
            f"database {where} is {reason}; nothing was written: {hint}. The server said ({said})",
            reason=reason,
            code=code,
            server_message=words,
        )
    if failure is Failure.CONSTRAINT:
        return ConstraintViolation(
            f"database {where} refused a row that breaks a constraint of the schema, which "
            f"chatledger's own writes keep (rows written outside chatledger?); nothing was "
            f"written. The server said ({said})",
            code=code,
            server_message=words,
        )
    return DatabaseError(
        f"database {where} refused the call ({said}); nothing was written", code=code, server_message=words
    )


@contextmanager
def database_errors(url: URL, *, statements: bool = True) -> Iterator[None]:
    """Raise every SQLAlchemy error of the block as :func:`database_error` maps it, from
    the error (for calls that run no retry loop: the schema commands).

    ``statements=False`` (a schema change: a migration, an adoption): a statement
    refused for a missing privilege, table or column is a :class:`DatabaseError`, the
    change's own failure, rather than a :class:`ConfigurationError` naming the runtime
    role's grants or a :class:`SchemaNotReady` naming ``chatledger upgrade``, which
    would not cure it; refusals of the connection itself stay configuration.
    """
    try:
        yield
    except SQLAlchemyError as error:
        found = rules(url.get_backend_name(), url.get_driver_name())
        if (
            not statements
            and isinstance(error, DBAPIError)
            and error.statement is not None
            and classify(found, error) in (Failure.CONFIGURATION, Failure.SCHEMA)
        ):
            code = error_code(error, found)
            words = _server_words(error)
            raise DatabaseError(
                f"database {display(url)} refused a statement of the schema change "
                f"({found.code_name} {code}: {words})",
                code=code,
                server_message=words,
            ) from error
        raise database_error(found, error, url) from error


@contextmanager
def configuration_refusals(url: URL, *, statements: bool = True) -> Iterator[None]:
    """Raise a configuration the server refuses inside the block (no such database, a
    refused login, a missing privilege) as :func:`configuration_error` does; other
    errors pass unchanged.

    ``statements=False`` takes only refusals of the connection itself (raised before any
    statement ran): a migration's statement refused for a privilege is the migration's
    own failure, which the runtime role's grants would not cure.
    """
    try:
        yield
    except DBAPIError as error:
        found = rules(url.get_backend_name(), url.get_driver_name())
        if (statements or error.statement is None) and classify(found, error) is Failure.CONFIGURATION:
            raise configuration_error(found, error, url) from error
        raise


def configure_engine(engine: AsyncEngine, options: LedgerOptions) -> None:
    """Per-connection set-up from the dialect's rules: the set-up statements of every
    new connection (SQLite's WAL, its size limit, busy timeout and synchronous pragmas;
    MySQL's lock wait timeout), and on SQLite explicit transactions.

    SQLite: sqlite3's own transaction handling is switched off
    (``isolation_level = None``) and every transaction begins with an explicit
    ``BEGIN`` from the ``begin`` event: ``BEGIN IMMEDIATE`` for a write, so it holds
    the write lock before its first statement, and a deferred ``BEGIN`` for a read,
    whose snapshot starts with its first statement (WAL mode: it blocks no writer).
    The mode comes from the ``chatledger_sqlite_begin`` execution option, ``IMMEDIATE``
    when none is given. SQLAlchemy's pysqlite / aiosqlite documentation,
    "Serializable isolation / Savepoints / Transactional DDL"."""
    found = rules(engine.dialect.name, engine.dialect.driver)
    statements = found.session_setup(options)
    explicit_begin = found.explicit_begin

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        if explicit_begin:
            dbapi_connection.isolation_level = None
        if not statements:
            return
        cursor = dbapi_connection.cursor()
        try:
            for statement in statements:
                cursor.execute(statement)
        finally:
            cursor.close()

    if explicit_begin:
        _begin_explicitly(engine)


def _begin_explicitly(engine: AsyncEngine) -> None:
    """Every transaction of ``engine`` begins with ``BEGIN <chatledger_sqlite_begin>``
    (``IMMEDIATE`` when the option is not given; none when it is ``None``)."""

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("chatledger_sqlite_begin", "IMMEDIATE")
        if mode:
            conn.exec_driver_sql(f"BEGIN {mode}")


#: Execution options of the transaction :attr:`DialectRules.check_foreign` runs in:
#: on SQLite none is begun, so that a pragma may change the journal mode.
FOREIGN_CHECK_OPTIONS: dict[str, Any] = {"chatledger_sqlite_begin": None}


def adopt_engine(engine: AsyncEngine) -> tuple[AsyncEngine, DialectRules]:
    """A ledger's view of an engine its caller made and owns (the ``engine=`` option)
    and the rules of its dialect and driver.

    The view is ``engine.execution_options()``: a copy sharing the engine's pool, so
    that the listeners a ledger adds (aiosqlite's clean-up of a cancelled statement)
    apply to the ledger's transactions only, never to the caller's own. Per-connection
    settings are the engine's (chatledger does not change connections the caller also
    uses): the lock timeout (PostgreSQL ``lock_timeout``, MySQL
    ``innodb_lock_wait_timeout``, SQLite's busy timeout, sqlite3's ``timeout``),
    SQLite's ``synchronous``, Galera's ``wsrep_sync_wait``, pooling. What a ledger
    needs of them is set or checked on first use by :attr:`DialectRules.check_foreign`,
    and at the start of each of its transactions by :attr:`DialectRules.foreign_begin`
    (no autocommit; SQLite's explicit ``BEGIN IMMEDIATE`` / ``BEGIN DEFERRED``, emitted
    after the engine's own ``begin`` listeners), which the ledger runs.

    Raises:
        TypeError: ``engine`` is not an ``AsyncEngine``.
        ValueError: a dialect or driver chatledger does not serve, or an engine in
            ``AUTOCOMMIT`` (the ledger's transactions would not be transactions).
    """
    if not isinstance(engine, AsyncEngine):
        raise TypeError(
            f"engine must be a sqlalchemy AsyncEngine (create_async_engine), not {type(engine).__name__}"
        )
    found = rules(engine.dialect.name, engine.dialect.driver)
    # create_async_engine(isolation_level=...) is kept where SQLAlchemy's own Connection
    # looks it up (Connection._is_autocommit_isolation), execution_options() in the options.
    isolation = engine.get_execution_options().get("isolation_level") or getattr(
        engine.dialect, "_on_connect_isolation_level", None
    )
    if isolation == "AUTOCOMMIT":
        raise ValueError(
            "engine runs in AUTOCOMMIT; chatledger runs every call in one transaction: "
            "pass an engine without isolation_level='AUTOCOMMIT'"
        )
    view = engine.execution_options()
    release_cancelled_statements(view)
    return view, found


# -- schema migrations ----------------------------------------------------------------


class SchemaLockTimeout(TimeoutError):
    """The schema lock was not granted in time: another process is migrating the database."""


#: PostgreSQL's advisory lock key of the schema lock: the first 8 bytes of
#: SHA-256("chatledger schema lock") as a signed bigint. Advisory locks are per
#: database, so one constant serves every database of a server.
SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"chatledger schema lock").digest()[:8], "big", signed=True)
#: MySQL/MariaDB ``GET_LOCK`` name of the schema lock. Lock names are server-wide and at
#: most 64 characters, so it carries the MD5 of the database name.
_MYSQL_LOCK_NAME = "CONCAT('chatledger_schema_', MD5(DATABASE()))"

#: Opens the one transaction a migration runs in, holding the schema lock, on a connection
#: of an engine set up by :func:`configure_migration_engine`; yields the connection to run
#: it on. Arguments: the connection and the lock timeout in seconds. Raises
#: :class:`SchemaLockTimeout` when the lock is not granted within the timeout.
MigrationTransaction = Callable[[AsyncConnection, float], AbstractAsyncContextManager[AsyncConnection]]


class MigrationBusy(TimeoutError):
    """A statement of the migration, past the schema lock, waited longer than the lock
    timeout for a lock on a table (or deadlocked): another transaction holds a lock on
    chatledger's tables (an open transaction that read or wrote them)."""


def _busy(conn: AsyncConnection, error: DBAPIError) -> MigrationBusy | None:
    """:class:`MigrationBusy` for a lock wait past the timeout (or a deadlock) of the
    migration's work; ``None`` for any other failure, which is the work's own."""
    if classify(rules(conn.dialect.name, conn.dialect.driver), error) is Failure.TRANSIENT:
        return MigrationBusy(str(error.orig))
    return None


@asynccontextmanager
async def _migration_transaction_postgresql(
    conn: AsyncConnection, lock_timeout: float
) -> AsyncIterator[AsyncConnection]:
    """PostgreSQL: ``pg_advisory_xact_lock`` inside the migration's own transaction (DDL is
    transactional), so the lock goes with the COMMIT or ROLLBACK, also behind PgBouncer.

    READ COMMITTED whatever the database's default, so that a process granted the lock
    after another upgraded reads the revision that one committed. ``lock_timeout``
    (``set_config(.., true)``: ``SET LOCAL``, for this transaction only) bounds every
    lock wait of the migration: the schema lock's (advisory locks obey it; SQLSTATE
    55P03) and its DDL's on tables an open transaction has read or written, which
    would otherwise wait unbounded while every writer queues behind the pending
    ``ACCESS EXCLUSIVE`` lock (:class:`MigrationBusy`; nothing is applied).
    """
    conn = await conn.execution_options(isolation_level="READ COMMITTED")
    async with conn.begin():
        milliseconds = max(1, round(lock_timeout * 1000))
        await conn.execute(
            text("SELECT set_config('lock_timeout', :value, true)"), {"value": f"{milliseconds}ms"}
        )
        try:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        except DBAPIError as error:
            if error_code(error) == "55P03":  # lock_not_available
                raise SchemaLockTimeout(f"pg_advisory_xact_lock({SCHEMA_LOCK_KEY})") from error
            raise
        try:
            yield conn
        except DBAPIError as error:
            busy = _busy(conn, error)
            if busy is None:
                raise
            raise busy from error


@asynccontextmanager
async def _migration_transaction_mysql(
    conn: AsyncConnection, lock_timeout: float
) -> AsyncIterator[AsyncConnection]:
    """MySQL/MariaDB: ``GET_LOCK``, a lock of the session, taken and committed before the
    migration's transaction begins (so that transaction's snapshot starts after it) and
    released after; a lost connection releases it on the server. DDL is not
    transactional here: every statement commits by itself.

    While the lock is held, ``lock_wait_timeout`` (metadata locks: the DDL's wait for a
    transaction that read or wrote a table, one day by default, while every writer
    queues behind it) and ``innodb_lock_wait_timeout`` (row locks) of the session are
    the lock timeout in whole seconds, then put back: a wait past it is
    :class:`MigrationBusy` (error 1205); the revisions before it stay applied."""
    granted = await conn.scalar(
        text(f"SELECT GET_LOCK({_MYSQL_LOCK_NAME}, :timeout)"), {"timeout": lock_timeout}
    )
    await conn.commit()
    if granted != 1:  # 0: timed out; NULL: killed or out of memory
        raise SchemaLockTimeout(f"GET_LOCK({_MYSQL_LOCK_NAME})")
    try:
        saved = (
            await conn.execute(text("SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout"))
        ).one()
        seconds = max(1, math.ceil(lock_timeout))
        await conn.exec_driver_sql(
            f"SET SESSION lock_wait_timeout = {seconds}, innodb_lock_wait_timeout = {seconds}"
        )
        await conn.commit()
        try:
            async with conn.begin():
                try:
                    yield conn
                except DBAPIError as error:
                    busy = _busy(conn, error)
                    if busy is None:
                        raise
                    raise busy from error
        finally:
            with suppress(SQLAlchemyError):  # the connection may be gone (its settings with it)
                await conn.exec_driver_sql(
                    f"SET SESSION lock_wait_timeout = {int(saved[0])}, "
                    f"innodb_lock_wait_timeout = {int(saved[1])}"
                )
                await conn.commit()
    except BaseException:
        with suppress(DBAPIError):  # the connection may be gone, and the lock with it
            await _release_mysql_lock(conn)
        raise
    await _release_mysql_lock(conn)


async def _release_mysql_lock(conn: AsyncConnection) -> None:
    await conn.execute(text(f"SELECT RELEASE_LOCK({_MYSQL_LOCK_NAME})"))
    await conn.commit()


@asynccontextmanager
async def _migration_transaction_sqlite(
    conn: AsyncConnection, lock_timeout: float
) -> AsyncIterator[AsyncConnection]:
    """SQLite: ``BEGIN IMMEDIATE`` (emitted by :func:`configure_migration_engine`) takes the
    file's write lock, waiting up to the busy timeout; every statement of the migration,
    DDL included, then runs in that one transaction. The busy timeout bounds every
    later lock wait too (a COMMIT waiting for readers, outside WAL mode):
    :class:`MigrationBusy`, nothing applied."""
    began = False
    try:
        async with conn.begin():
            began = True
            yield conn
    except DBAPIError as error:
        if not began and error_code(error) in RULES["sqlite"].transient_codes:
            raise SchemaLockTimeout("BEGIN IMMEDIATE") from error
        busy = _busy(conn, error)
        if busy is None:
            raise
        raise busy from error


#: Dialect name -> the transaction a migration runs in, holding the schema lock.
MIGRATION_TRANSACTIONS: dict[str, MigrationTransaction] = {
    "postgresql": _migration_transaction_postgresql,
    "mysql": _migration_transaction_mysql,
    "sqlite": _migration_transaction_sqlite,
}


@dataclass(frozen=True)
class OfflineScript:
    """A migration rendered as SQL (``--sql``) for the database's own client: opened and
    closed as :data:`MIGRATION_TRANSACTIONS` runs it online, the schema lock included,
    so that the script waits for (or stops at) an upgrade running meanwhile."""

    #: How to run the script (``SCRIPT``) so that it stops at the first error.
    client: str
    #: What a failure halfway leaves behind, in lines of the script's header.
    on_failure: tuple[str, ...]
    #: Statements before the first revision, given the lock timeout in seconds.
    begin: Callable[[float], tuple[str, ...]]
    #: Statements after the last revision.
    end: tuple[str, ...]


#: Where the PostgreSQL script keeps the session's own ``lock_timeout`` while it waits for
#: the schema lock (a custom setting, local to the script's transaction).
_SAVED_LOCK_TIMEOUT = "chatledger.saved_lock_timeout"


def _offline_begin_postgresql(lock_timeout: float) -> tuple[str, ...]:
    # Bounded like online, then put back as online: the revisions' DDL waits for table
    # locks as the session says (a lock_timeout the DBA SET before running the script).
    return (
        "BEGIN;",
        f"SELECT set_config('{_SAVED_LOCK_TIMEOUT}', current_setting('lock_timeout'), true);",
        f"SET LOCAL lock_timeout = '{max(1, round(lock_timeout * 1000))}ms';",
        f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY});",
        f"SELECT set_config('lock_timeout', current_setting('{_SAVED_LOCK_TIMEOUT}'), true);",
    )


def _offline_begin_mysql(lock_timeout: float) -> tuple[str, ...]:
    # A script cannot test GET_LOCK's answer, so the statement fails unless it is 1 (as
    # online: 0 is a timeout, NULL an error, such as no database selected): the second
    # row then makes the scalar subquery an error ("Subquery returns more than 1 row"),
    # and the client stops before the first change. <=> compares NULL as a value.
    return (
        f"SELECT (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE NOT (GET_LOCK({_MYSQL_LOCK_NAME}, "
        f"{max(1, math.ceil(lock_timeout))}) <=> 1)) AS chatledger_schema_lock;",
    )


def _offline_begin_sqlite(lock_timeout: float) -> tuple[str, ...]:
    return (f"PRAGMA busy_timeout = {max(1, round(lock_timeout * 1000))};", "BEGIN IMMEDIATE;")


#: Dialect name -> how its ``--sql`` script opens and closes.
OFFLINE_SCRIPTS: dict[str, OfflineScript] = {
    "postgresql": OfflineScript(
        client="psql -v ON_ERROR_STOP=1 -d DATABASE -f SCRIPT",
        on_failure=("It is one transaction: a failure changes nothing.",),
        begin=_offline_begin_postgresql,
        end=("COMMIT;",),
    ),
    "mysql": OfflineScript(
        client="mysql DATABASE < SCRIPT",
        on_failure=(
            "MySQL/MariaDB commit every DDL statement on its own: a failure leaves the statements",
            'before it applied (README, "Deploying: migrations"). Take a backup first.',
        ),
        begin=_offline_begin_mysql,
        end=(f"SELECT RELEASE_LOCK({_MYSQL_LOCK_NAME});",),
    ),
    "sqlite": OfflineScript(
        client="sqlite3 -bail DATABASE_FILE < SCRIPT",
        on_failure=("It is one transaction: a failure changes nothing (-bail stops at the first error).",),
        begin=_offline_begin_sqlite,
        end=("COMMIT;",),
    ),
}


def offline_script(dialect_name: str) -> OfflineScript:
    """How a ``--sql`` script of the dialect opens and closes; ``ValueError`` for a
    dialect chatledger does not serve."""
    try:
        return OFFLINE_SCRIPTS[dialect_name]
    except KeyError:
        raise ValueError(f"dialect {dialect_name!r} is not supported") from None


def migration_transaction(
    conn: AsyncConnection, lock_timeout: float
) -> AbstractAsyncContextManager[AsyncConnection]:
    """The migration transaction of ``conn``'s dialect, holding the schema lock; see
    :data:`MigrationTransaction`. ``ValueError`` for a dialect chatledger does not serve."""
    try:
        opener = MIGRATION_TRANSACTIONS[conn.dialect.name]
    except KeyError:
        raise ValueError(f"dialect {conn.dialect.name!r} is not supported") from None
    return opener(conn, lock_timeout)


# -- downgrades that drop tables --------------------------------------------------------


class TablesBusy(TimeoutError):
    """The tables a downgrade drops could not be locked in time: open transactions kept
    using them past the lock timeout (or deadlocked with the downgrade)."""

    def __init__(self, tables: Sequence[str]) -> None:
        super().__init__(", ".join(tables))
        #: The tables it tried to lock.
        self.tables = tuple(tables)


#: Keeps every other session out of the tables a downgrade drops for its ``with`` block,
#: in which the downgrade counts their rows and drops them: an append whose transaction
#: is open when the lock is asked for commits first (and is counted), and every later
#: one waits until the tables are gone (and then fails: it was never acknowledged).
#: Arguments: the migration's (synchronous) connection, the tables it drops, every
#: table of chatledger's it may touch meanwhile (the dropped ones among them), and the
#: lock timeout in seconds. Raises :class:`TablesBusy` when the tables are not granted
#: in time. Runs inside :data:`MIGRATION_TRANSACTIONS`, under the schema lock.
DropGuard = Callable[[Connection, Sequence[str], Sequence[str], float], AbstractContextManager[None]]


def _lock_tables(conn: Connection, statement: str, tables: Sequence[str]) -> None:
    try:
        conn.exec_driver_sql(statement)
    except DBAPIError as error:
        # A lock wait past the timeout, or a deadlock with a writer (which then goes on).
        if classify(rules(conn.dialect.name, conn.dialect.driver), error) is Failure.TRANSIENT:
            raise TablesBusy(tables) from error
        raise


@contextmanager
def _guard_drops_postgresql(
    conn: Connection, dropped: Sequence[str], _touched: Sequence[str], lock_timeout: float
) -> Iterator[None]:
    """PostgreSQL: ``LOCK TABLE .. IN ACCESS EXCLUSIVE MODE`` in the migration's own
    transaction, which the DROPs commit with. The wait is bounded by ``lock_timeout``
    (SQLSTATE 55P03), then the value before it is put back (the migration transaction's
    own, the same lock timeout)."""
    quote = conn.dialect.identifier_preparer.quote
    previous = conn.scalar(text("SELECT current_setting('lock_timeout')"))
    conn.execute(
        text("SELECT set_config('lock_timeout', :value, true)"),
        {"value": f"{max(1, round(lock_timeout * 1000))}ms"},
    )
    names = ", ".join(quote(name) for name in dropped)
    _lock_tables(conn, f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE", dropped)
    conn.execute(text("SELECT set_config('lock_timeout', :value, true)"), {"value": previous})
    yield


@contextmanager
def _guard_drops_mysql(
    conn: Connection, dropped: Sequence[str], touched: Sequence[str], lock_timeout: float
) -> Iterator[None]:
    """MySQL/MariaDB: ``LOCK TABLES .. WRITE``. Every DDL statement commits on its own, so
    no transaction can hold the tables from the count to the DROP; a table lock of the
    session can (DDL does not release it): it waits for the transactions using the
    tables (their metadata locks) and keeps every other session out until ``UNLOCK
    TABLES``. The session may then use only the tables it locked, under their own names
    (no alias): every table of chatledger's it touches. ``lock_wait_timeout`` bounds the
    wait (error 1205), then is put back. A lost connection releases the locks on the
    server: nothing is left locked or renamed.

    ``UNLOCK TABLES`` commits the open transaction: after a failure it is rolled back
    first."""
    quote = conn.dialect.identifier_preparer.quote
    previous = int(conn.scalar(text("SELECT @@SESSION.lock_wait_timeout")) or 0)
    conn.exec_driver_sql(f"SET SESSION lock_wait_timeout = {max(1, math.ceil(lock_timeout))}")
    try:
        names = ", ".join(f"{quote(name)} WRITE" for name in touched)
        _lock_tables(conn, f"LOCK TABLES {names}", dropped)
    finally:
        with suppress(DBAPIError):  # the connection may be gone (the locks with it)
            conn.exec_driver_sql(f"SET SESSION lock_wait_timeout = {previous}")
    try:
        yield
    except BaseException:
        for statement in ("ROLLBACK", "UNLOCK TABLES"):
            with suppress(DBAPIError):
                conn.exec_driver_sql(statement)
        raise
    conn.exec_driver_sql("UNLOCK TABLES")


@contextmanager
def _guard_drops_sqlite(
    _conn: Connection, _dropped: Sequence[str], _touched: Sequence[str], _lock_timeout: float
) -> Iterator[None]:
    """SQLite: nothing to add. The migration's ``BEGIN IMMEDIATE`` holds the file's write
    lock from before the count to the COMMIT: an append open at that moment has committed
    before it was granted, and every later one waits for the COMMIT."""
    yield


#: Dialect name -> how a downgrade keeps writers out of the tables it drops.
DROP_GUARDS: dict[str, DropGuard] = {
    "postgresql": _guard_drops_postgresql,
    "mysql": _guard_drops_mysql,
    "sqlite": _guard_drops_sqlite,
}


def guard_drops(
    conn: Connection, dropped: Sequence[str], touched: Sequence[str], lock_timeout: float
) -> AbstractContextManager[None]:
    """:data:`DropGuard` of ``conn``'s dialect; ``ValueError`` for a dialect chatledger
    does not serve."""
    try:
        guard = DROP_GUARDS[conn.dialect.name]
    except KeyError:
        raise ValueError(f"dialect {conn.dialect.name!r} is not supported") from None
    if not dropped:
        return nullcontext()
    return guard(conn, dropped, touched, lock_timeout)


def configure_migration_engine(engine: AsyncEngine, *, lock_timeout: float) -> None:
    """Set up an engine that runs migrations. SQLite only: SQLAlchemy's documented recipe
    for transactional DDL ("Serializable isolation / Savepoints / Transactional DDL"):
    the driver's own transaction handling off (``isolation_level = None``, so sqlite3
    neither begins nor commits on its own, and DDL no longer runs outside the
    transaction) and an explicit ``BEGIN IMMEDIATE``, which waits for the write lock
    up to ``lock_timeout`` seconds (the busy timeout)."""
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {max(0, round(lock_timeout * 1000))}")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def release_cancelled_statements(engine: AsyncEngine) -> None:
    """aiosqlite: a statement interrupted by a cancellation (or another exit
    exception) is reset before SQLAlchemy closes its connection, so that the close
    rolls the transaction back and releases SQLite's write lock at once.

    Why it is needed: SQLAlchemy takes an exit exception for a disconnect, so it
    closes no cursor and terminates the connection instead
    (``Connection._handle_dbapi_exception``). A statement that returns rows --
    ``INSERT .. RETURNING``, which begins the write transaction -- stays active in
    its sqlite3 cursor until its rows are fetched, and the cancellation came before
    the fetch. sqlite3 closes with ``sqlite3_close_v2``, which leaves a connection
    with an active statement open as a "zombie" until that statement is finalized
    (when the cursor is garbage collected), with its transaction and the file's
    write lock held: every other writer, in this process or another, waits out its
    busy timeout.
    Closing the cursor resets the statement first (aiosqlite runs the two in order
    on the connection's thread).
    """
    if engine.dialect.driver != "aiosqlite":
        return

    @event.listens_for(engine.sync_engine, "handle_error")
    def _reset_interrupted_statement(context: ExceptionContext) -> None:
        if isinstance(context.original_exception, Exception) or context.execution_context is None:
            return
        # ExceptionContext.cursor is documented but not set by SQLAlchemy 2.1, so the
        # cursor is read from the execution context, which is where it came from.
        cursor = getattr(context.execution_context, "cursor", None)
        if cursor is None:
            return
        try:
            cursor.close()
        except Exception:  # the connection is being discarded anyway
            logger.debug("could not close the cursor of a cancelled statement", exc_info=True)


#: ``wsrep_sync_wait`` bit 1: SELECT, SHOW and BEGIN / START TRANSACTION first wait
#: until this node has applied every write set the cluster had committed when they
#: were issued (MariaDB Galera documentation, "wsrep_sync_wait").
GALERA_SYNC_WAIT_READS = 1


def configure_galera(engine: AsyncEngine) -> None:
    """Causal reads on a MariaDB Galera cluster: on each new MySQL connection, detect
    Galera (``@@wsrep_on``) and, when it is on, make the session's reads wait for
    the cluster (``wsrep_sync_wait``), so that a load or list on any node sees every
    append acknowledged before it on any node.

    Galera replicates a commit to every node before acknowledging it, but applies it
    on the other nodes afterwards: without the wait, a read right after an append on
    another node can miss it. Writes need no wait: a write set based on stale rows
    fails certification (error 1213) and is retried. Servers without Galera (MySQL
    has no ``wsrep_on`` at all) are left as they are; the check costs one statement
    per new pooled connection."""
    if engine.dialect.name != "mysql":
        return

    @event.listens_for(engine.sync_engine, "connect")
    def _galera_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SHOW VARIABLES LIKE 'wsrep\\_on'")
            row = cursor.fetchone()
            if row is not None and str(row[1]).upper() == "ON":
                cursor.execute(
                    f"SET SESSION wsrep_sync_wait = @@session.wsrep_sync_wait | {GALERA_SYNC_WAIT_READS}"
                )
        finally:
            cursor.close()
        dbapi_connection.rollback()
