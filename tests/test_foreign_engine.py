"""A store on an ``AsyncEngine`` its caller made and owns (``engine=``), on every target:
used as it is, never disposed by the store, its own transactions left alone; what
the ledger needs of it set (SQLite's WAL) or checked (MySQL's isolation and charset)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rein import Session
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import ConfigurationError
from chatledger.rein import LedgerSessionStore
from chatledger.schema import raw_messages_table
from chatledger.zett import LedgerSessionStorage

from .backends import Servers
from .conftest import Database
from .throwaway import migrated_database, shared_server


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
