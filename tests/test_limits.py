"""Limits, on every backend: 255-character ids compared exactly, several-MiB texts,
the 64-bit and timestamp edges, and messages larger than the server accepts
(a clear ``ValueError`` naming the limit, nothing written, the store still usable)."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import select, text
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.messages import (
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage

from chatledger import validate
from chatledger.errors import ChatledgerError
from chatledger.schema import raw_messages_table
from chatledger.types import MAX_ID_LENGTH
from chatledger.zett import LedgerSessionStorage, codec

from .conftest import Database

pytestmark = pytest.mark.one_transaction_at_a_time

MIB = 2**20
NOW = datetime(2025, 6, 7, 8, 9, 10, 123456, tzinfo=UTC)


def unique_id(fill: str, length: int = MAX_ID_LENGTH) -> str:
    """An id of exactly ``length`` characters, unique to this test run."""
    prefix = f"{uuid.uuid4().hex[:12]}-"
    return prefix + fill * (length - len(prefix))


# -- ids -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fill",
    ["a", "😀", "界", "é"],
    ids=["ascii", "astral-4-byte", "cjk-3-byte", "latin-2-byte"],
)
async def test_ids_of_255_characters_round_trip(storage: LedgerSessionStorage, fill: str) -> None:
    """Session, parent and request ids of exactly 255 characters (up to 1020 UTF-8 bytes)."""
    session_id, parent_id, request_id = (unique_id(fill) for _ in range(3))
    assert len(session_id) == MAX_ID_LENGTH
    await storage.append(session_id, request_id, UserMessage(content="hi"), parent_session_id=parent_id)
    summary = await storage.get_session(session_id)
    assert summary is not None
    assert (summary.session_id, summary.parent_session_id) == (session_id, parent_id)
    view = await storage.load(session_id)
    assert view.parent_session_id == parent_id
    [record] = view.raw_tail
    assert (record.session_id, record.request_id) == (session_id, request_id)
    assert await storage.count_messages(session_id) == 1


async def test_id_of_256_characters_is_refused(storage: LedgerSessionStorage) -> None:
    with pytest.raises(ValueError, match="session_id is 256 characters long; the limit is 255"):
        await storage.append(unique_id("a", 256), "req", UserMessage(content="hi"))


async def test_ids_that_differ_only_by_case_are_different_sessions(storage: LedgerSessionStorage) -> None:
    """MySQL's default collations fold case, accents, ß/ss and trailing spaces; ids must not."""
    stem = uuid.uuid4().hex[:8]
    variants = [
        f"{stem}-Session",
        f"{stem}-session",
        f"{stem}-SESSION",
        f"{stem}-session ",
        f"{stem}-straße",
        f"{stem}-strasse",
        f"{stem}-STRASSE",
        f"{stem}-é",
        f"{stem}-e\u0301",
        f"{stem}-E",
        f"{stem}-e",
    ]
    for variant in variants:
        await storage.append(variant, variant.upper(), UserMessage(content=variant))
    for variant in variants:
        [record] = await storage.list_raw_messages(variant)
        assert record.session_id == variant
        assert record.request_id == variant.upper()
        assert record.message == UserMessage(content=variant)
        summary = await storage.get_session(variant)
        assert summary is not None
        assert (summary.session_id, summary.message_count) == (variant, 1)
    # A parent id differing only by case is another session, not this one.
    await storage.append(f"{stem}-child", "r", UserMessage(content="c"), parent_session_id=f"{stem}-Session")
    with pytest.raises(ValueError, match="parent"):
        await storage.append(
            f"{stem}-child", "r", UserMessage(content="c"), parent_session_id=f"{stem}-session"
        )


# -- texts -----------------------------------------------------------------------------


