"""The fast decode of a load's rows gives what the reference decoder gives, or defers to it.

``codec.records`` decodes each row on a fast path and hands any row it has a doubt
about to ``codec.record``, the reference (zett's own codec, zett's validation). These
tests hold the fast path to that: whatever it accepts, the reference accepts, with
the same result down to the types of nested values (compared by ``repr``, which
tells ``1`` from ``1.0`` and ``True``, a tuple from a list); and what it refuses, the
reference refuses with its own error. No database: rows are built by the append's
own row builder, as they are stored.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from zett_agent.extensions.events import MessageTiming
from zett_agent.messages import (
    AssistantMessage,
    ImageContent,
    ImageUrlSource,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.stop import StopInfo, StopReason
from zett_agent.storage import decode_messages, encode_messages

from chatledger import validate
from chatledger.zett import codec

from ..support import strategies as gen
from ..test_corrupt_rows import RAW_CORRUPTIONS

EXAMPLES = int(os.environ.get("CHATLEDGER_PROPERTY_EXAMPLES", "40")) * 5
decode_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
NOW = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


class Row:
    """A stored row as the database gives it back: attributes by column name (what the
    reference reads) and iteration in ``codec.RECORD_COLUMNS`` order (the fast path)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def __iter__(self) -> Any:
        return iter([getattr(self, column.name) for column in codec.RECORD_COLUMNS])


def stored(sent: gen.Append, sequence: int = 7, **changes: Any) -> Row:
    row = codec.raw_row(
        session_id="session",
        request_id=sent.request_id,
        message=sent.message,
        timing=sent.timing,
        metadata=sent.metadata,
        tags=sent.tags,
        usage=sent.usage,
        now=NOW,
    )
    return Row({**row, "sequence": sequence, **changes})


def outcome(decode: Any, row: Row) -> tuple[str, str]:
    try:
        return "ok", repr(decode(row))
    except ValueError as error:
        return type(error).__name__, str(error)


def fast_path_applies(row: Row) -> bool:
    """Whether the row's message text is one the fast path reads (no bytes marker, no
    ``\\u`` escape); other rows go to the reference by design."""
    return codec._BYTES_MARKER not in row.message_json and "\\u" not in row.message_json


@decode_settings
@given(sent=gen.appends())
def test_records_equal_the_reference(sent: gen.Append) -> None:
    """Every message kind, timing, usage, metadata and tags: the same record."""
    row = stored(sent)
    [fast] = codec.records([row])
    reference = codec.record(row)
    assert fast == reference
    assert repr(fast) == repr(reference)


@decode_settings
@given(sent=gen.appends())
def test_fast_path_reads_plain_rows_itself(sent: gen.Append) -> None:
    """Rows without bytes or escapes never need the reference: the fast path alone
    decodes them, equal to the reference."""
    row = stored(sent)
    assume(fast_path_applies(row))
    fast = codec._fast(list(row))
    assert repr(fast) == repr(codec.record(row))


PLAIN = [
    UserMessage(content="hello", attributes={"n": 2**70, "f": 0.1, "neg": -0.0, "big": 1e300, "b": True}),
    UserMessage(content=[ImageContent(ImageUrlSource("https://example.com/a.png"), alt_text="a")]),
    AssistantMessage(
        content="answer",
        reasoning="because",
        tool_calls=(ToolCall("c1", "grep", {"pattern": "x", "list": [1, 2.5, None]}),),
        provider="p",
        model="m",
        replay_blocks=({"type": "thinking", "signature": "abc"},),
        stop=StopInfo(reason=StopReason.MAX_OUTPUT, raw="length", detail={"code": 7}),
    ),
    ToolMessage(tool_call_id="c1", name="grep", content="found", success=False),
]


