"""Hypothesis strategies for everything a zett session stores.

Values are drawn from the edges a store must keep: unicode, emoji and astral-plane
characters, NUL and the characters SQL literals escape, image bytes, microsecond
timestamps in several zones, durations from 0 ns to days (and the 64-bit limit),
token counts up to 2**40. Every value drawn here is valid input, so it must come
back from every backend equal to what went in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import strategies as st
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.json_types import JsonValue
from zett_agent.messages import (
    AgentMessage,
    AnyMessage,
    AssistantMessage,
    ImageBytesSource,
    ImageContent,
    ImageDetail,
    ImageUrlSource,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.stop import StopInfo, StopReason

#: Characters that break naive storage: NUL, what SQL literals escape, a BOM, a
#: zero-width joiner and a combining accent, case pairs that collations fold,
#: astral-plane characters.
SPECIAL_CHARACTERS = (
    "\x00", "'", '"', "\\", "\n", "\r", "\x1a", "\t", " ", "\ufeff", "\u200d", "\u0301", "\ufffd",
    "é", "e", "ß", "ẞ", "ǅ", "İ", "Σ", "ς", "😀", "👩", "💻", "𝄞", "\U00010000", "\U0010ffff",
)  # fmt: skip

_characters = st.one_of(st.characters(codec="utf-8"), st.sampled_from(SPECIAL_CHARACTERS))
_characters_without_nul = st.one_of(
    st.characters(codec="utf-8", exclude_characters="\x00"),
    st.sampled_from([char for char in SPECIAL_CHARACTERS if char != "\x00"]),
)


def texts(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Any UTF-8 encodable text, NUL included."""
    return st.text(_characters, min_size=min_size, max_size=max_size)


def ids(max_size: int = 255) -> st.SearchStrategy[str]:
    """Valid session / request ids: 1-255 characters, not blank, no NUL."""
    short = st.text(_characters_without_nul, min_size=1, max_size=min(12, max_size))
    long = st.text(_characters_without_nul, min_size=max_size - 5, max_size=max_size)
    return st.one_of(short, long).filter(str.strip)


def display_text(max_size: int) -> st.SearchStrategy[str]:
    """A title or agent name as stored: stripped, 1-``max_size`` characters, no NUL."""
    return st.text(_characters_without_nul, min_size=1, max_size=max_size).map(str.strip).filter(bool)


# -- JSON --------------------------------------------------------------------------

_scalars: st.SearchStrategy[JsonValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts(),
)


def _json(scalars: st.SearchStrategy[object], keys: st.SearchStrategy[str]) -> st.SearchStrategy[object]:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=12,
    )


json_values = _json(_scalars, texts(max_size=12))
#: ``metadata``: any JSON object with string keys (the empty key included).
metadata = st.dictionaries(texts(max_size=12), json_values, max_size=5)
#: ``tags``: a JSON object whose keys are not blank (zett's ``nonempty_keys``).
tags = st.dictionaries(texts(min_size=1, max_size=12).filter(str.strip), json_values, max_size=5)

#: Free-form message values (attributes, tool arguments, replay blocks, stop details):
#: zett's codec stores JSON plus ``bytes`` (as a marker object) anywhere inside.
_codec_keys = texts(max_size=12).filter(lambda key: key != "__kcs_bytes__")
codec_objects = st.dictionaries(
    _codec_keys, _json(st.one_of(_scalars, st.binary(max_size=24)), _codec_keys), max_size=4
)

# -- messages ----------------------------------------------------------------------

_common = {
    "attributes": codec_objects,
    "persist": st.booleans(),
    "include_in_messages": st.booleans(),
}
_optional_text = st.none() | texts()

images = st.builds(
    ImageContent,
    source=st.one_of(
        st.builds(
            ImageBytesSource,
            data=st.binary(min_size=1, max_size=256),
            media_type=st.sampled_from(["image/png", "image/jpeg", "image/webp", "image/gif"]),
        ),
        st.builds(
            ImageUrlSource,
            url=st.one_of(
                texts().map(lambda path: f"https://example.com/{path}"),
                st.binary(min_size=1, max_size=32).map(lambda data: f"data:image/png;base64,{data.hex()}"),
            ),
        ),
    ),
    detail=st.sampled_from(ImageDetail),
    alt_text=_optional_text,
)
user_content = st.one_of(
    texts(max_size=200),
    st.lists(st.one_of(st.builds(TextContent, texts(max_size=80)), images), max_size=4),
)
tool_calls = st.builds(
    ToolCall,
    id=texts(min_size=1, max_size=24),
    name=texts(min_size=1),
    arguments=codec_objects,
    error=_optional_text,
)
stops = st.none() | st.builds(
    StopInfo,
    reason=st.sampled_from(StopReason),
    raw=_optional_text,
    category=_optional_text,
    message=_optional_text,
    recommended_model=_optional_text,
    detail=codec_objects,
)

