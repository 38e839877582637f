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
