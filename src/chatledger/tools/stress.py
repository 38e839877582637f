"""Many processes appending at once: the stress command and the concurrency tests.

Each worker process (:mod:`chatledger.tools.harness`) opens its own
:class:`~chatledger.zett.LedgerSessionStorage` and appends ``appends`` messages to
one session shared by all workers and, when asked, as many to a session of its own.
Afterwards the parent reads every session back and counts what a shared store must
never show: gaps, duplicates, and acknowledged messages that are missing or
different (the harness's definitions).

Given the nodes of one cluster (MariaDB Galera), the workers are spread over the
nodes, each acknowledged append is read back at once through another node (a
causal read), and every node's copy is compared with the others.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import URL

from ..dsn import resolve_dsn
from ..errors import StorageUnavailable
from .harness import AppendJob, open_store, read_back, run_workers, tally


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
    #: The run's sessions, left in the database, all have ids starting with this.
    session_prefix: str = ""

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
    jobs = []
    for worker in range(processes):
        node = worker % len(urls)
        jobs.append(
            AppendJob(
                "chatledger",
                rendered[node],
                worker,
                (shared, own) if (own := owns[worker]) else (shared,),
                appends,
                options or {},
                read_url=rendered[(node + 1) % len(urls)] if causal_reads and len(urls) > 1 else None,
            )
        )
    outcomes = await asyncio.to_thread(run_workers, jobs)
    sessions = [shared, *(own for own in owns if own)]
    copies = []
    unreachable = 0
    for url in urls:
        store = open_store("chatledger", url)
        try:
            copies.append(await read_back(store, sessions))
        except Exception:  # a node killed during the run; the others are compared
            unreachable += 1
        finally:
            await store.close()
    if not copies:
        raise StorageUnavailable("no node answered the verification reads")
    found = tally(copies[0], outcomes)
    errors = [error for outcome in outcomes for error in outcome.errors]
    return StressReport(
        backend=urls[0].get_backend_name(),
        processes=processes,
        appends=appends,
        seconds=max(outcome.finished for outcome in outcomes) - min(outcome.started for outcome in outcomes),
        acknowledged=sum(len(outcome.acked) for outcome in outcomes),
        errors=len(errors),
        retries=sum(outcome.retries or 0 for outcome in outcomes),
        gaps=found.gaps,
        duplicates=found.duplicates,
        lost=found.lost,
        error_samples=errors[:5],
        nodes=len(urls),
        node_errors=[
            sum(len(outcome.errors) for job, outcome in zip(jobs, outcomes, strict=True) if job.url == url)
            for url in rendered
        ],
        causal_reads=sum(outcome.causal_reads for outcome in outcomes),
        causal_misses=sum(outcome.causal_misses for outcome in outcomes),
        disagreeing_nodes=sum(1 for copy in copies[1:] if copy.texts() != copies[0].texts()),
        unreachable_nodes=unreachable,
        session_prefix=f"stress-{run}-",
    )
