"""A tombstone purge committing while writers of the same id wait on it, on every
backend: the first append meets the purge's mark (``SessionDeleted``), a
``create_session`` numbers on from it, a rein save takes the next version. On
PostgreSQL the database defaults to REPEATABLE READ, where a write's snapshot taken
before the purge committed would hide the mark (the id numbered from 1 again): the
ledger writes at READ COMMITTED there."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rein import Message, Session
from sqlalchemy import Table, delete, select, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import SessionDeleted, marks
from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.schema import rein_sessions_table, sessions_table
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import fresh_database

#: How long the purge holds its transaction open once it has written the mark, in
#: seconds: the writer started meanwhile waits for it (if it starts later, it meets the
#: committed mark, and the test asserts the same).
HOLD = 0.5


@pytest.fixture
async def url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path, "purge_races") as fresh:
        if database.server is not None:
            await database.server.default_to_repeatable_read(fresh.database)
        await upgrade_database(fresh)
        yield fresh


async def held_purge(
    url: URL, table: Table, store: int, id: str, version: int, marked: asyncio.Event
) -> None:
    """The purge's own statements for ``id`` (tombstone deleted, mark written), its
    COMMIT held back for :data:`HOLD` seconds after ``marked`` is set."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            assert (await conn.execute(delete(table).where(table.c.id == id))).rowcount == 1
            await marks.raise_to(conn, store, id, 2 if store == marks.ZETT else 0, version, datetime.now(UTC))
            marked.set()
            await asyncio.sleep(HOLD)
    finally:
        await engine.dispose()


async def test_writers_waiting_on_a_purge_never_reuse_its_sequences_or_versions(url: URL) -> None:
    async with LedgerSessionStorage(url) as setup, LedgerSessionStorage(url) as writer:
        for session_id in ("appended", "created"):
            for text_ in ("1", "2"):
                await setup.append(session_id, "r", UserMessage(content=text_))
            assert await setup.delete_session(session_id)
        await writer.ledger.ensure_ready()
        if writer.ledger.backend.write_isolation_query is not None:
            level = await writer.ledger.write(lambda conn: conn.scalar(text("SHOW transaction_isolation")))
            assert level == "read committed"

        marked = asyncio.Event()
        purge = asyncio.create_task(held_purge(url, sessions_table, marks.ZETT, "appended", 2, marked))
        await marked.wait()
        with pytest.raises(SessionDeleted, match="tombstone since purged"):
            await writer.append("appended", "r", UserMessage(content="late"))
        await purge

        marked = asyncio.Event()
        purge = asyncio.create_task(held_purge(url, sessions_table, marks.ZETT, "created", 2, marked))
        await marked.wait()
        await writer.create_session(session_id="created")
        await purge
        assert await writer.append("created", "r", UserMessage(content="3")) == 3

    async with LedgerSessionStore(url) as setup_rein, LedgerSessionStore(url) as saver:
        await setup_rein.asave("r", Session(messages=[Message(role="user", content="one")]))
        assert await setup_rein.adelete("r")  # version 2
        assert await saver.aload("other") is None  # its schema check done
        marked = asyncio.Event()
        purge = asyncio.create_task(held_purge(url, rein_sessions_table, marks.REIN, "r", 2, marked))
        await marked.wait()
        await saver.asave("r", Session(messages=[Message(role="user", content="two")]))
        await purge
        saved = await saver.aload_versioned("r")
        assert saved is not None and saved.version == 3


@pytest.mark.requires("lock_wait_timeout")
async def test_two_purges_writing_marks_into_one_gap_do_not_wait_on_each_other(url: URL) -> None:
    """InnoDB: a locking read of a missing mark takes a gap lock, and a second purge's
    INSERT into that gap waits for the first to commit (two such purges deadlock). The
    mark's INSERT comes first, so the second purge commits while the first is open."""
    engine = create_async_engine(url, poolclass=NullPool)
    now = datetime.now(UTC)
    try:
        async with engine.connect() as first, engine.connect() as second:
            await second.execute(text("SET SESSION innodb_lock_wait_timeout = 1"))
            await second.commit()
            await first.begin()
            await marks.raise_to(first, marks.ZETT, "purged-first", 2, 2, now)
            async with second.begin():  # error 1205 here if it waited on the first
                await marks.raise_to(second, marks.ZETT, "purged-second", 3, 3, now)
            await marks.raise_to(first, marks.ZETT, "purged-first", 1, 5, now)  # raised, never lowered
            await first.commit()
            found = (await first.execute(text("SELECT last_sequence, version FROM high_water_marks"))).all()
            assert sorted(tuple(row) for row in found) == [(2, 5), (3, 3)]
    finally:
        await engine.dispose()


async def test_an_openai_add_or_adk_create_waiting_on_a_purge_numbers_on_from_its_mark(url: URL) -> None:
    """The add's counter ``UPDATE`` (the ADK create's revive ``UPDATE``, after its read
    found the tombstone) waits for the purge, then matches nothing: the mark it then
    takes carries the sequences and versions on."""
    from chatledger.adk import LedgerSessionService
    from chatledger.adk.rows import Key
    from chatledger.openai_agents import LedgerSession
    from chatledger.openai_agents.items import delete_session
    from chatledger.schema import adk_sessions_table, openai_items_table, openai_sessions_table
    from chatledger.testing.adk import event

    async with LedgerSessionService(url) as setup, LedgerSessionService(url) as writer:
        session = LedgerSession("o", ledger=setup.ledger)
        await session.add_items([{"role": "user", "content": "1"}, {"role": "user", "content": "2"}])
        assert await delete_session(setup.ledger, "o")  # last sequence 2, generation 2
        made = await setup.create_session(app_name="app", user_id="u", session_id="a")
        await setup.append_event(made, event("1"))
        await setup.delete_session(app_name="app", user_id="u", session_id="a")  # last 2, version 2
        await writer.ledger.ensure_ready()

        marked = asyncio.Event()
        engine = create_async_engine(url, poolclass=NullPool)

        async def held(table: Table, condition: Any, store: int, id: str) -> None:
            async with engine.begin() as conn:
                assert (await conn.execute(delete(table).where(condition))).rowcount == 1
                await marks.raise_to(conn, store, id, 2, 2, datetime.now(UTC))
                marked.set()
                await asyncio.sleep(HOLD)

        try:
            purge = asyncio.create_task(
                held(openai_sessions_table, openai_sessions_table.c.id == "o", marks.OPENAI, "o")
            )
            await marked.wait()
            await LedgerSession("o", ledger=writer.ledger).add_items([{"role": "user", "content": "3"}])
            await purge
            sequences = await writer.ledger.read(
                lambda conn: conn.scalars(
                    select(openai_items_table.c.sequence).where(openai_items_table.c.session_id == "o")
                )
            )
            assert list(sequences) == [3]

            marked.clear()
            key = Key("app", "u", "a")
            purge = asyncio.create_task(
                held(adk_sessions_table, key.session(), marks.ADK, marks.adk_id("app", "u", "a"))
            )
            await marked.wait()
            again = await writer.create_session(app_name="app", user_id="u", session_id="a")
            await purge
            await writer.append_event(again, event("2"))
            row = await writer.ledger.read(
                lambda conn: conn.execute(
                    select(adk_sessions_table.c.last_sequence, adk_sessions_table.c.state_version).where(
                        key.session()
                    )
                )
            )
            assert [tuple(found) for found in row] == [(3, 3)]
        finally:
            await engine.dispose()
