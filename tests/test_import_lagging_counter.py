"""A zett session whose counter row is behind its messages (zett's own store numbered
them by ``MAX(sequence) + 1`` before revision 0007) is imported as it was exported, on
every backend: revision 0007's counter trigger (SQLite) moves the row along as the
messages go in, and the importer puts it back, so a re-import finds it identical."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import create_async_engine
from zett_agent.messages import UserMessage

from chatledger.migrate import upgrade_database
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import dsn_of, execute, fresh_database


async def _counter(url: URL) -> int:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return int(
                await conn.scalar(text("SELECT last_sequence FROM agent_sessions WHERE id = 'lagging'"))
            )
    finally:
        await engine.dispose()


async def test_a_lagging_counter_is_imported_as_exported(database: Database, tmp_path: Path) -> None:
    """A session whose counter row is behind its messages (zett's own store numbered them
    before revision 0007) is imported as it was exported, on every backend, and a
    re-import finds it identical: the trigger's move of the counter is put back."""
    async with (
        fresh_database(database, tmp_path, "source") as source,
        fresh_database(database, tmp_path, "target") as target,
    ):
        await upgrade_database(source)
        await upgrade_database(target)
        async with LedgerSessionStorage(source) as storage:
            for text in ("one", "two", "three"):
                await storage.append("lagging", "r", UserMessage(content=text))
        await execute(source, "UPDATE agent_sessions SET last_sequence = 1")
        exported = tmp_path / "lagging.jsonl"
        assert await run(["export", "--dsn", dsn_of(source), "-o", str(exported)]) == 0
        for _ in range(2):  # the second: identical, skipped
            assert await run(["import", "--dsn", dsn_of(target), str(exported)]) == 0
        assert await _counter(target) == 1
