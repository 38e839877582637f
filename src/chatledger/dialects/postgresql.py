"""PostgreSQL: its backends for asyncpg (the default driver) and psycopg 3 (async), and
PgBouncer's transaction pooling."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import (
    asynccontextmanager,
    contextmanager,
)
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    DateTime,
    String,
    Text,
    any_,
    bindparam,
    func,
    select,
    text,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from ..options import LedgerOptions
from ..schema import metadata, openai_items_table, raw_messages_table
from ..types import BigInt
from .appends import (
    MESSAGE_COLUMNS,
    append_params,
    conflict_merge,
    counter_advance,
    counter_upsert,
    save_rein_returning,
)
from .base import (
    DATABASE_HINT,
    LOGIN_HINT,
    Backend,
    Collations,
    Liveness,
    OfflineScript,
    Replication,
    StorageSize,
    error_code,
    no_listeners,
    require_database,
)
from .migrations import SchemaLockTimeout, lock_tables, migration_busy


def _fed_insert(counter: Any) -> Any:
    """``WITH counter AS (<counter>) INSERT INTO raw_messages .. SELECT .., last_sequence
    FROM counter RETURNING sequence``: the message inserted with the sequence the
    counter row's statement returned, and nothing when it returned no row."""
    return (
        raw_messages_table.insert()
        .from_select(
            [*MESSAGE_COLUMNS, "sequence"],
            select(
                *(bindparam(f"m_{name}", type_=raw_messages_table.c[name].type) for name in MESSAGE_COLUMNS),
                counter.cte("counter").c.last_sequence,
            ),
        )
        .returning(raw_messages_table.c.sequence)
    )


_POSTGRESQL_APPEND = _fed_insert(counter_upsert(postgresql.insert, func.greatest))


async def _append_postgresql(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """PostgreSQL: one statement, a data-modifying CTE. The counter upsert feeds the
    message INSERT .. SELECT; on a parent mismatch or a tombstone the CTE is empty, so
    is the insert."""
    result = await conn.execute(_POSTGRESQL_APPEND, append_params(values, row, now))
    sequence: int | None = result.scalar_one_or_none()
    return sequence


_POSTGRESQL_SINGLE_APPEND = _fed_insert(counter_advance(func.greatest))


async def _single_append_postgresql(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """PostgreSQL: the append as one statement committed by itself (autocommit), on a
    session whose counter row it only moves along: the counter's ``UPDATE`` in a CTE
    feeding the message's ``INSERT .. SELECT``. One statement is atomic, so its row lock,
    the counter and the message commit together or not at all; no row: not such a
    session, and nothing was written."""
    result = await conn.execute(_POSTGRESQL_SINGLE_APPEND, append_params(values, row, now))
    sequence: int | None = result.scalar_one_or_none()
    return sequence


async def _save_rein_postgresql(
    conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    return await save_rein_returning(postgresql.insert, func.greatest, conn, values, only_if_absent)


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


def _any_of_array(column: ColumnElement[int], values: Sequence[int]) -> ColumnElement[bool]:
    """PostgreSQL: ``column = ANY(:values)``, the values bound as one integer array."""
    return column == any_(bindparam(None, list(values), type_=postgresql.ARRAY(BigInteger)))


#: Whether a session runs a statement (not one waiting to read the rest of a message
#: from a silent client) or changed state lately; ending it rolls its transaction back.
_LIVENESS_SQL = {
    "busy": "SELECT state = 'active' AND wait_event IS DISTINCT FROM 'ClientRead'"
    " OR state_change > clock_timestamp() - make_interval(secs => CAST(:quiet AS double precision))"
    " FROM pg_stat_activity WHERE pid = :id",
    "end": "SELECT pg_terminate_backend(:id)",
}


def _shut_down(descriptor: int) -> None:
    """Shut the socket of file ``descriptor`` down both ways, leaving the descriptor
    open (psycopg waits on it: the wait wakes, reads the end and raises
    ``OperationalError``; closing the connection then closes the descriptor)."""
    with socket.socket(fileno=os.dup(descriptor)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


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


# Grants on chatledger's own tables only: the schema may hold an application's tables too.
_PRIVILEGE_HINT_POSTGRESQL = (
    "the role {user} lacks a privilege the runtime role needs; grant it as chatledger's owner role "
    '(docs/deploying.md, "Two roles: owner and runtime"): GRANT CONNECT ON DATABASE {database} TO {user}; '
    "GRANT USAGE ON SCHEMA public TO {user} (or the schema chatledger's tables are in); "
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(sorted(metadata.tables))} TO {{user}}; "
    "the tables an upgrade creates need it too, chatledger's bookkeeping included: "
    "GRANT SELECT ON chatledger_alembic_version, chatledger_compatibility TO {user};"
)

_PROTOCOL_HINT = (
    "the server, or a connection pooler in front of it, refused the connection's start-up "
    "settings; behind PgBouncer in transaction pooling mode pass pgbouncer=True"
)


#: psycopg's failures to connect, and its connections lost under a statement, carry no
#: SQLSTATE, only libpq's or the server's message (libpq gives the error of a
#: connection attempt as text): the codes the messages stand for,
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
        # libpq's words for a connection lost under a statement (fe-secure.c,
        # fe-misc.c), which psycopg raises with no SQLSTATE: connection_failure. Its
        # other uncoded errors (a statement it refuses to send) keep no code.
        (
            r"server closed the connection unexpectedly|could not (?:receive|send) data "
            r"(?:from|to) server|no connection to the server|SSL SYSCALL error",
            "08006",
        ),
    )
)

#: PostgreSQL's advisory lock key of the schema lock: the first 8 bytes of
#: SHA-256("chatledger schema lock") as a signed bigint. Advisory locks are per
#: database, so one constant serves every database of a server.
SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"chatledger schema lock").digest()[:8], "big", signed=True)


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
            busy = migration_busy(conn, error)
            if busy is None:
                raise
            raise busy from error


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


