"""A store on an ``AsyncEngine`` its caller made and owns (``engine=``), on every target:
used as it is, never disposed by the store, its own transactions left alone; what
the ledger needs of it set (SQLite's WAL) or checked (MySQL's isolation and charset;
every transaction: no autocommit); a pooled one refused on a second event loop."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rein import Session
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import ConfigurationError
from chatledger.rein import LedgerSessionStore
from chatledger.schema import raw_messages_table, sessions_table
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import Servers
from .support.facts import driver_facts
from .support.throwaway import migrated_database, shared_server


async def _count(engine: Any, session_id: str) -> int:
    async with engine.connect() as conn:
        statement = select(func.count()).where(raw_messages_table.c.session_id == session_id)
        return int(await conn.scalar(statement))


async def test_storage_uses_the_callers_engine_and_leaves_it_open(
    database: Database, session_id: str
) -> None:
    engine = create_async_engine(database.url)
    pool = engine.sync_engine.pool
    try:
        async with LedgerSessionStorage(engine=engine, retry_timeout=5) as storage:
            assert storage.ledger.engine.sync_engine.pool is pool  # one pool, the caller's
            assert await storage.append(session_id, "r", UserMessage(content="one")) == 1
            assert await storage.append(session_id, "r", UserMessage(content="two")) == 2
            view = await storage.load(session_id)
            assert [record.message.content for record in view.raw_tail] == ["one", "two"]
            assert storage.url.database == database.url.database
            assert database.url.password is None or "***" in repr(storage)
        # Closed: the store refuses calls, the engine is the caller's and still serves.
        with pytest.raises(RuntimeError, match="closed"):
            await storage.load(session_id)
        assert engine.sync_engine.pool is pool
        assert await _count(engine, session_id) == 2
    finally:
        await engine.dispose()


def test_rein_store_on_the_callers_engine(database: Database) -> None:
    """The rein store runs its calls on its own loop: an engine without a pool of
    idle connections (NullPool) serves it and the caller's loop alike."""
    engine = create_async_engine(database.url, poolclass=NullPool)
    conv_id = f"rein-{uuid.uuid4()}"
    try:
        with LedgerSessionStore(engine=engine) as store:
            store.save(conv_id, Session(iteration=3))
            assert store.load(conv_id) == Session(iteration=3)
        with LedgerSessionStore(engine=engine) as again:  # the close left the engine usable
            assert again.load(conv_id) == Session(iteration=3)
            again.delete(conv_id)
    finally:
        asyncio.run(engine.dispose())