def several_mib_text(size: int) -> str:
    """``size`` characters of prose with NUL, quotes, backslashes, emoji and astral
    characters sprinkled through it."""
    chunk = "The quick brown fox \x00 jumps 'over' \"the\" lazy \\ dog 😀 𝄞 é ß\n"
    return (chunk * (size // len(chunk) + 1))[:size]


async def test_several_mib_user_text_round_trips(storage: LedgerSessionStorage, session_id: str) -> None:
    message = UserMessage(content=several_mib_text(4 * MIB))
    await storage.append(session_id, "req", message)
    [record] = await storage.list_raw_messages(session_id)
    assert record.message == message


async def test_several_mib_assistant_reasoning_and_tool_result_round_trip(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    assistant = AssistantMessage(
        content=several_mib_text(MIB),
        reasoning=several_mib_text(3 * MIB),
        tool_calls=(ToolCall("call-1", "read", {"path": several_mib_text(1000)}),),
        provider="anthropic",
        model="claude-example",
        replay_blocks=({"type": "thinking", "signature": b"\x00\xff" * 1000},),
    )
    image = bytes(range(256)) * (3 * MIB // 256)
    tool = ToolMessage(
        tool_call_id="call-1",
        name="read",
        content=[
            TextContent("see image"),
            ImageContent(ImageBytesSource(data=image, media_type="image/png")),
        ],
    )
    usage = ModelUsage(input_tokens=2**40, output_tokens=2**40, reasoning_tokens=2**39)
    await storage.append(session_id, "req", assistant, usage=usage)
    await storage.append(session_id, "req", tool)
    records = await storage.list_raw_messages(session_id)
    assert [record.message for record in records] == [assistant, tool]
    assert records[0].input_tokens == 2**40


async def test_several_mib_checkpoint_round_trips(storage: LedgerSessionStorage, session_id: str) -> None:
    await storage.append(session_id, "req", UserMessage(content="start"))
    summary = CompactedMessage(content=several_mib_text(4 * MIB))
    await storage.snapshot(session_id, summary, 1, 0)
    view = await storage.load(session_id)
    assert view.snapshot is not None
    assert view.snapshot.compacted_message == summary


async def test_empty_texts_round_trip(storage: LedgerSessionStorage, session_id: str) -> None:
    messages = [UserMessage(content=""), UserMessage(content=[]), AssistantMessage(content="", reasoning="")]
    for message in messages:
        await storage.append(session_id, "req", message)
    assert [record.message for record in await storage.list_raw_messages(session_id)] == messages


async def test_nul_characters_survive_in_the_message(storage: LedgerSessionStorage, session_id: str) -> None:
    """PostgreSQL text cannot hold NUL: the ``content`` convenience column (and
    ``tool_name``) show U+FFFD, while ``message_json`` keeps the exact text."""
    message = ToolMessage(tool_call_id="c\x00", name="to\x00ol", content="a\x00b\x00")
    await storage.append(session_id, "req", message, metadata={"k\x00": "v\x00"}, tags={"t\x00": ["\x00"]})
    [record] = await storage.list_raw_messages(session_id)
    assert record.message == message
    assert record.metadata == {"k\x00": "v\x00"}
    assert record.tags == {"t\x00": ["\x00"]}

    async def columns(conn: Any) -> Any:
        query = select(raw_messages_table.c.content, raw_messages_table.c.tool_name)
        return (await conn.execute(query.where(raw_messages_table.c.session_id == session_id))).one()

    content, tool_name = await storage.ledger.read(columns)
    assert (content, tool_name) == ("a\ufffdb\ufffd", "to\ufffdol")


async def test_tool_name_column_keeps_the_first_200_characters_and_the_message_all(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    message = ToolMessage(tool_call_id="c", name="n" * 300, content="r")
    await storage.append(session_id, "req", message)
    [record] = await storage.list_raw_messages(session_id)
    assert record.message == message

    async def tool_name(conn: Any) -> Any:
        query = select(raw_messages_table.c.tool_name).where(raw_messages_table.c.session_id == session_id)
        return await conn.scalar(query)

    assert await storage.ledger.read(tool_name) == "n" * 200


# -- numbers and instants --------------------------------------------------------------


@pytest.mark.parametrize("tokens", [0, 1, 2**31, 2**40, 2**63 - 1])
async def test_token_counts_round_trip(storage: LedgerSessionStorage, session_id: str, tokens: int) -> None:
    usage = ModelUsage(
        input_tokens=tokens,
        output_tokens=tokens,
        cache_read_tokens=tokens,
        cache_write_tokens=tokens // 2,
        reasoning_tokens=tokens,
    )
    await storage.append(session_id, "req", AssistantMessage(content="a"), usage=usage)
    [record] = await storage.list_raw_messages(session_id)
    assert (
        record.input_tokens,
        record.output_tokens,
        record.cache_read_tokens,
        record.cache_write_tokens,
        record.reasoning_tokens,
    ) == (tokens, tokens, tokens, tokens // 2, tokens)


@pytest.mark.parametrize("duration", [0, 1, 999_999_999, 5 * 86_400 * 10**9, 2**63 - 1])
async def test_durations_round_trip(storage: LedgerSessionStorage, session_id: str, duration: int) -> None:
    timing = MessageTiming(
        started_at=NOW,
        completed_at=NOW + timedelta(microseconds=1),
        duration_ns=duration,
        reasoning_started_at=NOW,
        reasoning_completed_at=NOW,
        reasoning_duration_ns=duration,
        content_started_at=NOW,
        content_completed_at=NOW,
        content_duration_ns=duration,
    )
    await storage.append(session_id, "req", AssistantMessage(content="a"), timing)
    [record] = await storage.list_raw_messages(session_id)
    assert (record.duration_ns, record.reasoning_duration_ns, record.content_duration_ns) == (duration,) * 3
    assert record.completed_at == NOW + timedelta(microseconds=1)


@pytest.mark.parametrize(
    "instant",
    [
        validate.MIN_INSTANT,
        validate.MAX_INSTANT,
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2038, 1, 19, 3, 14, 8, 1, tzinfo=UTC),
        datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-11))),
        datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=14))),
    ],
    ids=["min", "max", "epoch", "2038", "leap-day-minus-11h", "max-in-plus-14h"],
)
async def test_instants_round_trip_with_microseconds(
    storage: LedgerSessionStorage, session_id: str, instant: datetime
) -> None:
    timing = MessageTiming(started_at=instant, completed_at=instant, duration_ns=0)
    await storage.append(session_id, "req", UserMessage(content="t"), timing)
    [record] = await storage.list_raw_messages(session_id)
    assert record.started_at == instant
    assert record.started_at.utcoffset() == timedelta(0)
    assert record.started_at.microsecond == instant.astimezone(UTC).microsecond


