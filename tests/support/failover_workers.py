"""The writer processes of the failover tests (importable by spawn).

Each worker appends to one of a few shared sessions and, between appends, races the
other workers for the first checkpoint of each race session, until ``stop`` is set.
An append or checkpoint the store gave up on is settled as the documented errors say:

- ``OutcomeUnknown`` (the COMMIT's answer was lost): the identical call again, with
  the error's ``write_id`` as ``message_id``, until the cluster answers; a checkpoint
  is looked up by its id (the session's snapshot has it, or it was not stored);
- ``StorageUnavailable`` (nothing committed): the identical call again.

Every acknowledgement is reported with the time it came; the parent checks them
against what the new primary holds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from threading import Barrier, Event

from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import OutcomeUnknown, SnapshotConflict, StorageUnavailable
from chatledger.ids import new_uuid7
from chatledger.zett import LedgerSessionStorage

#: Seconds between the settling tries of a call the store gave up on.
SETTLE_PAUSE = 0.2


@dataclass
class WorkerReport:
    worker: int
    #: (session, sequence, message_id, content, monotonic time of the acknowledgement)
    acked: list[tuple[str, int, str, str, float]] = field(default_factory=list)
    #: race session -> "ok" or "conflict"
    races: dict[str, str] = field(default_factory=dict)
    #: race session -> the boundary this worker asked for
    boundaries: dict[str, int] = field(default_factory=dict)
    #: error class name -> how many calls raised it (each then settled)
    errors: dict[str, int] = field(default_factory=dict)
    #: calls completed after a documented error: repeated (an append with its id), or
    #: looked up (a checkpoint whose outcome was unknown)
    settled: int = 0
    #: transient failures the store retried within its budget (``Ledger.retries``)
    retries: int = 0


def _count(report: WorkerReport, error: BaseException) -> None:
    name = type(error).__name__
    report.errors[name] = report.errors.get(name, 0) + 1


async def _append(storage: LedgerSessionStorage, report: WorkerReport, session: str, content: str) -> None:
    message_id = new_uuid7()  # fixed before the first try: the settle looks it up
    failed = False
    while True:
        try:
            sequence = await storage.append(
                session, "failover", UserMessage(content=content), message_id=message_id
            )
        except StorageUnavailable as error:  # OutcomeUnknown included
            _count(report, error)
            if isinstance(error, OutcomeUnknown):
                assert error.write_id == message_id, (error.write_id, message_id)
            failed = True
            await asyncio.sleep(SETTLE_PAUSE)
            continue
        report.settled += failed
        report.acked.append((session, sequence, message_id, content, time.monotonic()))
        return


async def _race(storage: LedgerSessionStorage, report: WorkerReport, session: str, boundary: int) -> None:
    report.boundaries[session] = boundary
    failed = False
    while True:
        try:
            await storage.snapshot(session, CompactedMessage(content=f"w{report.worker}"), boundary, 0)
        except SnapshotConflict:
            report.settled += failed
            report.races[session] = "conflict"
            return
        except OutcomeUnknown as error:
            _count(report, error)
            # Stored under its id, or not at all: the session's checkpoint says which.
            while True:
                await asyncio.sleep(SETTLE_PAUSE)
                try:
                    view = await storage.load(session)
                except StorageUnavailable as again:
                    _count(report, again)
                    continue
                break
            report.settled += 1
            ours = view.snapshot is not None and view.snapshot.id == error.write_id
            report.races[session] = "ok" if ours else "conflict"
            return
        except StorageUnavailable as error:  # nothing stored: the identical call again
            _count(report, error)
            failed = True
            await asyncio.sleep(SETTLE_PAUSE)
            continue
        report.settled += failed
        report.races[session] = "ok"
        return


async def _work(
    dsn: str,
    worker: int,
    sessions: list[str],
    races: list[str],
    start: Barrier,
    stop: Event,
    retry_timeout: float,
) -> WorkerReport:
    report = WorkerReport(worker)
    async with LedgerSessionStorage(dsn, retry_timeout=retry_timeout, pool_timeout=10) as storage:
        await storage.ledger.ensure_ready()
        await asyncio.to_thread(start.wait)
        session = sessions[worker % len(sessions)]
        index = 0
        pending = list(races)
        while not stop.is_set() or pending:
            await _append(storage, report, session, f"w{worker}-{index}")
            index += 1
            # One race every 5 appends, each worker with its own boundary (1..8).
            if pending and (index % 5 == 0 or stop.is_set()):
                await _race(storage, report, pending.pop(0), 1 + worker % 8)
            await asyncio.sleep(0.01)  # paced as a service's requests are
        report.retries = storage.ledger.retries
    return report


def write_and_race(
    dsn: str,
    worker: int,
    sessions: list[str],
    races: list[str],
    start: Barrier,
    stop: Event,
    retry_timeout: float = 30.0,
) -> WorkerReport:
    """Append to ``sessions[worker % len]`` until ``stop`` (a manager's event) is set,
    racing for each session of ``races`` on the way; start once every party reached
    ``start`` (a manager's barrier)."""
    return asyncio.run(_work(dsn, worker, sessions, races, start, stop, retry_timeout))
