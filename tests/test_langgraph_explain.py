"""LedgerSaver's ``get_tuple`` of a thread's latest checkpoint costs what it costs on a
short thread: the statement it sends reads backwards along the checkpoints' primary key
(``thread_id``, ``checkpoint_ns``, ``checkpoint_id``), one row, without a sort, on a
thread of 10,000 checkpoints beside one of 10. Checked with EXPLAIN, as
``tests/test_explain.py`` checks the zett store's reads."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import insert, text

from chatledger.langgraph import LedgerSaver
from chatledger.schema import langgraph_checkpoints_table

from .conftest import Database
from .test_explain import ANALYZE, EXPLAIN, SETTINGS, captured

pytestmark = pytest.mark.one_transaction_at_a_time

#: Checkpoints of the long thread and of the short one beside it.
LONG, SHORT = 10_000, 10
#: The primary key's index as each backend's EXPLAIN names it.
PRIMARY_KEY = {"pk_langgraph_checkpoints", "PRIMARY", "sqlite_autoindex_langgraph_checkpoints_1"}


@pytest.fixture
async def saver(database: Database) -> AsyncIterator[LedgerSaver]:
    async with LedgerSaver.from_url(database.url) as opened:
        yield opened


async def _seed(saver: LedgerSaver, thread_id: str, count: int) -> str:
    """``count`` checkpoints of ``thread_id`` written directly (a put each would take
    minutes); the highest id."""
    made = await saver.aput(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
        {"v": 1, "id": "0" * 8, "ts": "", "channel_values": {}, "channel_versions": {}, "versions_seen": {}},  # type: ignore[typeddict-item]
        {},
        {},
    )
    template = dict(made["configurable"])
    now = datetime.now(UTC)
    stored = await saver.aget_tuple(made)
    assert stored is not None
    kind, data = saver.serde.dumps_typed(stored.checkpoint)
    rows = [
        {
            "thread_id": template["thread_id"],
            "checkpoint_ns": "",
            "checkpoint_id": f"{n:08d}",
            "parent_checkpoint_id": f"{n - 1:08d}",
            "checkpoint_type": kind,
            "checkpoint_blob": data,
            "metadata_json": "{}",
            "write_id": str(uuid.uuid4()),
            "created_at": now,
        }
        for n in range(1, count)
    ]
    async with saver.ledger.engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            await conn.execute(insert(langgraph_checkpoints_table), rows[start : start + 1000])
    return f"{count - 1:08d}"


async def test_the_latest_checkpoint_is_read_on_the_primary_key_without_a_sort(
    saver: LedgerSaver, backend: str
) -> None:
    long_thread, short_thread = f"long-{uuid.uuid4()}", f"short-{uuid.uuid4()}"
    highest = await _seed(saver, long_thread, LONG)
    await _seed(saver, short_thread, SHORT)
    async with saver.ledger.engine.begin() as conn:
        analyze = ANALYZE[backend].replace(
            "agent_sessions, raw_messages, session_snapshots", "langgraph_checkpoints"
        )
        await conn.execute(text(analyze))

    for thread_id, latest in ((long_thread, highest), (short_thread, f"{SHORT - 1:08d}")):
        with captured(saver.ledger.engine) as statements:
            found = await saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        assert (
            found is not None
            and found.checkpoint["id"] == "0" * 8
            and found.config["configurable"]["checkpoint_id"] == latest
        )
        (sql, parameters), *_ = [
            (sql, parameters)
            for sql, parameters in statements
            if "FROM langgraph_checkpoints" in " ".join(sql.split())
        ]
        plan = await _plan(saver, backend, sql, parameters)
        assert plan.indexes & PRIMARY_KEY, plan.text
        assert not plan.sorts, plan.text


async def _plan(saver: LedgerSaver, backend: str, sql: str, parameters: Any) -> Any:
    async with saver.ledger.engine.connect() as conn, conn.begin():
        for setting in SETTINGS.get(backend, ()):
            await conn.execute(text(setting))
        return await EXPLAIN[backend](conn, sql, parameters)
