"""Cancelled calls end promptly, roll back and give their connection back, on every backend.

The storm: 60 concurrent writes, each cancelled after a random 0-10 ms. Afterwards
nothing may stay checked out of the pool, and another process's write must go
through well within SQLite's 30 s busy timeout.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from rein import Session
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import dialects
from chatledger.rein import LedgerSessionStore
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import driver_facts, facts_of

CALLS = 60
#: Generous bounds for "does not hang"; SQLite's busy timeout is 30 s.
SETTLE_WITHIN = 10.0
OTHER_PROCESS_WITHIN = 10.0

OTHER_PROCESS_APPEND = """
import asyncio, os, sys, time
from zett_agent.messages import UserMessage
from chatledger.zett import LedgerSessionStorage

async def main():
    async with LedgerSessionStorage(os.environ["DSN"]) as storage:
        started = time.monotonic()
        await storage.append(os.environ["SESSION_ID"], "other", UserMessage(content="from another process"))
        print(time.monotonic() - started)

asyncio.run(main())
"""


def dsn_of(database: Database) -> str:
    return database.url.render_as_string(hide_password=False)


async def storm(start: Callable[[int], Awaitable[Any]]) -> list[asyncio.Task[Any]]:
    """Start ``CALLS`` calls at once and cancel each after a random 0-10 ms."""
    tasks = [asyncio.create_task(start(n)) for n in range(CALLS)]
    for task in tasks:
        await asyncio.sleep(random.uniform(0, 0.010))
        task.cancel()
    return tasks  # kept referenced, as a caller would: their tracebacks stay alive


async def settled(tasks: list[asyncio.Task[Any]], engine: AsyncEngine) -> None:
    """All calls ended and the pool has nothing checked out, within ``SETTLE_WITHIN``."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while time.monotonic() < deadline:
        if all(task.done() for task in tasks) and engine.pool.checkedout() == 0:
            return
        await asyncio.sleep(0.05)
    running = sum(not task.done() for task in tasks)
    pytest.fail(
        f"{SETTLE_WITHIN} s after the cancellations {running} calls still run; pool: {engine.pool.status()}"
    )


async def other_process_appends(database: Database, session_id: str) -> None:
    env = {**os.environ, "DSN": dsn_of(database), "SESSION_ID": session_id}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", OTHER_PROCESS_APPEND],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) < OTHER_PROCESS_WITHIN


@pytest.fixture
def ledger_store(database: Database) -> Iterator[LedgerSessionStore]:
    with LedgerSessionStore(database.url) as opened:
        yield opened


async def test_cancelled_appends_release_connections_and_locks(
    storage: LedgerSessionStorage, database: Database, session_id: str
) -> None:
    await storage.append(session_id, "first", UserMessage(content="before the storm"))
    sessions = [f"{session_id}-{k}" for k in range(5)]
    tasks = await storm(lambda n: storage.append(sessions[n % 5], f"r{n}", UserMessage(content=f"m{n}")))
    await settled(tasks, storage.ledger.engine)
    await other_process_appends(database, session_id)
    assert await storage.count_messages(session_id) == 2
    # Each cancelled append rolled back whole: no counter advanced without its message.
    # (One cancelled during its COMMIT may still have committed, so the total is a bound.)
    total = 0
    for each in sessions:
        count = await storage.count_messages(each)
        records = await storage.list_raw_messages(each)
        assert [record.sequence for record in records] == list(range(1, count + 1))
        total += count
    assert sum(not task.cancelled() for task in tasks) <= total <= CALLS


async def test_cancelled_loads_release_connections(storage: LedgerSessionStorage, session_id: str) -> None:
    """Reads state their isolation on their connection (psycopg sets it by awaiting):
    one cancelled while it is set gives its connection back too. Three storms, each
    on new connections."""
    await storage.append(session_id, "first", UserMessage(content="to read"))
    for _storm in range(3):
        await storage.ledger.engine.dispose()
        tasks = await storm(lambda n: storage.load(session_id))
        await settled(tasks, storage.ledger.engine)
    assert (await storage.load(session_id)).raw_tail[0].message.content == "to read"


async def test_cancelled_rein_twins_release_connections_and_locks(
    ledger_store: LedgerSessionStore, database: Database, session_id: str
) -> None:
    ids = [f"{session_id}-{k}" for k in range(5)]
    tasks = await storm(lambda n: ledger_store.asave(ids[n % 5], Session(iteration=n)))
    await settled(tasks, ledger_store.ledger.engine)
    assert not ledger_store._runner._running  # no call left on the store's loop
    await other_process_appends(database, session_id)
    versions = [await ledger_store.aload_versioned(each) for each in ids]
    saved = sum(found.version for found in versions if found is not None)
    assert sum(not task.cancelled() for task in tasks) <= saved <= CALLS


