"""No stale writer wins: tombstones, generations and a monotonic ``updated_at``, on
every backend.

The rule: a version or sequence, once used for an id, is never valid again for that
id, across deletes. A deleted zett session keeps its counter row as a tombstone
(``deleted_at``); ``create_session`` on it starts a new generation numbered on from
the deleted one. A deleted rein session is a row without JSON whose version goes on
counting. ``updated_at`` is the greater of the stored and the writer's time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rein import Session
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

import chatledger.clock
from chatledger import SessionDeleted, SnapshotConflict, VersionConflict
from chatledger.engine import Ledger
from chatledger.rein import LedgerSessionStore
from chatledger.schema import raw_messages_table, rein_sessions_table, sessions_table, snapshots_table
from chatledger.zett import LedgerSessionStorage

from .conftest import Database

LAG = timedelta(seconds=5)


def summary_of(text: str) -> CompactedMessage:
    return CompactedMessage(content=f"summary: {text}")


async def append_users(
    storage: LedgerSessionStorage, session_id: str, *texts: str, parent: str | None = None
) -> list[int]:
    return [
        await storage.append(session_id, "r", UserMessage(content=text), parent_session_id=parent)
        for text in texts
    ]


def contents(records: Any) -> list[str]:
    return [record.message.content for record in records]


async def session_row(storage: LedgerSessionStorage, session_id: str) -> Any:
    """The ``agent_sessions`` row as stored, tombstone or not."""

    async def work(conn: AsyncConnection) -> Any:
        return (
            await conn.execute(select(sessions_table).where(sessions_table.c.id == session_id))
        ).one_or_none()

    return await storage.ledger.read(work)


async def content_rows(storage: LedgerSessionStorage, session_id: str) -> tuple[int, int]:
    """How many raw-message and snapshot rows the id has, straight from the tables."""

    async def work(conn: AsyncConnection) -> tuple[int, int]:
        raw = await conn.scalar(
            select(func.count())
            .select_from(raw_messages_table)
            .where(raw_messages_table.c.session_id == session_id)
        )
        snapshots = await conn.scalar(
            select(func.count())
            .select_from(snapshots_table)
            .where(snapshots_table.c.session_id == session_id)
        )
        return int(raw or 0), int(snapshots or 0)

    return await storage.ledger.read(work)


@pytest.fixture
async def other_storage(database: Database) -> AsyncIterator[LedgerSessionStorage]:
    """A second storage on the same database: another process's view."""
    async with LedgerSessionStorage(database.url) as opened:
        yield opened


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[timedelta], None]]:
    """``clock(lag)`` makes every later write of both stores read a clock ``lag`` behind."""
    real = datetime.now

    def set_lag(lag: timedelta) -> None:
        def behind() -> datetime:
            return real(UTC) - lag

        monkeypatch.setattr(chatledger.clock, "utc_now", behind)

    yield set_lag


# -- zett: tombstones ------------------------------------------------------------------------------


