"""zett-agent messages to and from rows, with zett's own message codec.

Every check runs here, before a statement is built; a row that someone edited by
hand into something zett cannot read gives a ``ValueError`` naming the session
and sequence.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import ContextSnapshot, RawMessageRecord
from zett_agent.ids import new_uuid7
from zett_agent.json_types import JsonValue, json_object
from zett_agent.messages import AnyMessage, AssistantMessage, ToolMessage, UserMessage
from zett_agent.model import ModelUsage
from zett_agent.storage import MESSAGE_TYPES, MessageKind, decode_messages, encode_messages

from .. import validate

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


def encode_message(message: object, field: str = "message") -> tuple[MessageKind, str]:
    """The message's kind and its JSON envelope from zett's codec."""
    kind = _KINDS.get(type(message))
    if kind is None:
        raise TypeError(f"{field} must be a zett-agent message, not {type(message).__name__}")
    try:
        payload = encode_messages([message])  # type: ignore[list-item]
    except (TypeError, ValueError) as error:
        raise ValueError(f"{field} cannot be encoded: {error}") from None
    return kind, validate.text(payload, field)


def context_json(value: Mapping[str, JsonValue] | None, field: str, *, nonempty_keys: bool = False) -> str:
    """``metadata`` or ``tags`` as JSON text, checked by zett's own ``json_object``."""
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(f"{field} must be a mapping, not {type(value).__name__}")
    try:
        checked = json_object(value, field_name=field, nonempty_keys=nonempty_keys)
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
        raise ValueError("message is a CompactedMessage: checkpoints belong in snapshot(), not the raw log")
    if timing is not None and not isinstance(timing, MessageTiming):
        raise TypeError(f"timing must be a MessageTiming, not {type(timing).__name__}")
    if usage is not None and not isinstance(usage, ModelUsage):
        raise TypeError(f"usage must be a ModelUsage, not {type(usage).__name__}")
    if usage is not None and not isinstance(message, AssistantMessage):
        raise ValueError("usage belongs only to assistant messages (zett storage contract)")
    timing = timing or MessageTiming(started_at=now, completed_at=now, duration_ns=0)
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
        row["tool_name"] = validate.text(row["tool_name"], "message.name")[:200]
    for name in _TIMING_FIELDS:
        row[name] = validate.optional_aware(getattr(timing, name), f"timing.{name}")
    for name in _DURATION_FIELDS:
        row[name] = validate.optional_integer(getattr(timing, name), f"timing.{name}")
    for name in _USAGE_FIELDS:
        row[name] = validate.integer(getattr(usage, name), f"usage.{name}") if usage is not None else None
    return row


def _corrupt(session_id: str, where: str, error: Exception) -> ValueError:
    return ValueError(f"stored {where} of session {session_id!r} is corrupt: {type(error).__name__}: {error}")


def _context(payload: str, field: str, *, nonempty_keys: bool) -> dict[str, JsonValue]:
    value = json.loads(payload)
    if not isinstance(value, dict):
        raise ValueError(f"{field} is not a JSON object")
    return json_object(value, field_name=field, nonempty_keys=nonempty_keys)


def record(row: Any) -> RawMessageRecord:
    """A ``raw_messages`` row as zett's ``RawMessageRecord``.

    Raises:
        ValueError: the row cannot be decoded; names the session and sequence.
    """
    try:
        messages = decode_messages(row.message_json)
        if len(messages) != 1 or isinstance(messages[0], CompactedMessage):
            raise ValueError("message_json must hold exactly one raw-log message")
        return RawMessageRecord(
            id=row.id,
            session_id=row.session_id,
            request_id=row.request_id,
            sequence=row.sequence,
            message=messages[0],
            metadata=_context(row.metadata_json, "metadata", nonempty_keys=False),
            tags=_context(row.tags_json, "tags", nonempty_keys=True),
            **{name: getattr(row, name) for name in (*_TIMING_FIELDS, *_DURATION_FIELDS, *_USAGE_FIELDS)},
            created_at=row.created_at,
            updated_at=row.updated_at,
        )
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as error:
        raise _corrupt(row.session_id, f"raw message {row.sequence}", error) from error


def snapshot_json(message: object) -> str:
    """A ``CompactedMessage`` as a snapshot's JSON envelope."""
    if not isinstance(message, CompactedMessage):
        raise TypeError(f"compacted_message must be a CompactedMessage, not {type(message).__name__}")
    return encode_message(message, "compacted_message")[1]


def snapshot(row: Any) -> ContextSnapshot:
    """A ``session_snapshots`` row as zett's ``ContextSnapshot``; ``ValueError`` if corrupt."""
    try:
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
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as error:
        raise _corrupt(row.session_id, f"snapshot version {row.version}", error) from error