async def test_sqlite_engine_of_the_caller(tmp_path: Path, session_id: str) -> None:
    """A fresh file: the store upgrades it (the embedded default does), puts it in WAL
    mode, and begins its own transactions explicitly -- only its own."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite3'}")
    sent: list[str] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    try:
        async with LedgerSessionStorage(engine=engine) as storage:
            assert await storage.append(session_id, "r", UserMessage(content="one")) == 1
            sent.clear()
            assert await storage.append(session_id, "r", UserMessage(content="two")) == 2
            assert sent[0] == "BEGIN IMMEDIATE"
            sent.clear()
            await storage.load(session_id)
            assert sent[0] == "BEGIN DEFERRED"
        sent.clear()
        async with engine.begin() as conn:
            assert await conn.scalar(text("SELECT 1")) == 1
        assert sent == ["SELECT 1"]  # the caller's transactions begin as they did
        async with engine.connect() as conn:
            assert await conn.scalar(text("PRAGMA journal_mode")) == "wal"
        assert await _count(engine, session_id) == 2
    finally:
        await engine.dispose()


# -- refused --------------------------------------------------------------------------------


def test_dsn_and_engine_together_are_refused(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'x.sqlite3'}")
    with pytest.raises(ValueError, match="dsn or engine, not both"):
        LedgerSessionStorage(f"sqlite:///{tmp_path / 'x.sqlite3'}", engine=engine)


@pytest.mark.parametrize(
    "option", [{"pool_size": 3}, {"connect_args": {"timeout": 1}}, {"lock_timeout": 1}, {"pgbouncer": True}]
)
def test_options_that_set_up_an_engine_are_refused_with_one(tmp_path: Path, option: dict[str, Any]) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'x.sqlite3'}")
    with pytest.raises(ValueError, match=f"{next(iter(option))} set up the engine chatledger creates"):
        LedgerSessionStorage(engine=engine, **option)


def test_what_is_not_an_async_engine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="AsyncEngine"):
        LedgerSessionStorage(engine=create_engine(f"sqlite:///{tmp_path / 'x.sqlite3'}"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AsyncEngine"):
        LedgerSessionStorage(engine="sqlite:///x.db")  # type: ignore[arg-type]


def test_engine_in_autocommit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite3"
    for engine in (
        create_async_engine(f"sqlite+aiosqlite:///{path}", isolation_level="AUTOCOMMIT"),
        create_async_engine(f"sqlite+aiosqlite:///{path}").execution_options(isolation_level="AUTOCOMMIT"),
    ):
        with pytest.raises(ValueError, match="AUTOCOMMIT"):
            LedgerSessionStorage(engine=engine)


def test_engine_urls_are_checked_as_dsns() -> None:
    with pytest.raises(ValueError, match="in-memory"):
        LedgerSessionStorage(engine=create_async_engine("sqlite+aiosqlite://"))
    with pytest.raises(ValueError, match="names no database"):
        LedgerSessionStorage(engine=create_async_engine("postgresql+asyncpg://u@db.example"))


# -- MySQL: checked on first use --------------------------------------------------------------


@pytest.fixture(scope="module")
async def mysql_url(servers: Servers) -> AsyncIterator[URL]:
    async with migrated_database(shared_server(servers, "mysql")) as url:
        yield url


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"isolation_level": "READ COMMITTED"}, "need REPEATABLE READ"),
        ({"connect_args": {"charset": "latin1"}}, "utf8mb4"),
    ],
)
async def test_mysql_engine_set_up_otherwise_is_refused_on_first_use(
    mysql_url: URL, options: dict[str, Any], refusal: str
) -> None:
    engine = create_async_engine(mysql_url.difference_update_query(["charset"]), **options)
    try:
        async with LedgerSessionStorage(engine=engine) as storage:
            with pytest.raises(ConfigurationError, match=refusal):
                await storage.count_messages("s-1")
            assert storage.ledger.retries == 0
    finally:
        await engine.dispose()


# -- transactions that are transactions ----------------------------------------------------


async def _refused_and_failed_writes_leave_nothing(engine: AsyncEngine, session_id: str) -> None:
    """A refused append leaves no sequence gap, a write that fails after its first
    statement leaves nothing: each call is one transaction."""
    async with LedgerSessionStorage(engine=engine, retry_timeout=5) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="one")) == 1
        taken = f"m-{uuid.uuid4().hex}"
        await storage.append(f"other-{session_id}", "r", UserMessage(content="x"), message_id=taken)
        with pytest.raises(ValueError, match="another session"):
            await storage.append(session_id, "r", UserMessage(content="refused"), message_id=taken)
        assert await storage.append(session_id, "r", UserMessage(content="two")) == 2

        async def half(conn: AsyncConnection) -> None:
            await conn.execute(
                sessions_table.update().where(sessions_table.c.id == session_id).values(title="half")
            )
            raise RuntimeError("the second step failed")

        with pytest.raises(RuntimeError, match="second step"):
            await storage.ledger.write(half)
        found = await storage.get_session(session_id)
        assert found is not None and found.title is None
        assert [record.sequence for record in await storage.list_raw_messages(session_id)] == [1, 2]


async def test_refused_and_failed_writes_leave_nothing_on_the_callers_engine(
    database: Database, session_id: str
) -> None:
    engine = create_async_engine(database.url)
    try:
        await _refused_and_failed_writes_leave_nothing(engine, session_id)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("wal", [False, True], ids=["new file", "file in WAL mode"])
async def test_sqlite_engine_set_up_by_sqlalchemys_recipe(tmp_path: Path, session_id: str, wal: bool) -> None:
    """SQLAlchemy's recipe for transactional SQLite (aiosqlite documentation,
    "Serializable isolation / Savepoints / Transactional DDL"): sqlite3's own
    transaction handling off, and a ``begin`` listener emitting ``BEGIN``. The
    engine's BEGIN runs after the store's view's listeners; the store rolls that
    empty transaction back and begins its own, and puts the file in WAL mode outside
    a transaction."""
    path = tmp_path / "app.sqlite3"
    if wal:
        async with LedgerSessionStorage(f"sqlite:///{path}") as migrated:  # migrated and in WAL mode
            await migrated.count_messages(session_id)
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    sent: list[str] = []

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    try:
        await _refused_and_failed_writes_leave_nothing(engine, session_id)
        async with LedgerSessionStorage(engine=engine) as storage:
            assert await storage.count_messages(session_id) == 2  # past the first use's checks
            sent.clear()
            assert await storage.append(session_id, "r", UserMessage(content="three")) == 3
            assert sent[:3] == ["BEGIN", "ROLLBACK", "BEGIN IMMEDIATE"]
            sent.clear()
            assert len((await storage.load(session_id)).raw_tail) == 3
            assert sent[:3] == ["BEGIN", "ROLLBACK", "BEGIN DEFERRED"]
        sent.clear()
        async with engine.begin() as conn:  # the caller's own transactions begin as they did
            assert await conn.scalar(text("PRAGMA journal_mode")) == "wal"
        assert sent == ["BEGIN", "PRAGMA journal_mode"]
    finally:
        await engine.dispose()


async def test_sqlite_engine_without_sqlite3s_transaction_handling(tmp_path: Path, session_id: str) -> None:
    """sqlite3's autocommit in its own sense (``isolation_level=None``, what SQLAlchemy
    reports as autocommit on SQLite) is what the store's own engines use: its explicit
    BEGIN makes each call one transaction."""
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite3'}", connect_args={"isolation_level": None}
    )
    try:
        await _refused_and_failed_writes_leave_nothing(engine, session_id)
    finally:
        await engine.dispose()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sqlite3's autocommit attribute is Python 3.12's")
async def test_sqlite3_autocommit_true_is_refused(tmp_path: Path, session_id: str) -> None:
    """sqlite3's ``autocommit=True`` (Python 3.12+) makes ``commit()`` a no-op: the
    store's transactions would never end."""
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite3'}", connect_args={"autocommit": True}
    )
    try:
        async with LedgerSessionStorage(engine=engine) as storage:
            with pytest.raises(ConfigurationError, match="autocommit=True"):
                await storage.append(session_id, "r", UserMessage(content="one"))
    finally:
        await engine.dispose()


