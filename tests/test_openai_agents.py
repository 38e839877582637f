"""chatledger's OpenAI Agents SDK session (:mod:`chatledger.openai_agents`) on every target:
the conformance suite (:mod:`chatledger.testing.openai_agents`), its own guarantees
(sequences, retractions, generations, settling a lost COMMIT) and 8 processes adding
to one session."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from agents.memory import Session
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import create_async_engine

from chatledger.engine import Ledger
from chatledger.openai_agents import LedgerSession
from chatledger.schema import openai_items_table as items
from chatledger.schema import openai_sessions_table as sessions
from chatledger.testing import OpenAISessionContract
from chatledger.tools.bench.floor import RoundTrips

from .conftest import Database
from .support.race_workers import add_openai_items

PROCESSES = 8


@pytest.fixture
async def ledger(database: Database) -> AsyncIterator[Ledger]:
    opened = Ledger(database.url)
    yield opened
    await opened.close()


@pytest.fixture
def open_session(ledger: Ledger) -> Callable[[str], Session]:
    return lambda session_id: LedgerSession(session_id, ledger=ledger)


@pytest.fixture
def session_id() -> str:
    return f"openai-{uuid.uuid4()}"


class TestOpenAIContract(OpenAISessionContract):
    """The conformance suite on chatledger's session, on every target (``open_session`` above)."""


async def rows(ledger: Ledger, session_id: str) -> list[tuple[int, bool]]:
    """(sequence, retracted) of every stored row of the session."""

    async def work(conn: Any) -> list[tuple[int, bool]]:
        found = await conn.execute(
            select(items.c.sequence, items.c.retracted_at.is_not(None))
            .where(items.c.session_id == session_id)
            .order_by(items.c.sequence)
        )
        return [(row[0], bool(row[1])) for row in found]

    return await ledger.read(work)


async def counter(ledger: Ledger, session_id: str) -> Any:
    async def work(conn: Any) -> Any:
        statement = select(sessions.c.last_sequence, sessions.c.generation, sessions.c.base_sequence)
        return (await conn.execute(statement.where(sessions.c.id == session_id))).one()

    return await ledger.read(work)


async def test_a_pop_retracts_and_no_sequence_is_reused(ledger: Ledger, session_id: str) -> None:
    session = LedgerSession(session_id, ledger=ledger)
    await session.add_items([{"role": "user", "content": f"m{n}"} for n in range(3)])
    assert await session.pop_item() == {"role": "user", "content": "m2"}
    await session.add_items([{"role": "user", "content": "m3"}])
    assert await rows(ledger, session_id) == [(1, False), (2, False), (3, True), (4, False)]


async def test_a_clear_starts_a_generation_numbered_on(ledger: Ledger, session_id: str) -> None:
    session = LedgerSession(session_id, ledger=ledger)
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    await session.clear_session()
    assert tuple(await counter(ledger, session_id)) == (2, 2, 2)
    assert await rows(ledger, session_id) == []
    await session.add_items([{"role": "user", "content": "c"}])
    assert await rows(ledger, session_id) == [(3, False)]
    assert await session.get_items() == [{"role": "user", "content": "c"}]


async def test_sessions_of_one_engine_share_a_ledger(database: Database) -> None:
    engine = create_async_engine(database.url)
    try:
        one, two = LedgerSession("a", engine=engine), LedgerSession("b", engine=engine)
        assert one.ledger is two.ledger and one.engine is engine
        await one.add_items([{"role": "user", "content": "x"}])
        assert await two.get_items() == []
    finally:
        await engine.dispose()


def test_bad_input_is_refused_before_any_write(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="session_id cannot be empty"):
        LedgerSession(" ", ledger=ledger)
    with pytest.raises(TypeError, match="session_id must be a str"):
        LedgerSession(7, ledger=ledger)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exactly one of engine= and ledger="):
        LedgerSession("x")
    with pytest.raises(TypeError, match="session_settings must be"):
        LedgerSession("x", ledger=ledger, session_settings=3)  # type: ignore[arg-type]