async def test_delete_leaves_a_tombstone_that_reads_as_unknown(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    parent = f"{session_id}-parent"
    await storage.create_session(session_id=parent)
    for text in ("m1", "m2", "m3"):
        await storage.append(session_id, "r", UserMessage(content=text), parent_session_id=parent, title="T")
    await storage.snapshot(session_id, summary_of("m1..m2"), 2, 0)
    await storage.update_session(session_id, agent_name="agent")
    fields_version = await storage.get_fields_version(session_id)
    assert fields_version == 2

    assert await storage.delete_session(session_id) is True
    assert await storage.delete_session(session_id) is False  # a tombstone is no session

    row = await session_row(storage, session_id)
    assert row is not None and row.deleted_at is not None
    assert (row.last_sequence, row.base_sequence, row.compacted_through_sequence) == (3, 3, 3)
    assert row.snapshot_version == 0
    assert (row.title, row.agent_name, row.parent_session_id) == (None, None, None)
    assert row.fields_version == fields_version + 1
    assert await content_rows(storage, session_id) == (0, 0)

    assert await storage.get_session(session_id) is None
    assert await storage.get_fields_version(session_id) is None
    assert await storage.count_messages(session_id) == 0
    assert await storage.list_raw_messages(session_id) == []
    assert await storage.update_session(session_id, title="x") is None
    assert await storage.update_session(session_id, title="x", expected_version=fields_version + 1) is None
    view = await storage.load(session_id)
    assert view.snapshot is None and view.raw_tail == [] and view.title is None
    listed = {summary.session_id for summary in await storage.list_sessions(limit=10_000)}
    assert session_id not in listed and parent in listed
    # None of the reads or refused writes changed the tombstone.
    assert await session_row(storage, session_id) == row


async def test_late_append_does_not_revive_a_deleted_session(
    storage: LedgerSessionStorage, other_storage: LedgerSessionStorage, session_id: str
) -> None:
    """An agent still running on a conversation another process deleted: its next
    append is refused, and the conversation stays deleted."""
    await append_users(storage, session_id, "m1", "m2")
    assert await other_storage.delete_session(session_id) is True
    tombstone = await session_row(storage, session_id)

    for parent in (None, f"{session_id}-parent"):
        with pytest.raises(SessionDeleted, match=r"was deleted.*create_session\(session_id=") as raised:
            await storage.append(session_id, "r", UserMessage(content="late"), parent_session_id=parent)
        assert isinstance(raised.value, ValueError)
        assert session_id in str(raised.value)

    assert await session_row(storage, session_id) == tombstone
    assert await content_rows(storage, session_id) == (0, 0)
    assert await storage.get_session(session_id) is None


async def test_create_session_on_a_tombstone_starts_a_new_generation(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    parent = f"{session_id}-parent"
    await storage.create_session(session_id=parent)
    first = await storage.create_session(session_id=session_id, title="old", agent_name="a1", session_type=3)
    await append_users(storage, session_id, "m1", "m2", "m3")
    await storage.snapshot(session_id, summary_of("m1"), 1, 0)
    await storage.delete_session(session_id)
    tombstone = await session_row(storage, session_id)

    created = await storage.create_session(
        session_id=session_id, parent_session_id=parent, title="new", agent_name="a2", session_type=4
    )
    assert (created.session_id, created.parent_session_id, created.title, created.agent_name) == (
        session_id,
        parent,
        "new",
        "a2",
    )
    assert created.session_type == 4 and created.message_count == 0
    assert created.created_at > first.created_at and created.updated_at >= tombstone.updated_at
    assert await storage.get_session(session_id) == created
    assert await storage.get_fields_version(session_id) == tombstone.fields_version + 1
    row = await session_row(storage, session_id)
    assert row.deleted_at is None and row.snapshot_version == 0
    assert (row.last_sequence, row.base_sequence, row.compacted_through_sequence) == (3, 3, 3)
    view = await storage.load(session_id)
    assert view.snapshot is None and view.raw_tail == [] and view.parent_session_id == parent

    with pytest.raises(ValueError, match="Session already exists"):
        await storage.create_session(session_id=session_id)

    # Sequences go on from the deleted generation's: none is used twice.
    assert await append_users(storage, session_id, "n1", "n2", parent=parent) == [4, 5]
    assert await storage.count_messages(session_id) == 2
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.message_count == 2
    assert contents(await storage.list_raw_messages(session_id)) == ["n1", "n2"]
    assert [record.sequence for record in await storage.list_raw_messages(session_id)] == [4, 5]
    # The new generation checkpoints from version 1.
    checkpoint = await storage.snapshot(session_id, summary_of("n1"), 4, 0)
    assert checkpoint.version == 1
    view = await storage.load(session_id)
    assert view.snapshot is not None and view.snapshot.compacted_message == summary_of("n1")
    assert contents(view.raw_tail) == ["n2"]

    # And again: a second delete and create go on from sequence 5.
    assert await storage.delete_session(session_id) is True
    await storage.create_session(session_id=session_id)
    assert await append_users(storage, session_id, "o1") == [6]
    assert contents((await storage.load(session_id)).raw_tail) == ["o1"]


async def test_checkpoint_of_a_deleted_session_is_refused_on_the_new_one(
    storage: LedgerSessionStorage, other_storage: LedgerSessionStorage, session_id: str
) -> None:
    """A compaction computed on a deleted conversation (zett's persistence extension
    sends expected_version 0 whenever its view had no checkpoint) never becomes the
    summary of the conversation created again under the same id."""
    await append_users(storage, session_id, "old1", "old2", "old3")
    stale_view = await storage.load(session_id)
    assert stale_view.snapshot is None  # so the stale writer's expected_version is 0

    await other_storage.delete_session(session_id)
    # On the tombstone itself.
    with pytest.raises(SessionDeleted):
        await storage.snapshot(session_id, summary_of("old1..old2"), 2, 0)

    await other_storage.create_session(session_id=session_id)
    # On the new generation before it has any message, and after.
    with pytest.raises(SnapshotConflict, match=r"Snapshot conflict.*deleted") as raised:
        await storage.snapshot(session_id, summary_of("old1..old2"), 2, 0)
    assert isinstance(raised.value, ValueError)
    await append_users(other_storage, session_id, "new1", "new2", "new3", "new4")
    for boundary in (1, 2, 3):
        with pytest.raises(SnapshotConflict, match=r"Snapshot conflict.*deleted"):
            await storage.snapshot(session_id, summary_of("old"), boundary, 0)

    view = await other_storage.load(session_id)
    assert view.snapshot is None
    assert contents(view.raw_tail) == ["new1", "new2", "new3", "new4"]
    assert await content_rows(storage, session_id) == (4, 0)


async def test_checkpoint_at_a_reused_snapshot_version_is_refused(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """The deleted generation was at snapshot version 1, and so is the new one: a
    writer holding version 1 from before the delete is still refused."""
    await append_users(storage, session_id, "old1", "old2", "old3")
    await storage.snapshot(session_id, summary_of("old1"), 1, 0)  # the stale writer holds version 1
    await storage.delete_session(session_id)
    await storage.create_session(session_id=session_id)
    await append_users(storage, session_id, "new1", "new2", "new3")
    await storage.snapshot(session_id, summary_of("new1"), 4, 0)

    with pytest.raises(SnapshotConflict, match=r"Snapshot conflict.*deleted"):
        await storage.snapshot(session_id, summary_of("old1..old3"), 3, 1)
    view = await storage.load(session_id)
    assert view.snapshot is not None and view.snapshot.compacted_message == summary_of("new1")
    assert contents(view.raw_tail) == ["new2", "new3"]


async def test_fields_version_from_before_a_delete_never_matches(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await storage.create_session(session_id=session_id, title="old")
    stale = await storage.get_fields_version(session_id)
    assert stale == 1
    await storage.delete_session(session_id)
    await storage.create_session(session_id=session_id, title="new")
    assert await storage.get_fields_version(session_id) == 3

    with pytest.raises(VersionConflict, match="at version 3, not 1"):
        await storage.update_session(session_id, title="stale", expected_version=stale)
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.title == "new"


async def test_appends_racing_a_delete_never_outlive_it(database: Database, session_id: str) -> None:
    """Appends that commit before the delete are erased with it; the others are
    refused. Either way the tombstone has no message, and the next generation
    starts right after the last sequence any of them got."""
    async with LedgerSessionStorage(database.url, pool_size=5, max_overflow=5) as storage:
        await append_users(storage, session_id, "first")

        async def append(index: int) -> int | BaseException:
            try:
                return await storage.append(session_id, "r", UserMessage(content=f"racer {index}"))
            except SessionDeleted as refused:
                return refused

        async def delete() -> bool:
            await asyncio.sleep(0.01)
            return await storage.delete_session(session_id)

        *results, deleted = await asyncio.gather(*(append(index) for index in range(20)), delete())
        assert deleted is True
        sequences = sorted(result for result in results if isinstance(result, int))
        refused = [result for result in results if isinstance(result, SessionDeleted)]
        assert len(sequences) + len(refused) == 20
        assert sequences == list(range(2, 2 + len(sequences)))

        row = await session_row(storage, session_id)
        assert row.deleted_at is not None
        assert row.last_sequence == row.base_sequence == 1 + len(sequences)
        assert await content_rows(storage, session_id) == (0, 0)
        await storage.create_session(session_id=session_id)
        assert await append_users(storage, session_id, "next") == [row.last_sequence + 1]


async def test_deletes_and_creates_racing_keep_one_live_generation(
    database: Database, session_id: str
) -> None:
    async with LedgerSessionStorage(database.url, pool_size=5, max_overflow=5) as storage:
        await storage.create_session(session_id=session_id)
        await storage.delete_session(session_id)
        results = await asyncio.gather(
            *(storage.create_session(session_id=session_id, title=f"racer {n}") for n in range(6)),
            return_exceptions=True,
        )
        winners = [result for result in results if not isinstance(result, BaseException)]
        assert len(winners) == 1, results
        assert all("already exists" in str(loser) for loser in results if isinstance(loser, BaseException))
        assert await storage.get_session(session_id) == winners[0]

        deleted = await asyncio.gather(*(storage.delete_session(session_id) for _ in range(6)))
        assert sorted(deleted) == [False] * 5 + [True]


# -- zett: updated_at never moves back -----------------------------------------------------------


async def test_session_with_the_newest_message_is_listed_first_despite_a_slow_clock(
    storage: LedgerSessionStorage, session_id: str, clock: Callable[[timedelta], None]
) -> None:
    kind = 1_000_000 + uuid.uuid4().int % 1_000_000_000  # this test's sessions only
    newest, other = f"{session_id}-newest", f"{session_id}-other"
    clock(timedelta(seconds=2))
    await storage.create_session(session_id=other, session_type=kind)
    await append_users(storage, other, "other")
    clock(timedelta(0))
    await storage.create_session(session_id=newest, session_type=kind)
    await append_users(storage, newest, "m1")
    before = await storage.get_session(newest)
    assert before is not None

    # A writer whose clock is 5 s behind (or whose retries took 5 s) appends last.
    clock(LAG)
    await append_users(storage, newest, "m2")
    after = await storage.get_session(newest)
    assert after is not None and after.updated_at == before.updated_at
    page = await storage.list_sessions(session_types=[kind], limit=10)
    assert [summary.session_id for summary in page] == [newest, other]


@pytest.mark.parametrize(
    "lag",
    [LAG, timedelta(microseconds=1), timedelta(0)],
    ids=["5s", "1us", "same-instant"],
)
async def test_no_session_write_moves_updated_at_back(
    storage: LedgerSessionStorage, session_id: str, clock: Callable[[timedelta], None], lag: timedelta
) -> None:
    """Every write of the counter row: append, create, update, delete, create again."""
    seen: list[datetime] = []

    async def updated_at() -> datetime:
        row = await session_row(storage, session_id)
        seen.append(row.updated_at)
        return row.updated_at

    writes = [
        lambda: storage.create_session(session_id=session_id),
        lambda: storage.append(session_id, "r", UserMessage(content="m")),
        lambda: storage.update_session(session_id, title="t"),
        lambda: storage.delete_session(session_id),
        lambda: storage.create_session(session_id=session_id),
        lambda: storage.append(session_id, "r", UserMessage(content="n")),
    ]
    clock(timedelta(0))
    await writes[0]()
    for write in writes[1:]:
        stored = await updated_at()
        clock(lag)
        await write()
        assert await updated_at() >= stored, (write, seen)
        clock(timedelta(0))
        await asyncio.sleep(0.002)
    assert seen == sorted(seen)


# -- rein: versions go on across deletes --------------------------------------------------------


@pytest.fixture
def store(database: Database) -> Iterator[LedgerSessionStore]:
    with LedgerSessionStore(database.url) as opened:
        yield opened


@pytest.fixture
def other_store(database: Database) -> Iterator[LedgerSessionStore]:
    with LedgerSessionStore(database.url) as opened:
        yield opened


@pytest.fixture
async def ledger(database: Database) -> AsyncIterator[Ledger]:
    """A ledger of the test's own, on its loop, to read rows as stored."""
    opened = Ledger(database.url)
    yield opened
    await opened.close()


@pytest.fixture
def conv_id() -> str:
    return f"rein-{uuid.uuid4()}"


async def rein_row(ledger: Ledger, id: str) -> Any:
    async def work(conn: AsyncConnection) -> Any:
        return (
            await conn.execute(select(rein_sessions_table).where(rein_sessions_table.c.id == id))
        ).one_or_none()

    return await ledger.read(work)


async def test_stale_rein_writer_loses_to_a_session_saved_after_a_delete(
    store: LedgerSessionStore, other_store: LedgerSessionStore, conv_id: str
) -> None:
    """Store A read version 1; store B deleted the session and saved a fresh one under
    the same id. A's compare-and-set at version 1 must not overwrite it."""
    await store.asave(conv_id, Session(iteration=1))
    held = await store.aload_versioned(conv_id)
    assert held is not None and held.version == 1

    assert await other_store.adelete(conv_id) is True
    await other_store.asave(conv_id, Session(iteration=100))
    fresh = await other_store.aload_versioned(conv_id)
    assert fresh is not None and fresh.version == 3  # 1, the delete 2, the fresh save 3

    with pytest.raises(VersionConflict, match="at version 3, not 1"):
        await store.asave(conv_id, Session(iteration=2), expected_version=held.version)
    assert await store.aload_versioned(conv_id) == fresh


async def test_rein_delete_leaves_a_tombstone_that_reads_as_absent(
    store: LedgerSessionStore, ledger: Ledger, conv_id: str
) -> None:
    await store.asave(conv_id, Session(iteration=1))
    await store.asave(conv_id, Session(iteration=2))
    assert await store.adelete(conv_id) is True
    assert await store.adelete(conv_id) is False

    row = await rein_row(ledger, conv_id)
    assert row is not None
    assert (row.session_json, row.write_id, row.version) == (None, None, 3)
    assert await store.aload(conv_id) is None and await store.aload_versioned(conv_id) is None
    assert not await store.acontains(conv_id)
    assert conv_id not in {info.id for info in await store.alist_sessions(limit=10_000)}

    # No compare-and-set matches a tombstone, not even at its own version.
    for version in (2, 3, 4):
        with pytest.raises(VersionConflict, match="does not exist"):
            await store.asave(conv_id, Session(), expected_version=version)
    assert await rein_row(ledger, conv_id) == row


async def test_rein_save_on_a_tombstone_continues_the_versions(
    store: LedgerSessionStore, ledger: Ledger, conv_id: str
) -> None:
    await store.asave(conv_id, Session(iteration=1))
    first = await rein_row(ledger, conv_id)
    await store.adelete(conv_id)

    # expected_version=0, "only if absent": a tombstone is absent.
    await store.asave(conv_id, Session(iteration=2), expected_version=0)
    assert await store.aload_versioned(conv_id) == (Session(iteration=2), 3)
    revived = await rein_row(ledger, conv_id)
    assert revived.created_at > first.created_at  # the id started anew
    with pytest.raises(VersionConflict, match="at version 3, not 0"):
        await store.asave(conv_id, Session(iteration=9), expected_version=0)

    # A plain save on a tombstone too; an overwrite keeps created_at.
    await store.adelete(conv_id)
    await store.asave(conv_id, Session(iteration=3))
    assert await store.aload_versioned(conv_id) == (Session(iteration=3), 5)
    await store.asave(conv_id, Session(iteration=4), expected_version=5)
    assert await store.aload_versioned(conv_id) == (Session(iteration=4), 6)
    latest = await rein_row(ledger, conv_id)
    assert latest.created_at > revived.created_at
    await store.asave(conv_id, Session(iteration=5))
    assert (await rein_row(ledger, conv_id)).created_at == latest.created_at
    assert [info.version for info in await store.alist_sessions(limit=10_000) if info.id == conv_id] == [7]


async def test_rein_saves_settle_by_their_write_id(
    store: LedgerSessionStore, ledger: Ledger, conv_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each save carries a new UUIDv7 write id and hands ``Ledger.write`` its identity,
    whose settle finds the version the save made by it, in the write log: after later
    saves and a delete of the id too."""
    settles: list[Any] = []
    write = Ledger.write

    async def recording_write(self: Ledger, work: Any, **options: Any) -> Any:
        identity = options.get("identity")
        settles.append(None if identity is None else identity.settle)
        return await write(self, work, **options)

    monkeypatch.setattr(Ledger, "write", recording_write)

    await store.asave(conv_id, Session(iteration=1))
    row = await rein_row(ledger, conv_id)
    assert uuid.UUID(row.write_id).version == 7
    assert len(settles) == 1 and settles[0] is not None
    assert await ledger.read(settles[0]) == 1

    await store.asave(conv_id, Session(iteration=2), expected_version=1)
    second = await rein_row(ledger, conv_id)
    assert second.write_id != row.write_id
    assert await ledger.read(settles[1]) == 2
    assert await ledger.read(settles[0]) == 1  # found after a later write replaced the row's id

    await store.adelete(conv_id)
    assert await ledger.read(settles[1]) == 2  # and after a delete
    await store.asave(conv_id, Session(iteration=3), expected_version=0)
    assert await ledger.read(settles[-1]) == 4


async def test_rein_updated_at_never_moves_back(
    store: LedgerSessionStore, ledger: Ledger, conv_id: str, clock: Callable[[timedelta], None]
) -> None:
    newest, other = f"{conv_id}-newest", f"{conv_id}-other"
    clock(timedelta(seconds=2))
    await store.asave(other, Session())
    clock(timedelta(0))
    await store.asave(newest, Session(iteration=1))
    stored = (await rein_row(ledger, newest)).updated_at

    # A writer whose clock is 5 s behind saves last, in every way a save can go.
    clock(LAG)
    await store.asave(newest, Session(iteration=2))
    await store.asave(newest, Session(iteration=3), expected_version=2)
    assert (await rein_row(ledger, newest)).updated_at == stored
    listed = [info.id for info in await store.alist_sessions(limit=10_000) if info.id in (newest, other)]
    assert listed == [newest, other]

    await store.adelete(newest)
    assert (await rein_row(ledger, newest)).updated_at == stored
    await store.asave(newest, Session(iteration=4), expected_version=0)
    assert (await rein_row(ledger, newest)).updated_at == stored