def _autocommit_args(database: Database) -> dict[str, Any]:
    """The connect arguments that put the target's driver in autocommit mode."""
    driver = database.url.get_driver_name()
    if not driver_facts(driver).autocommit_argument:
        pytest.skip(f"{driver} has no autocommit connect argument")
    return {"autocommit": True}


async def test_connections_in_autocommit_are_refused(database: Database, session_id: str) -> None:
    """aiomysql's and psycopg's ``autocommit=True``: every statement would commit on its
    own. Refused at the first call, before anything is written."""
    engine = create_async_engine(database.url, connect_args=_autocommit_args(database))
    try:
        async with LedgerSessionStorage(engine=engine, retry_timeout=5) as storage:
            with pytest.raises(ConfigurationError, match="autocommit mode"):
                await storage.append(session_id, "r", UserMessage(content="one"))
            assert storage.ledger.retries == 0
        assert await _count(engine, session_id) == 0
    finally:
        await engine.dispose()


async def test_a_pooled_connection_put_in_autocommit_later_is_refused(
    database: Database, session_id: str
) -> None:
    """Checked on every transaction, not only on the first connection: the caller puts
    the pool's one connection in autocommit after the store started using it."""
    _autocommit_args(database)
    set_autocommit = driver_facts(database.url.get_driver_name()).set_autocommit
    assert set_autocommit is not None
    engine = create_async_engine(database.url, pool_size=1, max_overflow=0)
    try:
        async with LedgerSessionStorage(engine=engine, retry_timeout=5) as storage:
            assert await storage.append(session_id, "r", UserMessage(content="one")) == 1
            async with engine.connect() as conn:
                await set_autocommit(conn)
            with pytest.raises(ConfigurationError, match="autocommit mode"):
                await storage.append(session_id, "r", UserMessage(content="two"))
        assert await _count(engine, session_id) == 1
    finally:
        await engine.dispose()


# -- event loops ----------------------------------------------------------------------------


def test_pooled_callers_engine_is_refused_on_a_second_event_loop(database: Database, session_id: str) -> None:
    """The pool's connections (and its wait queue) belong to the first loop; the store
    cannot replace the pool of an engine it does not own, so it refuses, before any
    checkout, and goes on serving its first loop."""
    engine = create_async_engine(database.url)
    storage = LedgerSessionStorage(engine=engine, retry_timeout=5)
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(storage.append(session_id, "r", UserMessage(content="one"))) == 1
        idle = engine.sync_engine.pool.checkedin()  # type: ignore[attr-defined]
        with pytest.raises(ConfigurationError, match=r"one engine, and one store, per event loop.*NullPool"):
            asyncio.run(storage.append(session_id, "r", UserMessage(content="two")))
        pool = engine.sync_engine.pool
        assert (pool.checkedin(), pool.checkedout()) == (idle, 0)  # type: ignore[attr-defined]
        assert first.run_until_complete(storage.append(session_id, "r", UserMessage(content="two"))) == 2
        first.run_until_complete(storage.close())
    finally:
        first.run_until_complete(engine.dispose())
        first.close()


def test_callers_engine_without_a_pool_serves_every_event_loop(database: Database, session_id: str) -> None:
    engine = create_async_engine(database.url, poolclass=NullPool)
    storage = LedgerSessionStorage(engine=engine, retry_timeout=5)
    try:
        assert asyncio.run(storage.append(session_id, "r", UserMessage(content="one"))) == 1
        assert asyncio.run(storage.append(session_id, "r", UserMessage(content="two"))) == 2
        asyncio.run(storage.close())
        with pytest.raises(RuntimeError, match="closed"):  # closed, from any loop
            asyncio.run(storage.load(session_id))
    finally:
        asyncio.run(engine.dispose())
