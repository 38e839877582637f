"""The conformance suite of zett-agent's session storage contract, for any implementation.

The contract is ``zett_agent.extensions.persistence.SessionStorage`` (``load``,
``append``, ``snapshot``) and the extras of zett's own ``SQLSessionStorage``
(``create_session``, ``get_session``, ``update_session``, ``delete_session``,
``list_sessions``, ``list_raw_messages``, ``count_messages``). The tests here use
nothing else, so another implementation runs them by subclassing
:class:`ZettStorageContract` in a test module of its own and providing a fixture:

* ``storage``: the implementation, on a database it may share with other tests;
* ``session_id`` (given by the class; override it if ids must look otherwise): a
  session id no other test uses.

chatledger runs them on its own store on every backend (``tests/test_zett_storage.py``)
and on zett-agent's own store (``tests/test_zett_contract_on_zett.py``), which marks
where the two differ on purpose.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import RawMessageRecord, SessionStorage, SessionSummary
from zett_agent.messages import (
    AgentMessage,
    AnyMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.storage import MessageKind

if TYPE_CHECKING:
    from .kinds import Driver

__all__ = ["TESTS", "ZettStorageContract"]

#: A zett ``SessionStorage`` with the extras of zett's own SQL store.
ContractStorage = Any

# -- helpers --------------------------------------------------------------------------


def summary_of(text: str) -> CompactedMessage:
    return CompactedMessage(content=f"summary: {text}")


async def append_users(storage: ContractStorage, session_id: str, count: int, start: int = 1) -> list[int]:
    """Append ``count`` user messages "m<start>".. one after another; return their sequences."""
    return [
        await storage.append(session_id, f"r-{index}", UserMessage(content=f"m{index}"))
        for index in range(start, start + count)
    ]


async def all_session_ids(storage: ContractStorage) -> set[str]:
    """Every session id in the (shared) database, page by page."""
    found: set[str] = set()
    offset = 0
    while page := await storage.list_sessions(limit=500, offset=offset):
        found.update(summary.session_id for summary in page)
        offset += len(page)
    return found


def tail_sequences(records: list[RawMessageRecord]) -> list[int]:
    return [record.sequence for record in records]


def is_utc(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() == timedelta(0)


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


async def test_storage_satisfies_zett_protocol(storage: ContractStorage) -> None:
    conforming: SessionStorage = storage  # checked by mypy/pyright against zett's Protocol
    assert callable(conforming.load) and callable(conforming.append) and callable(conforming.snapshot)


async def test_two_message_turn(storage: ContractStorage, session_id: str) -> None:
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


async def test_compaction_then_new_tail(storage: ContractStorage, session_id: str) -> None:
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


async def test_compacted_through_sequence_is_inclusive(storage: ContractStorage, session_id: str) -> None:
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


async def test_tail_starts_strictly_after_boundary(storage: ContractStorage, session_id: str) -> None:
    await append_users(storage, session_id, 8)

    for version, boundary in enumerate((1, 4, 7), start=1):
        await storage.snapshot(session_id, summary_of(f"through {boundary}"), boundary, version - 1)
        view = await storage.load(session_id)
        assert view.snapshot is not None
        assert view.snapshot.compacted_through_sequence == boundary
        assert tail_sequences(view.raw_tail) == list(range(boundary + 1, 9))
        assert boundary not in tail_sequences(view.raw_tail)


async def test_request_id_is_not_an_idempotency_key(storage: ContractStorage, session_id: str) -> None:
    message = UserMessage(content="same words")
    assert await storage.append(session_id, "req-same", message) == 1
    assert await storage.append(session_id, "req-same", message) == 2

    records = await storage.list_raw_messages(session_id)
    assert tail_sequences(records) == [1, 2]
    assert [record.request_id for record in records] == ["req-same", "req-same"]
    assert records[0].id != records[1].id
    assert await storage.count_messages(session_id) == 2


async def test_snapshot_refuses_non_checkpoint_message(storage: ContractStorage, session_id: str) -> None:
    await append_users(storage, session_id, 1)
    with pytest.raises(ValueError, match="CompactedMessage"):
        await storage.snapshot(session_id, UserMessage(content="not a summary"), 1, 0)
    with pytest.raises(ValueError, match=r"(?i)checkpoint"):
        await storage.append(session_id, "r", summary_of("belongs in snapshot()"))
    assert await storage.count_messages(session_id) == 1
    assert (await storage.load(session_id)).snapshot is None


async def test_raw_messages_unchanged_by_snapshot(storage: ContractStorage, session_id: str) -> None:
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


async def test_parent_is_immutable(storage: ContractStorage, session_id: str) -> None:
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


async def test_parent_cannot_be_added_later(storage: ContractStorage, session_id: str) -> None:
    assert await storage.append(session_id, "r-1", UserMessage(content="root")) == 1
    with pytest.raises(ValueError, match="parent"):
        await storage.append(session_id, "r-2", UserMessage(content="x"), parent_session_id=f"{session_id}-p")
    with pytest.raises(ValueError, match=r"(?i)parent"):
        await storage.append(session_id, "r-3", UserMessage(content="x"), parent_session_id=session_id)
    assert await storage.count_messages(session_id) == 1
    summary = await storage.get_session(session_id)
    assert summary is not None and summary.parent_session_id is None


async def test_ids_are_case_and_trailing_space_sensitive(storage: ContractStorage) -> None:
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


async def test_create_session(storage: ContractStorage, session_id: str) -> None:
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


async def test_append_updates_the_session_fields_it_is_given(
    storage: ContractStorage, session_id: str
) -> None:
    """zett's own store: a title or agent name given on an append replaces the stored
    one, ``None`` keeps it, and the session type and parent stay as created."""

    async def fields() -> tuple[object, ...]:
        summary = await storage.get_session(session_id)
        assert summary is not None
        return (summary.title, summary.agent_name, summary.session_type, summary.message_count)

    await storage.create_session(session_id=session_id, session_type=3)
    await storage.append(session_id, "r", UserMessage(content="m1"), title="First", agent_name="alpha")
    assert await fields() == ("First", "alpha", 3, 1)
    await storage.append(session_id, "r", UserMessage(content="m2"), title="Second")
    assert await fields() == ("Second", "alpha", 3, 2)
    await storage.append(session_id, "r", UserMessage(content="m3"), agent_name="beta")
    assert await fields() == ("Second", "beta", 3, 3)
    await storage.append(session_id, "r", UserMessage(content="m4"))
    assert await fields() == ("Second", "beta", 3, 4)
    view = await storage.load(session_id)
    assert (view.title, view.agent_name, view.session_type, view.parent_session_id) == (
        "Second",
        "beta",
        3,
        None,
    )
    # Every append is activity, whatever fields it gives.
    summary = await storage.get_session(session_id)
    records = await storage.list_raw_messages(session_id)
    assert summary is not None and summary.updated_at == records[-1].created_at

    # An empty, blank or over-long value is refused, and its append writes nothing.
    for bad in (
        {"title": ""},
        {"title": "  "},
        {"title": "t" * 201},
        {"agent_name": ""},
        {"agent_name": "a" * 65},
    ):
        with pytest.raises(ValueError):
            await storage.append(session_id, "r", UserMessage(content="never stored"), **bad)
    assert await fields() == ("Second", "beta", 3, 4)
    assert await storage.get_session(session_id) == summary


async def test_append_strips_the_session_fields(storage: ContractStorage, session_id: str) -> None:
    """Titles and agent names are stored stripped, as zett's create_session and
    update_session store them, whichever call gives them."""
    await storage.append(session_id, "r", UserMessage(content="m1"), title="  First ", agent_name="\talpha\n")
    summary = await storage.get_session(session_id)
    assert summary is not None and (summary.title, summary.agent_name) == ("First", "alpha")
    await storage.append(session_id, "r", UserMessage(content="m2"), title=" Second  ")
    summary = await storage.get_session(session_id)
    assert summary is not None and (summary.title, summary.agent_name) == ("Second", "alpha")


async def test_wrong_types_zett_refuses_with_value_error(storage: ContractStorage, session_id: str) -> None:
    """Where zett's own store raises ``ValueError`` for an argument of the wrong type,
    so that its callers catch ``ValueError``: a session type that is no int, a
    snapshot's ``expected_version`` that is no int. Nothing is written."""
    for bad in (1.5, "standard", True, None):
        with pytest.raises(ValueError, match="session_type"):
            await storage.create_session(session_id=session_id, session_type=bad)
        with pytest.raises(ValueError, match="session_type"):
            await storage.list_sessions(session_types=[bad])
    assert await storage.get_session(session_id) is None

    await append_users(storage, session_id, 2)
    for stale in ("0", 0.5, None):
        with pytest.raises(ValueError):
            await storage.snapshot(session_id, summary_of("typed wrong"), 1, stale)
    assert (await storage.load(session_id)).snapshot is None


