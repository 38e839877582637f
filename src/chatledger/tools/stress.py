"""Many processes appending at once: the stress command and the concurrency tests.

Each worker process opens its own :class:`~chatledger.zett.LedgerSessionStorage`
and appends ``appends`` messages to one session shared by all workers and, when
asked, as many to a session of its own. Afterwards the parent reads every session
back and counts what a shared store must never show: gaps, duplicates, and
acknowledged messages that are missing or different.

Given the nodes of one cluster (MariaDB Galera), the workers are spread over the
nodes, each acknowledged append is read back at once through another node (a
causal read), and every node's copy is compared with the others.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import URL

from ..dsn import resolve_dsn
from ..errors import StorageUnavailable


@dataclass
class WorkerResult:
    """What one worker saw: its acknowledgements ``(session, sequence, text)``, its
    errors, its retries, and its causal reads on another node (with the misses)."""

    acked: list[tuple[str, int, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retries: int = 0
    node: int = 0
    causal_reads: int = 0
    causal_misses: int = 0


@dataclass
class StressReport:
    """The outcome of one stress run against one database (or one cluster of nodes)."""

    backend: str
    processes: int
    appends: int
    seconds: float
    acknowledged: int
    errors: int
    retries: int
    gaps: int
    duplicates: int
    lost: int
    error_samples: list[str] = field(default_factory=list)
    #: Nodes the workers were spread over (worker ``w`` on node ``w % nodes``).
    nodes: int = 1
    #: Errors per node (index into the DSNs given), for a cluster.
    node_errors: list[int] = field(default_factory=list)
    #: Reads on the next node right after each acknowledged append, and how many of
    #: them did not see it (a cluster only; both 0 otherwise).
    causal_reads: int = 0
    causal_misses: int = 0
    #: Nodes whose copy of the sessions differed from the first answering node's.
    disagreeing_nodes: int = 0
    #: Nodes that did not answer the verification (e.g. one killed during the run).
    unreachable_nodes: int = 0

    @property
    def appends_per_second(self) -> float:
        return self.acknowledged / self.seconds if self.seconds else 0.0

    @property
    def clean(self) -> bool:
        """No error, gap, duplicate, lost acknowledgement, causal miss or node that
        disagrees or does not answer."""
        return not (
            self.errors
            or self.gaps
            or self.duplicates
            or self.lost
            or self.causal_misses
            or self.disagreeing_nodes
            or self.unreachable_nodes
        )


@dataclass(frozen=True)
class WorkerJob:
    """One worker's orders (pickled into its process)."""

    dsn: str
    worker: int
    shared: str
    own: str | None
    appends: int
    start_at: float
    options: dict[str, Any]
    node: int = 0
    #: Another node to read each acknowledged append back from, right away.
    read_dsn: str | None = None


async def _work(job: WorkerJob) -> WorkerResult:
    from zett_agent.messages import UserMessage

    from ..zett import LedgerSessionStorage

    result = WorkerResult(node=job.node)
    async with AsyncExitStack() as stack:
        storage = await stack.enter_async_context(LedgerSessionStorage(job.dsn, **job.options))
        reader = None
        if job.read_dsn is not None:
            reader = await stack.enter_async_context(LedgerSessionStorage(job.read_dsn, **job.options))
        await storage.ledger.ensure_ready()
        await asyncio.sleep(max(0.0, job.start_at - time.time()))
        for index in range(job.appends):
            for session in (job.shared, job.own) if job.own else (job.shared,):
                text = f"{job.worker}:{index}"
                try:
                    sequence = await storage.append(session, f"req-{job.worker}", UserMessage(content=text))
                    result.acked.append((session, sequence, text))
                except Exception as error:  # counted and reported, never hidden
                    result.errors.append(f"{type(error).__name__}: {error}")
                    continue
                if reader is None:
                    continue
                try:
                    seen = await reader.list_raw_messages(
                        session, after_sequence=sequence - 1, through_sequence=sequence
                    )
                except Exception:  # the reading node is down: no causal read was made
                    continue
                result.causal_reads += 1
                if [getattr(record.message, "content", None) for record in seen] != [text]:
                    result.causal_misses += 1
        result.retries = storage.ledger.retries
    return result


def _worker(job: WorkerJob) -> WorkerResult:
    return asyncio.run(_work(job))


async def _stored(dsn: str | URL, sessions: list[str]) -> dict[str, tuple[int, dict[int, Any]]]:
    """Each session's counter and messages by sequence, as one node holds them."""
    from ..zett import LedgerSessionStorage

    found = {}
    async with LedgerSessionStorage(dsn) as storage:
        for session in sessions:
            records = await storage.list_raw_messages(session, limit=10**9)
            counter = await storage.count_messages(session)
            found[session] = (counter, {record.sequence: record.message for record in records})
    return found


