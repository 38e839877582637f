"""chatledger.rein.LedgerSessionStore on every backend, driven by rein's MockProvider.

The conformance suite of rein's ``SessionStore`` (:mod:`chatledger.testing.rein`) runs
here (:class:`TestReinContract`); the tests below add what only chatledger promises:
versions, async twins, limits, listing and the write log."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
import rein
from rein import Agent, LoopConfig, MockProvider, Session, SlidingWindow, SummarizeCompaction, ToolCall, Usage
from sqlalchemy import insert, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import VersionConflict
from chatledger.dsn import resolve_dsn
from chatledger.rein import LedgerSessionStore, ReinSessionInfo, VersionedSession
from chatledger.rein.store import WRITE_LOG_PRUNE_EVERY, WRITE_LOG_RETENTION, _save_identity
from chatledger.schema import rein_sessions_table
from chatledger.schema import rein_writes_table as writes
from chatledger.testing import ReinStoreContract
from chatledger.testing.rein import tool_agent
from chatledger.zett import LedgerSessionStorage

from .conftest import Database


@pytest.fixture
def store(database: Database) -> Iterator[LedgerSessionStore]:
    with LedgerSessionStore(database.url) as opened:
        yield opened


@pytest.fixture
def conv_id() -> str:
    return f"rein-{uuid.uuid4()}"


def dsn_of(database: Database) -> str:
    return database.url.render_as_string(hide_password=False)


class TestReinContract(ReinStoreContract):
    """The conformance suite on chatledger's store, on every target (the ``store`` above)."""


# -- the protocol and the three-line usage ----------------------------------------------


def test_satisfies_rein_protocol(store: LedgerSessionStore, conv_id: str) -> None:
    assert isinstance(store, rein.SessionStore)
    assert store.load(conv_id) is None
    assert store.load_versioned(conv_id) is None
    assert conv_id not in store
    assert store.delete(conv_id) is False  # missing is not an error, as in MemorySessionStore
    store.save(conv_id, Session())
    assert conv_id in store
    assert store.load(conv_id) == Session()
    assert store.delete(conv_id) is True
    assert conv_id not in store
    assert store.load(conv_id) is None


def test_three_line_usage_between_chat_sends(store: LedgerSessionStore, conv_id: str) -> None:
    """Each chat.send runs its own asyncio.run; the store keeps working between them."""
    agent = Agent(provider=MockProvider(["Hello!", "Still here."]), system="Be brief.")
    for message in ("hi", "are you there?"):
        chat = agent.chat(session=store.load(conv_id))
        chat.send(message)
        store.save(conv_id, chat.session)
    found = store.load_versioned(conv_id)
    assert found is not None
    assert found.version == 2
    assert [(m.role, m.content) for m in found.session.messages] == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "Hello!"),
        ("user", "are you there?"),
        ("assistant", "Still here."),
    ]
    assert found.session == chat.session


README_SCRIPT = """
import os
from rein import Agent, MockProvider
from chatledger.rein import LedgerSessionStore

agent = Agent(provider=MockProvider(["Hello!"]))
conv_id = os.environ["CONV_ID"]

with LedgerSessionStore(os.environ["DSN"]) as store:
    chat = agent.chat(session=store.load(conv_id))
    chat.send("Hi there")
    store.save(conv_id, chat.session)
    print(store.load_versioned(conv_id).version, len(chat.session.messages))
"""


