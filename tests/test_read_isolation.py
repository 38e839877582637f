"""Every read states its isolation, never inherits the server's default.

``load`` reads the session row (with its checkpoint) and then the raw-log tail. With
a server whose default is READ COMMITTED (``transaction_isolation=READ-COMMITTED`` on
MySQL/MariaDB, PostgreSQL's own default), each statement of a read would see the
latest commits: a session deleted and created anew between the two statements would
give the old checkpoint with the new session's messages. The store's connections
here default to READ COMMITTED (a per-connection setting, standing in for the
server's), and another writer deletes and recreates the session between the two
reads of one ``load``; the load must show the old session whole.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.util import await_only
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger.zett import LedgerSessionStorage

from .conftest import Database

#: Connect arguments making a connection's default isolation READ COMMITTED, per driver.
READ_COMMITTED: dict[str, dict[str, Any]] = {
    "asyncpg": {"server_settings": {"default_transaction_isolation": "read committed"}},
    "psycopg": {"options": r"-c default_transaction_isolation=read\ committed"},
    "aiomysql": {"init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"},
    "aiosqlite": {},  # no such setting: a deferred BEGIN reads one snapshot
}


async def test_load_reads_one_snapshot_under_a_read_committed_default(
    database: Database, session_id: str
) -> None:
    connect_args = READ_COMMITTED[database.url.get_driver_name()]
    async with (
        LedgerSessionStorage(database.url, connect_args=connect_args) as storage,
        LedgerSessionStorage(database.url) as writer,
    ):
        for index in range(1, 6):
            await storage.append(session_id, "r", UserMessage(content=f"old {index}"))
        await storage.snapshot(session_id, CompactedMessage(content="old 1-3"), 3, 0)

        async def recreate() -> None:
            await writer.delete_session(session_id)
            await writer.create_session(session_id=session_id, title="new")
            for index in range(1, 9):
                await writer.append(session_id, "r", UserMessage(content=f"new {index}"))

        interleaved = 0

        @event.listens_for(storage.ledger.engine.sync_engine, "after_cursor_execute")
        def _between_the_reads(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            nonlocal interleaved
            if not interleaved and "FROM agent_sessions LEFT OUTER JOIN session_snapshots" in statement:
                interleaved += 1
                await_only(recreate())  # the load's session read is done, its tail read not yet

        view = await storage.load(session_id)
        assert interleaved == 1
        assert view.snapshot is not None and view.snapshot.compacted_through_sequence == 3
        assert view.snapshot.compacted_message.content == "old 1-3"
        assert [record.message.content for record in view.raw_tail] == ["old 4", "old 5"]
        assert [record.sequence for record in view.raw_tail] == [4, 5]

        # The next load sees the new session, whole.
        view = await storage.load(session_id)
        assert view.snapshot is None and view.title == "new"
        assert [record.message.content for record in view.raw_tail] == [f"new {i}" for i in range(1, 9)]
