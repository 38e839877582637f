"""MySQL and MariaDB (aiomysql), Galera clusters included."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import (
    asynccontextmanager,
    contextmanager,
    suppress,
)
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Dialect,
    Table,
    and_,
    bindparam,
    event,
    func,
    text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..errors import ConfigurationError
from ..options import LedgerOptions
from ..schema import raw_messages_table, rein_sessions_table, sessions_table
from .appends import (
    MESSAGE_COLUMNS,
    MESSAGE_INSERT,
    SESSION_BINDS,
    append_params,
    field_updates,
    merge_key,
    session_row,
)
from .base import (
    DATABASE_HINT,
    LOGIN_HINT,
    TRANSACTION_ENDED,
    Backend,
    Collations,
    Liveness,
    OfflineScript,
    Replication,
    RoutineRefused,
    StorageSize,
    backend,
    error_code,
    execute_call,
    no_listeners,
    require_database,
)
from .migrations import SchemaLockTimeout, lock_tables, migration_busy


def _mysql_counter() -> Any:
    """MySQL: ``INSERT .. ON DUPLICATE KEY UPDATE`` on the counter row, the new sequence
    handed back through ``LAST_INSERT_ID(expr)`` (0 on a parent mismatch or a tombstone).

    A refused append leaves ``updated_at`` and the given fields changed too: the caller
    raises, which rolls the transaction back. The assignments run in list order
    (:func:`field_updates`)."""
    table = sessions_table
    statement = session_row(mysql.insert, last_sequence=func.last_insert_id(1))
    return statement.on_duplicate_key_update(
        [
            *field_updates(statement.inserted),
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
    params = append_params(values, row, now)
    sequence = (await conn.execute(_MYSQL_COUNTER, params)).lastrowid
    if not sequence:
        return None
    await conn.execute(MESSAGE_INSERT, {**params, "sequence": sequence})
    return int(sequence)


#: The append procedure: the counter upsert and the insert in one statement.
_APPEND_PROCEDURE = "chatledger_append"
#: ER_SP_DOES_NOT_EXIST, ER_SP_WRONG_NO_OF_ARGS, ER_PROCACCESS_DENIED_ERROR: the
#: procedure dropped, given other parameters, or its EXECUTE revoked since the schema
#: check (a connection opened before a REVOKE keeps the grant, so asking again could
#: answer yes). The server names the procedure it refused: one of these from a
#: statement inside it (a trigger's, a routine it calls) is that statement's error.
_REFUSALS = frozenset({1305, 1318, 1370})
#: How those messages name it: ``database.chatledger_append``.
_REFUSED_NAME = re.compile(rf"\.{_APPEND_PROCEDURE}\b")


def _procedure_call(procedure: str) -> Any:
    """``CALL procedure(:s_id, .., :m_updated_at)``: the parameters of
    :func:`append_params`, in the order of both append procedures' parameters, each
    bound with its column's type."""
    parameters = [bindparam(f"s_{name}", type_=sessions_table.c[name].type) for name in SESSION_BINDS] + [
        bindparam(f"m_{name}", type_=raw_messages_table.c[name].type) for name in MESSAGE_COLUMNS
    ]
    names = ", ".join(f":{parameter.key}" for parameter in parameters)
    return text(f"CALL {procedure}({names})").bindparams(*parameters)


_PROCEDURE_CALL = _procedure_call(_APPEND_PROCEDURE)


