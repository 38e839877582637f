"""Engines of a backend: creating one (a missing driver named as its extra),
the set-up of every new connection, the driver's ``connect()`` arguments, and adopting
an engine the caller made (``engine=``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolResetState

from ..errors import missing_extra
from ..options import LedgerOptions
from . import base
from .base import Backend


def merge_connect_args(ours: dict[str, Any], *given: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's ``connect()`` arguments: ``ours`` (from the backend), then each of
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


def create_engine(url: URL, **options: Any) -> AsyncEngine:
    """SQLAlchemy's ``create_async_engine``, with a missing driver reported as the extra
    that installs it.

    Raises:
        ImportError: the URL's driver is not installed; the message gives the
            ``pip install 'chatledger[...]'`` line.
        ValueError: a dialect or driver chatledger does not serve.
    """
    backend = base.backend(url.get_backend_name(), url.get_driver_name())
    try:
        return create_async_engine(url, **options)
    except ImportError as error:  # also psycopg without its binary or C part
        raise ImportError(missing_extra(f"the {backend.driver} driver", backend.driver_extra)) from error


#: The pool record's ``info`` key a transaction sets once its COMMIT succeeded with
#: nothing run after it: the connection has no transaction open, which a backend whose
#: :attr:`Backend.transaction_open` is not exact cannot tell from the driver.
COMMITTED = "chatledger_committed"


def skips_reset(backend: Backend, record: Any, state: PoolResetState) -> bool:
    """Whether the pool's reset of a connection returned with ``state`` sends nothing,
    even if :attr:`Backend.transaction_open` says a transaction is open: a connection
    the pool must not touch (garbage collected outside its event loop: the pool
    terminates it), or one a backend whose probe is not exact knows to be clean: its
    last act a successful COMMIT (:data:`COMMITTED`), or SQLAlchemy's own rollback."""
    if not state.asyncio_safe:
        return True
    committed = record is not None and bool(record.info.get(COMMITTED))
    return not backend.transaction_open_exact and (committed or state.transaction_was_reset)


def configure_engine(engine: AsyncEngine, options: LedgerOptions) -> None:
    """Per-connection set-up from the backend: the set-up statements of every
    new connection (SQLite's WAL, its size limit, busy timeout and synchronous pragmas;
    MySQL's lock wait timeout), and on SQLite explicit transactions.

    SQLite: every transaction begins with an explicit ``BEGIN`` from the ``begin``
    event: ``BEGIN IMMEDIATE`` for a write, so it holds the write lock before its
    first statement, and a deferred ``BEGIN`` for a read, whose snapshot starts with
    its first statement (WAL mode: it blocks no writer). The mode comes from the
    ``chatledger_sqlite_begin`` execution option, ``IMMEDIATE`` when none is given.
    SQLAlchemy's pysqlite / aiosqlite documentation, "Serializable isolation /
    Savepoints / Transactional DDL". A write whose first statement writes
    (:attr:`Backend.first_write`, the append) sends none: sqlite3's
    ``isolation_level`` is :attr:`Backend.driver_begin` (``IMMEDIATE``), so sqlite3
    sends ``BEGIN IMMEDIATE`` itself right before that statement, in the same hop to
    aiosqlite's thread. (sqlite3 begins nothing before a ``SELECT`` or a pragma, and
    nothing in a transaction begun explicitly.)

    The pool's reset on return (``pool_reset_on_return=None`` on the engine, see
    :mod:`chatledger.connections`) rolls back only a connection whose driver has a
    transaction open (:attr:`Backend.transaction_open`): a connection returned after
    its COMMIT costs no ``ROLLBACK``, one returned mid-transaction (a task cancelled,
    a statement run on the raw connection) is rolled back before it is pooled, and
    one the rollback fails on, or leaves in a transaction, is discarded by the pool.
    Where the driver's state misses a read's transaction (MySQL), only a connection
    whose last act was a successful COMMIT (:data:`COMMITTED`, set by the ledger's
    transactions) or SQLAlchemy's own rollback skips it.

    A backend whose :attr:`Backend.single_append` commits its own transaction (MySQL's
    committed append procedure) gets :func:`_spare_ended_commits`: the ``COMMIT`` after
    it sends nothing."""
    backend = base.backend(engine.dialect.name, engine.dialect.driver)
    statements = backend.session_setup(options)
    explicit_begin = backend.explicit_begin
    driver_begin = backend.driver_begin
    transaction_open = backend.transaction_open
    exact = backend.transaction_open_exact
    dialect = engine.sync_engine.dialect

    @event.listens_for(engine.sync_engine, "reset")
    def _reset(dbapi_connection: Any, record: Any, state: PoolResetState) -> None:
        skip = skips_reset(backend, record, state)
        if record is not None:
            record.info.pop(COMMITTED, None)
            record.info.pop(base.TRANSACTION_ENDED, None)
        if not skip and transaction_open(dbapi_connection):
            dialect.do_rollback(dbapi_connection)  # what the pool's own reset calls
            if exact and transaction_open(dbapi_connection):
                # A transaction the driver's adapter did not begin (asyncpg's rolls back
                # only its own): raised here, the pool discards the connection.
                raise RuntimeError("a connection still in a transaction after its rollback is not pooled")

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        if explicit_begin:
            dbapi_connection.isolation_level = driver_begin
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
    if backend.single_append is not None and not backend.single_append_autocommit:
        _spare_ended_commits(engine)


