"""Incremental loads: a storage that loaded a session before decodes only what is new,
and its views are the views of a storage without the cache.

The property test runs random interleavings of append, snapshot, delete,
create_session and load from several storages on one database (two with caches, one
of them small enough to evict, and one without) and compares every load with the
uncached one, on every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.persistence import RawMessageRecord, SessionView
from zett_agent.messages import AssistantMessage, UserMessage

from chatledger import SessionDeleted
from chatledger.zett import LedgerSessionStorage, codec
from chatledger.zett.cache import CachedTail, TailCache

from .conftest import Database

EXAMPLES = int(os.environ.get("CHATLEDGER_PROPERTY_EXAMPLES", "40"))


@pytest.fixture
async def stores(database: Database) -> AsyncIterator[list[LedgerSessionStorage]]:
    """Two cached storages (the second holds 8 messages, so it evicts) and an uncached
    one, the reference, all on the test database."""
    opened = [
        LedgerSessionStorage(database.url),
        LedgerSessionStorage(database.url, load_cache_messages=8),
        LedgerSessionStorage(database.url, load_cache_messages=0),
    ]
    try:
        yield opened
    finally:
        for storage in opened:
            await storage.close()


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sequences every ``codec.records`` call decodes, in order."""
    seen: list[int] = []
    original = codec.records

    def counting(rows: Any) -> list[RawMessageRecord]:
        result = original(rows)
        seen.extend(record.sequence for record in result)
        return result

    monkeypatch.setattr(codec, "records", counting)
    return seen


def message(n: int) -> UserMessage:
    return UserMessage(content=f"message {n}")


async def append_unless_deleted(storage: LedgerSessionStorage, session_id: str, sent: Any) -> None:
    """An append; on a deleted session's tombstone (revision 0002) it is refused, as
    a late append from a stopped agent is."""
    with contextlib.suppress(SessionDeleted):
        await storage.append(session_id, "r", sent)


# -- the cache alone --------------------------------------------------------------------

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def fake_records(first: int, count: int) -> list[RawMessageRecord]:
    return [
        RawMessageRecord(
            f"id-{sequence}",
            "s",
            "r",
            sequence,
            message(sequence),
            {},
            {},
            T0,
            T0,
            0,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            T0,
            T0,
        )
        for sequence in range(first, first + count)
    ]


def test_a_run_is_cut_at_its_first_gap() -> None:
    records = fake_records(3, 4)
    del records[2]  # sequences 3, 4, 6: 6 is not the next one
    entry = CachedTail.of(T0, 3, records, None)
    assert [record.sequence for record in entry.records] == [3, 4]
    assert CachedTail.of(T0, 2, records, None).records == ()


def test_run_serves_only_the_tail_after_the_boundary_and_up_to_the_counter() -> None:
    entry = CachedTail.of(T0, 3, fake_records(3, 5), None)  # sequences 3..7

    def run(boundary: int, through: int) -> list[int]:
        return [record.sequence for record in entry.run(boundary, through)]

    assert run(2, 7) == [3, 4, 5, 6, 7]
    assert run(2, 10) == [3, 4, 5, 6, 7]
    assert run(4, 10) == [5, 6, 7]  # a newer checkpoint: the records at or below it are not served
    assert run(2, 5) == [3, 4, 5]  # an older transaction that saw only up to 5
    assert run(1, 9) == []  # the run does not hold sequence 2
    assert run(7, 9) == []  # nor 8
    assert run(5, 5) == []


def test_lru_by_session_within_the_capacity() -> None:
    cache = TailCache(10)
    cache.put("a", CachedTail.of(T0, 1, fake_records(1, 4), None))  # costs 5
    cache.put("b", CachedTail.of(T0, 1, fake_records(1, 3), None))  # 4
    assert cache.get("a", T0) is not None  # a is now the most recently used
    cache.put("c", CachedTail.of(T0, 1, fake_records(1, 2), None))  # 3: b goes
    assert (cache.peek("a"), cache.peek("b")) != (None, None)
    assert cache.peek("b") is None
    assert cache.size == 8
    cache.put("d", CachedTail.of(T0, 1, fake_records(1, 10), None))  # larger than all: not kept
    assert cache.peek("d") is None
    assert cache.size == 8
    cache.put("a", CachedTail.of(T0, 1, fake_records(1, 1), None))  # replaced, not added
    assert cache.size == 5
    cache.discard("a")
    assert (len(cache), cache.size) == (1, 3)