@pytest.mark.requires("insert_returning")
async def test_plain_sqlalchemy_insert_returning_storm(database: Database, session_id: str) -> None:
    """The cause sits below chatledger, where SQLAlchemy's aiosqlite adapter meets a
    cancellation: a bare engine with chatledger's listeners settles too. (Without
    :func:`chatledger.dialects.release_cancelled_statements`, SQLite's
    :attr:`~chatledger.dialects.Backend.add_listeners`, an ``INSERT .. RETURNING``
    cancelled before its row is fetched strands SQLite's write lock.)"""
    timeout = driver_facts(database.url.get_driver_name()).timeout_argument
    engine = create_async_engine(database.url, connect_args={timeout: 30})
    dialects.backend(engine.dialect.name, engine.dialect.driver).add_listeners(engine)
    table = f"cancel_probe_{uuid.uuid4().hex[:8]}"
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"CREATE TABLE {table} (n INTEGER)"))

        async def insert(n: int) -> None:
            async with engine.begin() as conn:
                await conn.execute(text(f"INSERT INTO {table} (n) VALUES (:n) RETURNING n"), {"n": n})

        await settled(await storm(insert), engine)
        await other_process_appends(database, session_id)
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        await engine.dispose()


async def test_cancelled_twin_rolls_back(
    ledger_store: LedgerSessionStore, database: Database, session_id: str
) -> None:
    """A twin cancelled while its save waits for a row lock writes nothing, and the
    store goes on working.

    The lock is released right after the cancel: a SQLite statement already waiting
    for the write lock cannot be interrupted (``sqlite3_interrupt`` does not end a
    busy wait), so there the cancelled call ends once its statement does.
    """
    await ledger_store.asave(session_id, Session(iteration=1))
    blocker = create_async_engine(database.url, poolclass=NullPool)
    try:
        async with blocker.connect() as conn:
            await lock_row(conn, database.backend, session_id)
            task = asyncio.create_task(ledger_store.asave(session_id, Session(iteration=2)))
            await asyncio.sleep(0.5)  # the save now waits for the lock
            assert not task.done()
            task.cancel()
            await asyncio.sleep(0.1)
            await conn.rollback()
        done, _ = await asyncio.wait({task}, timeout=SETTLE_WITHIN)
        assert done == {task}
        assert task.cancelled()
        assert not ledger_store._runner._running
    finally:
        await blocker.dispose()
    await settled([task], ledger_store.ledger.engine)
    found = await ledger_store.aload_versioned(session_id)
    assert found is not None
    assert (found.session.iteration, found.version) == (1, 1)
    await ledger_store.asave(session_id, Session(iteration=3))
    assert await ledger_store.aload_versioned(session_id) == (Session(iteration=3), 2)


async def lock_row(conn: AsyncConnection, backend: str, session_id: str) -> None:
    """Hold the write lock a save of ``session_id`` needs, in ``conn``'s open transaction."""
    if facts_of(backend).file_write_lock:
        await conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        await conn.execute(
            text("SELECT version FROM rein_sessions WHERE id = :id FOR UPDATE"), {"id": session_id}
        )


async def test_close_cancels_running_calls(database: Database, session_id: str) -> None:
    """Closing a store cancels the calls still running (their transactions roll back);
    their callers get ``RuntimeError``, later calls too."""
    store = LedgerSessionStore(database.url)
    await store.asave(session_id, Session(iteration=1))
    blocker = create_async_engine(database.url, poolclass=NullPool)
    try:
        async with blocker.connect() as conn:
            await lock_row(conn, database.backend, session_id)
            saving = asyncio.create_task(asyncio.to_thread(store.save, session_id, Session(iteration=2)))
            await asyncio.sleep(0.5)  # the save now waits for the lock
            closing = asyncio.create_task(store.aclose())
            await asyncio.sleep(0.1)
            await conn.rollback()  # (a SQLite busy wait ends only with the lock, see above)
        done, _ = await asyncio.wait({saving, closing}, timeout=SETTLE_WITHIN)
        assert done == {saving, closing}
        with pytest.raises(RuntimeError, match="closed while the call ran"):
            saving.result()
        with pytest.raises(RuntimeError, match="closed"):
            await store.aload(session_id)
    finally:
        await blocker.dispose()
    async with LedgerSessionStore(database.url) as reopened:
        assert await reopened.aload_versioned(session_id) == (Session(iteration=1), 1)
