"""zett-agent messages to and from rows, with zett's own message codec.

Every check runs here, before a statement is built; a row that someone edited by
hand into something zett cannot read gives a ``ValueError`` naming the session
and sequence.

What goes in comes back equal: an encoded message is decoded again before it is
stored, so a message zett's codec would not read back (a wrong field type, a
non-string key in ``attributes`` or tool arguments, a mapping that looks like the
codec's bytes marker) is refused at append instead of turning up as a corrupt row.
JSON has one array type, so a tuple inside a free-form value comes back as a list.

Reading is on every agent turn's path, so :func:`records` decodes a load's rows on
a fast path (one pydantic-core pass over each stored JSON envelope, no parse of an
empty metadata or tags object, no re-check of absent timing or usage) and hands
every row it has any doubt about to :func:`record`, the reference decoder, whose
result or error is then the answer. The fast path only ever accepts a row that
:func:`record` accepts, with the same result.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import Column
from typing_extensions import TypedDict
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import ContextSnapshot, RawMessageRecord
from zett_agent.ids import new_uuid7
from zett_agent.json_types import JsonValue, json_object
from zett_agent.messages import AnyMessage, AssistantMessage, ToolMessage, UserMessage
from zett_agent.model import ModelUsage
from zett_agent.storage import MESSAGE_TYPES, MessageKind, decode_messages, encode_messages

from .. import validate
from ..errors import CorruptData, WrongType
from ..schema import raw_messages_table

_KINDS = {cls: kind for kind, cls in MESSAGE_TYPES.items()}
_TIMING_FIELDS = ("started_at", "completed_at", "reasoning_started_at", "reasoning_completed_at",
                  "content_started_at", "content_completed_at")  # fmt: skip
_DURATION_FIELDS = ("duration_ns", "reasoning_duration_ns", "content_duration_ns")
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
#: The timing and token columns of a row without a timing (but its start and end) or usage.
_NO_TIMING = {**dict.fromkeys(_TIMING_FIELDS), **dict.fromkeys(_DURATION_FIELDS), "duration_ns": 0}
_NO_USAGE = dict.fromkeys(_USAGE_FIELDS)
#: The one key of the object zett's codec writes for ``bytes`` (``storage.encode_messages``).
_BYTES_MARKER = "__kcs_bytes__"


def _first_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:500]


def _check_keys(value: object, path: str) -> None:
    """Refuse what JSON would change silently: non-string keys (``{1: x}`` reads back
    as ``{"1": x}``) and a lone bytes-marker key (it reads back as ``bytes``)."""
    if isinstance(value, dict):
        if len(value) == 1 and _BYTES_MARKER in value:
            raise ValueError(f"{path} uses the key {_BYTES_MARKER!r}, which zett's codec reserves for bytes")
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path} has the non-string key {key!r}; JSON object keys are strings")
            _check_keys(item, f"{path}[{key!r}]")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_keys(item, f"{path}[{index}]")


def encode_message(message: object, field: str = "message") -> tuple[MessageKind, str]:
    """The message's kind and its JSON envelope from zett's codec.

    The envelope is decoded again (as :func:`record` will) so that nothing is
    stored that would not read back. First by the load's fast path: when it reads
    the envelope back as a message equal to ``message``, the reference decoder
    would too (the fast path accepts nothing the reference refuses), and no key
    can have changed on the way (a non-string key reads back as another key, a
    bytes-marker object is left to the reference). Anything else -- a tuple that
    comes back as a list, a checkpoint -- takes the reference check.

    Raises:
        WrongType: ``message`` is not a zett-agent message, holds an object JSON
            cannot hold (zett's codec raises ``TypeError`` there; this is both), or
            would not decode because a field has the wrong type (``content=123``).
        ValueError: it cannot be encoded otherwise (NaN, infinity, a string that is
            not UTF-8), would not decode for another reason, or holds a non-string
            key. The message names ``field``.
    """
    kind = _KINDS.get(type(message))
    if kind is None:
        raise WrongType(f"{field} must be a zett-agent message, not {type(message).__name__}")
    try:
        payload = encode_messages([message])  # type: ignore[list-item]
    except (TypeError, ValueError, RecursionError) as error:
        raise _refusal(error)(f"{field} cannot be encoded: {_first_line(error)}") from None
    validate.text(payload, field)
    if not _reads_back_as(payload, message):
        _check_read_back(message, payload, field)
    return kind, payload


def _reads_back_as(payload: str, message: object) -> bool:
    """Whether the fast path reads ``payload`` back as exactly ``[message]``."""
    try:
        return _fast_messages(payload) == [message]
    except (LookupError, ValueError, TypeError, RecursionError):
        return False


def _check_read_back(message: object, payload: str, field: str) -> None:
    """The reference check of an encoded message: no key JSON would change, and zett's
    own decoder reads the envelope."""
    try:
        _check_keys(asdict(message), field)  # type: ignore[call-overload]
    except (TypeError, ValueError, RecursionError) as error:
        raise _refusal(error)(f"{field} cannot be encoded: {_first_line(error)}") from None
    try:
        decode_messages(payload)
    except (TypeError, ValueError, KeyError) as error:
        raise _refusal(error)(f"{field} would not read back from storage: {_first_line(error)}") from None


def _refusal(error: Exception) -> type[ValueError]:
    """:class:`WrongType` for a failure that is about a value's type (a ``TypeError``,
    or a validation whose every error is pydantic's ``*_type``), else ``ValueError``."""
    if isinstance(error, TypeError):
        return WrongType
    if isinstance(error, ValidationError) and all(
        str(detail["type"]).endswith("_type") for detail in error.errors()
    ):
        return WrongType
    return ValueError


def context_json(value: Mapping[str, JsonValue] | None, field: str, *, nonempty_keys: bool = False) -> str:
    """``metadata`` or ``tags`` as JSON text, checked by zett's own ``json_object``."""
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise WrongType(f"{field} must be a mapping, not {type(value).__name__}")
    if not value:
        return "{}"  # what the checks below make of an empty mapping
    validate.json_depth(value, field)
    try:
        # Named as zett's own store names them ("Message metadata ..."), which its
        # callers may match.
        checked = json_object(value, field_name=f"Message {field}", nonempty_keys=nonempty_keys)
    except ValueError as error:
        cause = f": {error.__cause__}" if error.__cause__ else ""
        raise ValueError(f"{error}{cause}") from None
    return validate.json_text(checked, field)


def _plain_text(message: AnyMessage) -> str:
    """The message's text for the ``content`` column (what SQL readers grep)."""
    text = message.text if isinstance(message, UserMessage | ToolMessage) else message.content
    return text if isinstance(text, str) else ""


def raw_row(
    *,
    session_id: str,
    request_id: str,
    message: AnyMessage,
    timing: MessageTiming | None,
    metadata: Mapping[str, JsonValue] | None,
    tags: Mapping[str, JsonValue] | None,
    usage: ModelUsage | None,
    now: datetime,
) -> dict[str, Any]:
    """Validate one append's input and build its ``raw_messages`` row (without sequence)."""
    kind, message_json = encode_message(message)
    if kind is MessageKind.CHECKPOINT:
        raise ValueError(
            "Checkpoints belong in snapshots, not raw logs: message is a CompactedMessage; use snapshot()"
        )
    if timing is not None and not isinstance(timing, MessageTiming):
        raise WrongType(f"timing must be a MessageTiming, not {type(timing).__name__}")
    if usage is not None and not isinstance(usage, ModelUsage):
        raise WrongType(f"usage must be a ModelUsage, not {type(usage).__name__}")
    if usage is not None and not isinstance(message, AssistantMessage):
        raise ValueError("Model usage belongs only to assistant messages (usage)")
    row: dict[str, Any] = {
        "id": new_uuid7(),
        "session_id": session_id,
        "request_id": request_id,
        "role": int(kind),
        # PostgreSQL text cannot hold NUL; this column is a convenience copy and
        # message_json keeps the exact text.
        "content": _plain_text(message).replace("\x00", "\ufffd"),
        "tool_name": message.name if isinstance(message, ToolMessage) else None,
        "message_json": message_json,
        "metadata_json": context_json(metadata, "metadata"),
        "tags_json": context_json(tags, "tags", nonempty_keys=True),
        "created_at": now,
        "updated_at": now,
    }
    if row["tool_name"] is not None:
        # A convenience copy for SQL readers, like ``content``: the exact name stays
        # in message_json; the column holds its first 200 characters, NUL replaced.
        row["tool_name"] = validate.utf8(row["tool_name"], "message.name")[:200].replace("\x00", "\ufffd")
    if timing is None:
        # The default timing, MessageTiming(started_at=now, completed_at=now,
        # duration_ns=0): no span of its own, nothing to check but the instant.
        row.update(_NO_TIMING)
        row["started_at"] = row["completed_at"] = validate.aware(now, "timing.started_at")
    else:
        for name in _TIMING_FIELDS:
            row[name] = validate.optional_aware(getattr(timing, name), f"timing.{name}")
        for name in _DURATION_FIELDS:
            row[name] = validate.optional_integer(getattr(timing, name), f"timing.{name}")
    if usage is None:
        row.update(_NO_USAGE)
    else:
        for name in _USAGE_FIELDS:
            row[name] = validate.integer(getattr(usage, name), f"usage.{name}")
    return row


def _corrupt(session_id: object, where: str, column: str, error: Exception) -> CorruptData:
    return CorruptData(
        f"session {session_id!r}: the stored {where} is corrupt in {column} (edited outside "
        f"chatledger?): {type(error).__name__}: {_first_line(error)}"
    )


def _context(payload: str, field: str, *, nonempty_keys: bool) -> dict[str, JsonValue]:
    value = json.loads(payload)
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a JSON object")  # zett's own words
    return json_object(value, field_name=field, nonempty_keys=nonempty_keys)


def record(row: Any) -> RawMessageRecord:
    """A ``raw_messages`` row as zett's ``RawMessageRecord``.

    Raises:
        ValueError: the row cannot be decoded; names the session and sequence.
    """
    column = "message_json"
    try:
        messages = decode_messages(row.message_json)
        if len(messages) != 1 or isinstance(messages[0], CompactedMessage):
            raise ValueError("message_json must hold exactly one raw-log message")
        column = "role"
        if row.role != _KINDS[type(messages[0])]:
            raise ValueError(f"role {row.role} does not match the message kind in message_json")
        column = "the timing columns"
        timing = {name: getattr(row, name) for name in (*_TIMING_FIELDS, *_DURATION_FIELDS)}
        MessageTiming(**timing)  # non-negative durations, spans complete or absent
        column = "the token columns"
        usage = {name: getattr(row, name) for name in _USAGE_FIELDS}
        if any(value is not None for value in usage.values()):
            if any(value is None for value in usage.values()):
                raise ValueError("token counts must be all set (assistant usage) or all NULL")
            ModelUsage(**usage)  # non-negative, cache and reasoning within the totals
        column = "metadata_json"
        metadata = _context(row.metadata_json, "metadata", nonempty_keys=False)
        column = "tags_json"
        tags = _context(row.tags_json, "tags", nonempty_keys=True)
        return RawMessageRecord(
            id=row.id,
            session_id=row.session_id,
            request_id=row.request_id,
            sequence=row.sequence,
            message=messages[0],
            metadata=metadata,
            tags=tags,
            **timing,
            **usage,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
    except (ValueError, TypeError, KeyError, RecursionError) as error:
        raise _corrupt(row.session_id, f"raw message at sequence {row.sequence}", column, error) from error


# -- the fast path of a load ----------------------------------------------------------

#: ``RawMessageRecord``'s fields, in its order (its positional arguments).
_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(RawMessageRecord))
_JSON_COLUMNS = {"message": "message_json", "metadata": "metadata_json", "tags": "tags_json"}
#: The ``raw_messages`` columns a read selects: one per ``RawMessageRecord`` field, in
#: its order (the JSON columns in the places of the values decoded from them), then
#: ``role``. Not ``content`` or ``tool_name``: convenience copies for SQL readers.
RECORD_COLUMNS: tuple[Column[Any], ...] = (
    *(raw_messages_table.c[_JSON_COLUMNS.get(name, name)] for name in _RECORD_FIELDS),
    raw_messages_table.c.role,
)
_MESSAGE, _METADATA, _TAGS = (_RECORD_FIELDS.index(name) for name in ("message", "metadata", "tags"))
_ROLE = len(_RECORD_FIELDS)
_TIMING = tuple(_RECORD_FIELDS.index(name) for name in (*_TIMING_FIELDS, *_DURATION_FIELDS))
_TIMING_NAMES = tuple(_RECORD_FIELDS[index] for index in _TIMING)
_DURATION = _RECORD_FIELDS.index("duration_ns")
#: The timing values that are ``None`` for a message without streamed spans, and the
#: token counts (all ``None`` but on an assistant message with usage), of a row's values.
_spans = operator.itemgetter(
    *(_RECORD_FIELDS.index(name) for name in (*_TIMING_FIELDS[2:], *_DURATION_FIELDS[1:]))
)
_usage = operator.itemgetter(*(_RECORD_FIELDS.index(name) for name in _USAGE_FIELDS))


def _envelopes() -> TypeAdapter[Any]:
    """zett's envelope list (``[{"kind": K, "data": {...}}]``) as one pydantic-core
    validator of the stored JSON text: a union of the raw-log kinds discriminated by
    ``kind``, each validating ``data`` as zett's own codec does
    (``TypeAdapter(MESSAGE_TYPES[kind])``). A checkpoint kind is no member, so such a
    row goes to :func:`record`, which refuses it."""
    make: Any = TypedDict
    members = tuple(
        make(f"{cls.__name__}Envelope", {"kind": Literal[int(kind)], "data": cls})
        for kind, cls in MESSAGE_TYPES.items()
        if kind is not MessageKind.CHECKPOINT
    )
    union: Any = Union.__getitem__(members)
    return TypeAdapter(list[Annotated[union, Field(discriminator="kind")]])


_ENVELOPES = _envelopes()


def _fast_messages(payload: str) -> list[Any]:
    """The raw-log messages of a stored JSON envelope list; raises on any doubt
    (``LookupError``, or the validator's ``ValueError``)."""
    # zett's decoder turns every object whose one key is the bytes marker into bytes
    # (a JSON hook); without the marker in the text, plain JSON is what it reads. A
    # ``\u`` escape could spell the marker; JSON writes one only for control
    # characters and lone surrogates (and the text has one where a message has a
    # backslash before a "u"): such rows take the reference path.
    if _BYTES_MARKER in payload or "\\u" in payload:
        raise LookupError("reference path")
    return [envelope["data"] for envelope in _ENVELOPES.validate_json(payload)]


def _fast(values: list[Any]) -> RawMessageRecord:
    """One row's values (:data:`RECORD_COLUMNS`) as a record; raises on any doubt."""
    messages = _fast_messages(values[_MESSAGE])
    if len(messages) != 1:
        raise LookupError("reference path")
    message = messages[0]
    if values[_ROLE] != _KINDS[type(message)]:
        raise LookupError("reference path")
    values[_MESSAGE] = message
    duration, spans = values[_DURATION], _spans(values)
    if type(duration) is not int or duration < 0 or spans.count(None) != len(spans):
        MessageTiming(**{name: values[index] for name, index in zip(_TIMING_NAMES, _TIMING, strict=True)})
    usage = _usage(values)
    absent = usage.count(None)
    if absent != len(usage):
        if absent:
            raise LookupError("reference path")
        ModelUsage(**dict(zip(_USAGE_FIELDS, usage, strict=True)))
    metadata, tags = values[_METADATA], values[_TAGS]
    values[_METADATA] = {} if metadata == "{}" else _context(metadata, "metadata", nonempty_keys=False)
    values[_TAGS] = {} if tags == "{}" else _context(tags, "tags", nonempty_keys=True)
    return RawMessageRecord(*values[:_ROLE])


def records(rows: Iterable[Any]) -> list[RawMessageRecord]:
    """Rows of :data:`RECORD_COLUMNS` as zett's ``RawMessageRecord`` s, in order.

    Each row is decoded on the fast path; a row it cannot vouch for (bytes in the
    message, a partial token set, anything that does not validate) is decoded by
    :func:`record` instead, so the result and every error are the reference's.

    Raises:
        ValueError: a row cannot be decoded; names the session and sequence.
    """
    decoded: list[RawMessageRecord] = []
    append = decoded.append
    for row in rows:
        try:
            append(_fast(list(row)))
        except (LookupError, ValueError, TypeError, RecursionError):
            append(record(row))
    return decoded


def snapshot_json(message: object) -> str:
    """A ``CompactedMessage`` as a snapshot's JSON envelope."""
    if not isinstance(message, CompactedMessage):
        raise WrongType(f"compacted_message must be a CompactedMessage, not {type(message).__name__}")
    return encode_message(message, "compacted_message")[1]


def snapshot(row: Any, *, session_id: str | None = None, version: int | None = None) -> ContextSnapshot:
    """A ``session_snapshots`` row as zett's ``ContextSnapshot``.

    ``session_id`` and ``version`` name the checkpoint the session row points at, for
    the error message when that snapshot row is missing (all its columns ``None``).

    Raises:
        ValueError: the row is missing or cannot be decoded; names the session and version.
    """
    try:
        if row.message_json is None:
            raise ValueError("the session's current snapshot row is missing")
        messages = decode_messages(row.message_json)
        if len(messages) != 1 or not isinstance(messages[0], CompactedMessage):
            raise ValueError("snapshot must hold exactly one CompactedMessage")
        return ContextSnapshot(
            id=row.id,
            session_id=row.session_id,
            version=row.version,
            compacted_message=messages[0],
            compacted_through_sequence=row.compacted_through_sequence,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
    except (ValueError, TypeError, KeyError, RecursionError) as error:
        where = f"snapshot version {row.version if version is None else version}"
        session = row.session_id if session_id is None else session_id
        raise _corrupt(session, where, "message_json", error) from error