async def test_get_session(storage: ContractStorage, session_id: str) -> None:
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


async def test_list_raw_messages(storage: ContractStorage, session_id: str) -> None:
    await append_users(storage, session_id, 10)

    async def sequences(**bounds: object) -> list[int]:
        return tail_sequences(await storage.list_raw_messages(session_id, **bounds))

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


async def test_count_messages(storage: ContractStorage, session_id: str) -> None:
    assert await storage.count_messages(session_id) == 0
    await storage.create_session(session_id=session_id)
    assert await storage.count_messages(session_id) == 0
    await append_users(storage, session_id, 7)
    assert await storage.count_messages(session_id) == 7
    await storage.snapshot(session_id, summary_of("m1..m5"), 5, 0)
    assert await storage.count_messages(session_id) == 7
    assert await storage.count_messages(session_id) == len(await storage.list_raw_messages(session_id))


async def test_timestamps_keep_microseconds_and_come_back_utc(
    storage: ContractStorage, session_id: str
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


async def test_naive_datetimes_are_refused(storage: ContractStorage, session_id: str) -> None:
    naive = datetime(2024, 1, 1, 12, 0, 0, 5)
    timing = MessageTiming(started_at=naive, completed_at=naive, duration_ns=0)
    with pytest.raises(ValueError, match=r"timing\.started_at"):
        await storage.append(session_id, "r", UserMessage(content="naive"), timing)
    assert await storage.get_session(session_id) is None


async def test_bad_ids_are_refused_before_writing(storage: ContractStorage, session_id: str) -> None:
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
        await storage.append(42, "r", UserMessage(content="x"))
    with pytest.raises(TypeError, match="message"):
        await storage.append(session_id, "r", "plain text")
    with pytest.raises(ValueError, match="usage"):
        await storage.append(session_id, "r", UserMessage(content="x"), usage=ModelUsage(1, 1))
    with pytest.raises(ValueError, match="tags"):
        await storage.append(session_id, "r", UserMessage(content="x"), tags={"": 1})
    with pytest.raises(ValueError, match="metadata"):
        await storage.append(session_id, "r", UserMessage(content="x"), metadata={"n": float("nan")})
    assert await storage.get_session(session_id) is None


async def test_awkward_text_round_trips(storage: ContractStorage, session_id: str) -> None:
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


# -- the entry point --------------------------------------------------------------------

#: The contract's tests by name: the ``test_*`` functions above, in their order.
TESTS: dict[str, Callable[..., Awaitable[None]]] = {
    name: test for name, test in list(globals().items()) if name.startswith("test_") and callable(test)
}


class ZettStorageContract:
    """The contract's tests as methods: subclass it as ``Test<YourStore>`` and give a
    ``storage`` fixture (pytest-asyncio in auto mode runs the coroutine tests)::

        class TestMyStorage(ZettStorageContract):
            @pytest.fixture
            async def storage(self) -> AsyncIterator[MyStorage]:
                async with MyStorage(...) as opened:
                    yield opened

    A store that differs from the contract on purpose overrides that test with
    :func:`expected_to_differ`, so that the difference stays visible and a change on
    either side is noticed.
    """

    @pytest.fixture
    def session_id(self) -> str:
        """A session id no other test uses (the tests may share one database)."""
        return f"s-{uuid.uuid4()}"


for _name, _test in TESTS.items():
    setattr(ZettStorageContract, _name, staticmethod(_test))


# -- the kind driver (chatledger.testing.kinds) --------------------------------------------


class _Writer:
    """A :class:`chatledger.testing.kinds.Writer` of zett sessions: chatledger's store."""

    def __init__(self, url: Any, **options: Any) -> None:
        from ..zett import LedgerSessionStorage

        self.storage = LedgerSessionStorage(url, **options)
        self.ledger = self.storage.ledger

    async def ready(self) -> None:
        await self.ledger.ensure_ready()

    async def create(self, session_id: str) -> str:
        return session_id  # a session begins with its first append

    async def write(
        self, handle: str, text: str, *, write_id: str | None = None, in_transaction: bool = False
    ) -> int:
        title = f"title {text}"[:200] if in_transaction else None  # a changed title: a transaction
        sequence: int = await self.storage.append(
            handle, "contract", UserMessage(content=text), message_id=write_id, title=title
        )
        return sequence

    async def texts(self, session_id: str) -> list[str]:
        return [str(record.message.content) for record in await self.storage.list_raw_messages(session_id)]

    async def stale_write(self, handle: str, text: str) -> int:
        return await self.write(handle, text)

    def commit_point(self, text: str, *, in_transaction: bool) -> bytes | None:
        # An append to a live session is one statement that commits itself, where the
        # backend has one: found by its unique text.
        if self.ledger.single_append is not None and not in_transaction:
            return text.encode()
        return None

    async def close(self) -> None:
        await self.storage.close()


def driver() -> Driver:
    """The zett kind's driver for :mod:`chatledger.testing.kinds`."""
    from .. import kinds
    from ..errors import SessionDeleted
    from .kinds import Driver

    return Driver(kinds.ZETT, _Writer, identity="message_id", refused=(SessionDeleted,))
