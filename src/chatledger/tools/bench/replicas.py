"""The benchmark's loads on read replicas (``read_dsn``): the throughput of loads from
several processes with 0, 1 and 2 replicas (see :mod:`chatledger.tools.bench`).

Given the admin DSNs of the replicas of the benchmarked server (``--read-dsn``), a
fresh database is created on the primary and replicated; one session of 50 raw
messages is appended there. Then, per replica count ``k`` (0: the primary alone), each
of ``processes`` worker processes opens a storage with the first ``k`` replicas as its
``read_dsn`` (no load cache: every load reads), and, once all are connected, loads the
session ``loads`` times; the throughput is all loads over the wall time of the slowest
worker. The workers wrote nothing, so no load waits for a replica to catch up: this is
what replicas add to the reads, not what read-your-writes costs (that bound is
``replica_wait``; the causal check in ``tests/test_replicas.py`` counts its fall backs).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from threading import Barrier

from sqlalchemy.engine import URL

from ... import dialects
from ...migrate import upgrade_database
from .results import ReplicaLoads, ReplicaLoadStats
from .workloads import _admin

#: The session the workers load, and its size.
SESSION, MESSAGES = "replica-load", 50


NOT_GIVEN = (
    "not measured: no replicas given (--read-dsn ADMIN_DSN of each replica of the one --dsn server; "
    "tests/support/replicas.py starts a primary with two)"
)


def _dsn(url: URL) -> str:
    return url.render_as_string(hide_password=False)


#: What a worker returns: ``(started, finished, served, fell_back)``.
Outcome = tuple[float, float, int, int]


async def _worker(primary: str, replicas: list[str], loads: int, start: Barrier) -> Outcome:
    from ...zett import LedgerSessionStorage

    async with LedgerSessionStorage(primary, read_dsn=replicas or None, load_cache_messages=0) as storage:
        for _ in range(max(1, len(replicas))):  # a connection to each, untimed
            await storage.load(SESSION)
        await asyncio.to_thread(start.wait)
        started = time.perf_counter()
        for _ in range(loads):
            view = await storage.load(SESSION)
            if len(view.raw_tail) != MESSAGES:
                raise RuntimeError(f"a replica load gave {len(view.raw_tail)} messages, not {MESSAGES}")
        finished = time.perf_counter()
        reads = storage.ledger.replica_reads
        return started, finished, reads.served, reads.fell_back


def load_worker(primary: str, replicas: list[str], loads: int, start: Barrier) -> Outcome:
    """One worker process: ``(started, finished, served, fell_back)``."""
    return asyncio.run(_worker(primary, replicas, loads, start))


async def measure_replica_loads(
    admin: URL, replicas: Sequence[URL], processes: int, loads: int
) -> ReplicaLoads:
    """Load throughput with 0..len(``replicas``) replicas of the server ``admin`` names
    (admin URLs of the replicas); a database of its own, dropped at the end."""
    from zett_agent.messages import UserMessage

    from ...zett import LedgerSessionStorage

    backend = dialects.backend(admin.get_backend_name())
    if backend.replication is None or backend.create_database is None or backend.drop_database is None:
        return ReplicaLoads(note=f"not measured: {backend.display_name} has no read replicas")
    name = f"chatledger_bench_{uuid.uuid4().hex[:10]}_replicas"
    await _admin(admin, backend.create_database.format(name=name))
    primary = admin.set(database=name)
    urls = [_dsn(url.set(database=name)) for url in replicas]
    result = ReplicaLoads()
    try:
        await upgrade_database(primary)
        # Written through the replicas, so that the first loads wait until each has it all.
        async with LedgerSessionStorage(primary, read_dsn=urls, replica_wait=60.0) as storage:
            for number in range(MESSAGES):
                await storage.append(SESSION, "bench", UserMessage(content=f"message {number}"))
            for _ in urls:
                await storage.load(SESSION)
            if storage.ledger.replica_reads.fell_back:
                return ReplicaLoads(note="not measured: a replica did not catch up within 60 s")
        context = multiprocessing.get_context("spawn")
        with context.Manager() as manager, ProcessPoolExecutor(processes, mp_context=context) as pool:
            for count in range(len(urls) + 1):
                start = manager.Barrier(processes)
                jobs = [
                    asyncio.wrap_future(pool.submit(load_worker, _dsn(primary), urls[:count], loads, start))
                    for _ in range(processes)
                ]
                outcomes = await asyncio.gather(*jobs)
                seconds = max(o[1] for o in outcomes) - min(o[0] for o in outcomes)
                total = processes * loads
                result.runs.append(
                    ReplicaLoadStats(
                        replicas=count,
                        processes=processes,
                        loads=total,
                        seconds=seconds,
                        per_second=total / seconds if seconds > 0 else 0.0,
                        served=sum(o[2] for o in outcomes),
                        fell_back=sum(o[3] for o in outcomes),
                    )
                )
    finally:
        await _admin(admin, backend.drop_database.format(name=name))
    return result
