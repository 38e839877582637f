"""Bad input raises ValueError (``chatledger.WrongType``, a TypeError and a ValueError,
for a wrong type) naming the field, before any statement runs; afterwards no session
row and no message exist.

Each case is its own test, on every backend. Each case also runs once on zett-agent's
own store: where that refuses the input with ``ValueError`` or ``TypeError``,
chatledger's error is of that class too, so zett's callers catch it. "Before any statement runs" is checked
with a SQLAlchemy ``before_cursor_execute`` listener on the storage's engine, and
"nothing written" by counting every table's rows before and after.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, func, select
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.messages import (
    AgentMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage

from chatledger import WrongType
from chatledger.schema import raw_messages_table, sessions_table, snapshots_table
from chatledger.zett import LedgerSessionStorage

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
USER = UserMessage(content="hello")
LONE_SURROGATE = "bad \ud800 text"


def timing(**values: Any) -> MessageTiming:
    """A valid timing with ``values`` forced in afterwards, past zett's own checks
    (as a caller with a hand-built or mutated object would have it)."""
    return timing_with(MessageTiming(started_at=NOW, completed_at=NOW, duration_ns=0), **values)


def span(name: str, **values: Any) -> MessageTiming:
    """A timing with a complete ``name`` span, then ``values`` forced in."""
    made = MessageTiming(
        started_at=NOW,
        completed_at=NOW,
        duration_ns=0,
        **{f"{name}_started_at": NOW, f"{name}_completed_at": NOW, f"{name}_duration_ns": 5},
    )
    return timing_with(made, **values)


def timing_with(made: MessageTiming, **values: Any) -> MessageTiming:
    for field_name, value in values.items():
        object.__setattr__(made, field_name, value)
    return made


def usage(**values: Any) -> ModelUsage:
    made = ModelUsage(input_tokens=10, output_tokens=5)
    for name, value in values.items():
        object.__setattr__(made, name, value)
    return made


Call = Callable[[LedgerSessionStorage, str], Awaitable[object]]


@dataclass(frozen=True)
class Case:
    name: str
    call: Call
    #: Text the error message must contain: the field's name.
    field: str
    error: type[Exception] = ValueError


def append(**arguments: Any) -> Call:
    """``storage.append(session_id, "req", USER, **arguments)`` with overrides."""

    def call(storage: LedgerSessionStorage, session_id: str) -> Awaitable[object]:
        values: dict[str, Any] = {"session_id": session_id, "request_id": "req", "message": USER}
        values.update(arguments)
        return storage.append(**values)

    return call


def snapshot(**arguments: Any) -> Call:
    def call(storage: LedgerSessionStorage, session_id: str) -> Awaitable[object]:
        values: dict[str, Any] = {
            "session_id": session_id,
            "compacted_message": CompactedMessage(content="summary"),
            "compacted_through_sequence": 1,
            "expected_version": 0,
        }
        values.update(arguments)
        return storage.snapshot(**values)

    return call


def create(**arguments: Any) -> Call:
    def call(storage: LedgerSessionStorage, session_id: str) -> Awaitable[object]:
        values: dict[str, Any] = {"session_id": session_id}
        values.update(arguments)
        return storage.create_session(**values)

    return call


def method(name: str, *args: Any, with_session: bool = True, **kwargs: Any) -> Call:
    def call(storage: LedgerSessionStorage, session_id: str) -> Awaitable[object]:
        bound = getattr(storage, name)
        return bound(session_id, *args, **kwargs) if with_session else bound(*args, **kwargs)  # type: ignore[no-any-return]

    return call


def same_as_session(storage: LedgerSessionStorage, session_id: str) -> Awaitable[object]:
    return storage.append(session_id, "req", USER, parent_session_id=session_id)


def build_negative_timing(storage: LedgerSessionStorage, session_id: str) -> Awaitable[object]:
    # zett's own MessageTiming refuses a negative duration when it is built.
    return storage.append(
        session_id, "req", USER, MessageTiming(started_at=NOW, completed_at=NOW, duration_ns=-1)
    )


class Opaque:
    """An object JSON cannot hold."""


TOO_LONG_ID = "x" * 256
NAIVE = datetime(2025, 1, 2, 3, 4, 5)

CASES = [
    # -- ids: empty, blank, over-long, NUL, not UTF-8, wrong type ----------------
    Case("session_id-empty", append(session_id=""), "session_id"),
    Case("session_id-blank", append(session_id=" \t\n"), "session_id"),
    Case("session_id-256-characters", append(session_id=TOO_LONG_ID), "session_id"),
    Case("session_id-256-astral-characters", append(session_id="😀" * 256), "session_id"),
    Case("session_id-nul", append(session_id="a\x00b"), "session_id"),
    Case("session_id-lone-surrogate", append(session_id=LONE_SURROGATE), "session_id"),
    Case("session_id-int", append(session_id=42), "session_id", WrongType),
    Case("session_id-none", append(session_id=None), "session_id", WrongType),
    Case("request_id-empty", append(request_id=""), "request_id"),
    Case("request_id-blank", append(request_id="   "), "request_id"),
    Case("request_id-256-characters", append(request_id=TOO_LONG_ID), "request_id"),
    Case("request_id-lone-surrogate", append(request_id=LONE_SURROGATE), "request_id"),
    Case("request_id-bytes", append(request_id=b"req"), "request_id", WrongType),
    Case("parent_session_id-empty", append(parent_session_id=""), "parent_session_id"),
    Case("parent_session_id-blank", append(parent_session_id="  "), "parent_session_id"),
    Case("parent_session_id-256-characters", append(parent_session_id=TOO_LONG_ID), "parent_session_id"),
    Case("parent_session_id-same-as-session", same_as_session, "parent_session_id"),
    # -- metadata that is not JSON ---------------------------------------------
    Case("metadata-nan", append(metadata={"x": math.nan}), "metadata"),
    Case("metadata-infinity", append(metadata={"x": math.inf}), "metadata"),
    Case("metadata-negative-infinity", append(metadata={"x": -math.inf}), "metadata"),
    Case("metadata-nested-nan", append(metadata={"x": [1, {"y": math.nan}]}), "metadata"),
    Case("metadata-object", append(metadata={"x": Opaque()}), "metadata"),
    Case("metadata-datetime", append(metadata={"x": NOW}), "metadata"),
    Case("metadata-tuple", append(metadata={"x": (1, 2)}), "metadata"),
    Case("metadata-set", append(metadata={"x": {1, 2}}), "metadata"),
    Case("metadata-bytes", append(metadata={"x": b"raw"}), "metadata"),
    Case("metadata-int-key", append(metadata={1: "x"}), "metadata"),
    Case("metadata-nested-int-key", append(metadata={"x": {2: "y"}}), "metadata"),
    Case("metadata-none-key", append(metadata={None: "x"}), "metadata"),
    Case("metadata-lone-surrogate-value", append(metadata={"x": LONE_SURROGATE}), "metadata"),
    Case("metadata-lone-surrogate-key", append(metadata={LONE_SURROGATE: 1}), "metadata"),
    Case("metadata-not-a-mapping", append(metadata=[("x", 1)]), "metadata", WrongType),
    # -- tags --------------------------------------------------------------------
    Case("tags-empty-key", append(tags={"": "x"}), "tags"),
    Case("tags-blank-key", append(tags={" \t": "x"}), "tags"),
    Case("tags-nan", append(tags={"x": math.nan}), "tags"),
    Case("tags-int-key", append(tags={1: "x"}), "tags"),
    Case("tags-lone-surrogate", append(tags={"x": LONE_SURROGATE}), "tags"),
    Case("tags-not-a-mapping", append(tags="x=1"), "tags", WrongType),
    # -- usage on a non-assistant message, and bad usage -------------------------
    Case("usage-on-user", append(usage=ModelUsage(input_tokens=1)), "usage"),
    Case(
        "usage-on-system",
        append(message=SystemMessage(content="s"), usage=ModelUsage(input_tokens=1)),
        "usage",
    ),
    Case(
        "usage-on-tool",
        append(
            message=ToolMessage(tool_call_id="c", name="t", content="r"), usage=ModelUsage(input_tokens=1)
        ),
        "usage",
    ),
    Case(
        "usage-on-agent",
        append(message=AgentMessage(content="a"), usage=ModelUsage(input_tokens=1)),
        "usage",
    ),
    Case(
        "usage-over-64-bit",
        append(message=AssistantMessage(content="a"), usage=usage(input_tokens=2**63)),
        "usage.input_tokens",
    ),
    Case(
        "usage-negative",
        append(message=AssistantMessage(content="a"), usage=usage(reasoning_tokens=-1)),
        "usage.reasoning_tokens",
    ),
    Case(
        "usage-wrong-type",
        append(message=AssistantMessage(content="a"), usage={"input_tokens": 1}),
        "usage",
        WrongType,
    ),
    # -- the message itself --------------------------------------------------------
    Case("checkpoint-in-raw-log", append(message=CompactedMessage(content="summary")), "CompactedMessage"),
    Case("message-not-a-message", append(message={"role": "user", "content": "x"}), "message", WrongType),
    Case("message-lone-surrogate", append(message=UserMessage(content=LONE_SURROGATE)), "message"),
    Case(
        "message-nan-attribute",
        append(message=UserMessage(content="x", attributes={"x": math.nan})),
        "message",
    ),
    Case(
        "message-object-attribute",
        append(message=UserMessage(content="x", attributes={"x": Opaque()})),
        "message",
        WrongType,
    ),
    Case(
        "message-set-attribute",
        append(message=UserMessage(content="x", attributes={"x": {1, 2}})),
        "message",
        WrongType,
    ),
    Case(
        "message-int-key-attribute", append(message=UserMessage(content="x", attributes={1: "x"})), "message"
    ),
    Case(
        "message-bytes-marker-attribute",
        append(message=UserMessage(content="x", attributes={"__kcs_bytes__": "aGk="})),
        "message",
    ),
    Case(
        "message-tool-arguments-int-key",
        append(message=AssistantMessage(tool_calls=(ToolCall("c", "t", {1: 2}),))),
        "message",
    ),
    Case("message-field-of-wrong-type", append(message=UserMessage(content=123)), "message", WrongType),  # type: ignore[arg-type]
    # -- timing: naive datetimes, negative durations, ranges ---------------------
    Case("timing-wrong-type", append(timing={"started_at": NOW}), "timing", WrongType),
    Case(
        "timing-naive-started_at",
        append(timing=MessageTiming(started_at=NAIVE, completed_at=NOW, duration_ns=0)),
        "timing.started_at",
    ),
    Case(
        "timing-naive-completed_at",
        append(timing=MessageTiming(started_at=NOW, completed_at=NAIVE, duration_ns=0)),
        "timing.completed_at",
    ),
    Case(
        "timing-naive-reasoning_started_at",
        append(timing=span("reasoning", reasoning_started_at=NAIVE)),
        "timing.reasoning_started_at",
    ),
    Case(
        "timing-naive-content_completed_at",
        append(timing=span("content", content_completed_at=NAIVE)),
        "timing.content_completed_at",
    ),
    Case(
        "timing-string-started_at",
        append(timing=timing(started_at="2025-01-01T00:00:00Z")),
        "timing.started_at",
        WrongType,
    ),
    Case("timing-negative-duration-zett", build_negative_timing, "duration_ns"),
    Case("timing-negative-duration_ns", append(timing=timing(duration_ns=-1)), "timing.duration_ns"),
    Case(
        "timing-negative-reasoning_duration_ns",
        append(timing=span("reasoning", reasoning_duration_ns=-1)),
        "timing.reasoning_duration_ns",
    ),
    Case(
        "timing-negative-content_duration_ns",
        append(timing=span("content", content_duration_ns=-5)),
        "timing.content_duration_ns",
    ),
    Case("timing-duration-over-64-bit", append(timing=timing(duration_ns=2**63)), "timing.duration_ns"),
    Case("timing-float-duration", append(timing=timing(duration_ns=1.5)), "timing.duration_ns", WrongType),
    Case(
        "timing-before-year-1000-utc",
        append(timing=timing(started_at=datetime(1000, 1, 1, tzinfo=timezone(timedelta(hours=1))))),
        "timing.started_at",
    ),
    Case(
        "timing-overflows-utc",
        append(timing=timing(completed_at=datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))))),
        "timing.completed_at",
    ),
    # -- title and agent name --------------------------------------------------------
    Case("title-empty", append(title=""), "title"),
    Case("title-blank", append(title="   "), "title"),
    Case("title-201-characters", append(title="t" * 201), "title"),
    Case("title-nul", append(title="a\x00b"), "title"),
    Case("title-lone-surrogate", append(title=LONE_SURROGATE), "title"),
    Case("title-int", append(title=5), "title", WrongType),
    Case("agent_name-empty", append(agent_name=""), "agent_name"),
    Case("agent_name-blank", append(agent_name="\n"), "agent_name"),
    Case("agent_name-65-characters", append(agent_name="a" * 65), "agent_name"),
    Case("agent_name-lone-surrogate", append(agent_name=LONE_SURROGATE), "agent_name"),
    # -- create_session ------------------------------------------------------------
    Case("create-session_id-empty", create(session_id=""), "session_id"),
    Case("create-session_id-256-characters", create(session_id=TOO_LONG_ID), "session_id"),
    Case("create-title-empty", create(title=""), "title"),
    Case("create-title-201-characters", create(title="t" * 201), "title"),
    Case("create-agent_name-65-characters", create(agent_name="a" * 65), "agent_name"),
    Case("create-session_type-negative", create(session_type=-1), "session_type"),
    Case("create-session_type-over-32-bit", create(session_type=2**31), "session_type"),
    Case("create-session_type-str", create(session_type="0"), "session_type", WrongType),
    Case("create-session_type-float", create(session_type=1.5), "session_type", WrongType),
    Case("create-session_type-word", create(session_type="standard"), "session_type", WrongType),
    Case("create-session_type-bool", create(session_type=True), "session_type", WrongType),
    Case("create-session_type-none", create(session_type=None), "session_type", WrongType),
    Case("create-parent-empty", create(parent_session_id=""), "parent_session_id"),
    # -- snapshot arguments ------------------------------------------------------------
    Case("snapshot-session_id-empty", snapshot(session_id=""), "session_id"),
    Case(
        "snapshot-not-a-checkpoint",
        snapshot(compacted_message=UserMessage(content="x")),
        "compacted_message",
        WrongType,
    ),
    Case(
        "snapshot-checkpoint-nan-attribute",
        snapshot(compacted_message=CompactedMessage(content="x", attributes={"x": math.inf})),
        "compacted_message",
    ),
    Case("snapshot-boundary-zero", snapshot(compacted_through_sequence=0), "compacted_through_sequence"),
    Case("snapshot-boundary-negative", snapshot(compacted_through_sequence=-1), "compacted_through_sequence"),
    Case(
        "snapshot-boundary-str",
        snapshot(compacted_through_sequence="1"),
        "compacted_through_sequence",
        WrongType,
    ),
    Case("snapshot-expected_version-negative", snapshot(expected_version=-1), "expected_version"),
    Case("snapshot-expected_version-str", snapshot(expected_version="0"), "expected_version", WrongType),
    Case("snapshot-expected_version-float", snapshot(expected_version=0.5), "expected_version", WrongType),
    # -- update_session ------------------------------------------------------------
    Case("update-title-empty", method("update_session", title=""), "title"),
    Case("update-agent_name-65-characters", method("update_session", agent_name="a" * 65), "agent_name"),
    Case(
        "update-expected_version-zero",
        method("update_session", title="t", expected_version=0),
        "expected_version",
    ),
    # -- negative limits and offsets ------------------------------------------------
    Case("list_sessions-limit-zero", method("list_sessions", with_session=False, limit=0), "limit"),
    Case("list_sessions-limit-negative", method("list_sessions", with_session=False, limit=-1), "limit"),
    Case("list_sessions-offset-negative", method("list_sessions", with_session=False, offset=-1), "offset"),
    Case(
        "list_sessions-limit-bool",
        method("list_sessions", with_session=False, limit=True),
        "limit",
        WrongType,
    ),
    Case(
        "list_sessions-session_type-negative",
        method("list_sessions", with_session=False, session_types=[-1]),
        "session_type",
    ),
    Case(
        "list_sessions-session_type-float",
        method("list_sessions", with_session=False, session_types=[1.5]),
        "session_type",
        WrongType,
    ),
    Case("list_raw_messages-limit-negative", method("list_raw_messages", limit=-1), "limit"),
    Case("list_raw_messages-offset-negative", method("list_raw_messages", offset=-1), "offset"),
    Case(
        "list_raw_messages-after_sequence-negative",
        method("list_raw_messages", after_sequence=-1),
        "after_sequence",
    ),
    Case(
        "list_raw_messages-through_sequence-zero",
        method("list_raw_messages", through_sequence=0),
        "through_sequence",
    ),
    Case("list_raw_messages-limit-str", method("list_raw_messages", limit="10"), "limit", WrongType),
    # -- reads with bad ids ------------------------------------------------------------
    Case("load-session_id-empty", lambda storage, _: storage.load(""), "session_id"),
    Case(
        "get_session-session_id-256-characters",
        lambda storage, _: storage.get_session(TOO_LONG_ID),
        "session_id",
    ),
    Case("count_messages-session_id-blank", lambda storage, _: storage.count_messages(" "), "session_id"),
    Case(
        "delete_session-session_id-lone-surrogate",
        lambda storage, _: storage.delete_session(LONE_SURROGATE),
        "session_id",
    ),
]


async def table_counts(storage: LedgerSessionStorage) -> tuple[int, ...]:
    async def work(conn: Any) -> tuple[int, ...]:
        tables = (sessions_table, raw_messages_table, snapshots_table)
        return tuple([int(await conn.scalar(select(func.count()).select_from(table))) for table in tables])

    return await storage.ledger.read(work)


@contextmanager
def recorded_statements(storage: LedgerSessionStorage) -> Iterator[list[str]]:
    """Every SQL statement the storage's engine sends while the block runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    target = storage.ledger.engine.sync_engine
    event.listen(target, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(target, "before_cursor_execute", record)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_bad_input_is_refused_before_any_statement(
    storage: LedgerSessionStorage, session_id: str, case: Case
) -> None:
    before = await table_counts(storage)
    with recorded_statements(storage) as statements, pytest.raises(case.error) as raised:
        await case.call(storage, session_id)
    # Exactly ValueError / TypeError: not a pydantic, JSON or driver exception type.
    assert type(raised.value) is case.error
    assert case.field in str(raised.value)
    assert statements == []
    assert await storage.get_session(session_id) is None
    assert await storage.list_raw_messages(session_id) == []
    assert await table_counts(storage) == before


#: Cases of chatledger's own extras, which zett's store does not take.
CHATLEDGER_ONLY = {"update-expected_version-zero"}


@pytest.fixture(scope="module")
async def zett_store(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """zett-agent's own SQL store, on a SQLite file (it validates before it writes)."""
    from zett_agent.storage import SQLSessionStorage

    path = tmp_path_factory.mktemp("zett") / "zett.sqlite3"
    store = SQLSessionStorage(f"sqlite+aiosqlite:///{path}")
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if case.name not in CHATLEDGER_ONLY],
    ids=[case.name for case in CASES if case.name not in CHATLEDGER_ONLY],
)
@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # zett's store given a None id
async def test_error_is_of_the_class_zetts_store_raises(zett_store: Any, case: Case) -> None:
    """A caller written against zett's store catches chatledger's error for the same input.

    Where zett's store accepts the input, or fails another way (an ``AttributeError``
    of a ``str`` method on a wrong type), chatledger's own rule applies alone.
    """
    try:
        await case.call(zett_store, f"s-{uuid.uuid4()}")
    except (ValueError, TypeError) as error:
        for kind in (ValueError, TypeError):
            if isinstance(error, kind):
                assert issubclass(case.error, kind), f"zett's store raises {type(error).__name__}: {error}"
    except Exception:
        pass  # no caller of zett's store catches these for bad input