async def verify(dsn: str | URL, results: list[WorkerResult], sessions: list[str]) -> tuple[int, int, int]:
    """Read the sessions back: ``(gaps, duplicates, lost)``.

    A gap is a missing sequence below the counter, or a counter that disagrees with
    the rows; a duplicate is a sequence acknowledged twice; lost is an acknowledged
    message whose row is missing or holds another text.
    """
    return _count(await _stored(dsn, sessions), results)


def _count(
    stored: dict[str, tuple[int, dict[int, Any]]], results: list[WorkerResult]
) -> tuple[int, int, int]:
    gaps = duplicates = lost = 0
    acked: dict[tuple[str, int], str] = {}
    for result in results:
        for session, sequence, text in result.acked:
            if (session, sequence) in acked:
                duplicates += 1
            acked[(session, sequence)] = text
    for counter, messages in stored.values():
        gaps += len(set(range(1, counter + 1)) - messages.keys()) + abs(counter - len(messages))
    for (session, sequence), text in acked.items():
        message = stored.get(session, (0, {}))[1].get(sequence)
        if message is None or getattr(message, "content", None) != text:
            lost += 1
    return gaps, duplicates, lost


def _nodes(dsn: str | URL | Sequence[str | URL] | None) -> list[URL]:
    if dsn is None or isinstance(dsn, str | URL):
        return [resolve_dsn(dsn)]
    urls = [resolve_dsn(node) for node in dsn]
    if not urls:
        raise ValueError("dsn: give at least one node")
    if len({url.get_backend_name() for url in urls}) > 1:
        raise ValueError("dsn: the nodes of one cluster must all be of one backend")
    return urls


async def run_stress(
    dsn: str | URL | Sequence[str | URL] | None,
    *,
    processes: int = 8,
    appends: int = 200,
    own_sessions: bool = True,
    options: dict[str, Any] | None = None,
    causal_reads: bool = True,
) -> StressReport:
    """Run ``processes`` worker processes of ``appends`` appends each and verify.

    Args:
        dsn: the database (resolved as the storage does); it must be migrated. A
            sequence of DSNs is the nodes of one cluster (e.g. Galera) holding one
            database: worker ``w`` appends through node ``w % len(dsn)`` and, with
            ``causal_reads``, reads each acknowledged append back at once through the
            next node; afterwards every node is read back and compared.
        processes: worker processes, each with its own storage and pool.
        appends: appends per worker to the shared session (and as many to its own).
        own_sessions: also append to one session per worker.
        options: :class:`~chatledger.options.LedgerOptions` for every worker.
        causal_reads: on a cluster, count the reads that miss an append acknowledged
            on another node just before (``causal_misses``).

    Raises:
        ValueError: no node given, or nodes of different backends.
    """
    urls = _nodes(dsn)
    rendered = [url.render_as_string(hide_password=False) for url in urls]
    run = uuid.uuid4().hex[:8]
    shared = f"stress-{run}-shared"
    owns = [f"stress-{run}-{worker}" if own_sessions else None for worker in range(processes)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
        # Workers start together once every process is up, so contention is real.
        start_at = time.time() + 2.0 + 0.3 * processes
        jobs = []
        for worker in range(processes):
            node = worker % len(urls)
            reader = rendered[(node + 1) % len(urls)] if causal_reads and len(urls) > 1 else None
            jobs.append(
                WorkerJob(
                    rendered[node],
                    worker,
                    shared,
                    owns[worker],
                    appends,
                    start_at,
                    options or {},
                    node,
                    reader,
                )
            )
        futures = [pool.submit(_worker, job) for job in jobs]
        results = [future.result() for future in futures]
    seconds = time.time() - start_at
    sessions = [shared, *(own for own in owns if own)]
    copies = []
    unreachable = 0
    for url in urls:
        try:
            copies.append(await _stored(url, sessions))
        except Exception:  # a node killed during the run; the others are compared
            unreachable += 1
    if not copies:
        raise StorageUnavailable("no node answered the verification reads")
    gaps, duplicates, lost = _count(copies[0], results)
    errors = [error for result in results for error in result.errors]
    return StressReport(
        backend=urls[0].get_backend_name(),
        processes=processes,
        appends=appends,
        seconds=seconds,
        acknowledged=sum(len(result.acked) for result in results),
        errors=len(errors),
        retries=sum(result.retries for result in results),
        gaps=gaps,
        duplicates=duplicates,
        lost=lost,
        error_samples=errors[:5],
        nodes=len(urls),
        node_errors=[
            sum(len(result.errors) for result in results if result.node == node) for node in range(len(urls))
        ],
        causal_reads=sum(result.causal_reads for result in results),
        causal_misses=sum(result.causal_misses for result in results),
        disagreeing_nodes=sum(1 for copy in copies[1:] if _comparable(copy) != _comparable(copies[0])),
        unreachable_nodes=unreachable,
    )


def _comparable(copy: dict[str, tuple[int, dict[int, Any]]]) -> dict[str, tuple[int, dict[int, Any]]]:
    return {
        session: (
            counter,
            {sequence: getattr(message, "content", None) for sequence, message in messages.items()},
        )
        for session, (counter, messages) in copy.items()
    }