async def test_bad_items_are_refused_before_any_write(ledger: Ledger, session_id: str) -> None:
    session = LedgerSession(session_id, ledger=ledger)
    with pytest.raises(TypeError, match=r"items must be a list"):
        await session.add_items({"role": "user"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"items\[1\] must be a dict"):
        await session.add_items([{"role": "user"}, "text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"items\[0\] must be JSON serializable"):
        await session.add_items([{"n": float("nan")}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="limit must be an int"):
        await session.get_items("3")  # type: ignore[arg-type]
    assert await rows(ledger, session_id) == []


async def test_a_lost_commit_is_settled_once(ledger: Ledger, session_id: str) -> None:
    """The add's COMMIT succeeds but its answer is lost: the retry's settle finds the
    items by their ids and the add is not made twice."""
    session = LedgerSession(session_id, ledger=ledger)
    await ledger.ensure_ready()  # its own reads (the writer's isolation) are not the add
    original = ledger.transactions._attempt
    lost = []

    async def attempt(work: Any, *, write: bool, **rest: Any) -> Any:
        result = await original(work, write=write, **rest)
        if write and not lost:
            lost.append(True)
            from chatledger.transactions import _Retry

            raise _Retry(ConnectionResetError("answer lost"), None, ambiguous=True)
        return result

    ledger.transactions._attempt = attempt  # type: ignore[method-assign]
    try:
        await session.add_items([{"role": "user", "content": "once"}])
    finally:
        ledger.transactions._attempt = original  # type: ignore[method-assign]
    assert lost and await session.get_items() == [{"role": "user", "content": "once"}]
    assert await rows(ledger, session_id) == [(1, False)]


async def test_processes_add_to_one_session(database: Database, session_id: str, ledger: Ledger) -> None:
    adds = 15
    dsn = database.url.render_as_string(hide_password=False)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=PROCESSES, mp_context=context) as pool:
        start = manager.Barrier(PROCESSES, timeout=120)
        futures = [
            asyncio.wrap_future(pool.submit(add_openai_items, dsn, session_id, worker, adds, start))
            for worker in range(PROCESSES)
        ]
        errors = [error for found in await asyncio.wait_for(asyncio.gather(*futures), 300) for error in found]
    assert errors == []
    total = PROCESSES * adds * 2
    assert await rows(ledger, session_id) == [(sequence, False) for sequence in range(1, total + 1)]
    stored = [item["content"] for item in await LedgerSession(session_id, ledger=ledger).get_items()]
    assert len(set(stored)) == total
    for start_at in range(0, total, 2):  # each add's two items are adjacent, in order
        worker, n, _ = stored[start_at].split("-")
        assert stored[start_at : start_at + 2] == [f"{worker}-{n}-0", f"{worker}-{n}-1"]


#: The statements of an add to an existing session: PostgreSQL's one (the bump in a CTE,
#: the items inserted from it: Backend.items_add); elsewhere the counter bump returns the
#: range where the database returns an UPDATE's rows, and MySQL/MariaDB read it after.
ADD_STATEMENTS = {
    "postgresql": ["WITH counter AS"],
    "sqlite": ["UPDATE openai_sessions", "INSERT INTO openai_items"],
    "mysql": ["UPDATE openai_sessions", "SELECT openai_sessions.last_sequence,", "INSERT INTO openai_items"],
}


async def test_an_add_costs_its_bump_and_its_insert(
    ledger: Ledger, open_session: Callable[[str], Any], session_id: str, database: Database
) -> None:
    """An add to an existing session sends the counter bump and one INSERT of its items
    (one statement on PostgreSQL; plus the range's read where an UPDATE returns no
    rows), and no BEGIN of its own on SQLite (its first statement writes)."""
    session = open_session(session_id)
    await session.add_items([{"role": "user", "content": "first"}])
    trips = RoundTrips(ledger.engine)
    try:
        await session.add_items([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
        expected = ADD_STATEMENTS[database.backend]
        assert len(trips.sent) == len(expected), trips.sent
        assert all(sent.startswith(start) for sent, start in zip(trips.sent, expected, strict=True)), (
            trips.sent
        )
    finally:
        trips.close()
    assert [item["content"] for item in await session.get_items()] == ["first", "a", "b"]


async def test_an_add_too_large_for_one_statement_goes_row_by_row(
    ledger: Ledger, open_session: Callable[[str], Any], session_id: str, database: Database
) -> None:
    """Items that each fit the statement limit but not together are added row by row
    where the add would bind them all in one statement (PostgreSQL's one array
    parameter: one protocol message, refused past 1 GiB), in one transaction still."""
    session = open_session(session_id)
    await session.add_items([{"role": "user", "content": "first"}])
    ledger.statement_limit = 256 * 1024
    big = [{"role": "user", "content": letter * 130_000} for letter in "ab"]  # 130 KB each, 260 KB both
    trips = RoundTrips(ledger.engine)
    try:
        await session.add_items(big)
        row_by_row = ["UPDATE openai_sessions", "INSERT INTO openai_items"]
        expected = row_by_row if ledger.backend.items_add is not None else ADD_STATEMENTS[database.backend]
        assert len(trips.sent) == len(expected), trips.sent
        assert all(sent.startswith(start) for sent, start in zip(trips.sent, expected, strict=True))
    finally:
        trips.close()
    assert [item["content"][:1] for item in await session.get_items()] == ["f", "a", "b"]


#: The round trips of a get_items (on aiosqlite: hops to its thread): SQLite sends no
#: BEGIN for the one SELECT (its own snapshot; the cursor, the statement, its rows,
#: the cursor's close, the COMMIT), PostgreSQL its read's BEGIN, the SELECT and the
#: COMMIT, MySQL/MariaDB the SELECT and the COMMIT.
READ_ROUND_TRIPS = {"postgresql": 3, "mysql": 2, "sqlite": 5}


@pytest.mark.parametrize("limit", [None, 2])
async def test_a_read_costs_one_select(
    ledger: Ledger, open_session: Callable[[str], Any], session_id: str, database: Database, limit: int | None
) -> None:
    """get_items, whole or its newest, is one SELECT of the item texts, with no BEGIN
    of its own on SQLite."""
    session = open_session(session_id)
    await session.add_items([{"role": "user", "content": f"item {n}"} for n in range(3)])
    await session.get_items(limit)  # the schema check and the pool's first connection
    trips = RoundTrips(ledger.engine)
    try:
        found = await session.get_items(limit)
        assert [item["content"] for item in found] == [f"item {n}" for n in range(3)][-(limit or 3) :]
        assert trips.sent == ["SELECT openai_items.item_json FROM"], trips.sent
        assert trips.round_trips == READ_ROUND_TRIPS[database.backend]
    finally:
        trips.close()


async def test_an_item_that_is_not_json_is_named(
    ledger: Ledger, open_session: Callable[[str], Any], session_id: str
) -> None:
    """A row edited by hand into invalid JSON fails the read, naming its sequence;
    padded with whitespace, it is still the item (as json.loads reads it)."""
    session = open_session(session_id)
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])

    async def edit(text: str) -> None:
        async with ledger.engine.begin() as conn:
            second = (items.c.session_id == session_id) & (items.c.sequence == 2)
            await conn.execute(update(items).where(second).values(item_json=text))

    await edit(' \n{"role": "user", "content": "b"}\t ')
    assert [item["content"] for item in await session.get_items()] == ["a", "b"]
    await edit('{"role": "user"')
    for limit in (None, 1):
        with pytest.raises(ValueError, match=f"session '{session_id}': item 2 is stored as invalid JSON"):
            await session.get_items(limit)


@pytest.mark.parametrize("stored", ["null", "7", '"text"', "[1, 2]"])
async def test_an_item_that_is_not_a_json_object_is_named_and_stays(
    ledger: Ledger, open_session: Callable[[str], Any], session_id: str, stored: str
) -> None:
    """A row holding JSON that is no item (a ``null`` written by SQL) fails the read as
    invalid JSON does, naming its sequence; ``pop_item`` raises the same and leaves it
    in place (never ``None``, which reads as an empty session)."""
    session = open_session(session_id)
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    async with ledger.engine.begin() as conn:
        second = (items.c.session_id == session_id) & (items.c.sequence == 2)
        await conn.execute(update(items).where(second).values(item_json=stored))
    named = f"session '{session_id}': item 2 is stored as invalid JSON"
    for limit in (None, 1):
        with pytest.raises(ValueError, match=named):
            await session.get_items(limit)
    with pytest.raises(ValueError, match=named):
        await session.pop_item()
    assert await rows(ledger, session_id) == [(1, False), (2, False)]


async def test_a_closed_session_refuses_every_call(database: Database, session_id: str) -> None:
    session = LedgerSession.from_url(session_id, url=database.url)
    await session.add_items([{"role": "user", "content": "a"}])
    await session.close()
    for call in (
        session.add_items([]),
        session.add_items([{"role": "user", "content": "b"}]),
        session.get_items(),
        session.pop_item(),
        session.clear_session(),
    ):
        with pytest.raises(RuntimeError, match="is closed"):
            await call
    reopened = LedgerSession.from_url(session_id, url=database.url)
    try:
        assert await reopened.get_items() == [{"role": "user", "content": "a"}]
    finally:
        await reopened.close()


@pytest.mark.parametrize("ensure_ascii", [True, False, None])
async def test_ensure_ascii_escapes_as_the_sdk_documents(
    ledger: Ledger, database: Database, session_id: str, ensure_ascii: bool | None
) -> None:
    """``ensure_ascii=True`` (the SDK's ``from_url`` and constructor take it) stores
    non-ASCII characters escaped, ``False`` (chatledger's default) as they are; the
    items read back are the same."""
    given = {} if ensure_ascii is None else {"ensure_ascii": ensure_ascii}
    session = LedgerSession.from_url(session_id, url=database.url, **given)
    direct = LedgerSession(f"{session_id}-direct", ledger=ledger, **given)
    item = {"role": "user", "content": "café ☕"}
    try:
        for one in (session, direct):
            await one.add_items([item])
            assert await one.get_items() == [item]

            async def stored(conn: Any, one: LedgerSession = one) -> str:
                return str(
                    await conn.scalar(select(items.c.item_json).where(items.c.session_id == one.session_id))
                )

            text = await ledger.read(stored)
            assert ("\\u00e9" in text and "café" not in text) if ensure_ascii else ("café ☕" in text), text
    finally:
        await session.close()
    with pytest.raises(TypeError, match="ensure_ascii must be a bool"):
        LedgerSession(session_id, ledger=ledger, ensure_ascii="yes")  # type: ignore[arg-type]


def test_from_url_sessions_on_two_loops_at_once_get_a_ledger_each(database: Database) -> None:
    """Two threads, each with its own event loop, adding through ``from_url`` sessions of
    one URL at once: each loop gets a ledger (and pool) of its own, so no connection of
    one loop serves the other, and every add lands; sessions on one loop still share."""
    url = database.url.render_as_string(hide_password=False)
    barrier = threading.Barrier(2, timeout=60)
    adds = 20
    results: dict[str, Any] = {}

    def worker(name: str) -> None:
        async def run() -> tuple[list[Any], Ledger, bool]:
            session = LedgerSession.from_url(f"loops-{name}-{uuid.uuid4()}", url=url)
            sibling = LedgerSession.from_url(f"loops-{name}-sibling", url=url)
            try:
                await session.get_items()  # the ledger of this loop, bound to it
                barrier.wait()  # both loops hold their ledgers now
                for n in range(adds):
                    await session.add_items([{"role": "user", "content": f"{name}{n}"}])
                return await session.get_items(), session.ledger, sibling.ledger is session.ledger
            finally:
                await session.close()

        try:
            results[name] = asyncio.run(run())
        except BaseException as error:  # reported below, with the other thread's outcome
            barrier.abort()
            results[name] = error

    threads = [threading.Thread(target=worker, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert all(isinstance(outcome, tuple) for outcome in results.values()), results
    (items_a, ledger_a, shared_a), (items_b, ledger_b, shared_b) = results["a"], results["b"]
    assert [item["content"] for item in items_a] == [f"a{n}" for n in range(adds)]
    assert [item["content"] for item in items_b] == [f"b{n}" for n in range(adds)]
    assert ledger_a is not ledger_b
    assert shared_a and shared_b