@pytest.mark.parametrize("message", PLAIN, ids=lambda message: type(message).__name__)
def test_plain_messages_take_the_fast_path(message: Any) -> None:
    """The messages of an ordinary agent turn, with streamed timing spans and usage,
    decode without the reference (which would still give the same)."""
    timing = MessageTiming(
        started_at=NOW,
        completed_at=NOW,
        duration_ns=5,
        reasoning_started_at=NOW,
        reasoning_completed_at=NOW,
        reasoning_duration_ns=2,
    )
    usage = ModelUsage(input_tokens=9, output_tokens=4, cache_read_tokens=3, reasoning_tokens=1)
    sent = gen.Append(
        request_id="r",
        message=message,
        timing=timing,
        metadata={"user": "u", "n": [1, 2]},
        tags={"t": True},
        usage=usage if isinstance(message, AssistantMessage) else None,
    )
    row = stored(sent)
    assert fast_path_applies(row)
    assert repr(codec._fast(list(row))) == repr(codec.record(row))


# -- rows edited by hand: the fast path accepts nothing the reference refuses ------------

_FIELD_NAMES = (
    *("content", "attributes", "persist", "include_in_messages", "reasoning", "tool_calls", "name"),
    *("tool_call_id", "success", "stop", "replay_blocks", "provider", "model", "x"),
)
_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["", "x", "auto", "end_turn", "https://e.com/i.png", "image/png", "2"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from([*_FIELD_NAMES, "text", "source", "url", "id", "reason"]), children, max_size=4
        ),
    ),
    max_leaves=10,
)
_kinds = st.one_of(st.integers(0, 7), st.sampled_from(["2", 2.0, 3.5, True, None, [2]]))
_data = st.dictionaries(st.sampled_from(_FIELD_NAMES), _values, max_size=6)
_envelopes = st.lists(
    st.fixed_dictionaries({"kind": _kinds, "data": _data})
    | st.dictionaries(st.sampled_from(["kind", "data"]), _kinds),
    max_size=2,
).map(json.dumps)