def test_plain_script(database: Database, store: LedgerSessionStore, conv_id: str) -> None:
    """The README's usage from a plain script, twice: the second run continues the first."""
    env = {**os.environ, "DSN": dsn_of(database), "CONV_ID": conv_id}
    outputs = [
        subprocess.run(
            [sys.executable, "-c", README_SCRIPT], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert outputs == [["1", "2"], ["2", "4"]]
    loaded = store.load(conv_id)
    assert loaded is not None
    assert [m.content for m in loaded.messages] == ["Hi there", "Hello!", "Hi there", "Hello!"]


async def test_sync_calls_inside_a_running_loop(store: LedgerSessionStore, conv_id: str) -> None:
    agent = Agent(provider=MockProvider(["first", "second"]))
    chat = agent.chat(session=store.load(conv_id))
    await chat.asend("one")
    store.save(conv_id, chat.session)  # blocks this loop for one round trip, and works
    chat = agent.chat(session=await store.aload(conv_id))
    await chat.asend("two")
    await store.asave(conv_id, chat.session)
    assert store.load(conv_id) == chat.session
    assert await store.aload(conv_id) == chat.session
    assert (await store.aload_versioned(conv_id)) == VersionedSession(chat.session, 2)
    assert await store.acontains(conv_id)
    assert await store.adelete(conv_id) is True
    assert await store.adelete(conv_id) is False
    assert not await store.acontains(conv_id)


async def test_async_twins_do_not_block_the_callers_loop(store: LedgerSessionStore, conv_id: str) -> None:
    store.save(conv_id, Session())
    task = asyncio.create_task(store.aload(conv_id))
    await asyncio.sleep(0)
    # The task has started its call; a blocking implementation would have finished it.
    assert not task.done()
    assert await task == Session()


def test_async_twins_from_loops_that_end(store: LedgerSessionStore, conv_id: str) -> None:
    """No connection is bound to a caller's loop: each asyncio.run below ends its loop."""
    for turn in range(3):
        asyncio.run(store.asave(conv_id, Session(iteration=turn)))
        assert asyncio.run(store.aload(conv_id)) == Session(iteration=turn)
    assert store.load_versioned(conv_id) == VersionedSession(Session(iteration=2), 3)


def test_many_threads(store: LedgerSessionStore, conv_id: str) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda turn: store.save(conv_id, Session(iteration=turn)), range(24)))
    found = store.load_versioned(conv_id)
    assert found is not None
    assert found.version == 24


# -- versioning ----------------------------------------------------------------------------


def test_every_save_bumps_the_version(store: LedgerSessionStore, conv_id: str) -> None:
    for version in (1, 2, 3):
        store.save(conv_id, Session(iteration=version))
        assert store.load_versioned(conv_id) == VersionedSession(Session(iteration=version), version)


def test_compare_and_set(store: LedgerSessionStore, conv_id: str) -> None:
    with pytest.raises(VersionConflict, match="does not exist"):
        store.save(conv_id, Session(), expected_version=1)
    assert conv_id not in store

    store.save(conv_id, Session(iteration=1), expected_version=0)  # 0: must not exist yet
    with pytest.raises(VersionConflict, match="at version 1, not 0"):
        store.save(conv_id, Session(iteration=99), expected_version=0)

    found = store.load_versioned(conv_id)
    assert found == VersionedSession(Session(iteration=1), 1)
    store.save(conv_id, Session(iteration=2), expected_version=found.version)
    # A second writer still holding version 1 is refused, as a ValueError.
    with pytest.raises(ValueError, match="at version 2, not 1") as refused:
        store.save(conv_id, Session(iteration=99), expected_version=1)
    assert isinstance(refused.value, VersionConflict)
    assert store.load_versioned(conv_id) == VersionedSession(Session(iteration=2), 2)

    # A plain save stays last-writer-wins, and bumps the version too.
    store.save(conv_id, Session(iteration=3))
    store.save(conv_id, Session(iteration=4), expected_version=3)
    assert store.load_versioned(conv_id) == VersionedSession(Session(iteration=4), 4)

    store.delete(conv_id)
    with pytest.raises(VersionConflict, match="does not exist"):
        store.save(conv_id, Session(), expected_version=4)


async def test_concurrent_compare_and_set_has_one_winner(store: LedgerSessionStore, conv_id: str) -> None:
    await store.asave(conv_id, Session())
    results = await asyncio.gather(
        *(store.asave(conv_id, Session(iteration=n), expected_version=1) for n in range(10)),
        return_exceptions=True,
    )
    assert sum(result is None for result in results) == 1
    assert all(isinstance(result, VersionConflict) for result in results if result is not None)
    found = await store.aload_versioned(conv_id)
    assert found is not None
    assert found.version == 2
    assert found.session.iteration == results.index(None)


async def test_concurrent_creates_have_one_winner(store: LedgerSessionStore, conv_id: str) -> None:
    results = await asyncio.gather(
        *(store.asave(conv_id, Session(iteration=n), expected_version=0) for n in range(10)),
        return_exceptions=True,
    )
    assert sum(result is None for result in results) == 1
    assert all(isinstance(result, VersionConflict) for result in results if result is not None)
    assert store.load_versioned(conv_id) == VersionedSession(Session(iteration=results.index(None)), 1)