async def test_snapshot_of_an_unknown_session_writes_nothing(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    before = await table_counts(storage)
    with pytest.raises(ValueError, match="no raw messages") as raised:
        await storage.snapshot(session_id, CompactedMessage(content="summary"), 1, 0)
    assert session_id in str(raised.value)
    assert await storage.get_session(session_id) is None
    assert await table_counts(storage) == before


async def test_snapshot_of_a_session_without_raw_messages_writes_nothing(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await storage.create_session(session_id=session_id, title="empty")
    before = await table_counts(storage)
    with pytest.raises(ValueError, match="no raw messages"):
        await storage.snapshot(session_id, CompactedMessage(content="summary"), 1, 0)
    assert await table_counts(storage) == before
    view = await storage.load(session_id)
    assert view.snapshot is None
    assert view.raw_tail == []


async def test_refused_append_leaves_an_existing_session_unchanged(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """A refused append to an existing session changes neither its counter nor its log."""
    assert await storage.append(session_id, "req", USER, title="kept") == 1
    before = await storage.get_session(session_id)
    for arguments in (
        {"metadata": {"x": math.nan}},
        {"usage": ModelUsage(input_tokens=1)},
        {"tags": {"": 1}},
    ):
        with pytest.raises(ValueError):
            await storage.append(session_id, "req", USER, **arguments)
    assert await storage.get_session(session_id) == before
    assert await storage.append(session_id, "req", USER) == 2


async def test_refused_update_leaves_the_fields_unchanged(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await storage.create_session(session_id=session_id, title="kept", agent_name="agent")
    version = await storage.get_fields_version(session_id)
    for arguments in ({"title": ""}, {"title": "t" * 201}, {"agent_name": " "}, {"agent_name": "a" * 65}):
        with pytest.raises(ValueError):
            await storage.update_session(session_id, **arguments)
    summary = await storage.get_session(session_id)
    assert summary is not None
    assert (summary.title, summary.agent_name) == ("kept", "agent")
    assert await storage.get_fields_version(session_id) == version


@pytest.mark.parametrize(
    "field", ["started_at", "completed_at", "reasoning_started_at", "content_completed_at"]
)
async def test_naive_datetimes_are_refused_on_every_backend(
    storage: LedgerSessionStorage, session_id: str, field: str
) -> None:
    """The policy (documented in chatledger.validate): a naive datetime is refused,
    never taken as UTC or local time, with the same error on every backend."""
    made = MessageTiming(
        started_at=NOW,
        completed_at=NOW,
        duration_ns=0,
        reasoning_started_at=NOW,
        reasoning_completed_at=NOW,
        reasoning_duration_ns=0,
        content_started_at=NOW,
        content_completed_at=NOW,
        content_duration_ns=0,
    )
    naive = dataclasses.replace(made, **{field: NOW.replace(tzinfo=None)})
    with pytest.raises(ValueError) as raised:
        await storage.append(session_id, "req", USER, naive)
    assert str(raised.value) == f"timing.{field} is a naive datetime; pass a timezone-aware one (UTC)"
    assert await storage.get_session(session_id) is None


async def test_aware_datetimes_in_any_zone_are_stored_as_the_same_utc_instant(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    zone = timezone(timedelta(hours=-7, minutes=-30))
    local = NOW.astimezone(zone)
    await storage.append(
        session_id, "req", USER, MessageTiming(started_at=local, completed_at=local, duration_ns=0)
    )
    [record] = await storage.list_raw_messages(session_id)
    assert record.started_at == NOW
    assert record.started_at.utcoffset() == timedelta(0)
