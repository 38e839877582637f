"""The benchmark: chatledger against zett-agent's own SQL store and against the floor.

From the chatledger benchmark issue: per backend, in one run on one machine and the
same database servers, with rounds interleaved (each round runs every contender once,
in a shuffled order) so that machine drift hits every contender alike, it measures

* **append** latency and throughput into one session: chatledger's
  ``LedgerSessionStorage.append``; zett-agent's own ``SQLSessionStorage.append``; and
  the floor, a bare one-row ``INSERT`` of the same raw-message row committed per
  call, through SQLAlchemy Core on chatledger's async driver and engine settings;
  and chatledger's append under the setting its default trades against (the
  *variant*): ``sqlite_synchronous="NORMAL"`` against the durable ``FULL`` on SQLite,
  the pool's pre-ping against none on the servers;
* **load** of a checkpoint plus a 50-message tail from sessions of 10k and 100k raw
  messages, against a 50-message session (no checkpoint); chatledger without its
  load cache here (every load a first load, as zett's are), so that this measures
  the reads;
* **load as agents use it** (:mod:`chatledger.bench_load`): the first load of a
  session of 50 and of 2,000 raw messages (cold) and its reload after the 3 messages
  of a turn (warm, served from the load cache but for those), p50 and p95, each
  against the floor, a bare ``SELECT`` of the same rows;
* **list_sessions**, the first page of 20, over 10k and 100k sessions;
* **appends from 8 processes**, to one shared session and to 8 sessions (one per
  process), with each store's error count and a read-back check (gaps, duplicates,
  acknowledged messages lost).

Each backend gets its own fresh databases, dropped at the end (SQLite: files in a
temporary directory, removed at the end): one migrated for chatledger, one where
zett-agent creates its own tables, one holding the floor's table. The large sessions
are seeded in bulk with SQLAlchemy Core ``executemany`` straight into each store's
tables, with message JSON from zett's own codec and consistent counters, then
``ANALYZE``\\ d; only the reads are timed.

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
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table as RichTable
from sqlalchemy import MetaData, Table, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from ..dsn import display, resolve_dsn
from ..engine import Ledger
from ..migrate import upgrade_database
from ..schema import raw_messages_table, sessions_table, snapshots_table
from .bench_load import LatencyStats, LoadFloor, breakdown, measure_agent_loads
from .harness import AppendJob, Store, error_kinds, open_store, run_workers, user_message, verify

#: The contenders of the append measurement, in table order.
CONTENDERS = ("chatledger", "zett", "floor")
#: The stores compared on load, list_sessions and concurrent appends.
STORES = ("chatledger", "zett")
#: Rows per ``executemany`` while seeding.
SEED_CHUNK = 2_000
#: Seconds of back-to-back repeats of a fast call within one round (see ``measure_calls``).
REPEAT_BUDGET = 0.05
MAX_REPEATS = 20
#: Placeholder in the seeded messages' JSON, replaced by a number per row.
_MARK = "@@N@@"


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does; the defaults are the issue's sizes.

    Attributes:
        append_rounds: interleaved rounds of the append measurement.
        append_batch: appends per contender per round (each one timed).
        warmup: untimed appends per contender before the first round.
        tail: raw messages after the checkpoint in the large sessions, and the size
            of the small session.
        load_messages: raw-message counts of the large sessions, ascending.
        load_rounds: interleaved rounds of the load measurement (one load each).
        list_sessions: session counts at which list_sessions is timed, ascending.
        list_rounds: interleaved rounds of each list_sessions measurement.
        page: list_sessions page size.
        processes: worker processes of the concurrent appends.
        process_appends: appends per worker process in each concurrent run.
        agent_loads: raw-message counts of the sessions of the agent loads.
        agent_sessions: sessions per count; each gives one cold and one warm sample.
        agent_appends: messages appended between a session's cold and warm load.
    """

    append_rounds: int = 9
    append_batch: int = 100
    warmup: int = 20
    tail: int = 50
    load_messages: tuple[int, ...] = (10_000, 100_000)
    load_rounds: int = 25
    list_sessions: tuple[int, ...] = (10_000, 100_000)
    list_rounds: int = 5
    page: int = 20
    processes: int = 8
    process_appends: int = 100
    agent_loads: tuple[int, ...] = (50, 2_000)
    agent_sessions: int = 40
    agent_appends: int = 3
    #: Sessions and raw messages per session of the export/import measurement (1 million
    #: messages); 0 sessions skips it.
    transfer_sessions: int = 1_000
    transfer_messages: int = 1_000

    def __post_init__(self) -> None:
        names = (
            "append_rounds",
            "append_batch",
            "tail",
            "load_rounds",
            "list_rounds",
            "page",
            "agent_sessions",
        )
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("warmup", "processes", "process_appends", "transfer_sessions", "transfer_messages"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not self.load_messages or min(self.load_messages) <= self.tail:
            raise ValueError("load_messages must be non-empty and larger than tail")
        if not self.list_sessions or min(self.list_sessions) < self.page:
            raise ValueError("list_sessions must be non-empty and at least page")
        if not self.agent_loads or min(self.agent_loads) < 1 or self.agent_appends < 0:
            raise ValueError("agent_loads must be non-empty and positive, agent_appends not negative")


#: ``--quick``: a smoke run of every measurement in well under a minute per backend.
QUICK = Sizes(
    append_rounds=3,
    append_batch=30,
    warmup=5,
    load_messages=(1_000, 10_000),
    load_rounds=8,
    list_sessions=(1_000, 10_000),
    list_rounds=3,
    process_appends=20,
    agent_sessions=6,
    transfer_sessions=40,
    transfer_messages=500,
)


# -- results ------------------------------------------------------------------------


@dataclass
class AppendStats:
    """One contender's appends: per-append latency and per-round throughput."""

    median_ms: float
    p95_ms: float
    #: Median over rounds of (appends in the round / its seconds).
    per_second: float
    round_per_second: list[float]


@dataclass
class TimingStats:
    """Repeated timings of one call, in milliseconds."""

    median_ms: float
    min_ms: float
    samples: int


@dataclass
class ConcurrentStats:
    """One concurrent run: ``processes`` workers appending ``appends`` each."""

    processes: int
    sessions: int
    attempted: int
    acknowledged: int
    errors: int
    #: Transient failures retried inside the store (chatledger only; ``None`` for zett).
    retries: int | None
    gaps: int
    duplicates: int
    lost: int
    seconds: float
    per_second: float
    #: Errors by kind (the message without SQL, ids and numbers) -> how many.
    error_kinds: dict[str, int] = field(default_factory=dict)


@dataclass
class TransferStats:
    """``chatledger export`` and ``import`` of ``sessions`` x ``messages`` raw messages,
    and the floor: the same rows inserted bare. Each runs in a process of its own, so
    that its peak resident memory is its own."""

    sessions: int
    messages: int
    export_seconds: float
    import_seconds: float
    floor_seconds: float
    #: Peak resident set size of each process, MiB.
    export_peak_mib: float
    import_peak_mib: float
    #: Peak of a process that only loaded the same modules: the part no data caused.
    baseline_peak_mib: float
    #: Size of the export file, MiB.
    file_mib: float

    @property
    def export_per_second(self) -> float:
        return self.messages / self.export_seconds

    @property
    def import_per_second(self) -> float:
        return self.messages / self.import_seconds

    @property
    def floor_per_second(self) -> float:
        return self.messages / self.floor_seconds


@dataclass
class Verdict:
    """One target of the issue: ``value op bound``."""

    name: str
    description: str
    value: float
    op: str
    bound: float
    #: What the value is made of, measured (the agent loads), shown when it is missed.
    reason: str = ""

    @property
    def met(self) -> bool:
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound


@dataclass
class BackendReport:
    """Every number measured on one backend."""

    backend: str
    server: str
    server_version: str
    append: dict[str, AppendStats] = field(default_factory=dict)
    #: store -> raw messages in the session (as text) -> load timings.
    load: dict[str, dict[str, TimingStats]] = field(default_factory=dict)
    #: store -> sessions in the database (as text) -> list_sessions timings.
    list_sessions: dict[str, dict[str, TimingStats]] = field(default_factory=dict)
    #: store -> "one session" / "own sessions" -> the run.
    concurrent: dict[str, dict[str, ConcurrentStats]] = field(default_factory=dict)
    #: raw messages in the session (as text) -> cold / warm / their floors -> timings.
    agent_load: dict[str, dict[str, LatencyStats]] = field(default_factory=dict)
    #: Export and import throughput and peak memory (``None``: not measured).
    transfer: TransferStats | None = None
    targets: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class BenchReport:
    """A whole run: the machine, the sizes, one report per backend."""

    machine: dict[str, Any]
    sizes: Sizes
    backends: list[BackendReport]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchReport:
        """The report :meth:`to_json` wrote (to re-render a saved run as Markdown)."""
        reports = []
        for backend in data["backends"]:
            reports.append(
                BackendReport(
                    backend=backend["backend"],
                    server=backend["server"],
                    server_version=backend["server_version"],
                    append={name: AppendStats(**stats) for name, stats in backend["append"].items()},
                    load={k: {n: TimingStats(**t) for n, t in v.items()} for k, v in backend["load"].items()},
                    list_sessions={
                        k: {n: TimingStats(**t) for n, t in v.items()}
                        for k, v in backend["list_sessions"].items()
                    },
                    concurrent={
                        k: {mode: ConcurrentStats(**run) for mode, run in v.items()}
                        for k, v in backend["concurrent"].items()
                    },
                    agent_load={
                        count: {kind: LatencyStats(**stats) for kind, stats in kinds.items()}
                        for count, kinds in backend.get("agent_load", {}).items()
                    },
                    transfer=TransferStats(**backend["transfer"]) if backend.get("transfer") else None,
                    targets=[
                        Verdict(**{key: value for key, value in target.items() if key != "met"})
                        for target in backend["targets"]
                    ],
                    seconds=backend["seconds"],
                )
            )
        sizes: dict[str, Any] = {key: value for key, value in data["sizes"].items()}
        sizes.update(load_messages=tuple(sizes["load_messages"]), list_sessions=tuple(sizes["list_sessions"]))
        if "agent_loads" in sizes:
            sizes["agent_loads"] = tuple(sizes["agent_loads"])
        return cls(data["machine"], Sizes(**sizes), reports)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data; each target carries its ``met`` flag."""
        data = asdict(self)
        for backend, report in zip(data["backends"], self.backends, strict=True):
            for target, verdict in zip(backend["targets"], report.targets, strict=True):
                target["met"] = verdict.met
        return data


# -- per-backend set-up ---------------------------------------------------------------


@dataclass(frozen=True)
class _Backend:
    """What the benchmark does its own way per backend (database life cycle, zett's
    driver, statistics); the stores' own dialect rules stay in :mod:`chatledger.dialects`."""

    #: zett-agent's driver: psycopg on PostgreSQL, as zett's asyncpg path fails.
    zett_driver: str
    #: ``CREATE DATABASE`` / ``DROP DATABASE`` templates; ``None`` for SQLite files.
    create: str | None
    drop: str | None
    #: Refreshes the planner statistics of the store tables.
    analyze: str
    version: str
    #: The variant of chatledger's append measured beside its default: a label and
    #: the store options that make it.
    variant: tuple[str, dict[str, Any]] = ("pre-ping", {"pool_pre_ping": True})

    @property
    def variant_name(self) -> str:
        return f"chatledger, {self.variant[0]}"


_BACKENDS = {
    "postgresql": _Backend(
        "postgresql+psycopg",
        "CREATE DATABASE {name}",
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)",
        "ANALYZE",
        "SELECT version()",
    ),
    "mysql": _Backend(
        "mysql+aiomysql",
        "CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "DROP DATABASE IF EXISTS {name}",
        "ANALYZE TABLE agent_sessions, raw_messages, session_snapshots",
        "SELECT CONCAT('MySQL-compatible ', version())",
    ),
    "sqlite": _Backend(
        "sqlite+aiosqlite",
        None,
        None,
        "ANALYZE",
        "SELECT 'SQLite ' || sqlite_version()",
        ("synchronous=NORMAL", {"sqlite_synchronous": "NORMAL"}),
    ),
}