def test_a_generation_other_than_the_cached_one_is_a_miss() -> None:
    cache = TailCache(10)
    cache.put("a", CachedTail.of(T0, 1, fake_records(1, 2), None))
    assert cache.get("a", T0 + timedelta(microseconds=1)) is None
    assert cache.get("a", T0) is not None


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), ("10", TypeError), (True, TypeError)])
def test_load_cache_messages_is_checked(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="load_cache_messages"):
        LedgerSessionStorage("sqlite:///unused.sqlite3", load_cache_messages=value)  # type: ignore[arg-type]


# -- loads on a database ----------------------------------------------------------------


async def test_a_reload_decodes_only_the_new_messages(
    stores: list[LedgerSessionStorage], session_id: str, decoded: list[int]
) -> None:
    cached, _, reference = stores
    for n in range(1, 6):
        await reference.append(session_id, "r", message(n))
    assert [record.sequence for record in (await cached.load(session_id)).raw_tail] == [1, 2, 3, 4, 5]
    assert decoded == [1, 2, 3, 4, 5]
    decoded.clear()
    for n in range(6, 8):
        await reference.append(session_id, "r", message(n))
    view = await cached.load(session_id)
    assert decoded == [6, 7]
    assert view == await reference.load(session_id)
    decoded.clear()
    assert await cached.load(session_id) == view  # nothing new: no tail query at all
    assert decoded == []


async def test_a_checkpoint_drops_the_compacted_records_and_is_decoded_once(
    stores: list[LedgerSessionStorage], session_id: str, decoded: list[int]
) -> None:
    cached, _, reference = stores
    for n in range(1, 5):
        await reference.append(session_id, "r", message(n))
    await cached.load(session_id)
    await reference.snapshot(session_id, CompactedMessage(content="1-3"), 3, 0)
    await reference.append(session_id, "r", message(5))
    decoded.clear()
    view = await cached.load(session_id)
    assert decoded == [5]
    assert view == await reference.load(session_id)
    assert [record.sequence for record in view.raw_tail] == [4, 5]
    assert view.snapshot is not None
    again = await cached.load(session_id)
    assert again.snapshot is view.snapshot  # the decoded checkpoint was kept


async def test_a_deleted_session_loads_empty_and_a_recreated_one_shows_only_its_own_messages(
    stores: list[LedgerSessionStorage], session_id: str
) -> None:
    cached, _, reference = stores
    for n in range(1, 4):
        await reference.append(session_id, "r", message(n))
    await cached.load(session_id)
    await reference.delete_session(session_id)
    assert await cached.load(session_id) == SessionView(session_type=0)
    await reference.create_session(session_id=session_id)
    await reference.append(session_id, "r", AssistantMessage(content="new generation"))
    view = await cached.load(session_id)
    assert view == await reference.load(session_id)
    assert [record.message for record in view.raw_tail] == [AssistantMessage(content="new generation")]


async def test_recreated_without_a_load_in_between(
    stores: list[LedgerSessionStorage], session_id: str
) -> None:
    """The cache still holds the deleted generation when the new one is loaded."""
    cached, _, reference = stores
    for n in range(1, 4):
        await reference.append(session_id, "r", message(n))
    await cached.load(session_id)
    await reference.delete_session(session_id)
    await reference.create_session(session_id=session_id)
    for n in range(1, 3):
        await reference.append(session_id, "r", AssistantMessage(content=f"again {n}"))
    assert await cached.load(session_id) == await reference.load(session_id)


async def test_a_row_missing_from_the_log_is_not_bridged(
    stores: list[LedgerSessionStorage], session_id: str, database: Database
) -> None:
    """A row deleted by hand leaves a gap: the cache keeps only the run before it, so
    later loads still read what the database holds."""
    cached, _, reference = stores
    for n in range(1, 6):
        await reference.append(session_id, "r", message(n))
    async with reference.ledger.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM raw_messages WHERE session_id = :s AND sequence = 3"), {"s": session_id}
        )
    first = await cached.load(session_id)
    assert [record.sequence for record in first.raw_tail] == [1, 2, 4, 5]
    await reference.append(session_id, "r", message(6))
    assert await cached.load(session_id) == await reference.load(session_id)


