"""SQLite (aiosqlite): a file, its WAL, and explicit transactions."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import (
    asynccontextmanager,
    contextmanager,
)
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    bindparam,
    event,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Connection, ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import column as sql_column
from sqlalchemy.sql import table as sql_table

from ..errors import ConfigurationError
from ..options import LedgerOptions
from ..schema import sessions_table
from ..types import BigInt
from .appends import (
    MESSAGE_INSERT,
    append_params,
    conflict_merge,
    counted_insert,
    counter_upsert,
    save_rein_returning,
)
from .base import (
    AUTOCOMMIT_FIX,
    BEGUN_BY_DRIVER,
    Backend,
    Collations,
    OfflineScript,
    StorageSize,
    backend,
    error_code,
    logger,
    sync_connection,
)
from .migrations import SchemaLockTimeout, migration_busy

# SQLite's scalar max() with two arguments is GREATEST.
_SQLITE_COUNTER = counter_upsert(sqlite.insert, func.max)


async def _append_sqlite(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """SQLite: the counter upsert, then the insert (SQLite has no DML in a CTE)."""
    params = append_params(values, row, now)
    sequence: int | None = (await conn.execute(_SQLITE_COUNTER, params)).scalar_one_or_none()
    if sequence is not None:
        await conn.execute(MESSAGE_INSERT, {**params, "sequence": sequence})
    return sequence


#: The counter trigger, by the name it is created with.
_COUNTER_TRIGGER = "raw_messages_counter"
_MASTER = sql_table("sqlite_master", sql_column("type"), sql_column("name"), sql_column("tbl_name"))
_TRIGGER_PRESENT = (
    select(func.count())
    .select_from(_MASTER)
    .where(
        _MASTER.c.type == "trigger",
        _MASTER.c.name == _COUNTER_TRIGGER,
        _MASTER.c.tbl_name == "raw_messages",
    )
    .scalar_subquery()
)
# The trigger's presence comes back with the sequence, read in the statement's own
# transaction: an append never trusts a trigger that a downgrade dropped after the
# ledger's schema check found it.
_SQLITE_COUNTED_INSERT = counted_insert().returning(_TRIGGER_PRESENT)
#: What the trigger does, for an append that found it gone.
_SQLITE_FOLLOW = (
    update(sessions_table)
    .where(
        sessions_table.c.id == bindparam("s_id", type_=sessions_table.c.id.type),
        sessions_table.c.last_sequence == bindparam("sequence", type_=BigInt) - 1,
    )
    .values(
        last_sequence=bindparam("sequence", type_=BigInt),
        updated_at=func.max(
            sessions_table.c.updated_at, bindparam("s_updated_at", type_=sessions_table.c.updated_at.type)
        ),
    )
)


async def _append_sqlite_counted(
    conn: AsyncConnection, values: dict[str, Any], row: dict[str, Any], now: datetime
) -> int | None:
    """SQLite with the counter trigger: the insert alone, numbered from the counter
    row, which the trigger then moves along (:func:`.appends.counted_insert`); the
    counter upsert and the insert when it selected no counter row. Without the trigger
    (dropped since the schema check) the append moves the counter itself."""
    params = append_params(values, row, now)
    inserted = (await conn.execute(_SQLITE_COUNTED_INSERT, params)).one_or_none()
    if inserted is None:
        return await _append_sqlite(conn, values, row, now)
    sequence, triggered = int(inserted[0]), inserted[1]
    if not triggered:
        await conn.execute(_SQLITE_FOLLOW, {**params, "sequence": sequence})
    return sequence


#: Whether the schema has the counter trigger (read once per ledger).
_COUNTER_TRIGGER_SQLITE = (
    "SELECT 1 FROM sqlite_master "
    f"WHERE type = 'trigger' AND name = '{_COUNTER_TRIGGER}' AND tbl_name = 'raw_messages'"
)


async def _counter_trigger_found(conn: AsyncConnection) -> bool:
    return (await conn.execute(text(_COUNTER_TRIGGER_SQLITE))).first() is not None


def _rebuild_triggers_sqlite(conn: Connection) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every trigger dropped before a table rebuild and created again after it, as
    SQLite's generalized ``ALTER TABLE`` procedure says: the rebuild's ``DROP TABLE``
    drops the table's own, and its ``RENAME`` fails while another table's trigger
    (the counter trigger names ``agent_sessions``) refers to the table it dropped."""
    rows = conn.execute(
        text("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND sql IS NOT NULL ORDER BY name")
    ).all()
    quote = conn.dialect.identifier_preparer.quote_identifier
    return tuple(f"DROP TRIGGER {quote(name)}" for name, _ in rows), tuple(str(sql) for _, sql in rows)


