"""Conformance of ``LedgerSessionStorage`` to zett-agent's ``SessionStorage`` contract.

The contract is ``zett_agent.extensions.persistence.SessionStorage`` (load, append,
snapshot) and the extras of zett's own ``SQLSessionStorage`` (``_sql_storage.py``).
Every test runs on every backend through the ``storage`` / ``database`` fixtures;
the backends share one database each, so every test uses its own session ids.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import RawMessageRecord, SessionStorage, SessionSummary
from zett_agent.json_types import JsonValue
from zett_agent.messages import (
    AgentMessage,
    AnyMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    MessageRole,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.storage import MessageKind

from chatledger import SessionDeleted, SnapshotConflict, VersionConflict
from chatledger.schema import raw_messages_table, sessions_table, snapshots_table
from chatledger.types import MAX_ID_LENGTH
from chatledger.zett import LedgerSessionStorage

from .conftest import Database

# -- helpers --------------------------------------------------------------------------


def summary_of(text: str) -> CompactedMessage:
    return CompactedMessage(content=f"summary: {text}")


async def append_users(
    storage: LedgerSessionStorage, session_id: str, count: int, start: int = 1
) -> list[int]:
    """Append ``count`` user messages "m<start>".. one after another; return their sequences."""
    return [
        await storage.append(session_id, f"r-{index}", UserMessage(content=f"m{index}"))
        for index in range(start, start + count)
    ]


async def all_session_ids(storage: LedgerSessionStorage) -> set[str]:
    """Every session id in the (shared) database, page by page."""
    found: set[str] = set()
    offset = 0
    while page := await storage.list_sessions(limit=500, offset=offset):
        found.update(summary.session_id for summary in page)
        offset += len(page)
    return found


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


def tail_sequences(records: list[RawMessageRecord]) -> list[int]:
    return [record.sequence for record in records]


def is_utc(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() == timedelta(0)


# -- the SessionStorage protocol ------------------------------------------------------


async def test_storage_satisfies_zett_protocol(storage: LedgerSessionStorage) -> None:
    conforming: SessionStorage = storage  # checked by mypy/pyright against zett's Protocol
    assert callable(conforming.load) and callable(conforming.append) and callable(conforming.snapshot)


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


async def test_two_message_turn(storage: LedgerSessionStorage, session_id: str) -> None:
    user = UserMessage(content="What is 20 + 22?")
    assistant = AssistantMessage(content="42", provider="scripted", model="m-1")

    assert await storage.append(session_id, "req-1", user) == 1
    assert await storage.append(session_id, "req-1", assistant, usage=ModelUsage(10, 2)) == 2

    view = await storage.load(session_id)
    assert view.snapshot is None
    assert tail_sequences(view.raw_tail) == [1, 2]
    assert [record.message for record in view.raw_tail] == [user, assistant]
    assert view.messages == [user, assistant]
    assert {record.session_id for record in view.raw_tail} == {session_id}
    assert {record.request_id for record in view.raw_tail} == {"req-1"}
    assert len({record.id for record in view.raw_tail}) == 2


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


async def test_compaction_then_new_tail(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 4)
    summary = summary_of("m1..m3")

    snapshot = await storage.snapshot(session_id, summary, 3, 0)
    assert (snapshot.version, snapshot.compacted_through_sequence) == (1, 3)
    assert snapshot.session_id == session_id
    assert snapshot.compacted_message == summary

    assert await append_users(storage, session_id, 2, start=5) == [5, 6]

    view = await storage.load(session_id)
    assert view.snapshot is not None
    assert view.snapshot.id == snapshot.id
    assert (view.snapshot.version, view.snapshot.compacted_through_sequence) == (1, 3)
    assert view.snapshot.compacted_message == summary
    assert tail_sequences(view.raw_tail) == [4, 5, 6]
    assert view.messages == [summary, *(UserMessage(content=f"m{index}") for index in (4, 5, 6))]

    # A second checkpoint advances the boundary; the tail follows it.
    second = await storage.snapshot(session_id, summary_of("m1..m5"), 5, 1)
    assert second.version == 2
    view = await storage.load(session_id)
    assert view.snapshot is not None and view.snapshot.version == 2
    assert tail_sequences(view.raw_tail) == [6]


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


async def test_compacted_through_sequence_is_inclusive(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await append_users(storage, session_id, 3)

    # The boundary may be the last sequence: the checkpoint then represents all of it.
    await storage.snapshot(session_id, summary_of("all three"), 3, 0)
    view = await storage.load(session_id)
    assert view.snapshot is not None and view.snapshot.compacted_through_sequence == 3
    assert view.raw_tail == []
    assert view.messages == [summary_of("all three")]

    assert await storage.append(session_id, "r-4", UserMessage(content="m4")) == 4
    view = await storage.load(session_id)
    assert tail_sequences(view.raw_tail) == [4]


async def test_tail_starts_strictly_after_boundary(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 8)

    for version, boundary in enumerate((1, 4, 7), start=1):
        await storage.snapshot(session_id, summary_of(f"through {boundary}"), boundary, version - 1)
        view = await storage.load(session_id)
        assert view.snapshot is not None
        assert view.snapshot.compacted_through_sequence == boundary
        assert tail_sequences(view.raw_tail) == list(range(boundary + 1, 9))
        assert boundary not in tail_sequences(view.raw_tail)


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


def rich_messages() -> list[tuple[AnyMessage, MessageKind]]:
    return [
        (SystemMessage(content="Be exact.", attributes={"origin": "config"}), MessageKind.SYSTEM),
        (
            UserMessage(
                content=[
                    TextContent("What is in this picture? ünïcödé 😀"),
                    ImageContent(
                        ImageBytesSource(data=b"\x89PNG\r\n\x00\xff", media_type="image/png"), alt_text="a"
                    ),
                ],
                attributes={"client": {"name": "editor", "version": [1, 2]}},
            ),
            MessageKind.USER,
        ),
        (
            AssistantMessage(
                content="Let me look.",
                reasoning="The user wants a description; call the tool first.",
                tool_calls=(
                    ToolCall("call-7", "describe_image", {"detail": "high", "crop": [0, 0, 10, 10]}),
                ),
                provider="anthropic",
                model="claude-example",
                replay_blocks=(
                    {"type": "thinking", "thinking": "...", "signature": "c2lnbmF0dXJl"},
                    {"type": "redacted_thinking", "data": "b3BhcXVl", "nested": {"a": [1, None, True]}},
                ),
                attributes={"trace": "t-1", "score": 0.5},
            ),
            MessageKind.ASSISTANT,
        ),
        (
            ToolMessage(
                tool_call_id="call-7", name="describe_image", content="A cat.", attributes={"ms": 12}
            ),
            MessageKind.TOOL,
        ),
        (AgentMessage(content="Continue with the summary.", attributes={"by": "goal"}), MessageKind.AGENT),
        (
            AssistantMessage(content="It is a cat.", include_in_messages=True, attributes={"final": True}),
            MessageKind.ASSISTANT,
        ),
    ]


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


async def test_request_id_is_not_an_idempotency_key(storage: LedgerSessionStorage, session_id: str) -> None:
    message = UserMessage(content="same words")
    assert await storage.append(session_id, "req-same", message) == 1
    assert await storage.append(session_id, "req-same", message) == 2

    records = await storage.list_raw_messages(session_id)
    assert tail_sequences(records) == [1, 2]
    assert [record.request_id for record in records] == ["req-same", "req-same"]
    assert records[0].id != records[1].id
    assert await storage.count_messages(session_id) == 2


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


async def test_snapshot_refuses_non_checkpoint_message(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await append_users(storage, session_id, 1)
    with pytest.raises(TypeError, match="compacted_message"):
        await storage.snapshot(session_id, UserMessage(content="not a summary"), 1, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="CompactedMessage"):
        await storage.append(session_id, "r", summary_of("belongs in snapshot()"))
    assert await storage.count_messages(session_id) == 1


async def test_raw_messages_unchanged_by_snapshot(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 6)
    before = await storage.list_raw_messages(session_id)

    await storage.snapshot(session_id, summary_of("through 4"), 4, 0)
    await storage.snapshot(session_id, summary_of("through 6"), 6, 1)

    after = await storage.list_raw_messages(session_id)
    assert after == before
    assert tail_sequences(after) == [1, 2, 3, 4, 5, 6]
    assert await storage.count_messages(session_id) == 6
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.message_count == 6


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


async def test_parent_is_immutable(storage: LedgerSessionStorage, session_id: str) -> None:
    parent, other = f"{session_id}-parent", f"{session_id}-other"
    assert await storage.append(session_id, "r-1", UserMessage(content="m1"), parent_session_id=parent) == 1
    before = await storage.get_session(session_id)
    assert before is not None and before.parent_session_id == parent

    for wrong in (other, None):
        with pytest.raises(ValueError, match="parent"):
            await storage.append(
                session_id, "r-2", UserMessage(content="never stored"), parent_session_id=wrong
            )

    # Nothing was written: no message, no counter move, no activity bump.
    assert await storage.get_session(session_id) == before
    assert tail_sequences(await storage.list_raw_messages(session_id)) == [1]
    assert (await storage.load(session_id)).parent_session_id == parent
    # The same parent goes on appending, with the next sequence.
    assert await storage.append(session_id, "r-3", UserMessage(content="m2"), parent_session_id=parent) == 2


async def test_parent_cannot_be_added_later(storage: LedgerSessionStorage, session_id: str) -> None:
    assert await storage.append(session_id, "r-1", UserMessage(content="root")) == 1
    with pytest.raises(ValueError, match="parent"):
        await storage.append(session_id, "r-2", UserMessage(content="x"), parent_session_id=f"{session_id}-p")
    with pytest.raises(ValueError, match="parent_session_id"):
        await storage.append(session_id, "r-3", UserMessage(content="x"), parent_session_id=session_id)
    assert await storage.count_messages(session_id) == 1
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.parent_session_id is None


async def test_ids_are_case_and_trailing_space_sensitive(storage: LedgerSessionStorage) -> None:
    unique = uuid.uuid4().hex
    ids = [f"abc-{unique}", f"ABC-{unique}", f"abc-{unique} "]
    for index, sid in enumerate(ids, start=1):
        assert await storage.append(sid, "r", UserMessage(content=f"message {index}")) == 1
        assert await storage.append(sid, "r", AssistantMessage(content=f"reply {index}")) == 2

    listed = await all_session_ids(storage)
    for index, sid in enumerate(ids, start=1):
        assert sid in listed
        summary = await storage.get_session(sid)
        assert summary is not None and summary.session_id == sid and summary.message_count == 2
        view = await storage.load(sid)
        assert [record.message for record in view.raw_tail] == [
            UserMessage(content=f"message {index}"),
            AssistantMessage(content=f"reply {index}"),
        ]
        assert {record.session_id for record in view.raw_tail} == {sid}
    # Deleting one leaves the others.
    assert await storage.delete_session(ids[2]) is True
    assert await storage.get_session(ids[2]) is None
    assert await storage.count_messages(ids[0]) == 2
    assert await storage.count_messages(ids[1]) == 2


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


async def test_create_session(storage: LedgerSessionStorage, session_id: str) -> None:
    parent = f"{session_id}-parent"
    created = await storage.create_session(
        session_id=session_id,
        parent_session_id=parent,
        title="  Planning  ",
        agent_name="planner",
        session_type=3,
    )
    assert isinstance(created, SessionSummary)
    assert (created.session_id, created.parent_session_id, created.session_type) == (session_id, parent, 3)
    assert (created.title, created.agent_name, created.message_count) == ("Planning", "planner", 0)
    assert is_utc(created.created_at) and created.created_at == created.updated_at

    assert await storage.get_session(session_id) == created
    with pytest.raises(ValueError, match="already exists"):
        await storage.create_session(session_id=session_id)
    assert await storage.get_session(session_id) == created

    view = await storage.load(session_id)
    assert (view.parent_session_id, view.session_type, view.title, view.agent_name) == (
        parent,
        3,
        "Planning",
        "planner",
    )
    # Appends continue the created session, with its parent.
    assert await storage.append(session_id, "r", UserMessage(content="m1"), parent_session_id=parent) == 1
    after = await storage.get_session(session_id)
    assert after is not None and after.message_count == 1 and after.session_type == 3

    generated = await storage.create_session()
    try:
        assert uuid.UUID(generated.session_id).version == 7
    finally:
        await storage.delete_session(generated.session_id)

    for bad in ({"title": " "}, {"title": "t" * 201}, {"agent_name": "a" * 65}, {"session_type": -1}):
        with pytest.raises(ValueError):
            await storage.create_session(session_id=f"{session_id}-bad", **bad)
    with pytest.raises(ValueError, match="parent_session_id"):
        await storage.create_session(session_id=f"{session_id}-self", parent_session_id=f"{session_id}-self")
    assert await storage.get_session(f"{session_id}-bad") is None


async def test_append_sets_fields_only_on_creation(storage: LedgerSessionStorage, session_id: str) -> None:
    await storage.append(session_id, "r", UserMessage(content="m1"), title="First", agent_name="alpha")
    await storage.append(session_id, "r", UserMessage(content="m2"), title="Second", agent_name="beta")
    summary = await storage.get_session(session_id)
    assert summary is not None
    assert (summary.title, summary.agent_name, summary.message_count) == ("First", "alpha", 2)


async def test_get_session(storage: LedgerSessionStorage, session_id: str) -> None:
    await storage.append(session_id, "r", UserMessage(content="m1"), title="Hello", agent_name="greeter")
    await storage.append(session_id, "r", AssistantMessage(content="hi"))

    summary = await storage.get_session(session_id)
    assert summary is not None
    assert summary.session_id == session_id
    assert summary.parent_session_id is None
    assert (summary.session_type, summary.title, summary.agent_name) == (0, "Hello", "greeter")
    assert summary.message_count == 2
    assert is_utc(summary.created_at) and is_utc(summary.updated_at)
    assert summary.created_at <= summary.updated_at
    records = await storage.list_raw_messages(session_id)
    assert summary.updated_at == records[-1].created_at


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


async def test_list_raw_messages(storage: LedgerSessionStorage, session_id: str) -> None:
    await append_users(storage, session_id, 10)

    async def sequences(**bounds: object) -> list[int]:
        return tail_sequences(await storage.list_raw_messages(session_id, **bounds))  # type: ignore[arg-type]

    assert await sequences() == list(range(1, 11))
    assert await sequences(after_sequence=3) == list(range(4, 11))
    assert await sequences(through_sequence=5) == [1, 2, 3, 4, 5]
    assert await sequences(after_sequence=2, through_sequence=6) == [3, 4, 5, 6]
    assert await sequences(after_sequence=2, limit=2, offset=1) == [4, 5]
    assert await sequences(limit=3) == [1, 2, 3]
    assert await sequences(offset=8) == [9, 10]
    assert await sequences(after_sequence=10) == []
    assert await sequences(after_sequence=5, through_sequence=5) == []
    assert await sequences(through_sequence=100) == list(range(1, 11))
    records = await storage.list_raw_messages(session_id, after_sequence=6, through_sequence=8)
    assert [record.message for record in records] == [UserMessage(content="m7"), UserMessage(content="m8")]

    for bad in (
        {"after_sequence": -1},
        {"through_sequence": 0},
        {"through_sequence": -3},
        {"limit": 0},
        {"limit": -1},
        {"offset": -1},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            await storage.list_raw_messages(session_id, **bad)


async def test_count_messages(storage: LedgerSessionStorage, session_id: str) -> None:
    assert await storage.count_messages(session_id) == 0
    await storage.create_session(session_id=session_id)
    assert await storage.count_messages(session_id) == 0
    await append_users(storage, session_id, 7)
    assert await storage.count_messages(session_id) == 7
    await storage.snapshot(session_id, summary_of("m1..m5"), 5, 0)
    assert await storage.count_messages(session_id) == 7
    assert await storage.count_messages(session_id) == len(await storage.list_raw_messages(session_id))


# -- timestamps ---------------------------------------------------------------------------


async def test_timestamps_keep_microseconds_and_come_back_utc(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    india = timezone(timedelta(hours=5, minutes=30))
    started = datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC)
    timing = MessageTiming(
        started_at=started,
        completed_at=datetime(2024, 3, 1, 5, 30, 0, 1, tzinfo=india),  # 2024-03-01 00:00:00.000001 UTC
        duration_ns=2_000,
        reasoning_started_at=datetime(2024, 3, 1, 0, 0, 0, 7, tzinfo=UTC),
        reasoning_completed_at=datetime(2024, 2, 29, 19, 0, 0, 123_456, tzinfo=timezone(timedelta(hours=-5))),
        reasoning_duration_ns=0,
        content_started_at=datetime(1999, 12, 31, 23, 59, 59, 500_001, tzinfo=UTC),
        content_completed_at=datetime(2038, 1, 19, 3, 14, 8, 654_321, tzinfo=UTC),  # past 32-bit epoch
        content_duration_ns=1,
    )
    await storage.append(session_id, "r", AssistantMessage(content="timed"), timing)
    await storage.snapshot(session_id, summary_of("timed"), 1, 0)

    (record,) = await storage.list_raw_messages(session_id)
    for name in (
        "started_at",
        "completed_at",
        "reasoning_started_at",
        "reasoning_completed_at",
        "content_started_at",
        "content_completed_at",
    ):
        stored, given = getattr(record, name), getattr(timing, name)
        assert stored == given, name
        assert stored.tzinfo is UTC or stored.tzinfo == UTC, name
        assert is_utc(stored), name
        assert stored.microsecond == given.astimezone(UTC).microsecond, name
        assert stored.astimezone(UTC).replace(tzinfo=None) == given.astimezone(UTC).replace(tzinfo=None)
    assert record.completed_at.microsecond == 1
    assert record.started_at.microsecond == 999_999

    view = await storage.load(session_id)
    assert view.snapshot is not None
    summary = await storage.get_session(session_id)
    assert summary is not None
    for stamp in (
        record.created_at,
        record.updated_at,
        view.snapshot.created_at,
        view.snapshot.updated_at,
        summary.created_at,
        summary.updated_at,
    ):
        assert is_utc(stamp)
    # Store-assigned stamps keep microseconds too: the append's own clock reading comes back.
    assert summary.updated_at == record.created_at
    assert summary.created_at == record.created_at
    assert record.created_at == record.updated_at


async def test_naive_datetimes_are_refused(storage: LedgerSessionStorage, session_id: str) -> None:
    naive = datetime(2024, 1, 1, 12, 0, 0, 5)
    timing = MessageTiming(started_at=naive, completed_at=naive, duration_ns=0)
    with pytest.raises(ValueError, match=r"timing\.started_at"):
        await storage.append(session_id, "r", UserMessage(content="naive"), timing)
    assert await storage.get_session(session_id) is None


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


async def test_bad_ids_are_refused_before_writing(storage: LedgerSessionStorage, session_id: str) -> None:
    for bad in ("", "   ", "a\x00b", "\ud800"):
        with pytest.raises(ValueError, match="session_id"):
            await storage.append(bad, "r", UserMessage(content="x"))
        with pytest.raises(ValueError, match="session_id"):
            await storage.load(bad)
        with pytest.raises(ValueError, match="request_id"):
            await storage.append(session_id, bad, UserMessage(content="x"))
        with pytest.raises(ValueError, match="parent_session_id"):
            await storage.append(session_id, "r", UserMessage(content="x"), parent_session_id=bad)
    with pytest.raises(TypeError, match="session_id"):
        await storage.append(42, "r", UserMessage(content="x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="message"):
        await storage.append(session_id, "r", "plain text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="usage"):
        await storage.append(session_id, "r", UserMessage(content="x"), usage=ModelUsage(1, 1))
    with pytest.raises(ValueError, match="tags"):
        await storage.append(session_id, "r", UserMessage(content="x"), tags={"": 1})
    with pytest.raises(ValueError, match="metadata"):
        await storage.append(session_id, "r", UserMessage(content="x"), metadata={"n": float("nan")})
    assert await storage.get_session(session_id) is None


async def test_awkward_text_round_trips(storage: LedgerSessionStorage, session_id: str) -> None:
    text = "NUL\x00 inside, astral 😀𝄞, RTL \u202e, quotes '\" and back\\slash, " + "long " * 20_000
    messages: list[AnyMessage] = [
        UserMessage(content=text),
        AssistantMessage(content=text, reasoning=text[:100]),
        ToolMessage(tool_call_id="c\x00", name="t" * 300, content=text),
    ]
    for message in messages:
        await storage.append(session_id, "r", message, metadata={"text": text[:50]}, tags={"k\x00": "v\x00"})
    records = await storage.list_raw_messages(session_id)
    assert [record.message for record in records] == messages
    assert all(record.metadata == {"text": text[:50]} for record in records)
    assert all(record.tags == {"k\x00": "v\x00"} for record in records)
