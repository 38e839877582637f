"""Functions run in worker processes by the concurrency tests (importable by spawn)."""

from __future__ import annotations

import asyncio
import time

from zett_agent.extensions.compaction import CompactedMessage

from chatledger import SnapshotConflict
from chatledger.zett import LedgerSessionStorage


async def _snapshot_at(dsn: str, session_id: str, boundary: int, start_at: float) -> str:
    async with LedgerSessionStorage(dsn) as storage:
        await storage.ledger.ensure_ready()
        await asyncio.sleep(max(0.0, start_at - time.time()))
        try:
            await storage.snapshot(session_id, CompactedMessage(content=f"through {boundary}"), boundary, 0)
        except SnapshotConflict:
            return "conflict"
        return "ok"


def snapshot_at(dsn: str, session_id: str, boundary: int, start_at: float) -> str:
    """Call ``snapshot`` with expected_version 0 at ``start_at``: "ok" or "conflict"."""
    return asyncio.run(_snapshot_at(dsn, session_id, boundary, start_at))