async def _save_rein_sqlite(
    conn: AsyncConnection, values: dict[str, Any], only_if_absent: bool
) -> int | None:
    return await save_rein_returning(sqlite.insert, func.max, conn, values, only_if_absent)


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


def _any_of_json(column: ColumnElement[int], values: Sequence[int]) -> ColumnElement[bool]:
    """SQLite: ``column IN (SELECT value FROM json_each(:values))``, the values bound as
    one JSON array (JSON is built into SQLite from 3.38)."""
    each = func.json_each(bindparam(None, json.dumps(list(values)), type_=String)).table_valued("value")
    return column.in_(select(each.c.value))


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


def _transaction_open_sqlite(dbapi_connection: Any) -> bool:
    # sqlite3 reads in_transaction from any thread (sqlite3_get_autocommit): no hop.
    return bool(dbapi_connection.driver_connection.in_transaction)


def _count_hops(dbapi_connection: Any, tick: Callable[[], None]) -> Callable[[], None]:
    """Every hop to aiosqlite's thread goes through its connection's ``_execute``:
    counted there, on this one connection."""
    driver = dbapi_connection.driver_connection
    queue = driver._execute

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        tick()
        return await queue(fn, *args, **kwargs)

    driver._execute = counted

    def stop() -> None:
        if driver.__dict__.get("_execute") is counted:
            del driver._execute

    return stop


def _check_foreign_sqlite(conn: Connection) -> None:
    """An engine the caller made: the file goes to WAL mode, as chatledger's own
    connections put it (the mode is the file's, kept for every connection)."""
    if str(conn.exec_driver_sql("PRAGMA journal_mode").scalar()).lower() != "wal":
        conn.exec_driver_sql("PRAGMA journal_mode = WAL")


async def _begin_sqlite_foreign(conn: AsyncConnection) -> None:
    """SQLite, on an engine the caller made: the ledger's transaction begins with an
    explicit ``BEGIN <chatledger_sqlite_begin>`` (``IMMEDIATE`` when the option is not
    given or is :data:`BEGUN_BY_DRIVER`, none when it is ``None``), as on chatledger's
    own engines (:func:`configure_engine`), whose sqlite3 begins an append itself.

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
    sync = sync_connection(conn)
    driver: Any = sync.connection.driver_connection  # aiosqlite's Connection
    if sys.version_info >= (3, 12):
        await _refuse_sqlite_autocommit(sync.info, driver)
    if driver.in_transaction:
        await conn.exec_driver_sql("ROLLBACK")
    mode = sync.get_execution_options().get("chatledger_sqlite_begin", "IMMEDIATE")
    if mode == BEGUN_BY_DRIVER:  # the caller's sqlite3 may begin deferred, or never
        mode = "IMMEDIATE"
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
            f"nothing; {AUTOCOMMIT_FIX} (isolation_level=None works)"
        )


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
        if not began and error_code(error) in AIOSQLITE.transient_codes:
            raise SchemaLockTimeout("BEGIN IMMEDIATE") from error
        busy = migration_busy(conn, error)
        if busy is None:
            raise
        raise busy from error


def _offline_begin_sqlite(lock_timeout: float) -> tuple[str, ...]:
    return (f"PRAGMA busy_timeout = {max(1, round(lock_timeout * 1000))};", "BEGIN IMMEDIATE;")


_OFFLINE_SCRIPT = OfflineScript(
    client="sqlite3 -bail DATABASE_FILE < SCRIPT",
    on_failure=("It is one transaction: a failure changes nothing (-bail stops at the first error).",),
    begin=_offline_begin_sqlite,
    end=("COMMIT;",),
)


@contextmanager
def _guard_drops_sqlite(
    _conn: Connection, _dropped: Sequence[str], _touched: Sequence[str], _lock_timeout: float
) -> Iterator[None]:
    """SQLite: nothing to add. The migration's ``BEGIN IMMEDIATE`` holds the file's write
    lock from before the count to the COMMIT: an append open at that moment has committed
    before it was granted, and every later one waits for the COMMIT."""
    yield


def configure_migration_engine(engine: AsyncEngine, *, lock_timeout: float) -> None:
    """Set up an engine that runs migrations. SQLite only: SQLAlchemy's documented recipe
    for transactional DDL ("Serializable isolation / Savepoints / Transactional DDL"):
    the driver's own transaction handling off (``isolation_level = None``, so sqlite3
    neither begins nor commits on its own, and DDL runs inside the transaction) and an
    explicit ``BEGIN IMMEDIATE``, which waits for the write lock up to ``lock_timeout``
    seconds (the busy timeout)."""
    if not backend(engine.dialect.name, engine.dialect.driver).explicit_begin:
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

    SQLite's :attr:`Backend.add_listeners`: every engine a ledger transacts on gets it.
    """

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