_OFFLINE_SCRIPT = OfflineScript(
    client="psql -v ON_ERROR_STOP=1 -d DATABASE -f SCRIPT",
    on_failure=("It is one transaction: a failure changes nothing.",),
    begin=_offline_begin_postgresql,
    end=("COMMIT;",),
)


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
    lock_tables(conn, f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE", dropped)
    conn.execute(text("SELECT set_config('lock_timeout', :value, true)"), {"value": previous})
    yield


#: libpq's default port, which SQLAlchemy's asyncpg dialect needs written out per host.
_POSTGRESQL_PORT = 5432


def _hosts(url: URL) -> URL:
    """Repeated ``host=h:p`` parameters (a multi-host DSN, :mod:`chatledger.dsn`) checked
    (each names a host; ports 1..65535) and each given a port (asyncpg's dialect
    requires one per host)."""
    given = url.query.get("host")
    if not isinstance(given, tuple) or "port" in url.query:
        return url  # one host, or the "host=h1,h2&port=p1,p2" form SQLAlchemy reads itself
    hosts = []
    for entry in given:
        host, _, port = entry.partition(":")
        if not host:
            raise ValueError("dsn lists a host without a name; write each as host:port")
        if port:
            if not port.isdigit():
                raise ValueError(f"dsn port of host {host!r} is not a number")
            if not 0 < int(port) < 65536:
                raise ValueError(f"dsn port {port} of host {host!r} is outside 1..65535")
        hosts.append(f"{host}:{port or _POSTGRESQL_PORT}")
    return url.update_query_dict({"host": hosts})


#: The DSN parameters asyncpg's ``connect`` takes as text (and SQLAlchemy's statement
#: cache size); any other reaches ``connect`` as an unknown keyword.
_ASYNCPG_PARAMETERS = frozenset(
    {
        "host",
        "port",
        "user",
        "password",
        "passfile",
        "service",
        "servicefile",
        "database",
        "timeout",
        "statement_cache_size",
        "max_cached_statement_lifetime",
        "max_cacheable_statement_size",
        "command_timeout",
        "ssl",
        "direct_tls",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
        "prepared_statement_cache_size",
    }
)


def _resolve_dsn_asyncpg(url: URL) -> URL:
    require_database(url)
    url = _hosts(url)
    # libpq's sslmode, as users write it, is asyncpg's ``ssl`` keyword (same values);
    # psycopg is libpq and takes sslmode itself.
    if "sslmode" in url.query:
        url = url.update_query_dict({"ssl": url.query["sslmode"]}).difference_update_query(["sslmode"])
    unknown = sorted(set(url.query) - _ASYNCPG_PARAMETERS)
    if unknown:
        raise ValueError(
            f"dsn parameter {unknown[0]!r} is not one asyncpg takes "
            f"({', '.join(sorted(_ASYNCPG_PARAMETERS))}); libpq's own (options, "
            "application_name...) are psycopg's: use postgresql+psycopg://, or give server "
            "settings as connect_args={'server_settings': {...}} (a schema: the login's "
            "search_path, ALTER ROLE ... SET search_path = ...)"
        )
    return url


def _resolve_dsn_psycopg(url: URL) -> URL:
    require_database(url)
    return _hosts(url)


def _storage_size_postgresql(conn: Connection, tables: Sequence[str]) -> StorageSize:
    """``pg_total_relation_size`` (heap, indexes and TOAST) of each table the search path
    finds: file sizes, no scan; its AccessShareLock blocks no writer."""
    rows = conn.execute(
        text(
            "SELECT name, pg_total_relation_size(to_regclass(name)) AS size "
            "FROM unnest(CAST(:names AS text[])) AS name"
        ),
        {"names": list(tables)},
    )
    sizes = {row.name: int(row.size) for row in rows if row.size is not None}
    return StorageSize(sizes, sum(sizes.values()), "pg_total_relation_size (exact)")


#: PostgreSQL with asyncpg, the dialect's default driver.
# -- streaming standbys as read replicas ---------------------------------------------

#: The WAL insert location: past the end of every record inserted so far, the commit
#: records of this connection's transactions included, whatever ``synchronous_commit``
#: says (the flush or write location may still lie before an asynchronous commit).
#: Where it lies just past a page header (the short one, 24 bytes; at a segment's
#: start the long one, 40), it is taken back to the page boundary: the end a standby
#: reports for a record ending there (``pg_last_wal_replay_lsn()``), which no record
#: passes until more WAL is written -- waiting for the header's end would wait for that.
_WAL_POSITION = text(
    "SELECT CAST(CASE WHEN (lsn - '0/0') % seg = 40 THEN lsn - 40"
    " WHEN (lsn - '0/0') % blk = 24 THEN lsn - 24 ELSE lsn END AS text)"
    " FROM (SELECT pg_current_wal_insert_lsn() AS lsn,"
    " CAST(current_setting('wal_block_size') AS numeric) AS blk,"
    " (SELECT CAST(setting AS numeric) FROM pg_settings WHERE name = 'wal_segment_size') AS seg) AS now"
)
#: NULL on a server that is not in recovery (no standby): it cannot tell.
_REPLAYED = text("SELECT pg_last_wal_replay_lsn() >= CAST(CAST(:position AS text) AS pg_lsn)")
#: Pauses between two looks at a standby's replay location, in seconds: short at first
#: (replay usually trails by a millisecond or two), at most this long.
_FIRST_POLL, _LONGEST_POLL = 0.001, 0.02


async def _wal_position(conn: AsyncConnection) -> str | None:
    return str(await conn.scalar(_WAL_POSITION))


async def _wait_replayed(conn: AsyncConnection, position: str, bound: float) -> bool:
    """Poll ``pg_last_wal_replay_lsn()`` (PostgreSQL 15 has no server-side wait for a
    LSN) until it reaches ``position`` or ``bound`` seconds pass."""
    deadline = time.monotonic() + bound
    pause = _FIRST_POLL
    while True:
        replayed = await conn.scalar(_REPLAYED, {"position": position})
        if replayed:
            return True
        left = deadline - time.monotonic()
        if replayed is None or left <= 0:
            return False
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, _LONGEST_POLL)