@decode_settings
@given(
    payload=_envelopes,
    role=st.integers(1, 6),
    metadata=st.sampled_from(["{}", '{"a": 1}', "[]", '{"a": NaN}', "", '{"": 1}']),
    tags=st.sampled_from(["{}", '{"t": 1}', '{"": 1}', '" "', "{"]),
    duration=st.sampled_from([0, 5, -1]),
    spans=st.sampled_from([(None, None, None), (NOW, NOW, 3), (NOW, None, None), (NOW, NOW, -2)]),
    usage=st.sampled_from([(None,) * 5, (5, 3, 1, 0, 0), (5, None, 1, 0, 0), (1, 3, 5, 0, 0)]),
)
def test_edited_rows_decode_or_fail_as_the_reference_does(
    payload: str,
    role: int,
    metadata: str,
    tags: str,
    duration: int,
    spans: tuple[Any, ...],
    usage: tuple[Any, ...],
) -> None:
    """Arbitrary envelopes, kinds, roles, context JSON, timing and token columns: the
    load's decode has exactly the reference's outcome (record or error message)."""
    row = stored(
        gen.Append("r", UserMessage(content="x"), None, None, None, None),
        message_json=payload,
        role=role,
        metadata_json=metadata,
        tags_json=tags,
        duration_ns=duration,
        reasoning_started_at=spans[0],
        reasoning_completed_at=spans[1],
        reasoning_duration_ns=spans[2],
        **dict(zip(("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                    "reasoning_tokens"), usage, strict=True)),
    )  # fmt: skip
    assert outcome(lambda row: codec.records([row])[0], row) == outcome(codec.record, row)


def test_escaped_bytes_marker_is_read_as_the_reference_reads_it() -> None:
    """A marker spelled with a ``\\u`` escape still becomes bytes, as zett's codec makes it."""
    payload = '[{"kind": 2, "data": {"content": "x", "attributes": {"k": {"\\u005f_kcs_bytes__": "AAE="}}}}]'
    row = stored(gen.Append("r", UserMessage(content="x"), None, None, None, None), message_json=payload)
    [record] = codec.records([row])
    assert record.message.attributes == {"k": b"\x00\x01"}


@pytest.mark.parametrize("name", RAW_CORRUPTIONS)
def test_each_known_corruption_is_refused_as_the_reference_refuses_it(name: str) -> None:
    """The hand edits of the corrupt-row tests, on a row the fast path reads when intact."""
    sent = gen.Append("r", UserMessage(content="fine"), None, None, None, None)
    assert fast_path_applies(stored(sent))
    row = stored(sent, **RAW_CORRUPTIONS[name])
    expected = outcome(codec.record, row)
    assert expected[0] == "CorruptData"  # chatledger's, a ValueError
    assert outcome(lambda row: codec.records([row])[0], row) == expected


# -- the append's read-back check: the fast path decides nothing the reference would not --


def reference_encode(message: Any) -> tuple[str, str]:
    """The append's check as the reference makes it: no key JSON would change
    (``codec._check_keys``), zett's encoder, then zett's own decoder reads it back."""
    try:
        codec._check_keys(dataclasses.asdict(message), "message")
        payload = encode_messages([message])
    except (TypeError, ValueError, RecursionError):
        return "ValueError", "refused"
    try:
        validate.text(payload, "message")
        decode_messages(payload)
    except (TypeError, ValueError, KeyError):
        return "ValueError", "refused"
    return "ok", payload


def encoded(message: Any) -> tuple[str, str]:
    try:
        kind, payload = codec.encode_message(message)
    except ValueError:
        return "ValueError", "refused"
    assert kind == codec._KINDS[type(message)]
    return "ok", payload


_hostile_keys = st.one_of(
    gen.texts(max_size=6), st.integers(-2, 2), st.booleans(), st.none(), st.just(codec._BYTES_MARKER)
)
#: Free-form values a caller may hand in: JSON, bytes, tuples, and what JSON would change
#: (non-string keys, a lone bytes-marker key) or cannot hold.
_hostile_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(),
        gen.texts(max_size=8),
        st.binary(max_size=6),
        st.sampled_from(["AAE=", "aGk=", "not base64"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_hostile_keys, children, max_size=3),
        st.fixed_dictionaries({codec._BYTES_MARKER: children}),
    ),
    max_leaves=10,
)
_hostile_objects = st.dictionaries(_hostile_keys, _hostile_values, max_size=3)
_hostile_messages = st.one_of(
    st.builds(
        UserMessage,
        content=st.one_of(gen.texts(max_size=20), st.integers(), st.lists(gen.texts(max_size=3), max_size=2)),
        attributes=_hostile_objects,
    ),
    st.builds(
        AssistantMessage,
        content=st.one_of(st.none(), gen.texts(max_size=20)),
        tool_calls=st.lists(
            st.builds(ToolCall, st.just("c"), st.just("t"), _hostile_objects), max_size=2
        ).map(tuple),
        replay_blocks=st.lists(_hostile_objects, max_size=2).map(tuple),
    ),
    st.builds(
        ToolMessage, tool_call_id=st.just("c"), name=gen.texts(max_size=5), content=gen.texts(max_size=9)
    ),
    gen.raw_messages,
    gen.checkpoints,
)


@decode_settings
@given(message=_hostile_messages)
def test_append_read_back_check_decides_as_the_reference(message: Any) -> None:
    """Whatever the message -- valid, with bytes, tuples, non-string or bytes-marker keys,
    NaN, wrong field types, a checkpoint -- the append's check accepts exactly what the
    reference check accepts, with the same stored text."""
    assert encoded(message) == reference_encode(message)


@pytest.mark.parametrize("message", PLAIN, ids=lambda message: type(message).__name__)
def test_plain_messages_are_checked_on_the_fast_path(message: Any) -> None:
    """An ordinary turn's messages read back equal on the fast path: no reference decode."""
    payload = encode_messages([message])
    assert codec._reads_back_as(payload, message)


def test_an_append_without_timing_stores_zetts_default_timing() -> None:
    """No timing given: the row holds what ``MessageTiming(started_at=now, completed_at=now,
    duration_ns=0)`` would give, without building and checking one."""
    sent = gen.Append("r", UserMessage(content="x"), None, None, None, None)
    given = dataclasses.replace(sent, timing=MessageTiming(started_at=NOW, completed_at=NOW, duration_ns=0))
    without, with_default = stored(sent), stored(given)
    assert {**vars(without), "id": None} == {**vars(with_default), "id": None}