def _resolve_dsn(url: URL) -> URL:
    database = url.database
    if database in (None, "", ":memory:") or str(database).startswith("file::memory:"):
        # Every pooled connection would be a database of its own, or (with the one
        # static connection SQLAlchemy gives it) concurrent calls would share one
        # transaction; neither keeps what a shared store acknowledges.
        raise ValueError("dsn names an in-memory SQLite database; give a file: sqlite:///path/to/file.db")
    return url.set(database=str(Path(database).expanduser()))


def _storage_size_sqlite(conn: Connection, tables: Sequence[str]) -> StorageSize:
    """The ``dbstat`` virtual table's page sizes per table and its indexes, when SQLite
    is built with it (it walks the tables' pages: a read of the file, in the read
    transaction, which blocks no writer in WAL mode); else only the file's size
    (``page_count * page_size``)."""
    has_dbstat = conn.scalar(
        text("SELECT 1 FROM pragma_compile_options WHERE compile_options = 'ENABLE_DBSTAT_VTAB'")
    )
    if has_dbstat:
        rows = conn.execute(
            text(
                "SELECT m.tbl_name AS name, SUM(d.pgsize) AS size FROM dbstat AS d "
                "JOIN sqlite_schema AS m ON m.name = d.name "
                "WHERE m.tbl_name IN :names GROUP BY m.tbl_name"
            ).bindparams(bindparam("names", expanding=True)),
            {"names": list(tables)},
        )
        sizes = {row.name: int(row.size) for row in rows if row.size is not None}
        return StorageSize(sizes, sum(sizes.values()), "dbstat (exact pages)")
    pages = int(conn.scalar(text("PRAGMA page_count")) or 0)
    size = int(conn.scalar(text("PRAGMA page_size")) or 0)
    return StorageSize({}, pages * size, "page_count * page_size (the whole file; SQLite without dbstat)")


#: SQLite with aiosqlite.
AIOSQLITE = Backend(
    name="sqlite",
    display_name="SQLite",
    storage_size=_storage_size_sqlite,
    db_system=lambda dialect: "sqlite",
    schemes=("sqlite",),
    resolve_dsn=_resolve_dsn,
    append_message=_append_sqlite,
    counted_append=_append_sqlite_counted,
    append_routine_usable=_counter_trigger_found,
    rebuild_triggers=_rebuild_triggers_sqlite,
    save_rein_session=_save_rein_sqlite,
    merge_insert=conflict_merge(sqlite.insert),
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
    # No BEGIN: sqlite3 begins nothing before a SELECT, which reads one snapshot of its
    # own (three hops fewer to aiosqlite's thread: a cursor, the BEGIN, its close).
    single_read={"chatledger_sqlite_begin": None},
    # A write takes the write lock when it begins, before its first statement, so
    # everything it reads is current and two writers never deadlock upgrading a
    # read lock.
    write={"chatledger_sqlite_begin": "IMMEDIATE"},
    # The append's first statement is its counter upsert: sqlite3 sends BEGIN IMMEDIATE
    # right before it, in the same hop to aiosqlite's thread.
    first_write={"chatledger_sqlite_begin": BEGUN_BY_DRIVER},
    driver_begin="IMMEDIATE",
    transaction_open=_transaction_open_sqlite,
    count_requests=_count_hops,
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
    add_listeners=release_cancelled_statements,
    migration_transaction=_migration_transaction_sqlite,
    offline_script=_OFFLINE_SCRIPT,
    drop_guard=_guard_drops_sqlite,
    transactional_ddl=True,
    adoption="rebuild",
    char_length=func.length,
    zett_driver="sqlite+aiosqlite",
    create_database=None,
    drop_database=None,
    analyze="ANALYZE",
    server_version="SELECT 'SQLite ' || sqlite_version()",
    bench_variant=("synchronous=NORMAL", {"sqlite_synchronous": "NORMAL"}),
)