def _lsn(position: str) -> int:
    high, _, low = position.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


_REPLICATION = Replication(
    position=_wal_position,
    wait=_wait_replayed,
    later=lambda one, other: max(one, other, key=_lsn),
)


def _transaction_open_asyncpg(dbapi_connection: Any) -> bool:
    # SQLAlchemy's adapter holds the asyncpg Transaction it began and begins the next
    # only once that one is gone (its rollback discards it): either open counts.
    return (
        getattr(dbapi_connection, "_transaction", None) is not None
        or dbapi_connection.driver_connection.is_in_transaction()
    )


def _transaction_open_psycopg(dbapi_connection: Any) -> bool:
    # libpq's transaction status of the last reply: anything but idle (in a
    # transaction, in a failed one, a query under way, a broken connection) is rolled
    # back, or the connection discarded when that fails.
    from psycopg.pq import TransactionStatus

    return bool(dbapi_connection.driver_connection.info.transaction_status != TransactionStatus.IDLE)


def _items_add_postgresql(bump: Any) -> Any:
    """The OpenAI Agents add as one statement (:attr:`Backend.items_add`): the counter
    row's ``UPDATE`` in a CTE, the items ``INSERT .. SELECT`` from ``unnest`` of the
    two bound arrays ``WITH ORDINALITY`` (one statement whatever the number of items),
    their sequences the range the ``UPDATE`` took."""
    counter = bump.cte("counter")
    table = openai_items_table
    given = (
        func.unnest(
            bindparam("item_ids", type_=postgresql.ARRAY(Text())),
            bindparam("item_jsons", type_=postgresql.ARRAY(Text())),
        )
        .table_valued("item_id", "item_json", with_ordinality="position")
        .render_derived(name="given")
    )
    count = bindparam("count", type_=BigInt)
    rows = select(
        bindparam("session_id", type_=table.c.session_id.type),
        counter.c.last_sequence - count + given.c.position,
        given.c.item_id,
        given.c.item_json,
        bindparam("now", type_=table.c.created_at.type),
    ).select_from(counter.join(given, true()))
    return (
        table.insert()
        .from_select(["session_id", "sequence", "item_id", "item_json", "created_at"], rows)
        .returning(select(counter.c.generation).scalar_subquery())
    )


