"""The reader process of the causal replica check (importable by spawn): it is told
each write's session, position and text, loads the session from a replica, and
answers whether the load held the write."""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection

from chatledger.zett import LedgerSessionStorage


async def _read(pipe: Connection, primary: str, replicas: list[str]) -> None:
    async with LedgerSessionStorage(primary, read_dsn=replicas, replica_wait=10.0) as storage:
        await storage.ledger.ensure_ready()
        pipe.send("ready")
        stale = 0
        while (told := pipe.recv()) is not None:
            session_id, position, text = told
            storage.remember_write(session_id, position)
            view = await storage.load(session_id)
            fresh = bool(view.raw_tail) and view.raw_tail[-1].message.content == text
            stale += not fresh
            pipe.send(fresh)
        reads = storage.ledger.replica_reads
        pipe.send((stale, reads.served, reads.fell_back, reads.waited / max(reads.waits, 1)))


def read_told_writes(pipe: Connection, primary: str, replicas: list[str]) -> None:
    """Serve ``(session_id, position, text)`` requests on ``pipe`` until ``None``, then
    send ``(stale, served by a replica, fell back to the primary, mean wait in seconds)``."""
    asyncio.run(_read(pipe, primary, replicas))
