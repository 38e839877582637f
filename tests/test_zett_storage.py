"""``LedgerSessionStorage`` against zett-agent's ``SessionStorage`` contract, on every backend.

The implementation-neutral conformance suite (:mod:`chatledger.testing.zett`) runs here
(:class:`TestZettContract`), through the ``storage`` / ``database`` fixtures; the tests below add what only
chatledger promises or can show: the rows it stores, its races and limits. The
backends share one database each, so every test uses its own session ids.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.extensions.events import MessageTiming
from zett_agent.json_types import JsonValue
from zett_agent.messages import (
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    MessageRole,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage

from chatledger import SessionDeleted, SnapshotConflict, VersionConflict
from chatledger.schema import raw_messages_table, sessions_table, snapshots_table
from chatledger.testing import ZettStorageContract
from chatledger.testing.zett import all_session_ids, append_users, rich_messages, summary_of, tail_sequences
from chatledger.types import MAX_ID_LENGTH
from chatledger.zett import LedgerSessionStorage

from .conftest import Database


class TestZettContract(ZettStorageContract):
    """The conformance suite on chatledger's store, on every target (conftest's ``storage``)."""


# -- helpers --------------------------------------------------------------------------


async def snapshot_rows(storage: LedgerSessionStorage, session_id: str) -> int:
    """How many ``session_snapshots`` rows a session has, read straight from the table."""

    async def work(conn: AsyncConnection) -> int:
        return int(
            await conn.scalar(
                select(func.count())
                .select_from(snapshots_table)
                .where(snapshots_table.c.session_id == session_id)
            )
            or 0
        )

    return await storage.ledger.read(work)


async def session_row_exists(storage: LedgerSessionStorage, session_id: str) -> bool:
    async def work(conn: AsyncConnection) -> bool:
        found = await conn.scalar(select(sessions_table.c.id).where(sessions_table.c.id == session_id))
        return found is not None

    return await storage.ledger.read(work)


# -- the SessionStorage protocol ------------------------------------------------------


async def test_empty_session_load_writes_nothing(storage: LedgerSessionStorage, session_id: str) -> None:
    view = await storage.load(session_id)

    assert view.snapshot is None
    assert view.raw_tail == []
    assert view.messages == []
    assert view.session_type == 0
    assert (view.parent_session_id, view.title, view.agent_name) == (None, None, None)
    # Loading must not create the session.
    assert await storage.get_session(session_id) is None
    assert session_id not in await all_session_ids(storage)
    assert not await session_row_exists(storage, session_id)
    assert await storage.count_messages(session_id) == 0


async def test_tool_round_trip_preserved(storage: LedgerSessionStorage, session_id: str) -> None:
    user = UserMessage(content="Find the TODOs")
    call = AssistantMessage(
        tool_calls=(
            ToolCall("call-1", "grep", {"pattern": "TODO", "paths": ["src", "tests"]}),
            ToolCall("call-2", "read_file", {"path": "README.md", "start_line": 1}),
        ),
        provider="scripted",
        model="m-1",
    )
    first = ToolMessage(tool_call_id="call-1", name="grep", content="src/a.py:3: TODO")
    second = ToolMessage(tool_call_id="call-2", name="read_file", content="no such file", success=False)
    answer = AssistantMessage(content="One TODO, in src/a.py.")

    sequences = [
        await storage.append(session_id, "req", message) for message in (user, call, first, second, answer)
    ]
    assert sequences == [1, 2, 3, 4, 5]

    view = await storage.load(session_id)
    restored = [record.message for record in view.raw_tail]
    assert restored == [user, call, first, second, answer]
    assert isinstance(restored[1], AssistantMessage)
    assert restored[1].tool_calls == call.tool_calls
    assert isinstance(restored[3], ToolMessage)
    assert (restored[3].tool_call_id, restored[3].name, restored[3].success) == ("call-2", "read_file", False)

    # The tool name is kept in its own column for SQL readers.
    async def work(conn: AsyncConnection) -> list[tuple[int, str | None]]:
        rows = await conn.execute(
            select(raw_messages_table.c.sequence, raw_messages_table.c.tool_name)
            .where(raw_messages_table.c.session_id == session_id)
            .order_by(raw_messages_table.c.sequence)
        )
        return [(row.sequence, row.tool_name) for row in rows]

    assert await storage.ledger.read(work) == [(1, None), (2, None), (3, "grep"), (4, "read_file"), (5, None)]


async def test_stale_snapshot_version_conflicts(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 3)
    await storage.snapshot(session_id, summary_of("first"), 1, 0)

    with pytest.raises(SnapshotConflict, match="Snapshot conflict") as raised:
        await storage.snapshot(session_id, summary_of("stale"), 2, 0)
    assert isinstance(raised.value, ValueError)  # zett's callers catch ValueError
    with pytest.raises(ValueError, match="Snapshot conflict"):
        await storage.snapshot(session_id, summary_of("from the future"), 2, 5)

    # The conflicting writers changed nothing.
    view = await storage.load(session_id)
    assert view.snapshot is not None
    assert (view.snapshot.version, view.snapshot.compacted_through_sequence) == (1, 1)
    assert view.snapshot.compacted_message == summary_of("first")
    assert await snapshot_rows(storage, session_id) == 1


async def test_unknown_session(storage: LedgerSessionStorage, session_id: str) -> None:
    assert await storage.get_session(session_id) is None
    assert await storage.get_fields_version(session_id) is None
    assert await storage.update_session(session_id, title="nobody") is None
    assert await storage.update_session(session_id, agent_name="x", expected_version=1) is None
    assert await storage.delete_session(session_id) is False
    assert await storage.count_messages(session_id) == 0
    assert await storage.list_raw_messages(session_id) == []
    with pytest.raises(ValueError, match="no raw messages"):
        await storage.snapshot(session_id, summary_of("nothing"), 1, 0)
    # None of these created the session.
    assert not await session_row_exists(storage, session_id)
    assert await snapshot_rows(storage, session_id) == 0


async def test_reopening_the_database_keeps_everything(database: Database, session_id: str) -> None:
    first = LedgerSessionStorage(database.url)
    try:
        await append_users(first, session_id, 3)
        await storage_snapshot(first, session_id)
        await first.append(session_id, "r-4", AssistantMessage(content="after the checkpoint"))
        before = await first.load(session_id)
    finally:
        await first.close()

    async with LedgerSessionStorage(database.url) as reopened:
        after = await reopened.load(session_id)
        assert after == before
        assert after.snapshot is not None and after.snapshot.compacted_through_sequence == 2
        assert tail_sequences(after.raw_tail) == [3, 4]
        assert tail_sequences(await reopened.list_raw_messages(session_id)) == [1, 2, 3, 4]
        # The counter survived too: the next append continues the sequence.
        assert await reopened.append(session_id, "r-5", UserMessage(content="m5")) == 5


async def storage_snapshot(storage: LedgerSessionStorage, session_id: str) -> None:
    await storage.snapshot(session_id, summary_of("m1..m2"), 2, 0)


# -- the seed's checklist -------------------------------------------------------------


async def test_store_never_checkpoints_unless_asked(storage: LedgerSessionStorage, session_id: str) -> None:
    long_text = "word " * 20_000  # far beyond any context window a compactor would watch
    for index in range(1, 41):
        message = (
            UserMessage(content=f"{index}: {long_text}")
            if index % 2
            else AssistantMessage(content=f"{index}: {long_text}")
        )
        assert await storage.append(session_id, f"r-{index}", message) == index

    view = await storage.load(session_id)
    assert view.snapshot is None
    assert tail_sequences(view.raw_tail) == list(range(1, 41))
    assert await snapshot_rows(storage, session_id) == 0


async def test_everything_of_a_record_is_preserved(storage: LedgerSessionStorage, session_id: str) -> None:
    base = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    timing = MessageTiming(
        started_at=base,
        completed_at=base + timedelta(seconds=3, microseconds=1),
        duration_ns=3_000_001_999,
        reasoning_started_at=base + timedelta(microseconds=10),
        reasoning_completed_at=base + timedelta(seconds=1, microseconds=11),
        reasoning_duration_ns=1_000_001_000,
        content_started_at=base + timedelta(seconds=1, microseconds=12),
        content_completed_at=base + timedelta(seconds=3),
        content_duration_ns=1_999_988_000,
    )
    usage = ModelUsage(
        input_tokens=1_200,
        output_tokens=340,
        cache_read_tokens=1_000,
        cache_write_tokens=150,
        reasoning_tokens=120,
    )
    metadata: dict[str, JsonValue] = {
        "user": {"id": 7, "plan": "pro"},
        "flags": [True, False, None],
        "ratio": 0.25,
        "empty": {},
    }
    tags: dict[str, JsonValue] = {"domain": "vision", "priority": 2, "labels": ["a", "b"]}

    messages = rich_messages()
    for index, (message, _) in enumerate(messages, start=1):
        is_assistant = isinstance(message, AssistantMessage)
        sequence = await storage.append(
            session_id,
            "req-rich",
            message,
            timing,
            metadata=metadata,
            tags=tags,
            usage=usage if is_assistant else None,
        )
        assert sequence == index

    records = (await storage.load(session_id)).raw_tail
    assert records == await storage.list_raw_messages(session_id)
    assert len(records) == len(messages)
    for record, (message, _) in zip(records, messages, strict=True):
        assert record.message == message
        assert type(record.message) is type(message)
        assert record.message.role == message.role
        assert record.message.attributes == message.attributes
        assert record.metadata == metadata
        assert record.tags == tags
        for name in (
            "started_at",
            "completed_at",
            "duration_ns",
            "reasoning_started_at",
            "reasoning_completed_at",
            "reasoning_duration_ns",
            "content_started_at",
            "content_completed_at",
            "content_duration_ns",
        ):
            assert getattr(record, name) == getattr(timing, name), name
        if isinstance(message, AssistantMessage):
            assert (record.input_tokens, record.output_tokens) == (1_200, 340)
            assert (record.cache_read_tokens, record.cache_write_tokens) == (1_000, 150)
            assert record.reasoning_tokens == 120
            assert record.total_tokens == 1_540
        else:
            assert record.input_tokens is None and record.output_tokens is None
            assert record.cache_read_tokens is None and record.cache_write_tokens is None
            assert record.reasoning_tokens is None

    assistant = records[2].message
    assert isinstance(assistant, AssistantMessage)
    assert assistant.reasoning == "The user wants a description; call the tool first."
    assert (assistant.provider, assistant.model) == ("anthropic", "claude-example")
    assert [dict(block) for block in assistant.replay_blocks] == [
        {"type": "thinking", "thinking": "...", "signature": "c2lnbmF0dXJl"},
        {"type": "redacted_thinking", "data": "b3BhcXVl", "nested": {"a": [1, None, True]}},
    ]
    user = records[1].message
    assert isinstance(user, UserMessage) and isinstance(user.content, list)
    image = user.content[1]
    assert isinstance(image, ImageContent) and isinstance(image.source, ImageBytesSource)
    assert image.source.data == b"\x89PNG\r\n\x00\xff"

    # The role column holds zett's numeric MessageKind, as zett's own store writes it.
    async def work(conn: AsyncConnection) -> list[int]:
        rows = await conn.execute(
            select(raw_messages_table.c.role)
            .where(raw_messages_table.c.session_id == session_id)
            .order_by(raw_messages_table.c.sequence)
        )
        return [row.role for row in rows]

    assert await storage.ledger.read(work) == [int(kind) for _, kind in messages]
    assert [record.message.role for record in records] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.AGENT,
        MessageRole.ASSISTANT,
    ]


# -- snapshot rules -------------------------------------------------------------------


async def test_snapshot_boundary_must_exist(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 3)

    with pytest.raises(ValueError, match="not an existing raw-log sequence") as raised:
        await storage.snapshot(session_id, summary_of("too far"), 4, 0)
    assert not isinstance(raised.value, SnapshotConflict)
    with pytest.raises(ValueError, match="compacted_through_sequence"):
        await storage.snapshot(session_id, summary_of("zero"), 0, 0)
    with pytest.raises(ValueError, match="compacted_through_sequence"):
        await storage.snapshot(session_id, summary_of("negative"), -1, 0)
    with pytest.raises(ValueError, match="expected_version"):
        await storage.snapshot(session_id, summary_of("bad version"), 1, -1)

    assert (await storage.load(session_id)).snapshot is None
    assert await snapshot_rows(storage, session_id) == 0


async def test_snapshot_boundary_must_advance(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 5)
    await storage.snapshot(session_id, summary_of("through 3"), 3, 0)

    for boundary in (3, 2, 1):
        with pytest.raises(ValueError, match="must advance") as raised:
            await storage.snapshot(session_id, summary_of(f"back to {boundary}"), boundary, 1)
        assert not isinstance(raised.value, SnapshotConflict)

    view = await storage.load(session_id)
    assert view.snapshot is not None
    assert (view.snapshot.version, view.snapshot.compacted_through_sequence) == (1, 3)
    assert await snapshot_rows(storage, session_id) == 1
    # Advancing still works afterwards.
    assert (await storage.snapshot(session_id, summary_of("through 4"), 4, 1)).version == 2


async def test_snapshot_needs_raw_messages(storage: LedgerSessionStorage, session_id: str) -> None:
    # A session created explicitly has a row but no raw message.
    await storage.create_session(session_id=session_id, title="empty")
    with pytest.raises(ValueError, match="no raw messages"):
        await storage.snapshot(session_id, summary_of("nothing"), 1, 0)
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.message_count == 0
    assert (await storage.load(session_id)).snapshot is None
    assert await snapshot_rows(storage, session_id) == 0


# -- concurrency, parents, ids ----------------------------------------------------------


async def test_concurrent_appends_in_one_process(database: Database, session_id: str) -> None:
    count = 50
    async with LedgerSessionStorage(database.url, pool_size=5, max_overflow=5) as storage:
        sequences = await asyncio.gather(
            *(
                storage.append(session_id, f"r-{index}", UserMessage(content=f"concurrent {index}"))
                for index in range(count)
            )
        )
        assert sorted(sequences) == list(range(1, count + 1))

        records = await storage.list_raw_messages(session_id)
        assert tail_sequences(records) == list(range(1, count + 1))
        # Each call's message got exactly the sequence that call returned.
        by_sequence = {record.sequence: record.message for record in records}
        for index, sequence in enumerate(sequences):
            assert by_sequence[sequence] == UserMessage(content=f"concurrent {index}")
        assert await storage.count_messages(session_id) == count
        summary = await storage.get_session(session_id)
        assert summary is not None and summary.message_count == count


async def test_longest_ids(storage: LedgerSessionStorage, session_id: str) -> None:
    # 255 characters, most of them 4 bytes in UTF-8: the widest id any backend must hold.
    longest = session_id + "😀" * (MAX_ID_LENGTH - len(session_id))
    parent = "p" * MAX_ID_LENGTH
    request = "r" * (MAX_ID_LENGTH - 1) + "😀"
    assert len(longest) == len(parent) == len(request) == MAX_ID_LENGTH

    assert await storage.append(longest, request, UserMessage(content="hi"), parent_session_id=parent) == 1
    view = await storage.load(longest)
    assert view.parent_session_id == parent
    assert [(record.session_id, record.request_id) for record in view.raw_tail] == [(longest, request)]
    summary = await storage.get_session(longest)
    assert summary is not None and summary.session_id == longest
    assert (await storage.snapshot(longest, summary_of("hi"), 1, 0)).session_id == longest

    with pytest.raises(ValueError, match="session_id"):
        await storage.append(longest + "x", "r", UserMessage(content="too long"))
    with pytest.raises(ValueError, match="request_id"):
        await storage.append(session_id, request + "x", UserMessage(content="too long"))
    assert await storage.get_session(session_id) is None


# -- extras -----------------------------------------------------------------------------


async def test_update_session(storage: LedgerSessionStorage, session_id: str) -> None:
    await storage.append(session_id, "r", UserMessage(content="m1"), title="Old", agent_name="alpha")
    assert await storage.get_fields_version(session_id) == 1

    updated = await storage.update_session(session_id, title="  New title ")
    assert updated is not None
    assert (updated.title, updated.agent_name, updated.message_count) == ("New title", "alpha", 1)
    assert await storage.get_fields_version(session_id) == 2

    updated = await storage.update_session(session_id, agent_name="beta")
    assert updated is not None and (updated.title, updated.agent_name) == ("New title", "beta")
    assert await storage.get_fields_version(session_id) == 3
    assert await storage.get_session(session_id) == updated

    with pytest.raises(ValueError, match="At least one session field"):
        await storage.update_session(session_id)
    for bad in ({"title": "   "}, {"title": "t" * 201}, {"agent_name": ""}, {"agent_name": "a" * 65}):
        with pytest.raises(ValueError):
            await storage.update_session(session_id, **bad)  # type: ignore[arg-type]
    assert await storage.get_fields_version(session_id) == 3

    # Compare-and-set on fields_version.
    cas = await storage.update_session(session_id, title="CAS", expected_version=3)
    assert cas is not None and cas.title == "CAS"
    assert await storage.get_fields_version(session_id) == 4
    with pytest.raises(VersionConflict) as raised:
        await storage.update_session(session_id, title="stale", expected_version=3)
    assert isinstance(raised.value, ValueError)
    current = await storage.get_session(session_id)
    assert current is not None and current.title == "CAS"
    assert await storage.get_fields_version(session_id) == 4
    with pytest.raises(ValueError, match="expected_version"):
        await storage.update_session(session_id, title="x", expected_version=0)


async def test_append_that_changes_a_field_bumps_fields_version(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """Only a change counts: an append without fields, or with the stored values, leaves
    ``fields_version`` alone, so a compare-and-set reader is not disturbed by it."""
    await storage.create_session(session_id=session_id)
    assert await storage.get_fields_version(session_id) == 1
    await storage.append(session_id, "r", UserMessage(content="m1"))
    assert await storage.get_fields_version(session_id) == 1
    await storage.append(session_id, "r", UserMessage(content="m2"), title="A")
    assert await storage.get_fields_version(session_id) == 2
    await storage.append(session_id, "r", UserMessage(content="m3"), title=" A ", agent_name=None)
    assert await storage.get_fields_version(session_id) == 2
    await storage.append(session_id, "r", UserMessage(content="m4"), title="A", agent_name="x")
    assert await storage.get_fields_version(session_id) == 3
    await storage.append(session_id, "r", UserMessage(content="m5"), title="a", agent_name="y")
    assert await storage.get_fields_version(session_id) == 4  # one append, one bump
    summary = await storage.get_session(session_id)
    assert summary is not None and (summary.title, summary.agent_name, summary.message_count) == ("a", "y", 5)


async def test_append_that_changes_a_field_defeats_a_stale_compare_and_set(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """A title an append set is never overwritten silently by an update computed before it."""
    await storage.append(session_id, "r", UserMessage(content="m1"), title="Draft")
    read = await storage.get_fields_version(session_id)
    assert read == 1
    await storage.append(session_id, "r", UserMessage(content="m2"), title="From the agent")
    with pytest.raises(VersionConflict, match="version 2, not 1"):
        await storage.update_session(session_id, title="From the stale editor", expected_version=read)
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.title == "From the agent"
    # Read again, the editor's update goes through.
    assert (await storage.update_session(session_id, title="Edited", expected_version=2)) is not None
    assert await storage.get_fields_version(session_id) == 3


async def test_concurrent_appends_with_fields_lose_no_change(database: Database, session_id: str) -> None:
    count = 20
    async with LedgerSessionStorage(database.url, pool_size=5, max_overflow=5) as storage:
        await storage.create_session(session_id=session_id, agent_name="start")
        sequences = await asyncio.gather(
            *(
                storage.append(
                    session_id, f"r-{index}", UserMessage(content=f"m{index}"), title=f"title {index}"
                )
                for index in range(count)
            )
        )
        assert sorted(sequences) == list(range(1, count + 1))
        # Every append changed the title (each its own): one bump each, none lost.
        assert await storage.get_fields_version(session_id) == 1 + count
        summary = await storage.get_session(session_id)
        assert summary is not None and summary.agent_name == "start"
        # The title is the last appender's: the one whose message has the last sequence.
        last = (await storage.list_raw_messages(session_id))[-1]
        assert summary.title == f"title {last.request_id.removeprefix('r-')}"


async def test_refused_append_changes_no_field(storage: LedgerSessionStorage, session_id: str) -> None:
    parent = f"{session_id}-parent"
    await storage.append(session_id, "r", UserMessage(content="m1"), parent_session_id=parent, title="Kept")
    before = await storage.get_session(session_id)
    with pytest.raises(ValueError, match="parent"):
        await storage.append(session_id, "r", UserMessage(content="x"), title="Lost", agent_name="lost")
    assert await storage.get_session(session_id) == before
    assert await storage.get_fields_version(session_id) == 1

    assert await storage.delete_session(session_id)
    with pytest.raises(SessionDeleted):
        await storage.append(
            session_id, "r", UserMessage(content="late"), parent_session_id=parent, title="Late"
        )
    created = await storage.create_session(session_id=session_id)
    assert (created.title, created.agent_name) == (None, None)


async def test_delete_session(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 3)
    await storage.snapshot(session_id, summary_of("m1..m2"), 2, 0)

    assert await storage.delete_session(session_id) is True
    assert await storage.delete_session(session_id) is False

    assert await storage.get_session(session_id) is None
    assert await storage.list_raw_messages(session_id) == []
    assert await storage.count_messages(session_id) == 0
    assert await snapshot_rows(storage, session_id) == 0
    view = await storage.load(session_id)
    assert view.snapshot is None and view.raw_tail == []
    # A late append does not revive it; creating it again does, numbering on from 3.
    with pytest.raises(SessionDeleted, match="create_session"):
        await storage.append(session_id, "r", UserMessage(content="late"))
    await storage.create_session(session_id=session_id)
    assert await storage.append(session_id, "r", UserMessage(content="again")) == 4
    assert (await storage.snapshot(session_id, summary_of("again"), 4, 0)).version == 1


async def test_list_sessions(storage: LedgerSessionStorage, session_id: str) -> None:
    # A session type of our own keeps this test's sessions apart in the shared database.
    kind = 1_000_000 + uuid.uuid4().int % 1_000_000_000
    other_kind = kind + 1
    ids = [f"{session_id}-{index}" for index in range(5)]
    appends = {sid: index + 1 for index, sid in enumerate(ids)}  # 1..5 messages each
    for sid in ids:
        await storage.create_session(session_id=sid, session_type=kind)
    odd = f"{session_id}-odd"
    await storage.create_session(session_id=odd, session_type=other_kind)
    # Activity order: the last session to receive a message comes first.
    for sid in ids:
        for number in range(appends[sid]):
            await storage.append(sid, "r", UserMessage(content=f"{sid} {number}"))

    newest_first = list(reversed(ids))
    pages = [
        await storage.list_sessions(session_types=[kind], limit=2, offset=offset) for offset in (0, 2, 4, 6)
    ]
    assert [len(page) for page in pages] == [2, 2, 1, 0]
    listed = [summary for page in pages for summary in page]
    assert [summary.session_id for summary in listed] == newest_first
    assert all(summary.session_type == kind for summary in listed)
    for summary in listed:
        assert summary.message_count == appends[summary.session_id]
        assert summary.message_count == await storage.count_messages(summary.session_id)
    assert [summary.updated_at for summary in listed] == sorted(
        (summary.updated_at for summary in listed), reverse=True
    )

    both = await storage.list_sessions(session_types=[kind, other_kind], limit=100)
    assert {summary.session_id for summary in both} == {*ids, odd}
    only_other = await storage.list_sessions(session_types=[other_kind])
    assert [summary.session_id for summary in only_other] == [odd]

    # An update is activity too: it moves the session to the front.
    await storage.update_session(ids[0], title="bumped")
    first = await storage.list_sessions(session_types=[kind], limit=1)
    assert [summary.session_id for summary in first] == [ids[0]]

    # Unfiltered listing includes sessions of every type, newest first.
    everything = await storage.list_sessions(limit=3)
    assert len(everything) == 3
    assert everything[0].session_id == ids[0]

    with pytest.raises(ValueError, match="limit"):
        await storage.list_sessions(limit=0)
    with pytest.raises(ValueError, match="offset"):
        await storage.list_sessions(offset=-1)
    with pytest.raises(ValueError, match="session_type"):
        await storage.list_sessions(session_types=[-1])


# -- timestamps ---------------------------------------------------------------------------


# -- races and limits -------------------------------------------------------------------


async def test_concurrent_snapshots_one_wins(database: Database, session_id: str) -> None:
    async with LedgerSessionStorage(database.url, pool_size=5, max_overflow=5) as storage:
        await append_users(storage, session_id, 6)
        results = await asyncio.gather(
            *(storage.snapshot(session_id, summary_of(f"racer {n}"), n, 0) for n in range(1, 7)),
            return_exceptions=True,
        )
        winners = [result for result in results if not isinstance(result, BaseException)]
        losers = [result for result in results if isinstance(result, BaseException)]
        assert len(winners) == 1, results
        assert all(isinstance(loser, SnapshotConflict) for loser in losers), losers
        view = await storage.load(session_id)
        assert view.snapshot is not None
        assert view.snapshot.id == winners[0].id and view.snapshot.version == 1
        assert await snapshot_rows(storage, session_id) == 1


async def test_concurrent_create_session_one_wins(database: Database, session_id: str) -> None:
    async with LedgerSessionStorage(database.url, pool_size=5, max_overflow=5) as storage:
        results = await asyncio.gather(
            *(storage.create_session(session_id=session_id, title=f"racer {n}") for n in range(6)),
            return_exceptions=True,
        )
        winners = [result for result in results if not isinstance(result, BaseException)]
        losers = [result for result in results if isinstance(result, BaseException)]
        assert len(winners) == 1, results
        assert all(isinstance(loser, ValueError) for loser in losers), losers
        assert all("already exists" in str(loser) for loser in losers), losers
        assert await storage.get_session(session_id) == winners[0]


async def test_sequences_beyond_32_bits(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 1)
    far = 2**32 + 5

    async def jump(conn: AsyncConnection) -> None:
        await conn.execute(
            sessions_table.update().where(sessions_table.c.id == session_id).values(last_sequence=far)
        )

    await storage.ledger.write(jump)
    assert await storage.append(session_id, "r", UserMessage(content="far")) == far + 1
    assert await storage.count_messages(session_id) == far + 1
    view = await storage.load(session_id)
    assert tail_sequences(view.raw_tail) == [1, far + 1]
    snapshot = await storage.snapshot(session_id, summary_of("far"), far + 1, 0)
    assert snapshot.compacted_through_sequence == far + 1
    assert (await storage.load(session_id)).raw_tail == []