async def test_concurrent_first_saves_never_collide(store: LedgerSessionStore, conv_id: str) -> None:
    """Plain saves upsert: ten first saves of one new id all succeed (no duplicate key)."""
    await asyncio.gather(*(store.asave(conv_id, Session(iteration=n)) for n in range(10)))
    found = await store.aload_versioned(conv_id)
    assert found is not None
    assert found.version == 10


@pytest.mark.parametrize("expected", [-1, True, "1", 1.0])
def test_bad_expected_version(store: LedgerSessionStore, conv_id: str, expected: Any) -> None:
    error = ValueError if expected == -1 and not isinstance(expected, bool) else TypeError
    with pytest.raises(error, match="expected_version"):
        store.save(conv_id, Session(), expected_version=expected)
    assert conv_id not in store


# -- round trips -----------------------------------------------------------------------------


async def test_tool_calls_usage_and_stop_reason_round_trip(store: LedgerSessionStore, conv_id: str) -> None:
    chat = tool_agent().chat(session=await store.aload(conv_id))
    result = await chat.asend("What is 1 + 2?")
    assert result.output == "1 + 2 = 3"
    await store.asave(conv_id, chat.session)
    loaded = await store.aload(conv_id)
    assert loaded == chat.session
    assert loaded is not None
    assert [m.role for m in loaded.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert loaded.messages[2].tool_calls == [ToolCall(id="call-1", name="add", arguments={"a": 1, "b": 2})]
    assert loaded.messages[3].tool_call_id == "call-1"
    assert loaded.usage == Usage(input_tokens=14, output_tokens=6, cost_usd=0.25)
    assert loaded.stop_reason == "done"


async def test_circuit_stop_reason_round_trip(store: LedgerSessionStore, conv_id: str) -> None:
    chat = tool_agent(config=LoopConfig(max_iterations=1)).chat()
    result = await chat.asend("What is 1 + 2?")
    assert result.stop_reason == "max_iterations"
    await store.asave(conv_id, chat.session)
    assert await store.aload(conv_id) == chat.session


@pytest.mark.parametrize(
    "compaction",
    [SlidingWindow(max_messages=3), SummarizeCompaction(max_tokens=20, keep_recent=2)],
    ids=["sliding-window", "summarize"],
)
async def test_compacted_sessions_round_trip(
    store: LedgerSessionStore, conv_id: str, compaction: Any
) -> None:
    replies = [f"reply number {n}, with some words to count" for n in range(6)]
    agent = Agent(provider=MockProvider(replies), system="system prompt", compaction=compaction)
    for turn in range(6):
        chat = agent.chat(session=await store.aload(conv_id))
        await chat.asend(f"question number {turn}, also with a few words")
        await store.asave(conv_id, chat.session)
        assert await store.aload(conv_id) == chat.session
    # Compaction ran: the history is shorter than twelve turns plus the system prompt.
    assert len(chat.session.messages) < 13
    assert chat.session.messages[0].content == "system prompt"
    if isinstance(compaction, SummarizeCompaction):
        assert any(m.content.startswith("[历史摘要]") for m in chat.session.messages)


def test_too_large_for_the_server_is_refused(store: LedgerSessionStore, conv_id: str) -> None:
    """Checked against the server's statement limit (MySQL's max_allowed_packet) before sending."""
    store.save(conv_id, Session())  # reads the server's limit
    assert store.ledger.statement_limit >= 1_000_000
    store.ledger.statement_limit = 10_000  # stand-in for a small max_allowed_packet
    big = Session(messages=[rein.Message(role="user", content="x" * 20_000)])
    with pytest.raises(ValueError, match="session is too large"):
        store.save(conv_id, big)
    with pytest.raises(ValueError, match="session is too large"):
        store.save(conv_id, big, expected_version=1)
    assert store.load_versioned(conv_id) == VersionedSession(Session(), 1)


# -- ids, corrupt rows, listing --------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_id", "error"),
    [("", ValueError), ("   ", ValueError), ("\t\n", ValueError), ("x" * 256, ValueError),
     ("a\x00b", ValueError), (None, TypeError), (42, TypeError)],
)  # fmt: skip
async def test_bad_ids_are_refused(store: LedgerSessionStore, bad_id: Any, error: type[Exception]) -> None:
    before = store.list_sessions(limit=1)
    calls = [
        lambda: store.save(bad_id, Session()),
        lambda: store.save(bad_id, Session(), expected_version=0),
        lambda: store.load(bad_id),
        lambda: store.load_versioned(bad_id),
        lambda: store.delete(bad_id),
        lambda: bad_id in store,
    ]
    for call in calls:
        with pytest.raises(error, match="id"):
            call()
    for acall in (store.asave(bad_id, Session()), store.aload(bad_id), store.adelete(bad_id)):
        with pytest.raises(error, match="id"):
            await acall
    assert store.list_sessions(limit=1) == before


