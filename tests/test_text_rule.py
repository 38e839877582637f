"""``validate.text`` keeps its promise: a string every database can store in a text
column, so NUL (which PostgreSQL text cannot hold) is refused, naming the field.
Values stored inside JSON (message payloads, where NUL is escaped) keep it."""

from __future__ import annotations

import pytest
from zett_agent.messages import ToolMessage

from chatledger import validate
from chatledger.zett import LedgerSessionStorage

pytestmark = pytest.mark.one_transaction_at_a_time


def test_text_refuses_nul_naming_the_field() -> None:
    with pytest.raises(ValueError, match="session cannot contain NUL"):
        validate.text("a\x00b", "session")
    assert validate.text("plain ✓", "session") == "plain ✓"
    with pytest.raises(ValueError, match="field cannot be encoded as UTF-8"):
        validate.text("\ud800", "field")
    with pytest.raises(TypeError, match="field must be a str"):
        validate.text(b"bytes", "field")


async def test_nul_inside_a_message_still_round_trips(storage: LedgerSessionStorage, session_id: str) -> None:
    message = ToolMessage(tool_call_id="c\x00", name="tool\x00name", content="out\x00put")
    assert await storage.append(session_id, "r", message) == 1
    (record,) = (await storage.load(session_id)).raw_tail
    assert record.message == message