system_messages = st.builds(SystemMessage, content=texts(max_size=200), **_common)
user_messages = st.builds(UserMessage, content=user_content, **_common)
assistant_messages = st.builds(
    AssistantMessage,
    content=texts(max_size=200),
    reasoning=st.none() | texts(max_size=200),
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    provider=_optional_text,
    model=_optional_text,
    replay_blocks=st.lists(codec_objects, max_size=3).map(tuple),
    stop=stops,
    **_common,
)
tool_messages = st.builds(
    ToolMessage,
    tool_call_id=texts(min_size=1, max_size=24),
    # Up to 250 characters: past the 200 of the tool_name convenience column.
    name=texts(min_size=1, max_size=250),
    content=user_content,
    success=st.booleans(),
    **_common,
)
agent_messages = st.builds(AgentMessage, content=texts(max_size=200), **_common)
#: Every message kind the raw log holds.
raw_messages: st.SearchStrategy[AnyMessage] = st.one_of(
    system_messages, user_messages, assistant_messages, tool_messages, agent_messages
)
#: Checkpoint summaries (``CompactedMessage`` is a ``UserMessage``: text or parts).
checkpoints = st.builds(CompactedMessage, content=user_content, **_common)

# -- timing and usage --------------------------------------------------------------

ZONES = (
    UTC,
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(hours=-9, minutes=-30)),
    timezone(timedelta(hours=14)),
    timezone(timedelta(hours=-12)),
)
#: Aware instants with microseconds, in several zones, within the range every
#: backend stores (``chatledger.validate.MIN_INSTANT``..``MAX_INSTANT``).
instants = st.datetimes(
    min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.sampled_from(ZONES)
)
DAY_NS = 86_400 * 10**9
#: Durations in nanoseconds: 0 up to weeks, and the edges.
durations = st.one_of(st.integers(0, 30 * DAY_NS), st.sampled_from([0, 1, 3 * DAY_NS, 2**63 - 1]))


@st.composite
def timings(draw: st.DrawFn) -> MessageTiming:
    """A ``MessageTiming`` with each optional span present or absent."""
    spans = {}
    for name in ("reasoning", "content"):
        if draw(st.booleans()):
            spans[f"{name}_started_at"] = draw(instants)
            spans[f"{name}_completed_at"] = draw(instants)
            spans[f"{name}_duration_ns"] = draw(durations)
    return MessageTiming(
        started_at=draw(instants), completed_at=draw(instants), duration_ns=draw(durations), **spans
    )


TOKENS_MAX = 2**40
_tokens = st.one_of(st.integers(0, TOKENS_MAX), st.sampled_from([0, TOKENS_MAX]))


@st.composite
def usages(draw: st.DrawFn) -> ModelUsage:
    """Token counts up to 2**40 that satisfy zett's own invariants."""
    input_tokens = draw(_tokens)
    output_tokens = draw(_tokens)
    return ModelUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=draw(st.integers(0, input_tokens)),
        cache_write_tokens=draw(st.integers(0, input_tokens)),
        reasoning_tokens=draw(st.integers(0, output_tokens)),
    )


# -- appends and sessions ----------------------------------------------------------


@dataclass(frozen=True)
class Append:
    """The arguments of one ``append`` (besides the session id)."""

    request_id: str
    message: AnyMessage
    timing: MessageTiming | None
    metadata: dict[str, JsonValue] | None
    tags: dict[str, JsonValue] | None
    usage: ModelUsage | None


@st.composite
def appends(draw: st.DrawFn, messages: st.SearchStrategy[AnyMessage] = raw_messages) -> Append:
    """One append: a message with timing, metadata, tags each present or absent, and
    usage (only assistant messages carry it)."""
    message = draw(messages)
    usage = draw(usages()) if isinstance(message, AssistantMessage) and draw(st.booleans()) else None
    return Append(
        request_id=draw(ids(max_size=64)),
        message=message,
        timing=draw(st.none() | timings()),
        metadata=draw(st.none() | metadata),
        tags=draw(st.none() | tags),
        usage=usage,
    )


@dataclass(frozen=True)
class SessionFields:
    """The session row's fields as a caller gives them."""

    parent_session_id: str | None
    title: str | None
    agent_name: str | None
    session_type: int | None  # None: the session is created by its first append


session_fields = st.builds(
    SessionFields,
    parent_session_id=st.none() | ids(max_size=200),
    title=st.none() | display_text(200),
    agent_name=st.none() | display_text(64),
    session_type=st.none() | st.integers(0, 2**31 - 1),
)