async def test_the_counter_read_now_bounds_the_cached_run_too(
    stores: list[LedgerSessionStorage], session_id: str
) -> None:
    """A load whose transaction sees fewer messages than the cache holds (one that
    began before a newer load stored its run) returns only what its counter row
    covers. Set up here by turning the counter back by hand."""
    cached, _, reference = stores
    for n in range(1, 6):
        await reference.append(session_id, "r", message(n))
    await cached.load(session_id)
    async with reference.ledger.engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_sessions SET last_sequence = 3 WHERE id = :s"), {"s": session_id}
        )
    view = await cached.load(session_id)
    assert [record.sequence for record in view.raw_tail] == [1, 2, 3]
    assert view == await reference.load(session_id)


async def test_concurrent_loads_and_appends_see_consistent_views(
    stores: list[LedgerSessionStorage], session_id: str
) -> None:
    """Loads racing appends of another storage: each view is one the session had."""
    cached, small, reference = stores
    await reference.append(session_id, "r", message(0))

    async def appender() -> None:
        for n in range(1, 31):
            await reference.append(session_id, "r", message(n))

    async def loader(storage: LedgerSessionStorage) -> list[SessionView]:
        return [await storage.load(session_id) for _ in range(15)]

    _, *views = await asyncio.gather(appender(), loader(cached), loader(cached), loader(small))
    for view in (view for some in views for view in some):
        sequences = [record.sequence for record in view.raw_tail]
        assert sequences == list(range(1, len(sequences) + 1))
        assert [record.message for record in view.raw_tail] == [message(n) for n in range(len(sequences))]
    assert await cached.load(session_id) == await reference.load(session_id)


# -- random interleavings ------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One step: ``kind`` by storage ``store`` on session ``session``; ``pick`` chooses a
    snapshot boundary within the allowed range."""

    kind: str
    store: int
    session: int
    pick: float = 0.0


ops = st.lists(
    st.builds(
        Op,
        kind=st.sampled_from(["append"] * 3 + ["load"] * 3 + ["snapshot", "delete", "create", "race"]),
        store=st.integers(0, 2),
        session=st.integers(0, 1),
        pick=st.floats(0, 1),
    ),
    min_size=5,
    max_size=40,
)

interleavings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@interleavings
@given(steps=ops)
async def test_cached_loads_equal_uncached_loads(stores: list[LedgerSessionStorage], steps: list[Op]) -> None:
    """Any order of appends, snapshots, deletes, creates and loads, from any storage:
    every load of a cached storage equals the uncached load of the same moment, and a
    load racing an append sees the session before or after it."""
    reference = stores[2]
    sessions = [f"mix-{uuid.uuid4()}" for _ in range(2)]

    async def check(store: int, session_id: str) -> None:
        assert await stores[store].load(session_id) == await reference.load(session_id)

    for counter, step in enumerate(steps):
        storage, session_id = stores[step.store], sessions[step.session]
        if step.kind == "append":
            kind: Callable[..., Any] = AssistantMessage if counter % 2 else UserMessage
            await append_unless_deleted(storage, session_id, kind(content=f"m{counter}"))
        elif step.kind == "load":
            await check(step.store, session_id)
            await check(1 - step.store % 2, session_id)  # the other cached storage too
        elif step.kind == "snapshot":
            view = await reference.load(session_id)
            done = view.snapshot.compacted_through_sequence if view.snapshot else 0
            if view.raw_tail:
                last = view.raw_tail[-1].sequence
                boundary = done + 1 + int(step.pick * (last - done - 1))
                version = view.snapshot.version if view.snapshot else 0
                await storage.snapshot(session_id, CompactedMessage(content=f"c{counter}"), boundary, version)
        elif step.kind == "delete":
            await storage.delete_session(session_id)
        elif step.kind == "create":
            if await reference.get_session(session_id) is None:
                await storage.create_session(session_id=session_id)
        else:  # two loads of one storage racing an append of another
            before = await reference.load(session_id)
            writer = stores[(step.store + 1) % 3]
            first, _, second = await asyncio.gather(
                storage.load(session_id),
                append_unless_deleted(writer, session_id, UserMessage(content=f"m{counter}")),
                storage.load(session_id),
            )
            after = await reference.load(session_id)
            assert first in (before, after)
            assert second in (before, after)
    for store in (0, 1):
        for session_id in sessions:
            await check(store, session_id)