@dataclass(frozen=True)
class Databases:
    """The three fresh databases of one backend."""

    #: chatledger's, migrated (chatledger's async driver).
    ledger: URL
    #: zett-agent's own store's (zett's driver); zett creates its tables.
    zett: URL
    #: The floor's table (chatledger's async driver).
    floor: URL


async def _admin(url: URL, sql: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


def _sqlite_root(admin: URL) -> Path:
    """A new temporary directory inside the one a SQLite admin URL names."""
    parent = Path(admin.database).expanduser() if admin.database not in (None, "", ":memory:") else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="chatledger-bench-", dir=parent))


@contextlib.asynccontextmanager
async def fresh_databases(admin: URL) -> AsyncIterator[Databases]:
    """Create the benchmark's databases on the server ``admin`` names, yield them,
    and drop them afterwards.

    ``admin`` is an async URL (see :func:`chatledger.dsn.resolve_dsn`). For SQLite its
    path is a directory (``None`` or empty: the system's temporary directory) where
    a temporary directory of files is made and removed afterwards.
    """
    backend = admin.get_backend_name()
    rules = _BACKENDS[backend]
    if rules.create is None or rules.drop is None:
        root = _sqlite_root(admin)
        try:
            yield Databases(
                ledger=admin.set(database=str(root / "chatledger.sqlite3")),
                zett=admin.set(drivername=rules.zett_driver, database=str(root / "zett.sqlite3")),
                floor=admin.set(database=str(root / "floor.sqlite3")),
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    run = uuid.uuid4().hex[:10]
    names = {role: f"chatledger_bench_{run}_{role}" for role in ("ledger", "zett", "floor")}
    created: list[str] = []
    try:
        for name in names.values():
            await _admin(admin, rules.create.format(name=name))
            created.append(name)
        yield Databases(
            ledger=admin.set(database=names["ledger"]),
            zett=admin.set(drivername=rules.zett_driver, database=names["zett"]),
            floor=admin.set(database=names["floor"]),
        )
    finally:
        for name in created:
            await _admin(admin, rules.drop.format(name=name))


# -- the stores -----------------------------------------------------------------------


def _store_engine(store: Store) -> AsyncEngine:
    """The store's own engine, for seeding and statistics."""
    ledger = getattr(store, "ledger", None)
    engine = ledger.engine if isinstance(ledger, Ledger) else getattr(store, "engine", None)
    if not isinstance(engine, AsyncEngine):
        raise TypeError(f"{type(store).__name__} has no AsyncEngine")
    return engine


class Floor:
    """The floor: one ``raw_messages`` row (chatledger's columns and unique index) per
    call, encoded by zett's codec, in its own committed transaction through
    SQLAlchemy Core, on chatledger's driver and engine settings (pool, SQLite
    pragmas). No counter row, no validation, no retry: the least any store
    must do to persist a message."""

    def __init__(self, url: URL) -> None:
        from zett_agent.ids import new_uuid7
        from zett_agent.storage import MessageKind, encode_messages

        self._ledger = Ledger(url)
        self._table = raw_messages_table.to_metadata(MetaData())
        self._sequence = 0
        self._encode = encode_messages
        self._new_id = new_uuid7
        self._role = int(MessageKind.USER)

    async def create_table(self) -> None:
        async with self._ledger.engine.begin() as conn:
            await conn.run_sync(self._table.metadata.create_all)

    async def append(self, session_id: str, request_id: str, message: Any) -> int:
        self._sequence += 1
        now = datetime.now(UTC)
        row = {
            "id": self._new_id(),
            "session_id": session_id,
            "request_id": request_id,
            "sequence": self._sequence,
            "role": self._role,
            "content": message.content,
            "message_json": self._encode([message]),
            "metadata_json": "{}",
            "tags_json": "{}",
            "started_at": now,
            "completed_at": now,
            "duration_ns": 0,
            "created_at": now,
            "updated_at": now,
        }
        async with self._ledger.engine.begin() as conn:
            await conn.execute(self._table.insert(), row)
        return self._sequence

    async def close(self) -> None:
        await self._ledger.close()


# -- seeding --------------------------------------------------------------------------


def _chunks(rows: Iterable[dict[str, Any]], size: int = SEED_CHUNK) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclass(frozen=True)
class _Layout:
    """One store's tables and timestamp convention, for seeding it directly."""

    sessions: Table
    raw: Table
    snapshots: Table
    #: chatledger stores aware UTC instants; zett's columns are naive UTC.
    aware: bool
    #: chatledger's counter-row columns (``None``: zett has none).
    counters: bool


def _layout(kind: str) -> _Layout:
    if kind == "chatledger":
        return _Layout(sessions_table, raw_messages_table, snapshots_table, aware=True, counters=True)
    # zett-agent's ORM tables (its private module; pinned by chatledger's zett extra).
    from zett_agent._sql_storage import AgentSessionModel, ContextSnapshotModel, RawLogMessageModel

    return _Layout(
        cast(Table, AgentSessionModel.__table__),
        cast(Table, RawLogMessageModel.__table__),
        cast(Table, ContextSnapshotModel.__table__),
        aware=False,
        counters=False,
    )


class Seeder:
    """Bulk rows straight into one store's tables: valid zett message JSON, consistent
    counters, distinct activity times; far faster than appending one by one."""

    def __init__(self, kind: str, engine: AsyncEngine, base: datetime) -> None:
        from zett_agent.extensions.compaction import CompactedMessage
        from zett_agent.storage import MessageKind, encode_messages

        self.engine = engine
        self.layout = _layout(kind)
        self.base = base
        self._template = encode_messages([user_message(f"seeded message {_MARK}")])
        self._summary = encode_messages([CompactedMessage(content="summary of the seeded messages")])
        self._role = int(MessageKind.USER)

    def _at(self, offset_ms: int) -> datetime:
        instant = self.base + timedelta(milliseconds=offset_ms)
        return instant if self.layout.aware else instant.replace(tzinfo=None)

    def _session_row(self, session_id: str, at: datetime, messages: int, boundary: int) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": session_id,
            "parent_session_id": None,
            "session_type": 0,
            "title": None,
            "agent_name": None,
            "created_at": at,
            "updated_at": at,
        }
        if self.layout.counters:
            row.update(
                last_sequence=messages,
                snapshot_version=1 if boundary else 0,
                compacted_through_sequence=boundary,
                fields_version=1,
            )
        return row

    def _raw_rows(self, session_id: str, first: int, count: int, at: datetime) -> Iterator[dict[str, Any]]:
        from zett_agent.ids import new_uuid7

        for sequence in range(first, first + count):
            yield {
                "id": new_uuid7(),
                "session_id": session_id,
                "request_id": "seed",
                "sequence": sequence,
                "role": self._role,
                "content": f"seeded message {sequence}",
                "tool_name": None,
                "message_json": self._template.replace(_MARK, str(sequence)),
                "metadata_json": "{}",
                "tags_json": "{}",
                "started_at": at,
                "completed_at": at,
                "duration_ns": 0,
                "created_at": at,
                "updated_at": at,
            }

    async def _insert(self, table: Table, rows: Iterable[dict[str, Any]]) -> None:
        async with self.engine.begin() as conn:
            for chunk in _chunks(rows):
                await conn.execute(table.insert(), chunk)

    async def session(self, session_id: str, messages: int, boundary: int, offset_ms: int) -> None:
        """One session of ``messages`` raw messages with, when ``boundary`` > 0, a
        version-1 checkpoint through ``boundary``."""
        at = self._at(offset_ms)
        await self._insert(self.layout.sessions, [self._session_row(session_id, at, messages, boundary)])
        await self._insert(self.layout.raw, self._raw_rows(session_id, 1, messages, at))
        if boundary:
            from zett_agent.ids import new_uuid7

            snapshot = {
                "id": new_uuid7(),
                "session_id": session_id,
                "version": 1,
                "compacted_through_sequence": boundary,
                "message_json": self._summary,
                "created_at": at,
                "updated_at": at,
            }
            await self._insert(self.layout.snapshots, [snapshot])

    async def many_sessions(self, first: int, stop: int, prefix: str = "list") -> None:
        """Sessions ``first..stop-1`` of one raw message each, activity 1 ms apart."""
        ids = [(f"{prefix}-{index:07d}", self._at(index)) for index in range(first, stop)]
        await self._insert(self.layout.sessions, (self._session_row(sid, at, 1, 0) for sid, at in ids))
        await self._insert(self.layout.raw, (row for sid, at in ids for row in self._raw_rows(sid, 1, 1, at)))

    async def analyze(self, statement: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(text(statement))


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
    contenders: dict[str, Appender], sizes: Sizes, rng: random.Random
) -> dict[str, AppendStats]:
    """Interleaved rounds of ``sizes.append_batch`` timed appends per contender, each
    into its one session; a contender's order within a round is shuffled."""
    sessions = {name: f"append-{name}-{uuid.uuid4().hex[:8]}" for name in contenders}
    counter = 0

    async def one(name: str) -> float:
        nonlocal counter
        counter += 1
        message = user_message(f"benchmark message {counter}")
        start = time.perf_counter()
        await contenders[name](sessions[name], "bench", message)
        return time.perf_counter() - start

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
    return {
        name: AppendStats(
            median_ms=statistics.median(latencies[name]) * 1000,
            p95_ms=_p95(latencies[name]) * 1000,
            per_second=statistics.median(rounds[name]),
            round_per_second=rounds[name],
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


# -- one backend ----------------------------------------------------------------------


def _say(console: Console | None, message: str) -> None:
    if console is not None:
        console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}", highlight=False)


def _check(condition: bool, what: str) -> None:
    """The benchmark measures what it claims, or stops."""
    if not condition:
        raise RuntimeError(f"benchmark sanity check failed: {what}")


async def bench_backend(
    admin: URL, sizes: Sizes, rng: random.Random, console: Console | None = None
) -> BackendReport:
    """Every measurement on the server ``admin`` names, in fresh databases."""
    started = time.perf_counter()
    backend = admin.get_backend_name()
    rules = _BACKENDS[backend]

    def say(message: str) -> None:
        _say(console, f"{backend}: {message}")

    async with fresh_databases(admin) as databases:
        await upgrade_database(databases.ledger)
        stores: dict[str, Store] = {}
        #: Further stores the measurements open, closed at the end.
        opened: list[Store] = []
        floor = Floor(databases.floor)
        variant = open_store("chatledger", databases.ledger, dict(rules.variant[1]))
        try:
            stores = {kind: open_store(kind, getattr(databases, "ledger" if kind == "chatledger" else kind))
                      for kind in STORES}  # fmt: skip
            for store in stores.values():
                await store.count_messages("warm-up")  # zett creates its tables here
            await floor.create_table()
            async with _store_engine(stores["chatledger"]).connect() as conn:
                version = str(await conn.scalar(text(rules.version)))
            report = BackendReport(backend, display(admin), version)

            say(f"appends: {sizes.append_rounds} rounds x {sizes.append_batch} per contender")
            appenders: dict[str, Appender] = {kind: store.append for kind, store in stores.items()}
            appenders.update({"floor": floor.append, rules.variant_name: variant.append})
            report.append = await measure_appends(appenders, sizes, rng)

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
            seeders = {kind: Seeder(kind, _store_engine(store), base) for kind, store in stores.items()}
            say(f"seeding sessions of {sizes.tail}, {', '.join(map(str, sizes.load_messages))} messages")
            load_sessions = {str(sizes.tail): ("load-small", sizes.tail, 0)}
            for count in sizes.load_messages:
                load_sessions[str(count)] = (f"load-{count}", count, count - sizes.tail)
            for seeder in seeders.values():
                for session_id, count, boundary in load_sessions.values():
                    await seeder.session(session_id, count, boundary, offset_ms=-1)
                await seeder.analyze(rules.analyze)
            for kind, store in stores.items():  # the shape loaded is the shape claimed
                for label, (session_id, _count, boundary) in load_sessions.items():
                    view = await store.load(session_id)
                    tail = len(view.raw_tail)
                    _check(tail == sizes.tail, f"{kind} load of {label} gave {tail} messages")
                    _check((view.snapshot is not None) == bool(boundary), f"{kind} load of {label} snapshot")
            say(f"loads: {sizes.load_rounds} rounds")
            # chatledger without its load cache: every load reads, as zett's do.
            readers = {
                **stores,
                "chatledger": open_store("chatledger", databases.ledger, {"load_cache_messages": 0}),
            }
            opened.append(readers["chatledger"])
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
            await seeders["chatledger"].analyze(rules.analyze)
            say(f"agent loads: cold and warm (+{sizes.agent_appends}) against the floor")
            agent = open_store("chatledger", databases.ledger)
            opened.append(agent)
            load_floor = LoadFloor(databases.ledger)
            try:
                report.agent_load = await measure_agent_loads(
                    agent, load_floor, agent_sessions, sizes.agent_appends, rng, _check
                )
            finally:
                await load_floor.close()

            seeded = 0
            for count in sizes.list_sessions:
                say(f"seeding sessions up to {count}")
                for seeder in seeders.values():
                    await seeder.many_sessions(seeded, count)
                    await seeder.analyze(rules.analyze)
                seeded = count
                for kind, store in stores.items():
                    page = await store.list_sessions(limit=sizes.page)
                    _check(len(page) == sizes.page, f"{kind} list_sessions gave {len(page)}")
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
    report.targets = targets(report, sizes)
    report.seconds = time.perf_counter() - started
    return report


def targets(report: BackendReport, sizes: Sizes) -> list[Verdict]:
    """The issue's targets, as ratios of this backend's medians."""
    append = report.append
    load = report.load["chatledger"]
    largest_load, largest_list = str(max(sizes.load_messages)), str(max(sizes.list_sessions))
    lists = report.list_sessions
    return [
        Verdict(
            "append_vs_floor",
            "append throughput, chatledger / floor",
            append["chatledger"].per_second / append["floor"].per_second,
            ">=",
            0.7,
        ),
        Verdict(
            "append_vs_zett",
            "append throughput, chatledger / zett",
            append["chatledger"].per_second / append["zett"].per_second,
            ">=",
            2.0,
        ),
        Verdict(
            "load_o_tail",
            f"chatledger load, {largest_load}-message session / {sizes.tail}-message session",
            load[largest_load].median_ms / load[str(sizes.tail)].median_ms,
            "<=",
            2.0,
        ),
        Verdict(
            "list_o_page",
            f"list_sessions over {largest_list} sessions, zett time / chatledger time",
            lists["zett"][largest_list].median_ms / lists["chatledger"][largest_list].median_ms,
            ">=",
            100.0,
        ),
        *agent_load_targets(report, sizes),
        *_transfer_targets(report),
    ]


# -- export and import ------------------------------------------------------------------


def _peak_mib() -> float:
    """This process's peak resident set size, MiB (``ru_maxrss`` is KiB on Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _baseline_job() -> float:
    """A process that loads what the export and import load, and nothing else."""
    from . import transfer  # noqa: F401

    return _peak_mib()


def _export_job(dsn: str, path: str) -> tuple[float, float]:
    from .export import export

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
    from .importer import BATCH_ROWS, import_file, read_records
    from .rows import RowCodec

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
                        for chunk in _chunks(rows, BATCH_ROWS):
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
        _check(
            clean and imported == total, f"the import gave {imported} of {total} messages (clean: {clean})"
        )
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
IMPORT_TARGET_BACKENDS = ("postgresql", "mysql")


def _transfer_targets(report: BackendReport) -> list[Verdict]:
    if report.transfer is None or report.backend not in IMPORT_TARGET_BACKENDS:
        return []
    return [
        Verdict(
            "import_vs_floor",
            "import throughput, chatledger import / bare bulk insert",
            report.transfer.import_per_second / report.transfer.floor_per_second,
            ">=",
            0.5,
        )
    ]


def _transfer_rows(report: BackendReport, verdicts: dict[str, Verdict]) -> list[tuple[str, ...]]:
    stats = report.transfer
    if stats is None:
        return []
    ratio = stats.import_per_second / stats.floor_per_second
    verdict = verdicts.get("import_vs_floor")
    cells = (
        (
            f"cl/floor {verdict.value:.2f}",
            f"{verdict.op} {verdict.bound:g}",
            "PASS" if verdict.met else "MISS",
        )
        if verdict is not None
        else (f"cl/floor {ratio:.2f}", "", "")
    )
    size = f"{stats.messages:,} messages"
    return [
        (f"export, {size}, /s", _num(stats.export_per_second), "", "", "", "", ""),
        (f"import, {size}, /s", _num(stats.import_per_second), "", _num(stats.floor_per_second), *cells),
        (
            f"peak memory, MiB: export / import (idle {stats.baseline_peak_mib:.0f})",
            f"{stats.export_peak_mib:.0f} / {stats.import_peak_mib:.0f}",
            "",
            "",
            "",
            "",
            "",
        ),
    ]


#: Bounds of the agent loads: a reload at most 1.5x a bare read of the same rows at
#: every size, the first load of the largest at most 4x.
WARM_LOAD_BOUND, COLD_LOAD_BOUND = 1.5, 4.0


def agent_load_targets(report: BackendReport, sizes: Sizes) -> list[Verdict]:
    """Warm load / floor at every size of ``sizes.agent_loads``, cold load / floor at
    the largest; p50s, each with its measured breakdown."""
    verdicts = []
    largest = max(sizes.agent_loads)
    for count in sizes.agent_loads:
        stats = report.agent_load[str(count)]
        for kind, bound in (("warm", WARM_LOAD_BOUND), ("cold", COLD_LOAD_BOUND)):
            if kind == "cold" and count != largest:
                continue
            verdicts.append(
                Verdict(
                    f"{kind}_load_{count}",
                    f"{kind} load p50 / floor p50, {count}-message session",
                    stats[kind].median_ms / stats[f"{kind} floor"].median_ms,
                    "<=",
                    bound,
                    reason=breakdown(stats, kind),
                )
            )
    return verdicts


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
    sizes: Sizes = Sizes(),
    console: Console | None = None,
    *,
    seed: int | None = None,
) -> BenchReport:
    """Benchmark every server in ``dsns`` (admin DSNs; see :func:`fresh_databases`)
    one after the other; print progress and one table per backend to ``console``.

    Raises:
        ValueError: a DSN is not PostgreSQL, MySQL/MariaDB or SQLite.
        RuntimeError: a worker process failed, or a sanity check of what is measured.
    """
    admins = [resolve_dsn(dsn) for dsn in dsns]
    if not admins:
        raise ValueError("dsns must name at least one server")
    rng = random.Random(seed)
    machine = machine_info()
    reports: list[BackendReport] = []
    for admin in admins:
        report = await bench_backend(admin, sizes, rng, console)
        reports.append(report)
        if console is not None:
            console.print(render(report, sizes))
            for line in missed_reasons(report):
                console.print(f"  {line}", highlight=False, markup=False)
            for kind, runs in report.concurrent.items():
                for mode, run in runs.items():
                    for error, count in run.error_kinds.items():
                        console.print(f"  {kind}, {mode}: {count} x {error}", highlight=False, markup=False)
    machine["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return BenchReport(machine, sizes, reports)


# -- output ---------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


#: Columns of the result table; the last holds PASS / MISS.
COLUMNS = ("measure", "chatledger", "zett", "floor", "ratio", "target", "met")


def table_rows(report: BackendReport, sizes: Sizes) -> list[tuple[str, ...]]:
    """One backend's medians, ratios and target verdicts, as rows of :data:`COLUMNS`."""
    verdicts = {verdict.name: verdict for verdict in report.targets}

    def verdict_cells(name: str, ratio: str) -> tuple[str, str, str]:
        verdict = verdicts[name]
        return (
            f"{ratio}{verdict.value:.2f}",
            f"{verdict.op} {verdict.bound:g}",
            "PASS" if verdict.met else "MISS",
        )

    rows: list[tuple[str, ...]] = []
    append = report.append
    rows.append(("append p50 latency, ms", *(f"{append[n].median_ms:.2f}" for n in CONTENDERS), "", "", ""))
    rows.append(("append p95 latency, ms", *(f"{append[n].p95_ms:.2f}" for n in CONTENDERS), "", "", ""))
    rows.append(
        (
            "append throughput, /s",
            *(_num(append[name].per_second) for name in CONTENDERS),
            *verdict_cells("append_vs_floor", "cl/floor "),
        )
    )
    rows.append(("", "", "", "", *verdict_cells("append_vs_zett", "cl/zett ")))
    for name, stats in append.items():
        if name.startswith("chatledger, "):  # the variant: the price of the default's setting
            label = name.removeprefix("chatledger, ")
            ratio = append["chatledger"].per_second / stats.per_second
            rows.append((f"append p50 latency, ms, {label}", f"{stats.median_ms:.2f}", "", "", "", "", ""))
            rows.append(
                (
                    f"append throughput, /s, {label}",
                    _num(stats.per_second),
                    "",
                    "",
                    f"default/{label} {ratio:.2f}",
                    "",
                    "",
                )
            )
    load = report.load
    small = str(sizes.tail)
    rows.append(
        (
            f"load, {small}-message session, ms",
            *(f"{load[k][small].median_ms:.2f}" for k in STORES),
            "",
            "",
            "",
            "",
        )
    )
    for count in sizes.load_messages:
        label = str(count)
        if count == max(sizes.load_messages):
            cells = verdict_cells("load_o_tail", f"/{small}: ")
        else:
            ratio = load["chatledger"][label].median_ms / load["chatledger"][small].median_ms
            cells = (f"/{small}: {ratio:.2f}", "", "")
        rows.append(
            (
                f"load, checkpoint + {sizes.tail} of {count:,}, ms",
                *(f"{load[k][label].median_ms:.2f}" for k in STORES),
                "",
                *cells,
            )
        )
    rows += agent_load_rows(report, sizes, verdict_cells)
    lists = report.list_sessions
    for count in sizes.list_sessions:
        label = str(count)
        if count == max(sizes.list_sessions):
            cells = verdict_cells("list_o_page", "zett/cl ")
        else:
            ratio = lists["zett"][label].median_ms / lists["chatledger"][label].median_ms
            cells = (f"zett/cl {ratio:.1f}", "", "")
        rows.append(
            (
                f"list_sessions {sizes.page} of {count:,}, ms",
                *(f"{lists[k][label].median_ms:.2f}" for k in STORES),
                "",
                *cells,
            )
        )
    for mode in ("one session", "own sessions"):
        runs = {kind: report.concurrent.get(kind, {}).get(mode) for kind in STORES}
        if not any(runs.values()):
            continue
        processes = next(run.processes for run in runs.values() if run is not None)
        sessions = "1 session" if mode == "one session" else f"{processes} sessions"
        rows.append(
            (
                f"{processes} processes -> {sessions}, /s (errors)",
                *(
                    f"{_num(run.per_second)} ({run.errors})" if run is not None else "-"
                    for run in runs.values()
                ),
                "",
                "",
                "",
                "",
            )
        )
    rows += _transfer_rows(report, verdicts)
    return rows


def agent_load_rows(
    report: BackendReport, sizes: Sizes, verdict_cells: Callable[[str, str], tuple[str, str, str]]
) -> list[tuple[str, ...]]:
    """The agent loads' rows: p50 / p95 of chatledger and of the floor, the p50 ratio."""
    rows: list[tuple[str, ...]] = []
    verdicts = {verdict.name for verdict in report.targets}
    for count in sizes.agent_loads:
        stats = report.agent_load[str(count)]
        for kind in ("cold", "warm"):
            ours, floor = stats[kind], stats[f"{kind} floor"]
            name = f"{kind}_load_{count}"
            if name in verdicts:
                cells = verdict_cells(name, "cl/floor ")
            else:
                cells = (f"cl/floor {ours.median_ms / floor.median_ms:.2f}", "", "")
            what = f"{count:,}" if kind == "cold" else f"{count:,}+{sizes.agent_appends}"
            rows.append(
                (
                    f"load {kind} {what}, p50 / p95 ms",
                    f"{ours.median_ms:.2f} / {ours.p95_ms:.2f}",
                    "",
                    f"{floor.median_ms:.2f} / {floor.p95_ms:.2f}",
                    *cells,
                )
            )
    return rows


def missed_reasons(report: BackendReport) -> list[str]:
    """One line per missed target that carries a measured reason."""
    return [
        f"{verdict.name} missed: {verdict.reason}"
        for verdict in report.targets
        if not verdict.met and verdict.reason
    ]


def _title(report: BackendReport) -> str:
    return f"{report.backend}: {report.server_version.split(' on ')[0]}"


def render(report: BackendReport, sizes: Sizes) -> RichTable:
    """One backend's :func:`table_rows` as a rich table."""
    table = RichTable(title=_title(report), title_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("measure", "target") else "right")
    marks = {"PASS": "[green]PASS[/green]", "MISS": "[red]MISS[/red]"}
    for row in table_rows(report, sizes):
        table.add_row(*row[:-1], marks.get(row[-1], row[-1]))
    return table


def markdown(report: BenchReport) -> str:
    """The whole run as Markdown: the machine, then one table per backend."""
    machine = report.machine
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['platform']}, Python {machine['python']}; load average "
        f"{machine['load_average_at_start'][0]:.1f} at the start, "
        f"{(machine.get('load_average_at_end') or [0.0])[0]:.1f} at the end.",
    ]
    for backend in report.backends:
        lines += ["", f"**{_title(backend)}**", "", "| " + " | ".join(COLUMNS) + " |"]
        lines.append("|" + "|".join(":--" if c in ("measure", "target") else "--:" for c in COLUMNS) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in table_rows(backend, report.sizes)]
        reasons = missed_reasons(backend)
        if reasons:
            lines += ["", *(f"- {line}" for line in reasons)]
    return "\n".join(lines) + "\n"


def configure(parser: argparse.ArgumentParser) -> None:
    """The benchmark's arguments (for ``bench/bench.py`` and a ``chatledger bench``)."""
    parser.add_argument(
        "--dsn",
        action="append",
        required=True,
        help="admin DSN of a server to benchmark, repeatable: postgresql://USER@HOST/postgres, "
        "mysql://root@HOST/mysql, sqlite:///DIRECTORY/ (fresh databases are created and dropped)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--json", type=Path, help="also write the numbers and the machine as JSON here")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    parser.add_argument("--seed", type=int, help="seed of the round shuffling (default: random)")


async def run_command(args: argparse.Namespace, console: Console) -> int:
    """Run the benchmark from parsed arguments; 0 when every target is met, else 1."""
    sizes = QUICK if args.quick else Sizes()
    report = await run_bench(args.dsn, sizes, console, seed=args.seed)
    _say(console, "the benchmark dropped every database it created: it leaves no sessions behind")
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        _say(console, f"wrote {args.json}")
    if args.markdown is not None:
        args.markdown.write_text(markdown(report))
        _say(console, f"wrote {args.markdown}")
    if args.quick:
        return 0  # quick sizes are a smoke run: the targets are judged at the full sizes only
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
