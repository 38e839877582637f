"""SQLite: the WAL file returns to a bounded size while the store stays open.

A reader held open keeps a checkpoint from copying the frames written after its
snapshot, so the WAL grows with every append meanwhile ("checkpoint starvation" in
SQLite's "Write-Ahead Logging"). Once the reader ends, the next commits checkpoint
and restart the WAL from its start; without ``journal_size_limit`` the file keeps its
grown size until the last connection closes (issue 17, fault 7: 45 MB beside an 8.5 MB
database).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger.migrate import upgrade_database
from chatledger.zett import LedgerSessionStorage

#: The bound: chatledger.dialects.SQLITE_WAL_LIMIT, as the README states it (8 MiB).
SQLITE_WAL_LIMIT = 8 * 1024 * 1024
#: Appends while the reader is held: each writes a few pages, so the WAL passes the limit.
HELD_APPENDS = 600
#: Appends after the reader ended: the first one's autocheckpoint copies every frame,
#: the next one restarts the WAL and cuts it back.
LATER_APPENDS = 3


def size(path: Path) -> int | None:
    """The file's size in bytes; ``None`` when there is none."""
    return path.stat().st_size if path.exists() else None


async def test_the_wal_is_bounded_once_a_long_reader_ends(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    url = URL.create("sqlite+aiosqlite", database=str(path))
    await upgrade_database(url)
    wal = Path(f"{path}-wal")
    async with LedgerSessionStorage(url) as storage:
        await storage.append("s", "r0", UserMessage(content="first"))
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            assert reader.execute("SELECT count(*) FROM raw_messages").fetchone() == (1,)
            for index in range(HELD_APPENDS):
                await storage.append("s", f"held-{index}", UserMessage(content="x" * 2000))
            grown = size(wal)
            # The reader kept every frame since its snapshot in the WAL.
            assert grown is not None and grown > 2 * SQLITE_WAL_LIMIT
            assert reader.execute("SELECT count(*) FROM raw_messages").fetchone() == (1,)
            reader.execute("COMMIT")
        finally:
            reader.close()
        for index in range(LATER_APPENDS):
            await storage.append("s", f"later-{index}", UserMessage(content="y"))
        bounded = size(wal)
        assert bounded is not None  # the store is still open: its connections keep the WAL
        assert bounded <= SQLITE_WAL_LIMIT
        tail = (await storage.load("s")).raw_tail
        assert [record.sequence for record in tail] == list(range(1, 2 + HELD_APPENDS + LATER_APPENDS))


async def test_store_connections_set_the_wal_limit(tmp_path: Path) -> None:
    url = URL.create("sqlite+aiosqlite", database=str(tmp_path / "ledger.sqlite3"))
    await upgrade_database(url)
    async with LedgerSessionStorage(url) as storage:
        limit = await storage.ledger.read(lambda conn: conn.scalar(text("PRAGMA journal_size_limit")))
    assert limit == SQLITE_WAL_LIMIT
