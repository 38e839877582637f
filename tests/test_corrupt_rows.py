"""Rows someone edited by hand give a ValueError (``chatledger.CorruptData``) naming
the session and the sequence (or snapshot version), not a pydantic, JSON or driver
traceback; the rest of the store keeps working.

Each corruption is its own test, on every backend: the rows are changed with plain
SQL ``UPDATE`` / ``DELETE`` statements, as a person at a SQL prompt would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import text
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import AssistantMessage, UserMessage
from zett_agent.model import ModelUsage

from chatledger import CorruptData
from chatledger.zett import LedgerSessionStorage, codec

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

GOOD = UserMessage(content="fine")
GOOD_JSON = codec.encode_message(GOOD)[1]
CHECKPOINT_JSON = codec.encode_message(CompactedMessage(content="summary"))[1]
ASSISTANT_JSON = codec.encode_message(AssistantMessage(content="answer"))[1]

#: name -> the columns of raw message 2 to overwrite.
RAW_CORRUPTIONS: dict[str, dict[str, Any]] = {
    "message_json-not-json": {"message_json": "not json"},
    "message_json-truncated": {"message_json": '[{"kind": 2, "data": {"content": "fi'},
    "message_json-empty-list": {"message_json": "[]"},
    "message_json-two-messages": {"message_json": GOOD_JSON[:-1] + ", " + ASSISTANT_JSON[1:]},
    "message_json-object-not-list": {"message_json": '{"kind": 2, "data": {"content": "x"}}'},
    "message_json-unknown-kind": {"message_json": '[{"kind": 99, "data": {"content": "x"}}]'},
    "message_json-checkpoint-kind": {"message_json": CHECKPOINT_JSON, "role": 5},
    "message_json-missing-field": {"message_json": '[{"kind": 2, "data": {}}]'},
    "message_json-wrong-field-type": {"message_json": '[{"kind": 2, "data": {"content": 42}}]'},
    "message_json-bad-bytes-marker": {
        "message_json": '[{"kind": 2, "data": {"content": [{"source": {"data": {"__kcs_bytes__": "!!"},'
        ' "media_type": "image/png"}}]}}]'
    },
    "role-does-not-match-kind": {"role": 3},
    "metadata_json-not-json": {"metadata_json": "{oops"},
    "metadata_json-array": {"metadata_json": "[1, 2]"},
    "metadata_json-nan": {"metadata_json": '{"x": NaN}'},
    "metadata_json-empty": {"metadata_json": ""},
    "tags_json-empty-key": {"tags_json": '{"": 1}'},
    "tags_json-string": {"tags_json": '"tag"'},
    "duration_ns-negative": {"duration_ns": -1},
    "reasoning-span-incomplete": {"reasoning_duration_ns": 5},
    "usage-negative": {"input_tokens": -5, "output_tokens": 1, "cache_read_tokens": 0,
                       "cache_write_tokens": 0, "reasoning_tokens": 0},
    "usage-partial": {"input_tokens": 5},
}  # fmt: skip


#: The column each corruption's error names (by the prefix of its name).
NAMED_COLUMN = {
    "duration_ns": "the timing columns",
    "reasoning": "the timing columns",
    "usage": "the token columns",
}


async def execute(storage: LedgerSessionStorage, sql: str, **parameters: Any) -> None:
    """Run one hand-written statement in its own transaction."""
    async with storage.ledger.engine.begin() as conn:
        await conn.execute(text(sql), parameters)


async def corrupt_raw(storage: LedgerSessionStorage, session_id: str, values: Mapping[str, Any]) -> None:
    assignments = ", ".join(f"{column} = :{column}" for column in values)
    await execute(
        storage,
        f"UPDATE raw_messages SET {assignments} WHERE session_id = :session_id AND sequence = 2",
        session_id=session_id,
        **values,
    )


def assert_names_row(error: ValueError, session_id: str, where: str) -> None:
    """chatledger's CorruptData, a ValueError (not pydantic's or json's subclass),
    naming session and row."""
    assert type(error) is CorruptData, type(error)
    assert not isinstance(error, ValidationError | json.JSONDecodeError)
    assert repr(session_id) in str(error)
    assert where in str(error)
    assert "\n" not in str(error)


async def three_messages(storage: LedgerSessionStorage, session_id: str) -> None:
    for _ in range(3):
        await storage.append(session_id, "req", GOOD)


@pytest.mark.parametrize("name", RAW_CORRUPTIONS)
async def test_corrupt_raw_message_names_session_and_sequence(
    storage: LedgerSessionStorage, session_id: str, name: str
) -> None:
    await three_messages(storage, session_id)
    await corrupt_raw(storage, session_id, RAW_CORRUPTIONS[name])

    with pytest.raises(ValueError) as loaded:
        await storage.load(session_id)
    assert_names_row(loaded.value, session_id, "raw message at sequence 2")
    prefix = name.split("-")[0]
    assert f"corrupt in {NAMED_COLUMN.get(prefix, prefix)}" in str(loaded.value)
    with pytest.raises(ValueError) as listed:
        await storage.list_raw_messages(session_id)
    assert_names_row(listed.value, session_id, "raw message at sequence 2")

    # The damage stays in its row: the others read, and the session takes appends.
    around = [*await storage.list_raw_messages(session_id, through_sequence=1)]
    around += await storage.list_raw_messages(session_id, after_sequence=2)
    assert [record.sequence for record in around] == [1, 3]
    assert await storage.append(session_id, "req", GOOD) == 4


async def test_usage_columns_that_are_consistent_still_read(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """The read-side check accepts every row an append writes (control for the above)."""
    usage = ModelUsage(input_tokens=5, output_tokens=3, cache_read_tokens=5, cache_write_tokens=0)
    await storage.append(session_id, "req", AssistantMessage(content="a"), usage=usage)
    [record] = await storage.list_raw_messages(session_id)
    assert (record.input_tokens, record.cache_read_tokens) == (5, 5)


SNAPSHOT_CORRUPTIONS: dict[str, str] = {
    "not-json": "{{{",
    "not-a-checkpoint": GOOD_JSON,
    "empty-list": "[]",
    "missing-content": '[{"kind": 5, "data": {}}]',
}


@pytest.mark.parametrize("payload", SNAPSHOT_CORRUPTIONS.values(), ids=SNAPSHOT_CORRUPTIONS.keys())
async def test_corrupt_snapshot_names_session_and_version(
    storage: LedgerSessionStorage, session_id: str, payload: str
) -> None:
    await three_messages(storage, session_id)
    await storage.snapshot(session_id, CompactedMessage(content="summary"), 2, 0)
    await execute(
        storage,
        "UPDATE session_snapshots SET message_json = :payload WHERE session_id = :session_id",
        payload=payload,
        session_id=session_id,
    )
    with pytest.raises(ValueError) as raised:
        await storage.load(session_id)
    assert_names_row(raised.value, session_id, "snapshot version 1")
    # The raw log itself is intact.
    assert len(await storage.list_raw_messages(session_id)) == 3


async def test_missing_snapshot_row_names_session_and_version(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await three_messages(storage, session_id)
    await storage.snapshot(session_id, CompactedMessage(content="summary"), 2, 0)
    await execute(
        storage, "DELETE FROM session_snapshots WHERE session_id = :session_id", session_id=session_id
    )
    with pytest.raises(ValueError) as raised:
        await storage.load(session_id)
    assert_names_row(raised.value, session_id, "snapshot version 1")
    assert "missing" in str(raised.value)


async def test_other_sessions_are_unaffected(storage: LedgerSessionStorage, session_id: str) -> None:
    healthy = f"{session_id}-healthy"
    await three_messages(storage, session_id)
    await storage.append(healthy, "req", GOOD)
    await corrupt_raw(storage, session_id, {"message_json": "garbage"})
    with pytest.raises(ValueError):
        await storage.load(session_id)
    view = await storage.load(healthy)
    assert [record.message for record in view.raw_tail] == [GOOD]
