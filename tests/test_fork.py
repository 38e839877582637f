"""Stores used before ``os.fork()`` work in the child and stay undisturbed in the parent.

The shape of gunicorn ``--preload`` and celery prefork: the parent uses a store, then
forks workers that use the same store object. The child must get its own loop and
connections; the parent must keep its own pooled connection (the same server
session before and after) -- the child neither uses nor closes it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest
from rein import Session
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.messages import UserMessage

from chatledger.engine import Ledger
from chatledger.rein import LedgerSessionStore
from chatledger.zett import LedgerSessionStorage

from .conftest import Database

#: Generous bound for "the child does not hang".
CHILD_WITHIN = 60.0
#: The server's id of the session a connection is, per backend (None for SQLite).
SESSION_ID_QUERY = {
    "sqlite": None,
    "postgresql": "SELECT pg_backend_pid()",
    "mysql": "SELECT CONNECTION_ID()",
}


@pytest.fixture
def conv_id() -> str:
    return f"fork-{uuid.uuid4()}"


@pytest.fixture
def rein_store(database: Database) -> Iterator[LedgerSessionStore]:
    with LedgerSessionStore(database.url) as opened:
        yield opened


async def server_session(ledger: Ledger, backend: str) -> int | None:
    """The server session of the connection the ledger's next call gets."""
    query = SESSION_ID_QUERY[backend]
    if query is None:
        return None

    async def work(conn: AsyncConnection) -> int:
        return int(await conn.scalar(text(query)))

    return await ledger.read(work)


def in_forked_child(child: Callable[[], Any]) -> Any:
    """Run ``child()`` in a forked process and return what it returned (or raise what it raised)."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(child, sender))
    process.start()
    sender.close()
    process.join(CHILD_WITHIN)
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"the forked child hung for {CHILD_WITHIN} s")
    assert receiver.poll(), f"the child exited with {process.exitcode} and sent nothing"
    outcome, value = receiver.recv()
    if outcome == "error":
        pytest.fail(f"the forked child failed: {value}")
    return value


def _child_main(child: Callable[[], Any], sender: Connection) -> None:
    try:
        sender.send(("ok", child()))
    except BaseException as error:
        sender.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        sender.close()
        os._exit(0)


def test_rein_store_in_a_forked_child(
    rein_store: LedgerSessionStore, database: Database, conv_id: str
) -> None:
    store = rein_store
    store.save(conv_id, Session(iteration=1))  # the loop thread and a pooled connection exist now
    parent_session = store._runner.call(server_session, store.ledger, database.backend)

    def child() -> dict[str, Any]:
        found = store.load_versioned(conv_id)
        store.save(conv_id, Session(iteration=2), expected_version=1)
        return {
            "loaded": None if found is None else found.version,
            "saved": store.load_versioned(conv_id) == (Session(iteration=2), 2),
            "session": store._runner.call(server_session, store.ledger, database.backend),
        }

    result = in_forked_child(child)
    assert result["loaded"] == 1
    assert result["saved"]
    # The parent's store goes on, on its own thread and with the same connection.
    assert store.load_versioned(conv_id) == (Session(iteration=2), 2)
    store.save(conv_id, Session(iteration=3), expected_version=2)
    assert store._runner.call(server_session, store.ledger, database.backend) == parent_session
    if parent_session is not None:
        assert result["session"] != parent_session


def test_rein_async_twins_in_a_forked_child(rein_store: LedgerSessionStore, conv_id: str) -> None:
    store = rein_store
    asyncio.run(store.asave(conv_id, Session(iteration=1)))

    def child() -> int | None:
        async def main() -> int | None:
            await store.asave(conv_id, Session(iteration=2))
            found = await store.aload_versioned(conv_id)
            return None if found is None else found.version

        return asyncio.run(main())

    assert in_forked_child(child) == 2
    assert asyncio.run(store.aload_versioned(conv_id)) == (Session(iteration=2), 2)


@pytest.mark.requires("fork_during_calls")
def test_fork_while_another_thread_calls(rein_store: LedgerSessionStore, conv_id: str) -> None:
    """A fork taken while other threads are inside the store's calls: the child must
    not inherit a lock or a call it would wait for forever."""
    import threading

    store = rein_store
    store.save(conv_id, Session())
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            store.load(conv_id)

    threads = [threading.Thread(target=busy) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):
            assert in_forked_child(lambda: store.load(conv_id) == Session())
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert store.load(conv_id) == Session()


def test_zett_storage_in_a_forked_child(database: Database, session_id: str) -> None:
    """The parent keeps one loop for its storage; the forked child runs its own."""
    loop = asyncio.new_event_loop()
    storage = LedgerSessionStorage(database.url)
    try:
        loop.run_until_complete(storage.append(session_id, "parent", UserMessage(content="one")))
        parent_session = loop.run_until_complete(server_session(storage.ledger, database.backend))

        def child() -> dict[str, Any]:
            async def main() -> dict[str, Any]:
                sequence = await storage.append(session_id, "child", UserMessage(content="two"))
                view = await storage.load(session_id)
                return {
                    "sequence": sequence,
                    "tail": [record.sequence for record in view.raw_tail],
                    "session": await server_session(storage.ledger, database.backend),
                }

            return asyncio.run(main())

        result = in_forked_child(child)
        assert result["sequence"] == 2
        assert result["tail"] == [1, 2]
        assert (
            loop.run_until_complete(storage.append(session_id, "parent", UserMessage(content="three"))) == 3
        )
        assert loop.run_until_complete(server_session(storage.ledger, database.backend)) == parent_session
        if parent_session is not None:
            assert result["session"] != parent_session
    finally:
        loop.run_until_complete(storage.close())
        loop.close()