def test_not_a_session_is_refused(store: LedgerSessionStore, conv_id: str) -> None:
    for bad in (None, {"messages": []}, Session().model_dump_json()):
        with pytest.raises(TypeError, match=r"session must be a rein\.Session"):
            store.save(conv_id, bad)  # type: ignore[arg-type]
    assert conv_id not in store


@pytest.mark.parametrize("stored", ["{not json", '{"messages": 5}', "[]"])
async def test_corrupt_json_names_the_id(
    database: Database, store: LedgerSessionStore, conv_id: str, stored: str
) -> None:
    engine = create_async_engine(database.url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            now = datetime.now(UTC)
            await conn.execute(
                insert(rein_sessions_table).values(
                    id=conv_id, version=1, session_json=stored, created_at=now, updated_at=now
                )
            )
    finally:
        await engine.dispose()
    with pytest.raises(ValueError, match=f"rein session '{conv_id}'"):
        store.load(conv_id)
    with pytest.raises(ValueError, match=f"rein session '{conv_id}'"):
        await store.aload_versioned(conv_id)
    assert conv_id in store
    assert store.list_sessions(limit=1)[0].id == conv_id
    store.save(conv_id, Session())  # a good save repairs it
    assert store.load_versioned(conv_id) == VersionedSession(Session(), 2)


async def test_list_sessions_newest_first(store: LedgerSessionStore, conv_id: str) -> None:
    a, b, c = (f"{conv_id}-{name}" for name in "abc")
    for each in (a, b, c):
        store.save(each, Session())
    assert [info.id for info in store.list_sessions(limit=3)] == [c, b, a]
    store.save(a, Session(iteration=1))
    page = store.list_sessions(3)
    assert [info.id for info in page] == [a, c, b]
    assert [info.version for info in page] == [2, 1, 1]
    assert [info.id for info in store.list_sessions(limit=2, offset=1)] == [c, b]
    assert await store.alist_sessions(limit=3) == page
    newest = page[0]
    assert isinstance(newest, ReinSessionInfo)
    assert newest.created_at.tzinfo is not None
    assert newest.created_at < newest.updated_at
    assert page[1].created_at == page[1].updated_at
    assert len(store.list_sessions()) <= 100


@pytest.mark.parametrize(
    ("limit", "offset", "error"),
    [(0, 0, ValueError), (-1, 0, ValueError), (1, -1, ValueError), ("5", 0, TypeError), (1, None, TypeError)],
)
def test_list_sessions_validates_paging(
    store: LedgerSessionStore, limit: Any, offset: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="limit" if limit in (0, -1, "5") else "offset"):
        store.list_sessions(limit, offset)


async def test_shares_the_database_with_zett(
    storage: LedgerSessionStorage, store: LedgerSessionStore, conv_id: str
) -> None:
    """The same id in the zett tables and in rein_sessions: two independent sessions."""
    await storage.append(conv_id, "r1", UserMessage(content="zett side"))
    await store.asave(conv_id, Session(iteration=5))
    assert [record.sequence for record in (await storage.load(conv_id)).raw_tail] == [1]
    assert await store.aload(conv_id) == Session(iteration=5)
    await store.adelete(conv_id)
    assert await storage.count_messages(conv_id) == 1


# -- DSN, options, lifecycle -------------------------------------------------------------------


def test_dsn_rules(database: Database, monkeypatch: pytest.MonkeyPatch, conv_id: str) -> None:
    monkeypatch.setenv("CHATLEDGER_DSN", dsn_of(database))
    with LedgerSessionStore() as from_env:
        assert from_env.url == resolve_dsn(database.url)
        from_env.save(conv_id, Session())
    with LedgerSessionStore(dsn_of(database), pool_size=2, retry_timeout=3) as from_dsn:
        assert from_dsn.load(conv_id) == Session()
        from_dsn.delete(conv_id)
    with pytest.raises(ValueError, match="not supported"):
        LedgerSessionStore("oracle://somewhere/db")
    with pytest.raises(ValueError, match="pool_sise"):
        LedgerSessionStore(dsn_of(database), pool_sise=3)
    secret = LedgerSessionStore(URL.create("postgresql", "app", "s3cret", "db.invalid", database="chat"))
    assert "s3cret" not in repr(secret)
    secret.close()


def test_close(database: Database, conv_id: str) -> None:
    with LedgerSessionStore(database.url) as store:
        assert store._runner.thread is None  # nothing runs before the first call
        store.save(conv_id, Session())
        thread = store._runner.thread
        assert thread is not None
        assert thread.is_alive()
    assert not thread.is_alive()
    store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        store.load(conv_id)
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(store.aload(conv_id))
    LedgerSessionStore(database.url).close()  # never used: nothing to stop


async def test_async_context_manager(database: Database, conv_id: str) -> None:
    async with LedgerSessionStore(database.url) as store:
        await store.asave(conv_id, Session())
        thread = store._runner.thread
        assert thread is not None
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        await store.aload(conv_id)


def test_unclosed_store_is_cleaned_up(database: Database, conv_id: str) -> None:
    store = LedgerSessionStore(database.url)
    store.save(conv_id, Session())
    thread = store._runner.thread
    assert thread is not None
    del store  # the finalizer disposes of the pool and stops the thread
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert not any(t is thread for t in threading.enumerate())


# -- the write log (rein_writes, revision 0004): a save settles after later writes ----------


def _logged(store: LedgerSessionStore, conv_id: str) -> list[tuple[str, int]]:
    """The write log's entries of ``conv_id``: (write id, version), oldest first."""

    async def read(conn: Any) -> list[tuple[str, int]]:
        rows = await conn.execute(
            select(writes.c.write_id, writes.c.version)
            .where(writes.c.session_id == conv_id)
            .order_by(writes.c.version)
        )
        return [(row.write_id, row.version) for row in rows]

    async def work() -> list[tuple[str, int]]:
        return await store.ledger.read(read)

    return store._runner.call(work)


def _settled(store: LedgerSessionStore, write_id: str) -> int | None:
    async def work() -> int | None:
        return await store.ledger.read(_save_identity(write_id).settle)

    return store._runner.call(work)


def test_a_save_settles_to_its_own_version_after_later_saves_and_a_delete(
    store: LedgerSessionStore, conv_id: str
) -> None:
    store.save(conv_id, Session(iteration=1))
    store.save(conv_id, Session(iteration=2), expected_version=1)
    store.delete(conv_id)
    store.save(conv_id, Session(iteration=4))
    entries = _logged(store, conv_id)
    assert [version for _, version in entries] == [1, 2, 4]  # the delete (3) logs nothing
    # What a settle of each returns: the version that save made, whatever came after.
    assert [_settled(store, write_id) for write_id, _ in entries] == [1, 2, 4]
    assert _settled(store, str(uuid.uuid4())) is None


def test_the_write_log_prunes_a_sessions_entries_past_the_retention(
    store: LedgerSessionStore, conv_id: str
) -> None:
    old = datetime.now(UTC) - WRITE_LOG_RETENTION * 2

    async def backdate(conn: Any) -> None:
        await conn.execute(
            insert(writes),
            [
                {"write_id": "old-of-this", "session_id": conv_id, "version": 0, "created_at": old},
                {
                    "write_id": "old-of-other",
                    "session_id": conv_id + "-other",
                    "version": 0,
                    "created_at": old,
                },
            ],
        )

    async def work() -> None:
        await store.ledger.write(backdate)

    store.save(conv_id, Session(iteration=1))  # version 1 prunes (before the old entries)
    store._runner.call(work)
    for iteration in range(2, WRITE_LOG_PRUNE_EVERY):
        store.save(conv_id, Session(iteration=iteration))
    assert _settled(store, "old-of-this") == 0  # versions 2..15 do not prune
    store.save(conv_id, Session(iteration=WRITE_LOG_PRUNE_EVERY))  # version 16 prunes
    assert _settled(store, "old-of-this") is None
    assert _settled(store, "old-of-other") == 0  # another session's entries are its own
    assert len(_logged(store, conv_id)) == WRITE_LOG_PRUNE_EVERY  # every recent one kept
