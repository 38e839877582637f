"""The benchmark: chatledger against zett-agent's own SQL store and against the floor.

Split by concern: :mod:`.results` (sizes and results), :mod:`.workloads` (databases,
stores, the floor, seeding), :mod:`.measure` and :mod:`.load` (the measurements),
:mod:`.report` (targets and tables); this module runs them per backend and is the
command line.

Per backend, in one run on one machine and the
same database servers, with rounds interleaved (each round runs every contender once,
in a shuffled order) so that machine drift hits every contender alike, it measures

* **append** latency and throughput into one session: chatledger's
  ``LedgerSessionStorage.append``; zett-agent's own ``SQLSessionStorage.append``; and
  the floor, a bare one-row ``INSERT`` of the same raw-message row committed per
  call, through SQLAlchemy Core on chatledger's async driver and engine settings;
  and chatledger's append under the setting its default trades against (the
  *variant*): ``sqlite_synchronous="NORMAL"`` against the durable ``FULL`` on SQLite,
  the pool's pre-ping against none on the servers (for the load too);
* **appends as users see them** (:mod:`chatledger.tools.bench.seen`): messages of
  20 B to 40 KB and an agent transcript's mix, from 1 to 64 tasks and from several
  processes, to one hot session and to one session per task, against the naive
  floor (the same row on a plain ``create_async_engine``, in a database of its own)
  and, per size, the floor above too: throughput, p50 and p99 latency and client CPU
  per append, as ratios; its targets (``seen_*``) are judged and shown but leave the
  exit status alone;
* **load** of a checkpoint plus a 50-message tail from sessions of 10k and 100k raw
  messages, against a 50-message session (no checkpoint); chatledger without its
  load cache here (every load a first load, as zett's are), so that this measures
  the reads;
* **load as agents use it** (:mod:`chatledger.tools.bench.load`): the first load of a
  session of 50 and of 2,000 raw messages (cold) and its reload after the 3 messages
  of a turn (warm, served from the load cache but for those), p50 and p95, each
  against the floor, a bare ``SELECT`` of the same rows;
* **list_sessions**, the first page of 20, over 10k and 100k sessions;
* **appends from 8 processes**, to one shared session and to 8 sessions (one per
  process), with each store's error count and a read-back check (gaps, duplicates,
  acknowledged messages lost);
* **loads on read replicas** (:mod:`chatledger.tools.bench.replicas`, with
  ``--read-dsn``): load throughput from 4 processes with 0, 1 and 2 replicas; without
  replicas given, the report says that it was not measured.
* **the frameworks' own stores** (:mod:`chatledger.tools.bench.frameworks`): the OpenAI
  Agents SDK's ``SQLAlchemySession`` (and ``SQLiteSession`` on SQLite) beside
  ``LedgerSession``, and ADK's ``DatabaseSessionService`` beside
  ``LedgerSessionService``: calls per second as ratios, and a concurrency round of
  tasks writing to one session (errors, refusals, writes lost or stored twice).

Each backend gets its own fresh databases, dropped at the end (SQLite: files in a
temporary directory, removed at the end): one migrated for chatledger, one where
zett-agent creates its own tables, one holding the floor's table, one the naive
floor's. The large sessions are seeded in bulk with SQLAlchemy Core ``executemany``
straight into each store's tables, with message JSON from zett's own codec and
consistent counters, then ``ANALYZE``\\ d; only the reads are timed.

Times are medians. The targets are ratios, so they hold on any machine:

======================  =================================================  =========
target                  ratio                                              bound
======================  =================================================  =========
``append_vs_floor``     chatledger append throughput / the floor's         >= 0.7
``append_vs_zett``      chatledger append throughput / zett's              >= 2
``load_o_tail``         chatledger load, 100k-message session / 50-message  <= 2
``list_o_page``         zett list_sessions time / chatledger's, 100k        >= 100
``warm_load_50``        warm load p50 / its floor's, 50 messages           <= 1.5
``warm_load_2000``      warm load p50 / its floor's, 2,000 messages        <= 1.5
``cold_load_2000``      first load p50 / its floor's, 2,000 messages       <= 4
======================  =================================================  =========

A missed target of the agent loads comes with a measured breakdown of the two medians
(time in the driver's statement calls, and the rest) as its ``reason``.

Run it as ``python bench/bench.py --dsn DSN [--dsn DSN ...] [--quick] [--json FILE]``
with admin DSNs (a user that may create databases), for example
``postgresql://postgres@127.0.0.1/postgres``, ``mysql://root@127.0.0.1/mysql`` or
``sqlite:///some/dir/``. zett-agent and, on PostgreSQL, psycopg (zett's asyncpg path
fails) must be installed: ``pip install 'chatledger[dev]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from sqlalchemy import text
from sqlalchemy.engine import URL

from ... import dialects
from ...dsn import display, resolve_dsn
from ...migrate import upgrade_database
from ..harness import Store, open_store
from .frameworks import measure_frameworks
from .load import LoadFloor, measure_agent_loads
from .measure import Appender, Call, measure_appends, measure_calls, measure_concurrent, measure_transfer
from .replicas import NOT_GIVEN, measure_replica_loads
from .report import (
    framework_notes,
    framework_rows,
    markdown,
    missed_reasons,
    render,
    render_frameworks,
    render_replica_loads,
    render_seen,
    seen_targets,
    targets,
)
from .results import CONTENDERS, FULL, QUICK, STORES, BackendReport, BenchReport, ReplicaLoads, Sizes, check
from .seen import NaiveFloor, Seen, measure_processes, measure_sizes, measure_tasks
from .workloads import Databases, Floor, Seeder, fresh_databases, store_engine

#: The contenders of the append measurement, in table order.

__all__ = [
    "CONTENDERS",
    "QUICK",
    "STORES",
    "BenchReport",
    "Seeder",
    "Sizes",
    "configure",
    "main",
    "markdown",
    "run_bench",
    "run_command",
]

# -- one backend ----------------------------------------------------------------------


def _say(console: Console | None, message: str) -> None:
    if console is not None:
        console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", highlight=False)


async def measure_seen(
    databases: Databases,
    ledger: Store,
    tuned: Floor,
    sizes: Sizes,
    rng: random.Random,
    say: Callable[[str], None],
) -> Seen:
    """Appends as users see them (:mod:`.seen`): per size, from many tasks, from
    several processes, each against the naive floor in its own database."""
    seen = Seen()
    naive = NaiveFloor(databases.naive)
    try:
        await naive.create_table()
        if sizes.seen_sizes:
            say(f"appends as users see them: sizes {', '.join(sizes.seen_sizes)}, {sizes.seen_rounds} rounds")
            seen.sizes = await measure_sizes(
                ledger.append, naive.append, tuned.append, sizes.seen_sizes, sizes.seen_rounds,
                sizes.seen_appends, rng,
            )  # fmt: skip
    finally:
        await naive.close()
    if sizes.seen_tasks:
        say(f"appends as users see them: {', '.join(map(str, sizes.seen_tasks))} tasks")
        seen.tasks = await measure_tasks(
            databases.ledger,
            databases.naive,
            sizes.seen_tasks,
            sizes.seen_rounds,
            sizes.seen_task_appends,
            rng,
        )
    if sizes.seen_processes:
        say(f"appends as users see them: {', '.join(map(str, sizes.seen_processes))} processes")
        seen.processes = await measure_processes(
            databases.ledger,
            databases.naive,
            sizes.seen_processes,
            sizes.seen_rounds,
            sizes.seen_process_appends,
            rng,
        )
    return seen


async def bench_backend(
    admin: URL, sizes: Sizes, rng: random.Random, console: Console | None = None
) -> BackendReport:
    """Every measurement on the server ``admin`` names, in fresh databases."""
    started = time.perf_counter()
    backend = dialects.backend(admin.get_backend_name())
    variant_name = f"chatledger, {backend.bench_variant[0]}"

    def say(message: str) -> None:
        _say(console, f"{backend.name}: {message}")

    async with fresh_databases(admin) as databases:
        await upgrade_database(databases.ledger)
        stores: dict[str, Store] = {}
        #: Further stores the measurements open, closed at the end.
        opened: list[Store] = []
        floor = Floor(databases.floor)
        variant = open_store("chatledger", databases.ledger, dict(backend.bench_variant[1]))
        try:
            stores = {kind: open_store(kind, getattr(databases, "ledger" if kind == "chatledger" else kind))
                      for kind in STORES}  # fmt: skip
            for store in stores.values():
                await store.count_messages("warm-up")  # zett creates its tables here
            await floor.create_table()
            async with store_engine(stores["chatledger"]).connect() as conn:
                version = str(await conn.scalar(text(backend.server_version)))
            report = BackendReport(backend.name, display(admin), version)

            say(f"appends: {sizes.append_rounds} rounds x {sizes.append_batch} per contender")
            appenders: dict[str, Appender] = {kind: store.append for kind, store in stores.items()}
            appenders.update({"floor": floor.append, variant_name: variant.append})
            engines = {kind: store_engine(store) for kind, store in stores.items()}
            engines.update({"floor": floor.engine, variant_name: store_engine(variant)})
            report.append = await measure_appends(appenders, sizes, rng, engines)
            report.seen = await measure_seen(databases, stores["chatledger"], floor, sizes, rng, say)

            if sizes.processes and sizes.process_appends:
                runs = [(kind, shared) for kind in STORES for shared in (True, False)]
                rng.shuffle(runs)
                for kind, shared in runs:
                    mode = "one session" if shared else "own sessions"
                    say(f"{sizes.processes} processes x {sizes.process_appends} appends, {kind}, {mode}")
                    url = databases.ledger if kind == "chatledger" else databases.zett
                    report.concurrent.setdefault(kind, {})[mode] = await measure_concurrent(
                        kind, url, sizes.processes, sizes.process_appends, shared
                    )

            base = datetime.now(UTC) - timedelta(days=30)
            seeders = {kind: Seeder(kind, store_engine(store), base) for kind, store in stores.items()}
            say(f"seeding sessions of {sizes.tail}, {', '.join(map(str, sizes.load_messages))} messages")
            load_sessions = {str(sizes.tail): ("load-small", sizes.tail, 0)}
            for count in sizes.load_messages:
                load_sessions[str(count)] = (f"load-{count}", count, count - sizes.tail)
            for seeder in seeders.values():
                for session_id, count, boundary in load_sessions.values():
                    await seeder.session(session_id, count, boundary, offset_ms=-1)
                await seeder.analyze(backend.analyze)
            for kind, store in stores.items():  # the shape loaded is the shape claimed
                for label, (session_id, _count, boundary) in load_sessions.items():
                    view = await store.load(session_id)
                    tail = len(view.raw_tail)
                    check(tail == sizes.tail, f"{kind} load of {label} gave {tail} messages")
                    check((view.snapshot is not None) == bool(boundary), f"{kind} load of {label} snapshot")
            say(f"loads: {sizes.load_rounds} rounds")
            # chatledger without its load cache: every load reads, as zett's do.
            readers = {
                **stores,
                "chatledger": open_store("chatledger", databases.ledger, {"load_cache_messages": 0}),
            }
            opened.append(readers["chatledger"])
            # The load under the variant's setting too (on the servers: the pool's pre-ping).
            readers[variant_name] = open_store(
                "chatledger", databases.ledger, {**backend.bench_variant[1], "load_cache_messages": 0}
            )
            opened.append(readers[variant_name])
            load_calls: dict[tuple[str, str], Call] = {
                (kind, label): functools.partial(store.load, session_id)
                for kind, store in readers.items()
                for label, (session_id, _, _) in load_sessions.items()
            }
            for (kind, label), stats_ in (await measure_calls(load_calls, sizes.load_rounds, rng)).items():
                report.load.setdefault(kind, {})[label] = stats_

            counts = ", ".join(map(str, sizes.agent_loads))
            say(f"agent loads: seeding {sizes.agent_sessions} sessions each of {counts} messages")
            agent_sessions: dict[int, list[str]] = {}
            for count in sizes.agent_loads:
                agent_sessions[count] = [f"agent-{count}-{index}" for index in range(sizes.agent_sessions)]
                for session_id in agent_sessions[count]:
                    await seeders["chatledger"].session(session_id, count, 0, offset_ms=-2)
            await seeders["chatledger"].analyze(backend.analyze)
            say(f"agent loads: cold and warm (+{sizes.agent_appends}) against the floor")
            agent = open_store("chatledger", databases.ledger)
            opened.append(agent)
            load_floor = LoadFloor(databases.ledger)
            try:
                report.agent_load = await measure_agent_loads(
                    agent, load_floor, agent_sessions, sizes.agent_appends, rng, check
                )
            finally:
                await load_floor.close()

            seeded = 0
            for count in sizes.list_sessions:
                say(f"seeding sessions up to {count}")
                for seeder in seeders.values():
                    await seeder.many_sessions(seeded, count)
                    await seeder.analyze(backend.analyze)
                seeded = count
                for kind, store in stores.items():
                    page = await store.list_sessions(limit=sizes.page)
                    check(len(page) == sizes.page, f"{kind} list_sessions gave {len(page)}")
                say(f"list_sessions over {count} sessions: {sizes.list_rounds} rounds")
                list_calls: dict[tuple[str, str], Call] = {
                    (kind, str(count)): functools.partial(store.list_sessions, limit=sizes.page)
                    for kind, store in stores.items()
                }
                timed = await measure_calls(list_calls, sizes.list_rounds, rng)
                for (kind, label), stats_ in timed.items():
                    report.list_sessions.setdefault(kind, {})[label] = stats_
        finally:
            for store in [*stores.values(), *opened]:
                await store.close()
            await floor.close()
            await variant.close()
    if sizes.transfer_sessions and sizes.transfer_messages:
        report.transfer = await measure_transfer(admin, sizes, say)
    report.frameworks = await measure_frameworks(admin, sizes, rng, say)
    report.targets = targets(report, sizes)
    report.seen_targets = seen_targets(report.seen)
    report.seconds = time.perf_counter() - started
    return report


# -- the whole run --------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """Platform, CPU model (``/proc/cpuinfo``), cores, memory, Python, load average."""

    def proc_field(path: str, key: str) -> str | None:
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
        return None

    memory = proc_field("/proc/meminfo", "MemTotal")
    return {
        "platform": platform.platform(),
        "cpu": proc_field("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "memory_gib": round(int(memory.split()[0]) / 2**20, 1) if memory else None,
        "python": platform.python_version(),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


async def run_bench(
    dsns: Sequence[str | URL],
    sizes: Sizes = FULL,
    console: Console | None = None,
    *,
    seed: int | None = None,
    read_dsns: Sequence[str | URL] = (),
) -> BenchReport:
    """Benchmark every server in ``dsns`` (admin DSNs; see :func:`fresh_databases`)
    one after the other; print progress and one table per backend to ``console``.
    ``read_dsns``: admin DSNs of the read replicas of the one server of ``dsns``, for
    the load throughput with 0, 1, 2... replicas (:mod:`.replicas`); none: the report
    says it was not measured.

    Raises:
        ValueError: a DSN is not PostgreSQL, MySQL/MariaDB or SQLite; ``read_dsns``
            with more than one server.
        RuntimeError: a worker process failed, or a sanity check of what is measured.
    """
    admins = [resolve_dsn(dsn) for dsn in dsns]
    if not admins:
        raise ValueError("dsns must name at least one server")
    replicas = [resolve_dsn(dsn) for dsn in read_dsns]
    if replicas and len(admins) != 1:
        raise ValueError("--read-dsn names the replicas of one server: give one --dsn with it")
    rng = random.Random(seed)
    machine = machine_info()
    reports: list[BackendReport] = []
    for admin in admins:
        report = await bench_backend(admin, sizes, rng, console)
        if replicas:
            _say(console, f"{report.backend}: loads on 0..{len(replicas)} read replicas")
            report.replicas = await measure_replica_loads(
                admin, replicas, sizes.replica_processes, sizes.replica_loads
            )
        else:
            report.replicas = ReplicaLoads(note=NOT_GIVEN)
        reports.append(report)
        if console is not None:
            console.print(render(report, sizes))
            for table in render_seen(report):
                console.print(table)
            for line in render_replica_loads(report.replicas):
                console.print(line, highlight=False, markup=False)
            for line in missed_reasons(report):
                console.print(f"  {line}", highlight=False, markup=False)
            for kind, runs in report.concurrent.items():
                for mode, run in runs.items():
                    for error, count in run.error_kinds.items():
                        console.print(f"  {kind}, {mode}: {count} x {error}", highlight=False, markup=False)
            if framework_rows(report.frameworks):
                console.print(render_frameworks(report))
            for line in framework_notes(report.frameworks):
                console.print(f"  {line}", highlight=False, markup=False)
    machine["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return BenchReport(machine, sizes, reports)


def configure(parser: argparse.ArgumentParser) -> None:
    """The benchmark's arguments (for ``bench/bench.py`` and a ``chatledger bench``)."""
    parser.add_argument(
        "--dsn",
        action="append",
        required=True,
        help="admin DSN of a server to benchmark, repeatable: postgresql://USER@HOST/postgres, "
        "mysql://root@HOST/mysql, sqlite:///DIRECTORY/ (fresh databases are created and dropped)",
    )
    parser.add_argument(
        "--read-dsn",
        action="append",
        default=[],
        metavar="DSN",
        help="admin DSN of a read replica of the one --dsn server, repeatable: the load throughput "
        "with 0, 1, 2... replicas",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--json", type=Path, metavar="FILE", help="also write the numbers and the machine as JSON here"
    )
    parser.add_argument(
        "--markdown", type=Path, metavar="FILE", help="also write the tables as Markdown here"
    )
    parser.add_argument("--seed", type=int, metavar="N", help="seed of the round shuffling (default: random)")