ASYNCPG = Backend(
    name="postgresql",
    display_name="PostgreSQL",
    storage_size=_storage_size_postgresql,
    db_system=lambda dialect: "postgresql",
    schemes=("postgresql", "postgres"),
    resolve_dsn=_resolve_dsn_asyncpg,
    column_collations=_column_collations_postgresql,
    default_collation="default",
    append_message=_append_postgresql,
    single_append=_single_append_postgresql,
    save_rein_session=_save_rein_postgresql,
    merge_insert=conflict_merge(postgresql.insert),
    items_add=_items_add_postgresql,
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
    # read_only_sql_transaction (default_transaction_read_only, a hot standby)
    # asyncpg's answer when no host of a multi-host DSN is the primary (a failover
    # under way): the cluster may promote one within the retry budget. (psycopg's is
    # an OperationalError of the connection, a CONNECTION failure already.)
    unavailable_exceptions=frozenset({"TargetServerAttributeNotMatched"}),
    # idle_session_timeout, idle_in_transaction_session_timeout: sent by a server that
    # ended an idle session, read by the client with the answer to its next statement.
    idle_codes=frozenset({"57P05", "25P03"}),
    connection_closed=lambda connection: bool(connection.is_closed()),
    abort=lambda connection: connection.terminate(),
    liveness=Liveness(session_id=lambda connection: int(connection.get_server_pid()), **_LIVENESS_SQL),
    read_only_codes=frozenset({"25006"}),
    full_codes=frozenset({"53100"}),  # disk_full
    code_name="SQLSTATE",
    any_of=_any_of_array,
    configuration_hints={
        "3D000": DATABASE_HINT,  # invalid_catalog_name
        "28000": LOGIN_HINT,  # invalid_authorization_specification (unknown role)
        "28P01": LOGIN_HINT,  # invalid_password
        "42501": _PRIVILEGE_HINT_POSTGRESQL,  # insufficient_privilege
        # protocol_violation: what PgBouncer answers to a startup parameter it does
        # not track (the store's lock_timeout), and no server sends to a valid client.
        "08P01": _PROTOCOL_HINT,
    },
    # Stated by asyncpg's BEGIN itself (BEGIN ISOLATION LEVEL REPEATABLE READ READ
    # ONLY): one snapshot for every statement of the read, and no extra round trip.
    snapshot_read={"isolation_level": "REPEATABLE READ", "postgresql_readonly": True},
    # A write runs at the database's default: READ COMMITTED, or SERIALIZABLE (which
    # CockroachDB and YugabyteDB impose). At REPEATABLE READ its snapshot dates from its
    # first statement, so a session's first append or a rein save that waited for a
    # tombstone purge of the same id to commit cannot see the purge's high-water mark,
    # and numbers the id from 1 again: such a default is replaced by READ COMMITTED
    # (stated by asyncpg's and psycopg's BEGIN, no extra round trip).
    write_isolation_query="SHOW transaction_isolation",
    write_isolation_instead={"repeatable read": "READ COMMITTED"},
    connect_args=_postgresql_connect_args,
    add_listeners=no_listeners,
    transaction_open=_transaction_open_asyncpg,
    begin_round_trip=True,
    driver="asyncpg",
    driver_extra="postgres",
    pgbouncer_connect_args=_asyncpg_pgbouncer_args,
    # program_limit_exceeded
    too_large_codes=frozenset({"54000"}),
    schema_codes=frozenset({"42703", "42P01"}),  # undefined_column, undefined_table
    missing_table_codes=frozenset({"42P01"}),  # undefined_table
    byte_order_collation="C",
    pgbouncer=True,
    migration_transaction=_migration_transaction_postgresql,
    offline_script=_OFFLINE_SCRIPT,
    drop_guard=_guard_drops_postgresql,
    id_type=String,
    instant_type=lambda: DateTime(timezone=True),
    binds_time_zone=True,
    transactional_ddl=True,
    adoption="alter-column",
    char_length=func.length,
    adoption_lock="LOCK TABLE agent_sessions, raw_messages, session_snapshots IN ACCESS EXCLUSIVE MODE",
    # zett-agent's asyncpg path fails: its store is measured with psycopg.
    zett_driver="postgresql+psycopg",
    create_database="CREATE DATABASE {name}",
    drop_database="DROP DATABASE IF EXISTS {name} WITH (FORCE)",
    analyze="ANALYZE",
    server_version="SELECT version()",
    replication=_REPLICATION,
)

#: psycopg 3, async (SQLAlchemy's ``postgresql+psycopg`` under ``create_async_engine``):
#: PostgreSQL's backend, with the driver's own ways of sending the lock timeout, of
#: going through PgBouncer, and of reporting what asyncpg reports by its own classes.
PSYCOPG = replace(
    ASYNCPG,
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
    driver_aliases=("psycopg_async",),
    resolve_dsn=_resolve_dsn_psycopg,
    transaction_open=_transaction_open_psycopg,
    connection_closed=lambda connection: bool(connection.closed),
    abort=lambda connection: _shut_down(connection.pgconn.socket),
    liveness=Liveness(session_id=lambda connection: int(connection.info.backend_pid), **_LIVENESS_SQL),
    # set_isolation_level, set_read_only, set_autocommit are coroutines.
    characteristics_await=True,
)