async def _append_mysql_called(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """MySQL/MariaDB with the append procedure: :func:`_append_mysql`'s two
    statements in one ``CALL``, in the caller's transaction, its one row the sequence
    (``NULL``: refused, nothing inserted). That row is the procedure's last statement,
    so a failure of either statement is this call's error; a failure reported in the
    call's closing status, which follows the row (a Galera certification abort, a lost
    connection), is too (:func:`execute_call`).

    :raises RoutineRefused: the server refused the procedure itself (:data:`_REFUSALS`)."""
    return await _call(conn, _PROCEDURE_CALL, _REFUSED_NAME, append_params(values, row, now))


async def _call(
    conn: AsyncConnection, call: Any, refused_name: re.Pattern[str], params: dict[str, Any]
) -> int | None:
    """One append procedure's ``CALL`` and its one row, the sequence or ``NULL``.

    :raises RoutineRefused: the server refused the procedure itself (:data:`_REFUSALS`)."""
    try:
        result = await execute_call(conn, call, params)
    except DBAPIError as error:
        if error_code(error) in _REFUSALS and refused_name.search(str(error.orig)):
            raise RoutineRefused(error) from error
        raise
    sequence = result.scalar_one()
    return None if sequence is None else int(sequence)


#: The committed append procedure: the append to a session it only moves along,
#: committed, its row sent before its COMMIT.
_COMMITTED_PROCEDURE = "chatledger_append_committed_v2"
_COMMITTED_CALL = _procedure_call(_COMMITTED_PROCEDURE)
_COMMITTED_NAME = re.compile(rf"\.{_COMMITTED_PROCEDURE}\b")


async def _single_append_mysql(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """MySQL/MariaDB with the committed append procedure: the append in one ``CALL`` that
    begins, makes and commits its own transaction, on a session whose counter row it
    only moves along (a live session with the given parent and fields); ``None``: not
    such a session, and the procedure rolled back having written nothing. The ledger
    runs it as the first statement of a connection (its ``START TRANSACTION`` commits
    any transaction open). Its row comes before its ``COMMIT``, whose outcome is the
    call's closing status, read before the call returns (:func:`execute_call`): a
    sequence is returned only once committed. Then the transaction's ``COMMIT`` sends
    nothing (:data:`TRANSACTION_ENDED`). A failure inside it leaves its transaction
    open: the connection's rollback undoes it.

    :raises RoutineRefused: the server refused the procedure itself (:data:`_REFUSALS`)."""
    sequence = await _call(conn, _COMMITTED_CALL, _COMMITTED_NAME, append_params(values, row, now))
    conn.info[TRANSACTION_ENDED] = True
    return sequence


#: The procedure's probe: with a ``NULL`` session id it returns one row and does nothing
#: else. It is refused when the procedure is missing or the login may not call it
#: (``information_schema.ROUTINES`` is no test of that: it also lists a routine to its
#: definer and to logins with ``CREATE ROUTINE``, ``ALTER ROUTINE`` or a global ``SELECT``).
_APPEND_PROCEDURE_PROBE = (
    f"CALL {_APPEND_PROCEDURE}({', '.join(['NULL'] * (len(SESSION_BINDS) + len(MESSAGE_COLUMNS)))})"
)


async def _galera(conn: AsyncConnection) -> bool:
    wsrep = (await conn.execute(text("SHOW GLOBAL VARIABLES LIKE 'wsrep\\_on'"))).first()
    return wsrep is not None and str(wsrep[1]).upper() == "ON"


async def _append_procedure_usable(conn: AsyncConnection) -> bool:
    """Whether this ledger appends through the append procedure: the login may call it,
    and the server is no Galera node (``wsrep_on``). Galera does not handle the abort of
    a transaction its certification lost inside a stored procedure as it does for plain
    statements: the error can be lost, the changes with it, while the procedure returns,
    or the node hang waiting on it. On Galera the append keeps its two statements."""
    if await _galera(conn):
        return False
    return (await execute_call(conn, text(_APPEND_PROCEDURE_PROBE))).first() is not None


#: The committed procedure's probe, as :data:`_APPEND_PROCEDURE_PROBE`: it returns before it
#: begins a transaction.
_COMMITTED_PROBE = _APPEND_PROCEDURE_PROBE.replace(_APPEND_PROCEDURE, _COMMITTED_PROCEDURE, 1)


async def _committed_procedure_usable(conn: AsyncConnection) -> bool:
    """Whether this ledger appends through the committed procedure: the login may call
    it, and the server is no Galera node (as :func:`_append_procedure_usable`)."""
    if await _galera(conn):
        return False
    return (await execute_call(conn, text(_COMMITTED_PROBE))).first() is not None


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


def _any_of_literals(column: ColumnElement[int], values: Sequence[int]) -> ColumnElement[bool]:
    """MySQL/MariaDB: ``column IN (1, 2, …)``; aiomysql renders the values into the
    statement text itself (no server-side parameters, so no parameter limit), bounded
    by ``max_allowed_packet`` only, which a list of integers meets first at millions."""
    return column.in_(values)


def _mysql_session_setup(options: LedgerOptions) -> tuple[str, ...]:
    # innodb_lock_wait_timeout takes whole seconds, at least 1.
    return (f"SET SESSION innodb_lock_wait_timeout = {max(1, math.ceil(options.lock_timeout))}",)


def _check_foreign_mysql(conn: Connection) -> None:
    """An engine the caller made: its connections must talk utf8mb4 and read at
    REPEATABLE READ, as the ones chatledger makes do (see :data:`AIOMYSQL`)."""
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


_PRIVILEGE_HINT_MYSQL = (
    "the user {user} lacks a privilege the runtime role needs; grant it as an admin "
    '(docs/deploying.md, "Two roles: owner and runtime"): '
    "GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON `{database}`.* TO '{user}'@'%'; "
    "with grants per table, chatledger's bookkeeping tables need it too: "
    "GRANT SELECT ON `{database}`.chatledger_alembic_version TO '{user}'@'%'; "
    "GRANT SELECT ON `{database}`.chatledger_compatibility TO '{user}'@'%';"
)
#: ER_DBACCESS_DENIED_ERROR at login: MySQL/MariaDB refuse a user who is not root a
#: database that does not exist as they refuse one it may not use (so as not to tell
#: which databases exist), so a mistyped name reads as a missing privilege. The name is
#: the likelier fault, and the one that a GRANT would not cure: it comes first.
_DATABASE_OR_PRIVILEGE_HINT_MYSQL = (
    "the database {database} does not exist, or is not visible to the user {user}: check the "
    "database name in the DSN (a mistyped name is refused as if it were not granted), or create "
    'it (docs/deploying.md, "Two roles: owner and runtime"); if the name is right, ' + _PRIVILEGE_HINT_MYSQL
)

#: MySQL/MariaDB ``GET_LOCK`` name of the schema lock. Lock names are server-wide and at
#: most 64 characters, so it carries the MD5 of the database name.
_MYSQL_LOCK_NAME = "CONCAT('chatledger_schema_', MD5(DATABASE()))"


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
                    busy = migration_busy(conn, error)
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


def _offline_begin_mysql(lock_timeout: float) -> tuple[str, ...]:
    # A script cannot test GET_LOCK's answer, so the statement fails unless it is 1 (as
    # online: 0 is a timeout, NULL an error, such as no database selected): the second
    # row then makes the scalar subquery an error ("Subquery returns more than 1 row"),
    # and the client stops before the first change. <=> compares NULL as a value.
    # SET NAMES first: the client's own character set is recorded with the routines the
    # script creates (the append procedure), as utf8mb4 is online.
    return (
        "SET NAMES utf8mb4;",
        f"SELECT (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE NOT (GET_LOCK({_MYSQL_LOCK_NAME}, "
        f"{max(1, math.ceil(lock_timeout))}) <=> 1)) AS chatledger_schema_lock;",
    )


_OFFLINE_SCRIPT = OfflineScript(
    client="mysql DATABASE < SCRIPT",
    on_failure=(
        "MySQL/MariaDB commit every DDL statement on its own: a failure leaves the statements",
        'before it applied (docs/deploying.md, "Deploying: migrations"). Take a backup first.',
    ),
    begin=_offline_begin_mysql,
    end=(f"SELECT RELEASE_LOCK({_MYSQL_LOCK_NAME});",),
)


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
        lock_tables(conn, f"LOCK TABLES {names}", dropped)
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
    if not backend(engine.dialect.name, engine.dialect.driver).galera:
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


def _transaction_open_mysql(dbapi_connection: Any) -> bool:
    # Always, so the pool's reset always rolls back, as SQLAlchemy's own does: the
    # reply's SERVER_STATUS_IN_TRANS is not set by a read with autocommit off, yet
    # InnoDB holds its REPEATABLE READ snapshot and its shared locks (MariaDB 10.11,
    # a plain SELECT or LOCK IN SHARE MODE: information_schema.innodb_trx shows it).
    return True


class Utf8Varbinary(mysql.VARBINARY):
    """``VARBINARY`` bound as a str: MySQL stores the utf8mb4 connection's bytes (the id
    type here, :class:`chatledger.types.Id`)."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None


class HexBoundLongBlob(mysql.LONGBLOB):
    """``LONGBLOB`` bound as hex text through ``UNHEX()``: aiomysql cannot bind ``bytes``
    (with PyMySQL 1.1.1 and later its escape of them fails), and hex passes a utf8mb4
    connection unchanged. Twice the value's size on the wire, as escaped bytes at worst."""

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any]:
        def process(value: Any) -> Any:
            return None if value is None else bytes(value).hex()

        return process

    def bind_expression(self, bindvalue: Any) -> Any:
        return func.unhex(bindvalue)


def _resolve_dsn(url: URL) -> URL:
    require_database(url)
    if isinstance(url.query.get("host"), tuple):
        raise ValueError(
            "dsn lists several hosts; MySQL/MariaDB connects to one (a Galera cluster: one "
            "node, or a router in front of them)"
        )
    charset = url.query.get("charset", "utf8mb4")
    if charset != "utf8mb4":
        # Any other connection charset mangles ids (stored as bytes) and refuses emoji.
        raise ValueError(f"dsn charset {charset!r} is not supported; chatledger talks utf8mb4 to MySQL")
    return url.update_query_dict({"charset": "utf8mb4"})


def _adoption_equal(left: ColumnElement[Any], right: ColumnElement[Any]) -> ColumnElement[bool]:
    # The plain comparison uses the index (under zett's case-folding collation); the
    # binary one keeps only exact matches, as chatledger's VARBINARY ids will compare.
    return and_(left == right, func.binary(left) == func.binary(right))


def _storage_size_mysql(conn: Connection, tables: Sequence[str]) -> StorageSize:
    """``DATA_LENGTH + INDEX_LENGTH`` from ``information_schema.TABLES``: InnoDB's page
    statistics, an estimate (MySQL 8 caches them for ``information_schema_stats_expiry``)."""
    rows = conn.execute(
        text(
            "SELECT TABLE_NAME AS name, DATA_LENGTH + INDEX_LENGTH AS size FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN :names"
        ).bindparams(bindparam("names", expanding=True)),
        {"names": list(tables)},
    )
    sizes = {row.name: int(row.size) for row in rows if row.size is not None}
    return StorageSize(sizes, sum(sizes.values()), "information_schema.TABLES data + index length (estimate)")


def _db_system_mysql(dialect: Dialect) -> str:
    """MariaDB is its own ``db.system.name``; SQLAlchemy tells it once connected."""
    return "mariadb" if getattr(dialect, "is_mariadb", False) else "mysql"


#: MySQL and MariaDB with aiomysql.
# -- asynchronous replicas with GTIDs as read replicas -------------------------------

#: The binary log's position, which covers every commit acknowledged so far, this
#: connection's among them (a pooled connection's ``@@last_gtid`` may be of an older
#: transaction of its own, when the last one wrote nothing or was a settle's read).
#: Empty without a binary log: no position.
_GTID_POSITION = text("SELECT @@global.gtid_binlog_pos")
#: 0 once the replica applied the GTIDs, -1 on the timeout (MariaDB's own wait).
_GTID_WAIT = text("SELECT MASTER_GTID_WAIT(:position, :timeout)")


async def _gtid_position(conn: AsyncConnection) -> str | None:
    position = await conn.scalar(_GTID_POSITION)
    return str(position) if position else None


async def _wait_gtid(conn: AsyncConnection, position: str, bound: float) -> bool:
    return bool(await conn.scalar(_GTID_WAIT, {"position": position, "timeout": bound}) == 0)


def _later_gtids(one: str, other: str) -> str:
    """Per replication domain, the GTID with the later sequence number."""
    latest: dict[str, tuple[int, str]] = {}
    for gtid in (*one.split(","), *other.split(",")):
        gtid = gtid.strip()
        if not gtid:
            continue
        domain, _, rest = gtid.partition("-")
        sequence = int(rest.rpartition("-")[2])
        if domain not in latest or sequence > latest[domain][0]:
            latest[domain] = (sequence, gtid)
    return ",".join(gtid for _, gtid in latest.values())


_REPLICATION = Replication(position=_gtid_position, wait=_wait_gtid, later=_later_gtids)


def _merge_insert_mysql(table: Table, replace: Sequence[str]) -> Any:
    """:attr:`Backend.merge_insert`: ``INSERT .. ON DUPLICATE KEY UPDATE`` the ``replace``
    columns to the inserted values, or, with none, the key's first column to itself (no
    change: the stored row is kept). Never ``INSERT IGNORE``, which would turn other
    errors (a value too long) into warnings."""
    first = merge_key(table)[0]
    statement = mysql.insert(table)
    if not replace:
        return statement.on_duplicate_key_update({first.name: first})
    return statement.on_duplicate_key_update({name: statement.inserted[name] for name in replace})


AIOMYSQL = Backend(
    name="mysql",
    display_name="MySQL/MariaDB",
    storage_size=_storage_size_mysql,
    db_system=_db_system_mysql,
    schemes=("mysql", "mariadb"),
    resolve_dsn=_resolve_dsn,
    column_collations=_column_collations_mysql,
    table_collation=_table_collation_mysql,
    append_message=_append_mysql,
    counted_append=_append_mysql_called,
    append_routine_usable=_append_procedure_usable,
    single_append=_single_append_mysql,
    single_append_usable=_committed_procedure_usable,
    single_append_autocommit=False,
    # ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_CHECKREAD: raised by the procedure's
    # UPDATE or INSERT, before its COMMIT (never on Galera, where a certification
    # failure comes out of the COMMIT: chatledger does not use it there).
    single_append_rolled_back_codes=frozenset({1213, 1205, 1020}),
    save_rein_session=_save_rein_mysql,
    merge_insert=_merge_insert_mysql,
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
        1049: DATABASE_HINT,  # ER_BAD_DB_ERROR
        1045: LOGIN_HINT,  # ER_ACCESS_DENIED_ERROR
        1698: LOGIN_HINT,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR (no password given)
        1044: _DATABASE_OR_PRIVILEGE_HINT_MYSQL,  # ER_DBACCESS_DENIED_ERROR
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
    # Closes the transport without a round trip: a read waiting on it ends with 2013.
    abort=lambda connection: connection.close(),
    liveness=Liveness(
        session_id=lambda connection: int(connection.thread_id()),
        busy="SELECT COMMAND <> 'Sleep' OR TIME < :quiet FROM information_schema.PROCESSLIST WHERE ID = :id",
        end="KILL CONNECTION :id",
    ),
    driver="aiomysql",
    driver_extra="mysql",
    check_foreign=_check_foreign_mysql,
    add_listeners=no_listeners,
    transaction_open=_transaction_open_mysql,
    transaction_open_exact=False,
    # ER_NET_PACKET_TOO_LARGE
    too_large_codes=frozenset({1153}),
    schema_codes=frozenset({1054, 1146}),  # ER_BAD_FIELD_ERROR, ER_NO_SUCH_TABLE
    missing_table_codes=frozenset({1146}),  # ER_NO_SUCH_TABLE
    galera=True,
    migration_transaction=_migration_transaction_mysql,
    offline_script=_OFFLINE_SCRIPT,
    drop_guard=_guard_drops_mysql,
    id_type=lambda length: Utf8Varbinary(4 * length),  # 4 bytes: utf8mb4's worst case
    instant_type=lambda: mysql.DATETIME(fsp=6),  # plain DATETIME drops the fraction
    blob_type=HexBoundLongBlob,
    transactional_ddl=False,
    adoption="modify-column",
    adoption_equal=_adoption_equal,
    char_length=func.char_length,
    zett_driver="mysql+aiomysql",
    create_database="CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    drop_database="DROP DATABASE IF EXISTS {name}",
    analyze="ANALYZE TABLE agent_sessions, raw_messages, session_snapshots",
    server_version="SELECT CONCAT('MySQL-compatible ', version())",
    replication=_REPLICATION,
)