async def run_command(args: argparse.Namespace, console: Console) -> int:
    """Run the benchmark from parsed arguments; 0 when every target is met, else 1."""
    sizes = QUICK if args.quick else Sizes()
    report = await run_bench(args.dsn, sizes, console, seed=args.seed, read_dsns=args.read_dsn)
    _say(console, "the benchmark dropped every database it created: it leaves no sessions behind")
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        _say(console, f"wrote {args.json}")
    if args.markdown is not None:
        args.markdown.write_text(markdown(report))
        _say(console, f"wrote {args.markdown}")
    if args.quick:
        _say(
            console,
            "--quick is a smoke run: its PASS / MISS are of the small sizes and decide nothing "
            "(exit 0); the targets are judged at the full sizes only",
        )
        return 0
    return 0 if all(verdict.met for backend in report.backends for verdict in backend.targets) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python bench/bench.py``: parse ``argv`` (default ``sys.argv[1:]``) and run."""
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0] if __doc__ else None)
    configure(parser)
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    console.width = min(console.width, 120) if console.is_terminal else 120
    try:
        return asyncio.run(run_command(args, console))
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130


__all__ = [
    "QUICK",
    "BenchReport",
    "Sizes",
    "configure",
    "main",
    "run_bench",
    "run_command",
]
