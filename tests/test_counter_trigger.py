"""Revision 0007's counter trigger (SQLite): the append in one statement, and every
other way a raw message is numbered kept gap-free beside it.

* Code of revision 0006, which moves the counter row itself and then inserts the
  message, appending concurrently with this code's one-statement append to the same
  sessions: every session's log runs 1, 2, 3... with its counter at the last.
* A trigger gone after the ledger's schema check found it (a downgrade while this code
  runs): the append sees it in its own statement and moves the counter itself.
* A schema without the trigger: the schema check keeps the counter upsert.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from zett_agent.messages import UserMessage

from chatledger.migrate import head_revision, upgrade_database
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.appends import gap_free, mix_old_and_new
from .support.schema_helpers import dsn_of, execute, fresh_database

pytestmark = pytest.mark.requires("counter_trigger")

SESSIONS = 3
APPENDS = 12  # per writer and session


async def test_old_and_new_appends_mixed_stay_gap_free(database: Database, tmp_path: Path) -> None:
    async with (
        fresh_database(database, tmp_path) as url,
        LedgerSessionStorage(url) as new,
        LedgerSessionStorage(url) as old,
    ):
        # Code of revision 0006: the counter upsert, then the insert.
        ids = [f"mixed-{number}" for number in range(SESSIONS)]
        await mix_old_and_new(new, old, ids, APPENDS, titled=False)
    assert await run(["check", "--dsn", dsn_of(url)]) == 0


async def test_a_trigger_dropped_after_the_check_is_not_trusted(database: Database, tmp_path: Path) -> None:
    async with fresh_database(database, tmp_path) as url, LedgerSessionStorage(url) as storage:
        assert await storage.append("dropped", "r", UserMessage(content="one")) == 1
        assert await storage.append("dropped", "r", UserMessage(content="two")) == 2
        assert storage.ledger.append_message is storage.ledger.backend.counted_append
        await execute(url, "DROP TRIGGER raw_messages_counter")
        for sequence in (3, 4, 5):
            assert await storage.append("dropped", "r", UserMessage(content="more")) == sequence
        await gap_free(storage, "dropped", 5)


async def test_a_schema_without_the_trigger_keeps_the_counter_upsert(
    database: Database, tmp_path: Path
) -> None:
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await execute(url, "DROP TRIGGER raw_messages_counter")
        async with LedgerSessionStorage(url) as storage:
            for sequence in (1, 2, 3):
                assert await storage.append("without", "r", UserMessage(content="m")) == sequence
            assert storage.ledger.append_message is storage.ledger.backend.append_message
            await gap_free(storage, "without", 3)
