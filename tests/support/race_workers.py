"""Functions run in worker processes by the concurrency tests (importable by spawn)."""

from __future__ import annotations

import asyncio
from threading import Barrier

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
