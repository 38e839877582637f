"""The benchmark's measurements: interleaved timing rounds, concurrent appends from many
processes, and export/import throughput and peak memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, Table
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from ...engine import Ledger
from ...migrate import upgrade_database
from ...schema import raw_messages_table
from ..harness import AppendJob, error_kinds, open_store, run_workers, user_message, verify
from .floor import RoundTrips
from .load import StatementClock
from .results import (
    MAX_REPEATS,
    REPEAT_BUDGET,
    AppendBreakdown,
    AppendStats,
    ConcurrentStats,
    Sizes,
    TimingStats,
    TransferStats,
    check,
)
from .workloads import Seeder, chunks, fresh_databases

#: The contenders of the append measurement, in table order.

# -- timing ---------------------------------------------------------------------------


def _stats(samples_s: Sequence[float]) -> TimingStats:
    return TimingStats(
        median_ms=statistics.median(samples_s) * 1000, min_ms=min(samples_s) * 1000, samples=len(samples_s)
    )


def _p95(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


Appender = Callable[[str, str, Any], Awaitable[int]]


async def measure_appends(
    contenders: dict[str, Appender],
    sizes: Sizes,
    rng: random.Random,
    engines: dict[str, AsyncEngine] | None = None,
) -> dict[str, AppendStats]:
    """Interleaved rounds of ``sizes.append_batch`` timed appends per contender, each
    into its one session; a contender's order within a round is shuffled.

    Then, for the contenders with an engine in ``engines``, one more such round with
    a :class:`~chatledger.tools.bench.load.StatementClock` and a
    :class:`~chatledger.tools.bench.floor.RoundTrips` on the engine and the event loop
    thread's CPU time read around each append: the :class:`AppendBreakdown`."""
    sessions = {name: f"append-{name}-{uuid.uuid4().hex[:8]}" for name in contenders}
    counter = 0

    async def one(name: str) -> float:
        nonlocal counter
        counter += 1
        message = user_message(f"benchmark message {counter}")
        start = time.perf_counter()
        await contenders[name](sessions[name], "bench", message)
        return time.perf_counter() - start

    async def instrumented(name: str, clock: StatementClock) -> tuple[float, float, float, int, int]:
        clock.reset()
        trips[name].reset()
        cpu = time.thread_time()
        wall = await one(name)
        return wall, time.thread_time() - cpu, clock.seconds, clock.count, trips[name].round_trips

    for name in contenders:
        for _ in range(sizes.warmup):
            await one(name)
    latencies: dict[str, list[float]] = {name: [] for name in contenders}
    rounds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(sizes.append_rounds):
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            for _ in range(sizes.append_batch):
                latencies[name].append(await one(name))
            rounds[name].append(sizes.append_batch / (time.perf_counter() - start))
    breakdowns: dict[str, AppendBreakdown] = {}
    clocks = {name: StatementClock(engine) for name, engine in (engines or {}).items() if name in contenders}
    trips = {name: RoundTrips(engine) for name, engine in (engines or {}).items() if name in contenders}
    try:
        order = list(clocks)
        rng.shuffle(order)
        for name in order:
            samples = [await instrumented(name, clocks[name]) for _ in range(sizes.append_batch)]
            breakdowns[name] = AppendBreakdown(
                wall_ms=statistics.median(wall for wall, *_ in samples) * 1000,
                cpu_ms=statistics.median(cpu for _, cpu, *_ in samples) * 1000,
                waiting_ms=statistics.median(wall - cpu for wall, cpu, *_ in samples) * 1000,
                driver_ms=statistics.median(sample[2] for sample in samples) * 1000,
                statements=statistics.median(sample[3] for sample in samples),
                round_trips=statistics.median(sample[4] for sample in samples),
                hops=trips[name].driver_counted,
            )
    finally:
        for clock in clocks.values():
            clock.close()
        for trip in trips.values():
            trip.close()
    return {
        name: AppendStats(
            median_ms=statistics.median(latencies[name]) * 1000,
            p95_ms=_p95(latencies[name]) * 1000,
            per_second=statistics.median(rounds[name]),
            round_per_second=rounds[name],
            breakdown=breakdowns.get(name),
        )
        for name in contenders
    }


Call = Callable[[], Awaitable[object]]


async def measure_calls(
    calls: dict[tuple[str, str], Call], rounds: int, rng: random.Random
) -> dict[tuple[str, str], TimingStats]:
    """Interleaved rounds: each round runs every call, in a shuffled order, each one
    timed. A call that is fast runs several times in a row per round (as many as fit
    in :data:`REPEAT_BUDGET` seconds going by its untimed warm-up call, at most
    :data:`MAX_REPEATS`), so that a millisecond median rests on as many samples as the
    machine's noise needs, while a slow one (zett's list over 100k sessions) runs once."""
    repeats: dict[tuple[str, str], int] = {}
    for key, call in calls.items():
        start = time.perf_counter()
        await call()
        elapsed = time.perf_counter() - start
        repeats[key] = max(1, min(MAX_REPEATS, int(REPEAT_BUDGET / max(elapsed, 1e-6))))
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(rounds):
        order = list(calls)
        rng.shuffle(order)
        for key in order:
            for _ in range(repeats[key]):
                start = time.perf_counter()
                await calls[key]()
                samples[key].append(time.perf_counter() - start)
    return {key: _stats(values) for key, values in samples.items()}


