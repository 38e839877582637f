"""The one module of per-dialect statements and behaviour.

Everything that differs between SQLite, PostgreSQL and MySQL/MariaDB beyond a
column type (those live in :mod:`chatledger.types`) is a table entry here, keyed by
SQLAlchemy's dialect name: the append (sequence allocation and insert), the transient error
codes that are safe to retry, the options of a snapshot-consistent read, the
rein-session upsert, and the connection set-up of SQLite.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, event, func, select
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .schema import raw_messages_table, rein_sessions_table, sessions_table

#: Appends one raw message: allocates the next sequence of its session on the counter
#: row (creating the session on its first append) and inserts the message with it, in
#: the caller's transaction. Returns the sequence, or ``None`` (nothing written) when
#: the stored parent differs from the given one. Arguments: the connection, the
#: session row's values, the message row without ``sequence``, and the time now.
Appender = Callable[[AsyncConnection, dict[str, Any], dict[str, Any], datetime], Awaitable[int | None]]

#: Saves one rein session row (``id``, ``session_json``, ``created_at``, ``updated_at``)
#: in one race-free statement and returns its new version: 1 when inserted, the old
#: version + 1 when overwritten. With ``only_if_absent`` an existing row is left alone
#: and ``None`` is returned.
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


def _counter_upsert(insert: Callable[..., Any]) -> Any:
    """PostgreSQL and SQLite: ``INSERT .. ON CONFLICT (id) DO UPDATE`` on the counter row,
    ``RETURNING`` the new sequence.

    The conflict clause takes the row lock, so concurrent appenders to one session
    queue behind each other's transaction; its WHERE leaves the row alone (and
    returns nothing) when the parent does not match.
    """
    table = sessions_table
    statement = _session_row(insert)
    return statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={"last_sequence": table.c.last_sequence + 1, "updated_at": statement.excluded.updated_at},
        where=table.c.parent_session_id.is_not_distinct_from(statement.excluded.parent_session_id),
    ).returning(table.c.last_sequence)


def _append_params(values: dict[str, Any], row: dict[str, Any], now: datetime) -> dict[str, Any]:
    params = {f"s_{name}": values.get(name) for name in _SESSION_BINDS}
    params["s_created_at"] = params["s_updated_at"] = now
    params.update((f"m_{name}", row[name]) for name in _MESSAGE_COLUMNS)
    return params


# Built once: SQLAlchemy then reuses their cache keys and compiled forms on every append.
_POSTGRESQL_APPEND = (
    raw_messages_table.insert()
    .from_select(
        [*_MESSAGE_COLUMNS, "sequence"],
        select(
            *(bindparam(f"m_{name}", type_=raw_messages_table.c[name].type) for name in _MESSAGE_COLUMNS),
            (counter := _counter_upsert(postgresql.insert).cte("counter")).c.last_sequence,
        ),
    )
    .returning(raw_messages_table.c.sequence)
)
_SQLITE_COUNTER = _counter_upsert(sqlite.insert)


def _mysql_counter() -> Any:
    """MySQL: ``INSERT .. ON DUPLICATE KEY UPDATE`` on the counter row, the new sequence
    handed back through ``LAST_INSERT_ID(expr)`` (0 on a parent mismatch)."""
    table = sessions_table
    statement = _session_row(mysql.insert, last_sequence=func.last_insert_id(1))
    return statement.on_duplicate_key_update(
        last_sequence=func.if_(
            table.c.parent_session_id.is_not_distinct_from(statement.inserted.parent_session_id),
            func.last_insert_id(table.c.last_sequence + 1),
            table.c.last_sequence + func.last_insert_id(0),
        ),
        updated_at=statement.inserted.updated_at,
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
    message INSERT .. SELECT; on a parent mismatch the CTE is empty, so is the insert."""
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
    the allocation costs one round trip. On a parent mismatch the counter is left
    as it is and ``LAST_INSERT_ID(0)`` reports 0, which no real sequence is.
    """
    params = _append_params(values, row, now)
    sequence = (await conn.execute(_MYSQL_COUNTER, params)).lastrowid
    if not sequence:
        return None
    await conn.execute(_MESSAGE_INSERT, {**params, "sequence": sequence})
    return int(sequence)


async def _save_rein_returning(
    insert: Callable[..., Any], conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    """PostgreSQL and SQLite: ``INSERT .. ON CONFLICT (id) DO UPDATE / DO NOTHING .. RETURNING``.

    The conflict clause takes the row lock, so concurrent first saves of one id never
    raise a duplicate-key error: one inserts, the others overwrite after it.
    """
    table = rein_sessions_table
    statement = insert(table).values({**values, "version": 1})
    if only_if_absent:
        statement = statement.on_conflict_do_nothing(index_elements=[table.c.id])
    else:
        statement = statement.on_conflict_do_update(
            index_elements=[table.c.id],
            set_={
                "version": table.c.version + 1,
                "session_json": statement.excluded.session_json,
                "updated_at": statement.excluded.updated_at,
            },
        )
    return (await conn.execute(statement.returning(table.c.version))).scalar_one_or_none()


async def _save_rein_postgresql(
    conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    return await _save_rein_returning(postgresql.insert, conn, values, only_if_absent)


async def _save_rein_sqlite(
    conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    return await _save_rein_returning(sqlite.insert, conn, values, only_if_absent)


async def _save_rein_mysql(conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool) -> int | None:
    """MySQL/MariaDB: ``INSERT .. ON DUPLICATE KEY UPDATE`` with ``LAST_INSERT_ID(expr)``,
    as :func:`_append_mysql` does: the new version comes back in the OK
    packet, and 0 (no real version) reports a row left alone."""
    table = rein_sessions_table
    statement = mysql.insert(table).values({**values, "version": func.last_insert_id(1)})
    if only_if_absent:
        statement = statement.on_duplicate_key_update(version=table.c.version + func.last_insert_id(0))
    else:
        statement = statement.on_duplicate_key_update(
            version=func.last_insert_id(table.c.version + 1),
            session_json=statement.inserted.session_json,
            updated_at=statement.inserted.updated_at,
        )
    version = (await conn.execute(statement)).lastrowid
    return int(version) if version else None


@dataclass(frozen=True)
class DialectRules:
    """What one backend needs done its own way."""

    #: The append: sequence allocation on the counter row and the message insert.
    append_message: Appender
    #: The race-free upsert of one rein session row.
    save_rein_session: ReinSaver
    #: Driver error codes of failures that roll the whole transaction back and are
    #: safe to retry: serialization failures, deadlocks, lock timeouts, busy files.
    transient_codes: frozenset[str | int]
    #: Driver error codes that say the server cannot serve the call right now: it
    #: refused or dropped the connection, is starting up or shutting down, or has no
    #: connection slot left. Not retried (a dropped commit may have been applied);
    #: reported as ``StorageUnavailable``.
    unavailable_codes: frozenset[str | int] = frozenset()
    #: Driver error codes of a statement or value larger than the server accepts.
    too_large_codes: frozenset[str | int] = frozenset()
    #: Execution options of a snapshot-consistent read transaction.
    snapshot_read: dict[str, Any] = field(default_factory=dict)
    #: Execution options of a write transaction that must hold the write lock from its
    #: start, whatever its first statement (the schema upgrade).
    locked_write: dict[str, Any] = field(default_factory=dict)
    #: Largest statement the server takes, in bytes, when no query says otherwise:
    #: PostgreSQL's 1 GB field limit, SQLite's default ``SQLITE_MAX_LENGTH``.
    statement_limit: int = 1_000_000_000
    #: Query reading the server's own limit (MySQL's ``max_allowed_packet``).
    statement_limit_query: str | None = None
    #: A server behind a socket: a sized pool, pre-pinged (a server may drop pooled
    #: connections on a restart or an idle timeout; a SQLite file cannot).
    server: bool = True
    #: The chatledger extra that installs the driver (``pip install 'chatledger[...]'``).
    driver_extra: str = ""


RULES: dict[str, DialectRules] = {
    "postgresql": DialectRules(
        append_message=_append_postgresql,
        save_rein_session=_save_rein_postgresql,
        # serialization_failure, deadlock_detected
        transient_codes=frozenset({"40001", "40P01"}),
        # SQLSTATE class 08 (connection exceptions), too_many_connections,
        # admin_shutdown, crash_shutdown, cannot_connect_now (starting up / shutting down)
        # ... and invalid_authorization_specification, invalid_password,
        # invalid_catalog_name (no such database): the connection cannot be opened.
        unavailable_codes=frozenset(
            {"08000", "08001", "08003", "08004", "08006", "53300", "57P01", "57P02", "57P03"}
            | {"28000", "28P01", "3D000"}
        ),
        snapshot_read={"isolation_level": "REPEATABLE READ"},
        driver_extra="postgres",
        # program_limit_exceeded
        too_large_codes=frozenset({"54000"}),
    ),
    "mysql": DialectRules(
        append_message=_append_mysql,
        save_rein_session=_save_rein_mysql,
        # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
        transient_codes=frozenset({1213, 1205}),
        # ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED (MariaDB), client
        # errors CR_CONNECTION_ERROR, CR_CONN_HOST_ERROR, CR_SERVER_GONE_ERROR,
        # CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED, and ER_CLIENT_INTERACTION_TIMEOUT
        # ... and ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_BAD_DB_ERROR
        # ... and ER_UNKNOWN_COM_ERROR, Galera's "WSREP has not yet prepared node for
        # application use": the node is joining or outside the primary component.
        unavailable_codes=frozenset(
            {1040, 1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031} | {1044, 1045, 1049} | {1047}
        ),
        # InnoDB's default REPEATABLE READ already reads one consistent snapshot.
        statement_limit_query="SELECT @@max_allowed_packet",
        driver_extra="mysql",
        # ER_NET_PACKET_TOO_LARGE
        too_large_codes=frozenset({1153}),
    ),
    "sqlite": DialectRules(
        append_message=_append_sqlite,
        save_rein_session=_save_rein_sqlite,
        # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes, reduced below)
        transient_codes=frozenset({5, 6}),
        # A deferred read transaction in WAL mode sees one snapshot and blocks no writer.
        snapshot_read={"chatledger_sqlite_begin": "DEFERRED"},
        locked_write={"chatledger_sqlite_begin": "IMMEDIATE"},
        server=False,
        # SQLITE_TOOBIG
        too_large_codes=frozenset({18}),
    ),
}


def pgbouncer_connect_args() -> dict[str, Any]:
    """asyncpg behind PgBouncer's transaction pooling: every prepared statement gets a
    unique name and none is cached, since consecutive transactions may run on
    different server connections. From SQLAlchemy's asyncpg documentation,
    "Prepared Statement Name with PGBouncer"."""
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": lambda: f"__asyncpg_{uuid.uuid4()}__",
    }


def rules(dialect_name: str) -> DialectRules:
    """The rules of a dialect; ``ValueError`` for a backend chatledger does not serve."""
    try:
        return RULES[dialect_name]
    except KeyError:
        raise ValueError(f"dialect {dialect_name!r} is not supported") from None


def error_code(error: DBAPIError) -> str | int | None:
    """The driver's error code of a wrapped DBAPI error: the primary result code on
    SQLite, the server error number on MySQL (PyMySQL also sets a SQLSTATE, which is
    coarser, so the number comes first), SQLSTATE on PostgreSQL."""
    orig = error.orig
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        return sqlite_code & 0xFF
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate:
        return str(sqlstate)
    if isinstance(orig, Exception) and "database is locked" in str(orig):
        return 5
    return None


def is_transient(dialect_name: str, error: DBAPIError) -> bool:
    """Whether the error rolled the transaction back for a reason a retry can cure."""
    return error_code(error) in rules(dialect_name).transient_codes


def is_unavailable(dialect_name: str, error: DBAPIError) -> bool:
    """Whether the error says the server cannot serve now (down, restarting, out of
    connection slots, or the connection dropped), as opposed to the statement failing."""
    return error_code(error) in rules(dialect_name).unavailable_codes


def is_too_large(dialect_name: str, error: DBAPIError) -> bool:
    """Whether the server refused a statement or value for its size."""
    return error_code(error) in rules(dialect_name).too_large_codes


def configure_engine(engine: AsyncEngine, *, sqlite_busy_timeout_ms: int) -> None:
    """Per-connection set-up. SQLite only: WAL, a busy timeout, and write transactions
    that take the write lock with their first statement (``BEGIN IMMEDIATE``), so that
    two writers never deadlock upgrading a read lock.

    Every write transaction of chatledger starts with its INSERT, UPDATE or DELETE, so
    sqlite3's own ``isolation_level = "IMMEDIATE"`` begins it in the same call as that
    statement, without a round trip to aiosqlite's thread of its own. Reads and the
    schema upgrade ask for an explicit ``BEGIN DEFERRED`` / ``BEGIN IMMEDIATE`` through
    the ``chatledger_sqlite_begin`` execution option (SQLAlchemy's aiosqlite
    documentation, "Serializable isolation / Savepoints / Transactional DDL")."""
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # sqlite3 then opens a write transaction with BEGIN IMMEDIATE itself, right before
        # the first INSERT, UPDATE or DELETE, in the same call: no statement of its own.
        dbapi_connection.isolation_level = "IMMEDIATE"
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(sqlite_busy_timeout_ms)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("chatledger_sqlite_begin")
        if mode is not None:
            conn.exec_driver_sql(f"BEGIN {mode}")


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
