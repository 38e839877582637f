"""Many processes appending at once: the stress command and the concurrency tests.

Each worker process opens its own :class:`~chatledger.zett.LedgerSessionStorage`
and appends ``appends`` messages to one session shared by all workers and, when
asked, as many to a session of its own. Afterwards the parent reads every session
back and counts what a shared store must never show: gaps, duplicates, and
acknowledged messages that are missing or different.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import URL

from ..dsn import resolve_dsn


@dataclass
class WorkerResult:
    """What one worker saw: its acknowledgements ``(session, sequence, text)``."""

    acked: list[tuple[str, int, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retries: int = 0


@dataclass
class StressReport:
    """The outcome of one stress run against one database."""

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
    #: The run's sessions, left in the database, all have ids starting with this.
    session_prefix: str = ""

    @property
    def appends_per_second(self) -> float:
        return self.acknowledged / self.seconds if self.seconds else 0.0

    @property
    def clean(self) -> bool:
        """No error, gap, duplicate or lost acknowledgement."""
        return not (self.errors or self.gaps or self.duplicates or self.lost)


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


async def _work(job: WorkerJob) -> WorkerResult:
    from zett_agent.messages import UserMessage

    from ..zett import LedgerSessionStorage

    result = WorkerResult()
    async with LedgerSessionStorage(job.dsn, **job.options) as storage:
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
        result.retries = storage.ledger.retries
    return result


def _worker(job: WorkerJob) -> WorkerResult:
    return asyncio.run(_work(job))


async def verify(dsn: str | URL, results: list[WorkerResult], sessions: list[str]) -> tuple[int, int, int]:
    """Read the sessions back: ``(gaps, duplicates, lost)``.

    A gap is a missing sequence below the counter, or a counter that disagrees with
    the rows; a duplicate is a sequence acknowledged twice; lost is an acknowledged
    message whose row is missing or holds another text.
    """
    from ..zett import LedgerSessionStorage

    gaps = duplicates = lost = 0
    acked: dict[tuple[str, int], str] = {}
    for result in results:
        for session, sequence, text in result.acked:
            if (session, sequence) in acked:
                duplicates += 1
            acked[(session, sequence)] = text
    async with LedgerSessionStorage(dsn) as storage:
        for session in sessions:
            records = await storage.list_raw_messages(session, limit=10**9)
            stored = {record.sequence: record.message for record in records}
            counter = await storage.count_messages(session)
            gaps += len(set(range(1, counter + 1)) - stored.keys()) + abs(counter - len(stored))
            for (acked_session, sequence), text in acked.items():
                if acked_session != session:
                    continue
                message = stored.get(sequence)
                if message is None or getattr(message, "content", None) != text:
                    lost += 1
    return gaps, duplicates, lost


async def run_stress(
    dsn: str | URL | None,
    *,
    processes: int = 8,
    appends: int = 200,
    own_sessions: bool = True,
    options: dict[str, Any] | None = None,
) -> StressReport:
    """Run ``processes`` worker processes of ``appends`` appends each and verify.

    Args:
        dsn: the database (resolved as the storage does); it must be migrated.
        processes: worker processes, each with its own storage and pool.
        appends: appends per worker to the shared session (and as many to its own).
        own_sessions: also append to one session per worker.
        options: :class:`~chatledger.options.LedgerOptions` for every worker.
    """
    url = resolve_dsn(dsn)
    rendered = url.render_as_string(hide_password=False)
    run = uuid.uuid4().hex[:8]
    shared = f"stress-{run}-shared"
    owns = [f"stress-{run}-{worker}" if own_sessions else None for worker in range(processes)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
        # Workers start together once every process is up, so contention is real.
        start_at = time.time() + 2.0 + 0.3 * processes
        jobs = [
            WorkerJob(rendered, worker, shared, owns[worker], appends, start_at, options or {})
            for worker in range(processes)
        ]
        futures = [pool.submit(_worker, job) for job in jobs]
        results = [future.result() for future in futures]
    seconds = time.time() - start_at
    sessions = [shared, *(own for own in owns if own)]
    gaps, duplicates, lost = await verify(url, results, sessions)
    errors = [error for result in results for error in result.errors]
    return StressReport(
        backend=url.get_backend_name(),
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
        session_prefix=f"stress-{run}-",
    )
