"""The row the floors write: what chatledger stores of one message, in ``raw_messages``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def floor_row(
    id: str,
    session_id: str,
    request_id: str,
    sequence: int,
    role: int,
    content: str,
    tool_name: str | None,
    message_json: str,
) -> dict[str, Any]:
    """A floor's ``raw_messages`` row: the message's columns, empty metadata and tags,
    and now for every time."""
    now = datetime.now(UTC)
    return {
        "id": id,
        "session_id": session_id,
        "request_id": request_id,
        "sequence": sequence,
        "role": role,
        "content": content,
        "tool_name": tool_name,
        "message_json": message_json,
        "metadata_json": "{}",
        "tags_json": "{}",
        "started_at": now,
        "completed_at": now,
        "duration_ns": 0,
        "created_at": now,
        "updated_at": now,
    }