# -- statement size ----------------------------------------------------------------------


def message_of(characters: int) -> UserMessage:
    return UserMessage(content="x" * characters)


def row_size(message: UserMessage) -> int:
    """What the storage's size check computes for appending ``message``."""
    row = codec.raw_row(
        session_id="s",
        request_id="req",
        message=message,
        timing=None,
        metadata=None,
        tags=None,
        usage=None,
        now=NOW,
    )
    return validate.statement_size(
        row["content"], row["message_json"], row["metadata_json"], row["tags_json"]
    )


async def test_message_over_the_statement_limit_is_refused_and_the_store_stays_usable(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """Every backend: with the limit lowered, an over-limit append or snapshot gets a
    ValueError naming the limit, writes nothing, and the next call works."""
    await storage.ledger.ensure_ready()
    limit = storage.ledger.statement_limit = 256 * 1024
    with pytest.raises(ValueError) as raised:
        await storage.append(session_id, "req", message_of(200_000))
    assert type(raised.value) is ValueError
    assert "max_allowed_packet" in str(raised.value)
    assert f"is {limit} bytes" in str(raised.value)
    assert await storage.get_session(session_id) is None

    assert await storage.append(session_id, "req", UserMessage(content="small")) == 1
    with pytest.raises(ValueError, match="compacted_message is too large"):
        await storage.snapshot(session_id, CompactedMessage(content="x" * 300_000), 1, 0)
    view = await storage.load(session_id)
    assert view.snapshot is None
    assert [record.message for record in view.raw_tail] == [UserMessage(content="small")]
    snapshot = await storage.snapshot(session_id, CompactedMessage(content="fits"), 1, 0)
    assert snapshot.version == 1


async def test_escaped_characters_count_toward_the_limit(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """Quotes, backslashes and NUL take more bytes inside a statement than in the text."""
    await storage.ledger.ensure_ready()
    storage.ledger.statement_limit = 128 * 1024
    plain = UserMessage(content="x" * 40_000)
    escaped = UserMessage(content='\\"' * 20_000)
    assert row_size(plain) < storage.ledger.statement_limit < row_size(escaped)
    assert await storage.append(session_id, "req", plain) == 1
    with pytest.raises(ValueError, match="too large"):
        await storage.append(session_id, "req", escaped)
    assert await storage.count_messages(session_id) == 1


@pytest.mark.requires("max_allowed_packet")
async def test_mysql_max_allowed_packet_is_read_from_the_server_and_enforced(
    database: Database, storage: LedgerSessionStorage, session_id: str
) -> None:
    """For real, without changing the server: a message whose row just exceeds
    ``@@max_allowed_packet`` is refused before it is sent; one just within is stored
    by the server and reads back whole."""
    await storage.ledger.ensure_ready()

    async def server_limit(conn: Any) -> int:
        return int(await conn.scalar(text("SELECT @@max_allowed_packet")))

    limit = await storage.ledger.read(server_limit)
    assert storage.ledger.statement_limit == limit
    fits = (limit - row_size(message_of(0))) // 2
    assert row_size(message_of(fits)) <= limit < row_size(message_of(fits + 1))

    with pytest.raises(ValueError) as raised:
        await storage.append(session_id, "req", message_of(fits + 1))
    assert f"max_allowed_packet) is {limit} bytes" in str(raised.value)
    assert await storage.get_session(session_id) is None

    assert await storage.append(session_id, "req", message_of(fits)) == 1
    [record] = await storage.list_raw_messages(session_id)
    assert record.message == message_of(fits)


@pytest.mark.requires("max_allowed_packet")
async def test_mysql_server_refusal_is_no_raw_driver_error(
    database: Database, storage: LedgerSessionStorage, session_id: str
) -> None:
    """Should the check be bypassed (the limit lowered on the server after it was read),
    the server's refusal is a chatledger error, nothing is written, and the store
    keeps working."""
    await storage.ledger.ensure_ready()
    limit = storage.ledger.statement_limit
    storage.ledger.statement_limit = 2**62  # as if the check had not seen the new limit
    with pytest.raises(ChatledgerError) as raised:
        await storage.append(session_id, "req", message_of(limit // 2 + 1))
    assert isinstance(raised.value, ValueError | RuntimeError)
    assert await storage.get_session(session_id) is None
    assert await storage.count_messages(session_id) == 0
    assert await storage.append(session_id, "req", UserMessage(content="after")) == 1


def test_image_bytes_fit_the_base64_estimate() -> None:
    """Image bytes are stored as base64 (4/3 of their size) in ``message_json``."""
    data = b"\x89PNG" * 1000
    message = UserMessage(content=[ImageContent(ImageBytesSource(data=data, media_type="image/png"))])
    _kind, payload = codec.encode_message(message)
    assert base64.b64encode(data).decode() in payload
    assert row_size(message) >= len(base64.b64encode(data))
