"""Sessions written by zett-agent's own SQL store, and everything zett reads back of them.

Used by the adoption tests: the same sessions are read through zett's store before
``chatledger adopt`` and through chatledger's after, and must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import URL
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import RawMessageRecord, SessionSummary, SessionView
from zett_agent.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from zett_agent.model import ModelUsage
from zett_agent.storage import SQLSessionStorage

#: zett-agent's own drivers: psycopg on PostgreSQL (its documented URL), aiomysql, aiosqlite.
ZETT_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+aiomysql", "sqlite": "sqlite+aiosqlite"}


def zett_url(url: URL) -> URL:
    """The URL zett-agent's own store opens for the database ``url`` names."""
    return url.set(drivername=ZETT_DRIVERS[url.get_backend_name()]).difference_update_query(["charset"])


T0 = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)


def _timing(offset_s: int, *, streamed: bool = False) -> MessageTiming:
    start = T0 + timedelta(seconds=offset_s)
    if not streamed:
        return MessageTiming(
            started_at=start, completed_at=start + timedelta(milliseconds=250), duration_ns=250_000_000
        )
    return MessageTiming(
        started_at=start,
        completed_at=start + timedelta(seconds=1, microseconds=654321),
        duration_ns=1_654_321_987,
        reasoning_started_at=start + timedelta(microseconds=100_001),
        reasoning_completed_at=start + timedelta(microseconds=700_002),
        reasoning_duration_ns=600_001_234,
        content_started_at=start + timedelta(microseconds=700_003),
        content_completed_at=start + timedelta(seconds=1, microseconds=654_000),
        content_duration_ns=953_997_001,
    )


async def write_zett_sessions(url: URL) -> list[str]:
    """Write :func:`write_sessions` through zett-agent's own store; return their ids."""
    store = SQLSessionStorage(zett_url(url))
    try:
        return await write_sessions(store)
    finally:
        await store.close()


async def write_sessions(store: Any, prefix: str = "chat") -> list[str]:
    """Write a varied set of sessions through a zett-style store (zett's own or
    chatledger's, which share the interface); return their ids.

    Checkpoints (two versions in one session), tool calls and results, usage, streamed
    timings, metadata and tags, a parent/child pair, a session type, an empty session
    made by ``create_session``, a title changed later, non-ASCII text.
    """
    ids = [f"{prefix}-alpha", f"{prefix}-beta", f"{prefix}-beta-child", f"{prefix}-empty", f"{prefix}-gamma"]
    alpha = ids[0]
    await store.append(
        alpha,
        "req-1",
        SystemMessage(content="You are terse."),
        timing=_timing(0),
        title="Alpha ✓",
        agent_name="planner",
    )
    await store.append(
        alpha,
        "req-1",
        UserMessage(content="What is the weather in Zürich? 🌦"),
        timing=_timing(1),
        metadata={"channel": "web", "depth": {"a": [1, 2.5, None]}},
        tags={"lang": "de"},
    )
    await store.append(
        alpha,
        "req-1",
        AssistantMessage(
            content="",
            reasoning="Need the tool.",
            tool_calls=(ToolCall(id="call-1", name="weather", arguments={"city": "Zürich"}),),
            provider="echo",
            model="echo-1",
        ),
        timing=_timing(2, streamed=True),
        usage=ModelUsage(
            input_tokens=1200,
            output_tokens=80,
            cache_read_tokens=1000,
            cache_write_tokens=100,
            reasoning_tokens=30,
        ),
    )
    await store.append(
        alpha,
        "req-1",
        ToolMessage(tool_call_id="call-1", name="weather", content="12 °C, rain"),
        timing=_timing(3),
    )
    await store.append(
        alpha,
        "req-1",
        AssistantMessage(content="12 °C and rain.", provider="echo", model="echo-1"),
        timing=_timing(4, streamed=True),
        usage=ModelUsage(
            input_tokens=1300,
            output_tokens=9,
            cache_read_tokens=1200,
            cache_write_tokens=0,
            reasoning_tokens=0,
        ),
    )
    await store.snapshot(alpha, CompactedMessage(content="Asked about Zürich weather; it rains."), 3, 0)
    await store.append(alpha, "req-2", UserMessage(content="And tomorrow?"), timing=_timing(5))
    await store.append(
        alpha,
        "req-2",
        AssistantMessage(content="Sunny."),
        timing=_timing(6, streamed=True),
        usage=ModelUsage(input_tokens=300, output_tokens=2),
    )
    await store.snapshot(alpha, CompactedMessage(content="Weather talk: rain today, sun tomorrow."), 6, 1)

    beta, child = ids[1], ids[2]
    for index in range(12):
        await store.append(
            beta,
            f"req-{index}",
            UserMessage(content=f"message {index} ' \" \\ end"),
            timing=_timing(10 + index),
        )
    await store.append(
        child,
        "req-c",
        UserMessage(content="delegated task"),
        parent_session_id=beta,
        agent_name="worker",
        timing=_timing(30),
    )
    await store.snapshot(child, CompactedMessage(content="the whole delegated task"), 1, 0)

    await store.create_session(session_id=ids[3], title="Nothing yet", session_type=7)

    gamma = ids[4]
    await store.create_session(session_id=gamma, title="Gamma", agent_name="a", session_type=2)
    await store.append(gamma, "req-g", UserMessage(content="hello"), timing=_timing(40))
    await store.update_session(gamma, title="Gamma, renamed")
    return ids


@dataclass
class Readback:
    """Everything zett's storage interface reads back of a set of sessions."""

    listed: list[SessionSummary]
    summaries: dict[str, SessionSummary | None]
    views: dict[str, SessionView]
    raw: dict[str, list[RawMessageRecord]]
    counts: dict[str, int]


async def read_back(store: Any, ids: list[str]) -> Readback:
    """Read ``ids`` through a zett-style store (zett's own or chatledger's)."""
    return Readback(
        listed=await store.list_sessions(limit=1000),
        summaries={sid: await store.get_session(sid) for sid in ids},
        views={sid: await store.load(sid) for sid in ids},
        raw={sid: await store.list_raw_messages(sid) for sid in ids},
        counts={sid: await store.count_messages(sid) for sid in ids},
    )


async def zett_read_back(url: URL, ids: list[str]) -> Readback:
    store = SQLSessionStorage(zett_url(url))
    try:
        return await read_back(store, ids)
    finally:
        await store.close()
