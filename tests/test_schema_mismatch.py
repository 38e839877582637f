"""A database whose schema lacks a table or column chatledger uses -- an older or
hand-made schema, or one changed by hand -- raises ``SchemaNotReady`` naming
``chatledger check``, never the driver's raw error, on every backend: SQLite ("no such
column", "table ... has no column named", "no such table"), PostgreSQL (42703
undefined_column, 42P01 undefined_table) and MySQL/MariaDB (1054, 1146).

Each test migrates a fresh database of its own to head and then breaks it, so the
revision check on first use passes and the failure comes from the statements
themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from rein import Session
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import SchemaNotReady
from chatledger.dsn import as_argument, resolve_dsn
from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import execute, fresh_database

pytestmark = pytest.mark.one_transaction_at_a_time


@pytest.fixture
async def migrated_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh database of the test's backend, migrated to head, dropped afterwards."""
    async with fresh_database(database, tmp_path, "mismatch") as url:
        await upgrade_database(url)
        yield url


async def refused(call: Callable[[], Awaitable[object]], missing: str, url: URL) -> None:
    """``call`` raises SchemaNotReady naming what to run on the database ``url``
    (password masked) and, in the server's words, what is missing."""
    with pytest.raises(SchemaNotReady) as raised:
        await call()
    message = str(raised.value)
    dsn = as_argument(resolve_dsn(url))
    assert f"`chatledger check --dsn {dsn}`" in message, message
    assert f"`chatledger upgrade --dsn {dsn}`" in message, message
    assert missing in message, message
    assert isinstance(raised.value, RuntimeError)
    assert isinstance(raised.value.__cause__, DBAPIError)  # kept as the cause, not raised


async def test_a_missing_session_column(migrated_url: URL, session_id: str) -> None:
    async with LedgerSessionStorage(migrated_url) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="before")) == 1
        await execute(migrated_url, "ALTER TABLE agent_sessions DROP COLUMN agent_name")

        for call in (
            lambda: storage.append(session_id, "r", UserMessage(content="never stored"), agent_name="a"),
            lambda: storage.load(session_id),
            lambda: storage.get_session(session_id),
            lambda: storage.list_sessions(),
            lambda: storage.create_session(),
            lambda: storage.update_session(session_id, title="never stored"),
            lambda: storage.delete_session(session_id),
        ):
            await refused(call, "agent_name", migrated_url)

        # The column back (as a repair would put it), the same storage goes on: it
        # checks the database again after such a failure.
        await execute(migrated_url, "ALTER TABLE agent_sessions ADD COLUMN agent_name VARCHAR(64)")
        assert await storage.append(session_id, "r", UserMessage(content="after"), agent_name="a") == 2
        summary = await storage.get_session(session_id)
        assert summary is not None and (summary.agent_name, summary.message_count) == ("a", 2)


async def test_a_missing_message_column(migrated_url: URL, session_id: str) -> None:
    async with LedgerSessionStorage(migrated_url) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="before")) == 1
        await execute(migrated_url, "ALTER TABLE raw_messages DROP COLUMN tags_json")

        await refused(
            lambda: storage.append(session_id, "r", UserMessage(content="never stored")),
            "tags_json",
            migrated_url,
        )
        await refused(lambda: storage.load(session_id), "tags_json", migrated_url)
        await refused(lambda: storage.list_raw_messages(session_id), "tags_json", migrated_url)
        # The refused append left nothing: its counter move was rolled back with it.
        assert await storage.count_messages(session_id) == 1


async def test_a_missing_table(migrated_url: URL, session_id: str) -> None:
    async with LedgerSessionStorage(migrated_url) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="before")) == 1
        await execute(migrated_url, "DROP TABLE session_snapshots")

        await refused(lambda: storage.load(session_id), "session_snapshots", migrated_url)
        await refused(
            lambda: storage.snapshot(session_id, CompactedMessage(content="summary"), 1, 0),
            "session_snapshots",
            migrated_url,
        )

    store = LedgerSessionStore(migrated_url)
    try:
        await store.asave("conversation", Session())
        await execute(migrated_url, "DROP TABLE rein_sessions")
        await refused(lambda: store.aload("conversation"), "rein_sessions", migrated_url)
        await refused(lambda: store.asave("conversation", Session()), "rein_sessions", migrated_url)
    finally:
        await store.aclose()
