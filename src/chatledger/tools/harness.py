"""Many processes appending at once, and what a shared store must never show afterwards.

One harness for ``chatledger bench`` (concurrent appends, chatledger against zett's own
store) and ``chatledger stress``: each worker is a spawned process with its own store,
engine and pool; all of them start appending together once every one has connected (a
barrier, never a fixed start time); the parent then reads every session back and
tallies, with one definition for both tools:

* a **gap**: a sequence of the session's current generation, up to its counter, with
  no stored message, or a counter that disagrees with the stored rows;
* a **duplicate**: a sequence acknowledged twice, or stored twice;
* a **lost** acknowledgement: an acknowledged message whose row is missing or holds
  another text.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import re
import time
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from sqlalchemy.engine import URL

#: Seconds a worker process waits for the others to be ready before it gives up.
BARRIER_TIMEOUT = 300.0
#: Seconds the parent waits for all worker processes of one run.
PROCESS_TIMEOUT = 900.0


class Store(Protocol):
    """What the tools call on chatledger's storage and on zett's (same names)."""

    async def append(self, session_id: str, request_id: str, message: Any) -> int: ...
    async def load(self, session_id: str) -> Any: ...
    async def list_sessions(self, *, limit: int = 100) -> list[Any]: ...
    async def list_raw_messages(
        self,
        session_id: str,
        *,
        after_sequence: int = 0,
        through_sequence: int | None = None,
        limit: int = 10_000,
    ) -> list[Any]: ...
    async def count_messages(self, session_id: str) -> int: ...
    async def close(self) -> None: ...


def _ours(url: URL | str, options: dict[str, Any]) -> Store:
    from ..zett import LedgerSessionStorage

    return LedgerSessionStorage(url, **options)


def _zetts_own(url: URL | str, options: dict[str, Any]) -> Store:
    from zett_agent.storage import SQLSessionStorage

    return cast(Store, SQLSessionStorage(url))


#: The stores the tools append through, by name: chatledger's ``LedgerSessionStorage``,
#: zett-agent's own ``SQLSessionStorage``.
STORES = {"chatledger": _ours, "zett": _zetts_own}


def open_store(kind: str, url: URL | str, options: dict[str, Any] | None = None) -> Store:
    """The store ``kind`` names (:data:`STORES`; chatledger's with ``options``) on ``url``."""
    opener = STORES.get(kind)
    if opener is None:
        raise ValueError(f"store must be chatledger or zett, not {kind!r}")
    return opener(url, options or {})


def user_message(content: str) -> Any:
    """A zett ``UserMessage`` (zett-agent is imported only when a tool runs)."""
    from zett_agent.messages import UserMessage

    return UserMessage(content=content)


@dataclass(frozen=True)
class AppendJob:
    """One worker process's orders (pickled into it): ``appends`` rounds, each appending
    one message to every session of ``sessions`` in turn, through store ``store`` on
    ``url`` (workers may be given different URLs, e.g. the nodes of a cluster). With
    ``read_url``, each acknowledged append is read back at once through a store on
    that URL (another node: a causal read)."""

    store: str
    url: str
    worker: int
    sessions: tuple[str, ...]
    appends: int
    options: dict[str, Any] = field(default_factory=dict)
    read_url: str | None = None


@dataclass
class WorkerOutcome:
    """What one worker saw: acknowledgements ``(session, sequence, text)``, errors,
    chatledger's retries, and the wall-clock span of its appends."""

    acked: list[tuple[str, int, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retries: int | None = None
    started: float = 0.0
    finished: float = 0.0
    fatal: str | None = None
    #: Causal reads made through ``read_url``, and how many missed their append.
    causal_reads: int = 0
    causal_misses: int = 0


async def _work(job: AppendJob, barrier: Any) -> WorkerOutcome:
    outcome = WorkerOutcome()
    async with AsyncExitStack() as stack:
        store = open_store(job.store, job.url, job.options)
        stack.push_async_callback(store.close)
        reader = None
        if job.read_url is not None:
            reader = open_store(job.store, job.read_url, job.options)
            stack.push_async_callback(reader.close)
        await store.count_messages(job.sessions[0])  # connects; zett creates or checks its tables
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        outcome.started = time.time()
        for index in range(job.appends):
            for session in job.sessions:
                text = f"{job.worker}:{index}"
                try:
                    sequence = await store.append(session, f"worker-{job.worker}", user_message(text))
                    outcome.acked.append((session, sequence, text))
                except Exception as error:  # counted and reported, never hidden
                    outcome.errors.append(f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")
                    continue
                if reader is not None:
                    await _read_back(reader, session, sequence, text, outcome)
        outcome.finished = time.time()
        outcome.retries = getattr(getattr(store, "ledger", None), "retries", None)
    return outcome


async def _read_back(reader: Store, session: str, sequence: int, text: str, outcome: WorkerOutcome) -> None:
    """Read one acknowledged append back through another node, counting a miss."""
    try:
        seen = await reader.list_raw_messages(session, after_sequence=sequence - 1, through_sequence=sequence)
    except Exception:  # the reading node is down: no causal read was made
        return
    outcome.causal_reads += 1
    if [getattr(record.message, "content", None) for record in seen] != [text]:
        outcome.causal_misses += 1


def _worker(job: AppendJob, barrier: Any, results: Any) -> None:
    """A worker process: run the job, put ``(worker, outcome)`` on ``results``."""
    try:
        outcome = asyncio.run(_work(job, barrier))
    except BaseException as error:
        barrier.abort()  # the others stop waiting for this one
        outcome = WorkerOutcome(fatal=f"{type(error).__name__}: {error}")
    results.put((job.worker, outcome))


def run_workers(jobs: Sequence[AppendJob]) -> list[WorkerOutcome]:
    """Run one spawned process per job; they start appending together, once every one
    has connected. Blocks; raises ``RuntimeError`` when a worker dies or all do not
    finish within :data:`PROCESS_TIMEOUT`."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(jobs))
    results = context.Queue()
    processes = [context.Process(target=_worker, args=(job, barrier, results)) for job in jobs]
    for process in processes:
        process.start()
    outcomes: dict[int, WorkerOutcome] = {}
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while len(outcomes) < len(jobs):
            try:
                worker, outcome = results.get(timeout=1.0)
                outcomes[worker] = outcome
                continue
            except queue.Empty:
                pass
            dead = [
                f"worker {job.worker} exited with {process.exitcode}"
                for job, process in zip(jobs, processes, strict=True)
                if job.worker not in outcomes and process.exitcode not in (None, 0)
            ]
            if dead or time.monotonic() > deadline:
                barrier.abort()  # release the workers still waiting for the dead one
                raise RuntimeError(
                    f"worker processes failed: {dead[0]} (see its stderr)"
                    if dead
                    else f"worker processes did not finish within {PROCESS_TIMEOUT} s"
                )
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
    fatal = [outcome.fatal for outcome in outcomes.values() if outcome.fatal]
    if fatal:
        raise RuntimeError(f"{len(fatal)} worker process(es) failed: {fatal[0]}")
    return [outcomes[job.worker] for job in jobs]


@dataclass(frozen=True)
class Tally:
    """What a read-back found (see the module docstring for the definitions)."""

    gaps: int = 0
    duplicates: int = 0
    lost: int = 0

    @property
    def clean(self) -> bool:
        return not (self.gaps or self.duplicates or self.lost)


@dataclass(frozen=True)
class Copy:
    """Sessions as one database (or one node of a cluster) holds them: per session, its
    message count, the texts by sequence, and how many rows it holds in all."""

    sessions: dict[str, tuple[int, dict[int, Any], int]]

    def texts(self) -> dict[str, tuple[int, dict[int, Any]]]:
        """What must be equal on every node of a cluster."""
        return {session: (count, texts) for session, (count, texts, _) in self.sessions.items()}


async def read_back(store: Store, sessions: Sequence[str]) -> Copy:
    """Read ``sessions`` back through ``store``."""
    found: dict[str, tuple[int, dict[int, Any], int]] = {}
    for session in sessions:
        records = await store.list_raw_messages(session, limit=10**9)
        texts = {record.sequence: getattr(record.message, "content", None) for record in records}
        found[session] = (await store.count_messages(session), texts, len(records))
    return Copy(found)


def tally(copy: Copy, outcomes: Sequence[WorkerOutcome]) -> Tally:
    """Gaps, duplicates and lost acknowledgements of ``copy`` against the workers' ``outcomes``."""
    acked: dict[tuple[str, int], str] = {}
    duplicates = 0
    for outcome in outcomes:
        for session, sequence, content in outcome.acked:
            duplicates += (session, sequence) in acked
            acked[(session, sequence)] = content
    gaps = 0
    for count, texts, rows in copy.sessions.values():
        duplicates += rows - len(texts)
        # This generation's sequences run from just after the previous generations' last.
        first = min(texts, default=1)
        gaps += len(set(range(first, first + count)) - texts.keys()) + abs(count - len(texts))
    lost = sum(
        1
        for (session, sequence), content in acked.items()
        if copy.sessions.get(session, (0, {}, 0))[1].get(sequence) != content
    )
    return Tally(gaps, duplicates, lost)


async def verify(store: Store, outcomes: Sequence[WorkerOutcome], sessions: Sequence[str]) -> Tally:
    """Read ``sessions`` back through ``store`` and tally them against ``outcomes``."""
    return tally(await read_back(store, sessions), outcomes)


def error_kinds(errors: Iterable[str], most: int = 5) -> dict[str, int]:
    """The ``most`` commonest kinds of error: each message cut before its SQL or
    detail, with session ids and numbers masked, and how often it occurred."""
    counts: dict[str, int] = {}
    for error in errors:
        kind = re.split(r" \[SQL| DETAIL", error, maxsplit=1)[0]
        kind = re.sub(r"\b\d+\b", "N", re.sub(r"(conc|stress)-[0-9a-f]{8}-\w+", "<session>", kind))[:200]
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1])[:most])