def _spare_ended_commits(engine: AsyncEngine) -> None:
    """The ``COMMIT`` of a transaction whose statement ended it on the server
    (:data:`base.TRANSACTION_ENDED`, set on the connection by the appender once the
    statement's answer was read) sends nothing: the engine's dialect (its own, made
    with the engine) skips that one call. A rollback is always sent."""
    dialect = engine.sync_engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def ended(dbapi_connection: Any) -> bool:
        try:  # a pooled connection's info; an ad hoc one (first connect) has none
            info = dbapi_connection.info
        except (AttributeError, NotImplementedError):
            return False
        return bool(info.pop(base.TRANSACTION_ENDED, False))

    def do_commit(dbapi_connection: Any) -> None:
        if not ended(dbapi_connection):
            commit(dbapi_connection)

    def do_rollback(dbapi_connection: Any) -> None:
        ended(dbapi_connection)
        rollback(dbapi_connection)

    dialect.do_commit = do_commit  # type: ignore[method-assign]
    dialect.do_rollback = do_rollback  # type: ignore[method-assign]


def _begin_explicitly(engine: AsyncEngine) -> None:
    """Every transaction of ``engine`` begins with ``BEGIN <chatledger_sqlite_begin>``
    (``IMMEDIATE`` when the option is not given; none when it is ``None`` or
    :data:`BEGUN_BY_DRIVER`)."""

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("chatledger_sqlite_begin", "IMMEDIATE")
        if mode and mode != base.BEGUN_BY_DRIVER:
            conn.exec_driver_sql(f"BEGIN {mode}")


#: Execution options of the transaction :attr:`Backend.check_foreign` runs in:
#: on SQLite none is begun, so that a pragma may change the journal mode.
FOREIGN_CHECK_OPTIONS: dict[str, Any] = {"chatledger_sqlite_begin": None}


def adopt_engine(engine: AsyncEngine) -> tuple[AsyncEngine, Backend]:
    """A ledger's view of an engine its caller made and owns (the ``engine=`` option)
    and the backend of its dialect and driver.

    The view is ``engine.execution_options()``: a copy sharing the engine's pool, so
    that the listeners a ledger adds (:attr:`Backend.add_listeners`: aiosqlite's reset
    of a cancelled statement) apply to the ledger's transactions only, never to the
    caller's own. Per-connection settings are the engine's (chatledger does not change
    connections the caller also uses): the lock timeout (PostgreSQL ``lock_timeout``, MySQL
    ``innodb_lock_wait_timeout``, SQLite's busy timeout, sqlite3's ``timeout``),
    SQLite's ``synchronous``, Galera's ``wsrep_sync_wait``, pooling. What a ledger
    needs of them is set or checked on first use by :attr:`Backend.check_foreign`,
    and at the start of each of its transactions by :attr:`Backend.foreign_begin`
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
    backend = base.backend(engine.dialect.name, engine.dialect.driver)
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
    backend.add_listeners(view)
    return view, backend


async def set_characteristics(conn: AsyncConnection, options: Mapping[str, Any]) -> None:
    """``conn.execution_options(**options)`` on a connection just checked out, for a
    driver that awaits to set them (:attr:`Backend.characteristics_await`).

    SQLAlchemy sets them one by one and registers the reset that undoes them at
    check-in only once all are set; psycopg may yield to the event loop after a setter
    ran. A failure or cancellation midway therefore soft-invalidates the connection: it
    is replaced at its next checkout, never reused half set (an isolation level or
    read-only leaking into the next write, or autocommit into a transaction).
    """
    try:
        await conn.execution_options(**options)
    except BaseException:
        if conn.sync_connection is not None:
            conn.sync_connection.connection.invalidate(soft=True)
        raise
