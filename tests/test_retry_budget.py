"""One retry budget in seconds, and lock waits counted against it on every backend.

A row lock (PostgreSQL, MySQL/MariaDB) or the write lock (SQLite) held by another
connection makes every attempt of an append wait ``lock_timeout`` seconds and fail
(PostgreSQL 55P03, MySQL 1205, SQLite SQLITE_BUSY), which is retried until
``retry_timeout`` is spent: the caller gets ``StorageUnavailable`` within about
budget + lock timeout, never a hang, and nothing was written.
"""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import OutcomeUnknown, StorageUnavailable
from chatledger.dsn import sqlite_file
from chatledger.options import LedgerOptions
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of

BUDGET = 2.0
LOCK_TIMEOUT = 1.0
#: Generous: the budget, one more lock wait begun just before it ran out, and slack.
UPPER_BOUND = BUDGET + LOCK_TIMEOUT + 5


async def _hold_lock(database: Database, session_id: str) -> AsyncIterator[None]:
    """Hold the session's counter row lock (the SQLite file's write lock) until resumed."""
    if facts_of(database.backend).file_write_lock:
        path = sqlite_file(database.url)
        holder = sqlite3.connect(str(path), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    engine = create_async_engine(database.url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(
                text("SELECT id FROM agent_sessions WHERE id = :id FOR UPDATE"), {"id": session_id}
            )
            yield
            await conn.rollback()
    finally:
        await engine.dispose()


async def test_a_held_lock_ends_in_storage_unavailable_within_the_budget(
    database: Database, session_id: str
) -> None:
    async with LedgerSessionStorage(database.url, retry_timeout=BUDGET, lock_timeout=LOCK_TIMEOUT) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="first")) == 1
        holding = _hold_lock(database, session_id)
        await anext(holding)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(StorageUnavailable) as caught:
                await asyncio.wait_for(
                    storage.append(session_id, "r", UserMessage(content="blocked")), UPPER_BOUND
                )
            elapsed = loop.time() - started
        finally:
            await anext(holding, None)
        assert elapsed < UPPER_BOUND
        assert not isinstance(caught.value, OutcomeUnknown)
        message = str(caught.value)
        assert f"retry_timeout={BUDGET:g} s" in message and "nothing from this call was committed" in message
        assert storage.ledger.retries >= 1  # lock waits were retried, not raised at once
        # Nothing was written, and the lock's release lets the next append through.
        assert await storage.count_messages(session_id) == 1
        assert await storage.append(session_id, "r", UserMessage(content="after")) == 2


def test_retry_options() -> None:
    options = LedgerOptions()
    assert 0 < options.retry_timeout < 60 and 0 < options.lock_timeout < options.retry_timeout
    with pytest.raises(ValueError, match="retry_timeout"):
        LedgerOptions(retry_attempts=3)
    with pytest.raises(ValueError):
        LedgerOptions(lock_timeout=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert LedgerOptions(sqlite_busy_timeout_ms=2500).lock_timeout == 2.5
    assert any(issubclass(warning.category, DeprecationWarning) for warning in caught)


async def test_lock_timeout_is_set_on_every_connection(database: Database) -> None:
    async with LedgerSessionStorage(database.url, lock_timeout=2.5) as storage:
        ledger = storage.ledger
        query = {
            "postgresql": "SHOW lock_timeout",
            "mysql": "SELECT @@SESSION.innodb_lock_wait_timeout",
            "sqlite": "PRAGMA busy_timeout",
        }[database.backend]
        value = await ledger.read(lambda conn: conn.scalar(text(query)))
        assert str(value) == {"postgresql": "2500ms", "mysql": "3", "sqlite": "2500"}[database.backend]
