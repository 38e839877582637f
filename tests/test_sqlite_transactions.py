"""SQLite: every transaction begins explicitly, and commits are durable by default.

* A write begins with ``BEGIN IMMEDIATE`` before its first statement, so a write that
  reads first and writes what it read is atomic: two ledgers (two connections)
  incrementing one counter by read-then-update lose no increment. (With sqlite3's
  own transaction handling the read ran before the transaction began.)
* A read begins with a deferred ``BEGIN``.
* ``synchronous`` is ``FULL`` by default (WAL), ``NORMAL`` on request.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text, update
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.messages import UserMessage

from chatledger.engine import Ledger
from chatledger.migrate import upgrade_database
from chatledger.schema import sessions_table
from chatledger.zett import LedgerSessionStorage


@pytest.fixture
async def sqlite_url(tmp_path: Path) -> URL:
    url = URL.create("sqlite+aiosqlite", database=str(tmp_path / "ledger.sqlite3"))
    await upgrade_database(url)
    return url


async def test_a_write_that_reads_first_is_atomic(sqlite_url: URL) -> None:
    async with LedgerSessionStorage(sqlite_url) as storage:
        await storage.create_session(session_id="counter", title="t")
    ledgers = [Ledger(sqlite_url), Ledger(sqlite_url)]

    async def increment(conn: AsyncConnection) -> None:
        current = await conn.scalar(
            select(sessions_table.c.fields_version).where(sessions_table.c.id == "counter")
        )
        await asyncio.sleep(0.01)  # the other ledger runs meanwhile
        await conn.execute(
            update(sessions_table).where(sessions_table.c.id == "counter").values(fields_version=current + 1)
        )

    async def worker(ledger: Ledger) -> None:
        for _ in range(10):
            await ledger.write(increment)

    try:
        await asyncio.wait_for(asyncio.gather(*(worker(ledger) for ledger in ledgers)), 60)
        version = await ledgers[0].read(
            lambda conn: conn.scalar(
                select(sessions_table.c.fields_version).where(sessions_table.c.id == "counter")
            )
        )
        assert version == 1 + 20
    finally:
        for ledger in ledgers:
            await ledger.close()


async def test_every_transaction_begins_explicitly(sqlite_url: URL) -> None:
    ledger = Ledger(sqlite_url)
    sent: list[str] = []

    @event.listens_for(ledger.engine.sync_engine, "before_cursor_execute")
    def _record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(
            statement.split()[0].upper()
            + (" " + statement.split()[1] if statement.startswith("BEGIN") else "")
        )

    try:
        await ledger.ensure_ready()
        sent.clear()
        await ledger.read(lambda conn: conn.scalar(text("SELECT 1")))
        assert sent == ["BEGIN DEFERRED", "SELECT"]
        sent.clear()
        await ledger.write(lambda conn: conn.scalar(text("SELECT 1")))
        assert sent == ["BEGIN IMMEDIATE", "SELECT"]
    finally:
        await ledger.close()


@pytest.mark.parametrize(("option", "pragma"), [(None, 2), ("FULL", 2), ("NORMAL", 1)])
async def test_synchronous_is_full_by_default(sqlite_url: URL, option: str | None, pragma: int) -> None:
    options = {} if option is None else {"sqlite_synchronous": option}
    ledger = Ledger(sqlite_url, **options)
    try:
        assert await ledger.read(lambda conn: conn.scalar(text("PRAGMA synchronous"))) == pragma
        assert await ledger.read(lambda conn: conn.scalar(text("PRAGMA journal_mode"))) == "wal"
    finally:
        await ledger.close()


def test_synchronous_accepts_only_full_or_normal() -> None:
    with pytest.raises(ValueError, match="sqlite_synchronous"):
        Ledger("sqlite:////tmp/never-opened.sqlite3", sqlite_synchronous="OFF")


async def test_the_append_is_begun_immediate_by_sqlite3(sqlite_url: URL) -> None:
    """The append sends no BEGIN of its own: sqlite3 sends ``BEGIN IMMEDIATE`` itself,
    right before the append's one INSERT (revision 0007: it reads the counter row and
    the trigger moves it), so the append holds the write lock before it reads the
    counter; every other write still begins explicitly (the test above)."""
    async with LedgerSessionStorage(sqlite_url) as storage:
        engine = storage.ledger.engine
        executed: list[str] = []  # as SQLite ran them, sqlite3's own included

        @event.listens_for(engine.sync_engine, "connect")
        def _trace(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.run_async(lambda driver: driver.set_trace_callback(executed.append))

        sent: list[str] = []

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            sent.append(statement)

        await storage.append("s", "r", UserMessage(content="first"))
        sent.clear()
        executed.clear()
        assert await storage.append("s", "r", UserMessage(content="second")) == 2
        assert not any(statement.startswith("BEGIN") for statement in sent)
        assert [statement.split()[0] for statement in sent] == ["INSERT"]
        # SQLite traces the one INSERT again as each of its trigger programs (revision
        # 0007's counter trigger, RETURNING) starts.
        assert executed[0] == "BEGIN IMMEDIATE" and executed[-1] == "COMMIT"
        assert executed[1:-1] and all(
            statement.startswith("INSERT INTO raw_messages") for statement in executed[1:-1]
        )
