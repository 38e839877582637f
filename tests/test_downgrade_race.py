"""A downgrade drops no acknowledged row: a write whose transaction is open while the
downgrade counts the rows of the tables it drops commits first and is counted (the
downgrade is refused, the row kept), on every backend.

The rows are counted under a lock that keeps writers out until the DROP
(each backend's ``drop_guard``, ``chatledger.dialects``): PostgreSQL's ``LOCK TABLE``, MySQL's ``LOCK
TABLES``, SQLite's ``BEGIN IMMEDIATE``. Each test holds a real write open across the
downgrade's start and commits it once the downgrade waits for it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import DowngradeRefused, SchemaNotReady
from chatledger.dialects import TRANSACTION_ENDED
from chatledger.migrate import database_revision, downgrade_database, upgrade_database
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.schema_helpers import fresh_database, on_connection, table_names

T = TypeVar("T")

#: A rein session row as revision 0001 has them: the smallest write to a dropped table.
REIN_ROW = (
    "INSERT INTO rein_sessions (id, version, session_json, created_at, updated_at) "
    "VALUES ('held-open', 1, '{}', '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
)

#: How another session sees a statement waiting for a table lock, per server.
LOCK_WAITS = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'",
    "mysql": "SELECT count(*) FROM information_schema.processlist "
    "WHERE db = DATABASE() AND state LIKE 'Waiting for table metadata lock%'",
}


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path, "race") as url:
        yield url


async def lock_waited_for(url: URL) -> bool:
    """Whether a statement on ``url``'s database comes to wait for a table lock within
    30 s. SQLite shows no waits: there, half a second (the downgrade's BEGIN IMMEDIATE
    waits for the write lock the whole time)."""
    query = LOCK_WAITS.get(url.get_backend_name())
    if query is None:
        await asyncio.sleep(0.5)
        return True
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            async with engine.connect() as conn:
                if await conn.scalar(text(query)):
                    return True
            await asyncio.sleep(0.1)
        return False
    finally:
        await engine.dispose()


def in_a_thread(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` on an event loop of its own, blocking the caller's (as a slow COMMIT
    would) until it is done."""
    result: list[T] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(work)))
    thread.start()
    thread.join()
    return result[0]


def downgrade_in_a_thread(url: URL, outcome: dict[str, object], **options: Any) -> threading.Thread:
    def run() -> None:
        try:
            outcome["reached"] = asyncio.run(downgrade_database(url, "base", **options))
        except Exception as error:
            outcome["error"] = error

    return threading.Thread(target=run)


async def contents(url: URL) -> list[str]:
    return await on_connection(
        url, lambda conn: list(conn.execute(text("SELECT content FROM raw_messages")).scalars())
    )


async def test_an_append_committing_during_the_downgrade_is_counted_and_kept(
    fresh_url: URL, backend: str, session_id: str
) -> None:
    """The review's case: the append has written its rows and is about to COMMIT when
    ``downgrade base`` starts; it commits (and is acknowledged) while the downgrade
    waits for its tables; the downgrade must then find its row and refuse."""
    await upgrade_database(fresh_url)
    outcome: dict[str, object] = {}
    downgrade = downgrade_in_a_thread(fresh_url, outcome)
    async with LedgerSessionStorage(fresh_url) as storage:
        await storage.ledger.ensure_ready()
        engine = storage.ledger.engine.sync_engine

        def slow_commit(conn: Connection) -> None:  # before the append's COMMIT is sent
            # Not the COMMIT after a statement that ended its own transaction (MySQL's
            # procedure that commits itself, which leaves a new session alone): it sends
            # nothing, and nothing is written yet.
            if downgrade.ident is None and not conn.info.get(TRANSACTION_ENDED):
                downgrade.start()
                outcome["waited"] = in_a_thread(lock_waited_for(fresh_url))

        event.listen(engine, "commit", slow_commit)
        try:
            sequence = await storage.append(session_id, "r", UserMessage(content="acknowledged"))
        finally:
            event.remove(engine, "commit", slow_commit)
    await asyncio.to_thread(downgrade.join, 120)

    assert sequence == 1 and outcome["waited"] is True
    refused = outcome.get("error")
    assert isinstance(refused, DowngradeRefused), outcome
    assert refused.tables == {"raw_messages": 1, "agent_sessions": 1}
    assert await contents(fresh_url) == ["acknowledged"]
    if not facts_of(backend).transactional_ddl:
        # Revision 0002's downgrade ran first (waiting for the append) and committed.
        assert "the database is at revision 0001 now" in str(refused)
        assert await database_revision(fresh_url) == "0001"
    else:
        assert "nothing was changed" in str(refused)
        async with LedgerSessionStorage(fresh_url) as storage:
            assert [r.message.text for r in (await storage.load(session_id)).raw_tail] == ["acknowledged"]


async def test_a_write_open_when_the_tables_are_locked_is_counted_and_kept(fresh_url: URL) -> None:
    """From revision 0001 (whose downgrade only drops tables) the lock is the downgrade's
    first wait: the write open at that moment commits, the count finds its row."""
    await upgrade_database(fresh_url, "0001")
    engine = create_async_engine(fresh_url, poolclass=NullPool)
    try:
        async with engine.connect() as writer:
            await writer.execute(text(REIN_ROW))
            task = asyncio.create_task(downgrade_database(fresh_url, "base"))
            assert await lock_waited_for(fresh_url)
            await writer.commit()
            with pytest.raises(DowngradeRefused, match="nothing was changed") as refused:
                await task
    finally:
        await engine.dispose()
    assert refused.value.tables == {"rein_sessions": 1}
    assert await database_revision(fresh_url) == "0001"
    assert "rein_sessions" in await on_connection(fresh_url, table_names)

    # Nothing stays locked: told to, the same downgrade drops the tables.
    assert await downgrade_database(fresh_url, "base", drop_rows=True, lock_timeout=10) is None
    assert "rein_sessions" not in await on_connection(fresh_url, table_names)


async def test_a_write_left_open_past_the_lock_timeout_stops_the_downgrade(
    fresh_url: URL, backend: str
) -> None:
    """The wait for the tables is bounded by the lock timeout; then nothing is dropped and
    the message says why (SQLite: the schema lock is the file's write lock)."""
    await upgrade_database(fresh_url, "0001")
    engine = create_async_engine(fresh_url, poolclass=NullPool)
    try:
        async with engine.connect() as writer:
            await writer.execute(text(REIN_ROW))
            with pytest.raises(SchemaNotReady) as busy:  # not waiting for the writer
                await asyncio.wait_for(
                    downgrade_database(fresh_url, "base", drop_rows=True, lock_timeout=1), 60
                )
            await writer.rollback()
    finally:
        await engine.dispose()
    message = str(busy.value)
    if facts_of(backend).file_write_lock:
        assert "schema lock" in message
    else:
        assert "waited 1 s to lock the tables the downgrade drops" in message
        assert "rein_sessions" in message and "nothing was dropped" in message
        assert "--lock-timeout" in message
    assert await database_revision(fresh_url) == "0001"
    assert {"agent_sessions", "raw_messages", "rein_sessions"} <= await on_connection(fresh_url, table_names)
