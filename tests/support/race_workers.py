"""Functions run in worker processes by the concurrency tests (importable by spawn)."""

from __future__ import annotations

import asyncio
from threading import Barrier
from typing import Any

from zett_agent.extensions.compaction import CompactedMessage

from chatledger import SnapshotConflict
from chatledger.zett import LedgerSessionStorage


async def _snapshot_at(dsn: str, session_id: str, boundary: int, start: Barrier) -> str:
    async with LedgerSessionStorage(dsn) as storage:
        await storage.ledger.ensure_ready()
        # Connected and ready: wait for every racer (and the watcher) to be, too.
        await asyncio.to_thread(start.wait)
        try:
            await storage.snapshot(session_id, CompactedMessage(content=f"through {boundary}"), boundary, 0)
        except SnapshotConflict:
            return "conflict"
        return "ok"


def snapshot_at(dsn: str, session_id: str, boundary: int, start: Barrier) -> str:
    """Call ``snapshot`` with expected_version 0 once every party has reached ``start``
    (a manager's barrier): "ok" or "conflict"."""
    return asyncio.run(_snapshot_at(dsn, session_id, boundary, start))


async def _add_openai_items(dsn: str, session_id: str, worker: int, adds: int, start: Barrier) -> list[str]:
    from chatledger.openai_agents import LedgerSession

    session = LedgerSession.from_url(session_id, url=dsn)
    try:
        await session.ledger.ensure_ready()
        await asyncio.to_thread(start.wait)
        errors: list[str] = []
        for n in range(adds):
            batch: list[Any] = [{"role": "user", "content": f"w{worker}-{n}-{k}"} for k in range(2)]
            try:
                await session.add_items(batch)
            except Exception as error:  # counted, not raised: the test reports every one
                errors.append(f"{type(error).__name__}: {error}")
        return errors
    finally:
        await session.close()


def add_openai_items(dsn: str, session_id: str, worker: int, adds: int, start: Barrier) -> list[str]:
    """Add ``adds`` batches of two items to one OpenAI Agents session once every party
    has reached ``start``; the errors met (none expected)."""
    return asyncio.run(_add_openai_items(dsn, session_id, worker, adds, start))


async def _append_adk_events(
    dsn: str, session_id: str, worker: int, count: int, start: Barrier
) -> tuple[int, int]:
    from google.adk.errors import StaleSessionError
    from google.adk.sessions.base_session_service import GetSessionConfig

    from chatledger.adk import LedgerSessionService
    from chatledger.testing.adk import event

    async with LedgerSessionService(dsn) as service:
        await service.ledger.ensure_ready()
        session = await service.get_session(app_name="race", user_id="u", session_id=session_id)
        assert session is not None
        await asyncio.to_thread(start.wait)
        stale = 0
        for index in range(count):
            item = event(f"{worker}:{index}", {f"user:w{worker}": index})
            while True:
                try:
                    await service.append_event(session, item)
                    break
                except StaleSessionError:
                    # ADK's contract: reload, then append again (the event, its id kept).
                    stale += 1
                    reloaded = await service.get_session(
                        app_name="race",
                        user_id="u",
                        session_id=session_id,
                        config=GetSessionConfig(num_recent_events=0),
                    )
                    assert reloaded is not None
                    session = reloaded
        return count, stale


def append_adk_events(dsn: str, session_id: str, worker: int, count: int, start: Barrier) -> tuple[int, int]:
    """Append ``count`` events ("<worker>:<index>", each setting ``user:w<worker>``) to
    the ADK session ``session_id`` of app "race", user "u", reloading on a stale
    refusal, once every party reached ``start``: (appended, stale refusals)."""
    return asyncio.run(_append_adk_events(dsn, session_id, worker, count, start))