# -- concurrent appends from many processes -------------------------------------------


async def measure_concurrent(
    kind: str, url: URL, processes: int, appends: int, shared: bool
) -> ConcurrentStats:
    """``processes`` worker processes append ``appends`` each, to one shared session
    (``shared``) or each to its own, through store ``kind``; then read back."""
    run = uuid.uuid4().hex[:8]
    sessions = [f"conc-{run}-shared"] if shared else [f"conc-{run}-{worker}" for worker in range(processes)]
    rendered = url.render_as_string(hide_password=False)
    jobs = [
        AppendJob(kind, rendered, worker, (sessions[0 if shared else worker],), appends)
        for worker in range(processes)
    ]
    outcomes = await asyncio.to_thread(run_workers, jobs)
    store = open_store(kind, url)
    try:
        tally = await verify(store, outcomes, sessions)
    finally:
        await store.close()
    acknowledged = sum(len(outcome.acked) for outcome in outcomes)
    errors = [error for outcome in outcomes for error in outcome.errors]
    seconds = max(outcome.finished for outcome in outcomes) - min(outcome.started for outcome in outcomes)
    retries = [outcome.retries for outcome in outcomes if outcome.retries is not None]
    return ConcurrentStats(
        processes=processes,
        sessions=len(sessions),
        attempted=processes * appends,
        acknowledged=acknowledged,
        errors=len(errors),
        retries=sum(retries) if retries else None,
        gaps=tally.gaps,
        duplicates=tally.duplicates,
        lost=tally.lost,
        seconds=seconds,
        per_second=acknowledged / seconds if seconds > 0 else 0.0,
        error_kinds=error_kinds(errors),
    )


# -- export and import ------------------------------------------------------------------


def _peak_mib() -> float:
    """This process's own peak resident set size, MiB.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this address
    space, which an ``exec`` starts anew. Not ``ru_maxrss``: Linux keeps it across
    ``execve``, so a spawned child (fork, then exec of a new interpreter) reports the
    parent's resident size at the fork when that was larger (proc(5), getrusage(2)).
    Elsewhere ``ru_maxrss`` (KiB; bytes on macOS), where it is the process's own.
    """
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _baseline_job() -> float:
    """A process that loads what the export and import load, and nothing else."""
    from .. import transfer  # noqa: F401

    return _peak_mib()


def _export_job(dsn: str, path: str) -> tuple[float, float]:
    from ..export import export

    async def main() -> float:
        with open(path, "w", encoding="utf-8") as output:  # noqa: ASYNC230 - the job's only work
            start = time.perf_counter()
            await export(dsn, output)
            return time.perf_counter() - start

    return asyncio.run(main()), _peak_mib()


