"""One zett storage used from successive event loops, on every backend.

asyncpg and aiomysql connections belong to the loop that opened them; the ledger
replaces its pool when the running loop changes (``Connections.bind_loop``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import SchemaNotReady
from chatledger.migrate import upgrade_database
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import fresh_name

REPLACED = "the event loop changed; replacing the connection pool"


@pytest.fixture(autouse=True)
def collect_abandoned_connections() -> Iterator[None]:
    """Collects the connections these tests leave to their ended loops while the test
    runs, where pytest reports what their drivers' finalizers say (aiomysql's raises
    "Event loop is closed"), rather than at some random later point."""
    yield
    gc.collect()


def test_successive_asyncio_runs(
    database: Database, session_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    storage = LedgerSessionStorage(database.url)
    caplog.set_level(logging.DEBUG, logger="chatledger")
    try:
        for turn in range(3):
            sequence = asyncio.run(storage.append(session_id, f"r{turn}", UserMessage(content=f"m{turn}")))
            assert sequence == turn + 1
            view = asyncio.run(storage.load(session_id))
            assert [record.sequence for record in view.raw_tail] == list(range(1, turn + 2))
    finally:
        asyncio.run(storage.close())
    # One DEBUG line per change of loop (five changes after the first loop), no more;
    # the close on yet another loop drops the pool without touching its connections.
    replaced = [record for record in caplog.records if REPLACED in record.getMessage()]
    assert len(replaced) == 5
    assert all(record.levelno == logging.DEBUG for record in replaced)


def test_calls_on_one_loop_keep_the_pool(database: Database, session_id: str) -> None:
    storage = LedgerSessionStorage(database.url)

    async def many() -> None:
        pool = storage.ledger.engine.pool
        await asyncio.gather(
            *(storage.append(session_id, f"r{n}", UserMessage(content=f"m{n}")) for n in range(10))
        )
        assert storage.ledger.engine.pool is pool
        await storage.close()

    asyncio.run(many())


def test_ready_check_per_loop(database: Database, tmp_path: Path, session_id: str) -> None:
    """A storage whose schema check failed on one loop checks again on the next, where
    concurrent first calls queue on a lock of that loop (``ensure_ready``'s locks
    are keyed by loop: a lock of the first loop would raise there)."""
    url = asyncio.run(empty_database(database, tmp_path))
    storage = LedgerSessionStorage(url, auto_upgrade=False)
    try:
        with pytest.raises(SchemaNotReady):
            asyncio.run(storage.load(session_id))
        asyncio.run(upgrade_database(url))

        async def first_calls() -> list[int]:
            return await asyncio.gather(
                *(storage.append(f"{session_id}-{n}", "r", UserMessage(content="m")) for n in range(5))
            )

        assert asyncio.run(first_calls()) == [1] * 5
        assert asyncio.run(first_calls()) == [2] * 5
    finally:
        asyncio.run(storage.close())
        if database.server is not None:
            asyncio.run(database.server.drop_database(url.database or ""))


async def empty_database(database: Database, tmp_path: Path) -> URL:
    """A new database of the same backend without chatledger's schema."""
    if database.server is None:
        return URL.create("sqlite+aiosqlite", database=str(tmp_path / f"{uuid.uuid4().hex}.sqlite3"))
    return await database.server.create_database(fresh_name())
