"""The benchmark's sizes and results: what a run measures and what it found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .load import LatencyStats
from .seen import MIX, SIZES, Seen, seen_from_json

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
MARK = "@@N@@"


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does; the defaults are the full run's sizes.

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
        replica_processes, replica_loads: worker processes of the loads on read
            replicas, and loads each (``--read-dsn``).
        process_appends: appends per worker process in each concurrent run.
        agent_loads: raw-message counts of the sessions of the agent loads.
        agent_sessions: sessions per count; each gives one cold and one warm sample.
        agent_appends: messages appended between a session's cold and warm load.
        framework_rounds: interleaved rounds of the framework stores' calls
            (:mod:`.frameworks`).
        framework_items: items of the OpenAI Agents session ``get_items`` reads and
            events of the ADK session ``get_session`` reads; 0 skips the frameworks.
        framework_tasks, framework_writes: tasks writing to one session at once in
            the frameworks' concurrency round, and writes each.
        seen_sizes: content labels of the appends as users see them (:mod:`.seen`):
            text sizes in bytes and ``"mix"``; empty skips that section.
        seen_rounds: interleaved rounds of each :mod:`.seen` section.
        seen_appends: appends per contender per round of one task, per size.
        seen_tasks: task counts of one process appending at once; empty skips them.
        seen_task_appends: appends per task per round.
        seen_processes: process counts appending at once; empty skips them.
        seen_process_appends: appends per process per round.
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
    replica_processes: int = 4
    replica_loads: int = 200
    process_appends: int = 100
    agent_loads: tuple[int, ...] = (50, 2_000)
    agent_sessions: int = 40
    agent_appends: int = 3
    #: Sessions and raw messages per session of the export/import measurement (1 million
    #: messages); 0 sessions skips it.
    transfer_sessions: int = 1_000
    transfer_messages: int = 1_000
    framework_rounds: int = 9
    framework_items: int = 2_000
    framework_tasks: int = 8
    framework_writes: int = 20
    seen_sizes: tuple[str, ...] = (*SIZES, MIX)
    seen_rounds: int = 7
    seen_appends: int = 40
    seen_tasks: tuple[int, ...] = (1, 8, 32, 64)
    seen_task_appends: int = 10
    seen_processes: tuple[int, ...] = (2, 4)
    seen_process_appends: int = 40

    def __post_init__(self) -> None:
        names = (
            "append_rounds",
            "append_batch",
            "tail",
            "load_rounds",
            "list_rounds",
            "page",
            "agent_sessions",
            "framework_rounds",
            "seen_rounds",
            "seen_appends",
            "seen_task_appends",
            "seen_process_appends",
        )
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        non_negative = ("warmup", "processes", "process_appends", "transfer_sessions", "transfer_messages")
        for name in (*non_negative, "framework_items", "framework_tasks", "framework_writes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not self.load_messages or min(self.load_messages) <= self.tail:
            raise ValueError("load_messages must be non-empty and larger than tail")
        if not self.list_sessions or min(self.list_sessions) < self.page:
            raise ValueError("list_sessions must be non-empty and at least page")
        if not self.agent_loads or min(self.agent_loads) < 1 or self.agent_appends < 0:
            raise ValueError("agent_loads must be non-empty and positive, agent_appends not negative")
        if any(label not in (*SIZES, MIX) for label in self.seen_sizes):
            raise ValueError(f"seen_sizes must be of {', '.join((*SIZES, MIX))}")
        if any(count < 1 for count in (*self.seen_tasks, *self.seen_processes)):
            raise ValueError("seen_tasks and seen_processes must be positive")


#: ``--quick``: a smoke run of every measurement in well under a minute per backend.
#: The full run's sizes.
FULL = Sizes()

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
    replica_processes=2,
    replica_loads=20,
    framework_rounds=3,
    framework_items=300,
    framework_writes=10,
    seen_sizes=("20", "4000", MIX),
    seen_rounds=3,
    seen_appends=15,
    seen_tasks=(1, 8),
    seen_task_appends=5,
    seen_processes=(2,),
    seen_process_appends=10,
)


# -- results ------------------------------------------------------------------------


@dataclass
class AppendBreakdown:
    """Where one contender's append goes: medians per append, in milliseconds, of one
    extra interleaved round with instruments attached (so that the timed rounds carry
    none)."""

    wall_ms: float
    #: CPU time of the event loop's thread (``time.thread_time``): the store's Python,
    #: SQLAlchemy, the driver's client side.
    cpu_ms: float
    #: Wall time off that CPU: the database's work and the COMMIT's sync, the network,
    #: hand-offs to a driver's own thread (aiosqlite), being scheduled out.
    waiting_ms: float
    #: Time inside the driver's statement calls (``before_cursor_execute`` to
    #: ``after_cursor_execute``), and the statements sent (the COMMIT is none).
    driver_ms: float
    statements: float
    #: Round trips to the server per append (:class:`chatledger.tools.bench.floor.RoundTrips`:
    #: the statements, BEGIN, COMMIT, a ROLLBACK on return), or with :attr:`hops` the
    #: driver's hops to its thread (aiosqlite); ``None`` in a report from before.
    round_trips: float | None = None
    hops: bool = False


@dataclass
class AppendStats:
    """One contender's appends: per-append latency and per-round throughput."""

    median_ms: float
    p95_ms: float
    #: Median over rounds of (appends in the round / its seconds).
    per_second: float
    round_per_second: list[float]
    #: ``None``: not measured (no engine to instrument, or a report from before).
    breakdown: AppendBreakdown | None = None


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
    """One target of the benchmark: ``value op bound``."""

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
class ReplicaLoadStats:
    """One run: ``replicas`` replicas serving ``processes`` x ``loads`` loads."""

    replicas: int
    processes: int
    loads: int
    seconds: float
    per_second: float
    #: Loads a replica served, and loads that went to the primary.
    served: int
    fell_back: int