def split_export(path: str, parts: int) -> list[str]:
    """Cut an export file into ``parts`` complete exports of consecutive sessions
    (rein sessions go with the last), each with the header and its own end record."""
    with open(path, encoding="utf-8") as source:
        header = json.loads(source.readline())
        sessions = int(header["counts"]["sessions"])
        per_part = max(1, -(-sessions // parts))
        names: list[str] = []
        output: Any = None
        totals: dict[str, int] = {}
        done = 0
        for line in source:
            record = json.loads(line)
            kind = record["type"]
            if kind == "end":
                break
            if output is None:
                names.append(f"{path}.part{len(names)}")
                output = open(names[-1], "w", encoding="utf-8")  # noqa: SIM115 - closed below
                output.write(json.dumps(header) + "\n")
                totals = {"sessions": 0, "messages": 0, "snapshots": 0, "rein_sessions": 0}
            output.write(line)
            if kind == "session_end":
                totals["sessions"] += 1
                totals["messages"] += record["messages"]
                totals["snapshots"] += record["snapshots"]
                done += 1
            elif kind == "rein_session":
                totals["rein_sessions"] += 1
            if kind == "session_end" and done % per_part == 0 and done < sessions:
                output.write(json.dumps({"type": "end", **totals}) + "\n")
                output.close()
                output = None
        if output is not None:
            output.write(json.dumps({"type": "end", **totals}) + "\n")
            output.close()
    return names


def _import_job(target: str, floor: str, parts: list[str]) -> tuple[float, float, float, bool, int]:
    """Import each part into ``target`` and insert the same message rows bare into
    ``floor`` (the floor), alternating which goes first, so that the machine's drift
    hits both alike. Returns (import seconds, floor seconds, peak MiB, clean, messages)."""
    from ..importer import BATCH_ROWS, import_file, read_records
    from ..rows import RowCodec

    async def floor_rows(ledger: Ledger, table: Table, path: str) -> float:
        """Each session's message rows, decoded before the clock starts (one session at
        a time, so that the floor adds little to the process's peak memory)."""
        codec = RowCodec(table)
        elapsed = 0.0
        rows: list[dict[str, Any]] = []
        with open(path, "rb") as stream:  # noqa: ASYNC230 - the job's own file, read as the import reads
            for record in read_records(stream):
                if record.get("type") == "message":
                    rows.append(codec.decode(record["row"], "floor"))
                elif record.get("type") == "session_end" and rows:
                    start = time.perf_counter()
                    async with ledger.engine.begin() as conn:
                        for chunk in chunks(rows, BATCH_ROWS):
                            await conn.execute(table.insert(), chunk)
                    elapsed += time.perf_counter() - start
                    rows = []
        return elapsed

    async def main() -> tuple[float, float, bool, int]:
        floor_ledger = Ledger(floor)
        table = raw_messages_table.to_metadata(MetaData())
        imported = floored = 0.0
        clean, messages = True, 0
        try:
            async with floor_ledger.engine.begin() as conn:
                await conn.run_sync(table.metadata.create_all)
            for number, path in enumerate(parts):
                for step in ("import", "floor") if number % 2 == 0 else ("floor", "import"):
                    if step == "floor":
                        floored += await floor_rows(floor_ledger, table, path)
                        continue
                    start = time.perf_counter()
                    report = await import_file(target, path)
                    imported += time.perf_counter() - start
                    clean, messages = clean and report.clean, messages + report.messages
        finally:
            await floor_ledger.close()
        return imported, floored, clean, messages

    imported, floored, clean, messages = asyncio.run(main())
    return imported, floored, _peak_mib(), clean, messages


def _transfer_id(number: int) -> str:
    return f"transfer-{number:06d}"


async def _in_process(job: Callable[..., Any], *args: Any) -> Any:
    """Run ``job(*args)`` in a fresh process (spawned: nothing inherited) and return its result."""
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, job, *args)


#: Parts the export file is cut into for the interleaved import and floor.
TRANSFER_PARTS = 10


async def measure_transfer(admin: URL, sizes: Sizes, say: Callable[[str], None]) -> TransferStats:
    """Seed ``transfer_sessions`` x ``transfer_messages`` raw messages (each session with
    a checkpoint) into a fresh chatledger database and export them to a file, in a
    process of its own; then, in another, import the file (cut in parts) into a
    second fresh database, and insert the very same message rows bare into a third
    (the floor), part by part in alternation. Each process reports its peak memory;
    the import is checked to be complete."""
    sessions, messages = sizes.transfer_sessions, sizes.transfer_messages
    total = sessions * messages
    async with fresh_databases(admin) as databases:
        source, floor = databases.ledger, databases.floor
        target = databases.zett.set(drivername=source.drivername)
        for url in (source, target):
            await upgrade_database(url)
        say(f"export/import: seeding {sessions:,} sessions x {messages:,} messages")
        seeding = Ledger(source)
        try:
            seeder = Seeder("chatledger", seeding.engine, datetime(2026, 1, 1, tzinfo=UTC))
            for number in range(sessions):
                await seeder.session(_transfer_id(number), messages, max(0, messages - 50), number)
        finally:
            await seeding.close()
        rendered = {name: url.render_as_string(hide_password=False) for name, url in
                    (("source", source), ("target", target), ("floor", floor))}  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="chatledger-bench-") as directory:
            path = str(Path(directory) / "export.jsonl")
            baseline = await _in_process(_baseline_job)
            say(f"export of {total:,} messages")
            export_seconds, export_peak = await _in_process(_export_job, rendered["source"], path)
            file_mib = os.stat(path).st_size / 2**20
            parts = await asyncio.to_thread(split_export, path, TRANSFER_PARTS)
            say(f"import of {total:,} messages, and the floor, in {len(parts)} alternating parts")
            import_seconds, floor_seconds, import_peak, clean, imported = await _in_process(
                _import_job, rendered["target"], rendered["floor"], parts
            )
        check(clean and imported == total, f"the import gave {imported} of {total} messages (clean: {clean})")
    return TransferStats(
        sessions=sessions,
        messages=total,
        export_seconds=export_seconds,
        import_seconds=import_seconds,
        floor_seconds=floor_seconds,
        export_peak_mib=export_peak,
        import_peak_mib=import_peak,
        baseline_peak_mib=baseline,
        file_mib=file_mib,
    )


#: Backends on which the import throughput target applies (the server databases).