@dataclass
class ReplicaLoads:
    """The runs with 0..n replicas, or why none ran (``note``)."""

    runs: list[ReplicaLoadStats] = field(default_factory=list)
    note: str = ""


@dataclass
class FrameworkConcurrency:
    """``tasks`` tasks of one process writing ``attempted / tasks`` each to one session
    at once, then the session read back: what each write's answer claimed against
    what the store holds."""

    tasks: int
    attempted: int
    acknowledged: int
    #: Writes the store refused as designed (ADK's ``StaleSessionError``): nothing written.
    refused: int
    #: Any other exception (the database's, a time-out).
    errors: int
    #: Acknowledged writes missing from the read back, and writes found more than once.
    lost: int
    duplicates: int
    error_kinds: dict[str, int] = field(default_factory=dict)


@dataclass
class FrameworkStore:
    """One session store of a framework: chatledger's adapter or the framework's own."""

    #: "OpenAI Agents" or "ADK".
    framework: str
    #: The class, e.g. ``SQLAlchemySession``.
    name: str
    #: chatledger's adapter (the ratios' numerator).
    ours: bool
    #: operation -> its timings (empty: not measured, see ``note``).
    timings: dict[str, TimingStats] = field(default_factory=dict)
    concurrency: FrameworkConcurrency | None = None
    #: How it was set up when that differs from the usual, or why it was not measured.
    note: str = ""


@dataclass
class Frameworks:
    """The frameworks' own stores beside chatledger's adapters (:mod:`.frameworks`), or
    why none ran (``note``)."""

    stores: list[FrameworkStore] = field(default_factory=list)
    note: str = ""


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
    #: Load throughput with 0, 1, 2... read replicas, or why it was not measured.
    replicas: ReplicaLoads = field(default_factory=ReplicaLoads)
    #: The OpenAI Agents SDK's and ADK's own stores beside chatledger's adapters.
    frameworks: Frameworks = field(default_factory=Frameworks)
    #: Appends as users see them (:mod:`.seen`): sizes, tasks, processes.
    seen: Seen = field(default_factory=Seen)
    targets: list[Verdict] = field(default_factory=list)
    #: The targets of the appends as users see them: judged and shown, but not (yet)
    #: part of the exit status.
    seen_targets: list[Verdict] = field(default_factory=list)
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
                    append={name: _append_stats(stats) for name, stats in backend["append"].items()},
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
                    replicas=ReplicaLoads(
                        runs=[ReplicaLoadStats(**run) for run in backend.get("replicas", {}).get("runs", [])],
                        note=backend.get("replicas", {}).get("note", ""),
                    ),
                    frameworks=_frameworks(backend.get("frameworks")),
                    seen=seen_from_json(backend.get("seen")),
                    targets=_verdicts(backend["targets"]),
                    seen_targets=_verdicts(backend.get("seen_targets", [])),
                    seconds=backend["seconds"],
                )
            )
        sizes: dict[str, Any] = {key: value for key, value in data["sizes"].items()}
        sizes.update(load_messages=tuple(sizes["load_messages"]), list_sessions=tuple(sizes["list_sessions"]))
        for name in ("agent_loads", "seen_sizes", "seen_tasks", "seen_processes"):
            if name in sizes:
                sizes[name] = tuple(sizes[name])
        return cls(data["machine"], Sizes(**sizes), reports)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data; each target carries its ``met`` flag."""
        data = asdict(self)
        for backend, report in zip(data["backends"], self.backends, strict=True):
            for key in ("targets", "seen_targets"):
                for target, verdict in zip(backend[key], getattr(report, key), strict=True):
                    target["met"] = verdict.met
        return data


def _verdicts(data: list[dict[str, Any]]) -> list[Verdict]:
    return [Verdict(**{key: value for key, value in target.items() if key != "met"}) for target in data]


def _append_stats(data: dict[str, Any]) -> AppendStats:
    breakdown = data.get("breakdown")
    return AppendStats(**{**data, "breakdown": AppendBreakdown(**breakdown) if breakdown else None})


def _frameworks(data: dict[str, Any] | None) -> Frameworks:
    if not data:
        return Frameworks()
    stores = []
    for store in data["stores"]:
        concurrency = store.get("concurrency")
        stores.append(
            FrameworkStore(
                **{
                    **store,
                    "timings": {name: TimingStats(**stats) for name, stats in store["timings"].items()},
                    "concurrency": FrameworkConcurrency(**concurrency) if concurrency else None,
                }
            )
        )
    return Frameworks(stores, data.get("note", ""))


def check(condition: bool, what: str) -> None:
    """The benchmark measures what it claims, or stops."""
    if not condition:
        raise RuntimeError(f"benchmark sanity check failed: {what}")
