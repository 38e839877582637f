"""Appends as users see them: chatledger's append against the naive floor, at the
message sizes of agent transcripts, from many tasks and from several processes.

**The naive floor** (:class:`NaiveFloor`) is what a user writes without chatledger:
the row chatledger stores (``raw_messages``' columns and indexes, zett's codec for the
JSON, a uuid7 id), one ``INSERT`` committed per call, on a plain
``create_async_engine`` with SQLAlchemy's defaults, in a database of its own. On
SQLite the engine's connections are put in WAL with ``synchronous=FULL``, as the
ledger's are, so that both pay the same durability. Its ``sequence`` is handed out by
the client (no counter row, no read of the session), which is less than any store
that orders a session's messages can do.

Three sections, each a set of contenders run in interleaved rounds (every round runs
every contender once, in a shuffled order), so that the machine's drift hits them
alike; every ratio is the median over rounds of the round's ratio:

* **sizes** (:func:`measure_sizes`): one task appending messages of 20 B, 400 B,
  4 KB, 40 KB and the *mix* (:func:`contents`) to one session: chatledger, the naive
  floor, and the tuned floor (:class:`chatledger.tools.bench.workloads.Floor`);
* **tasks** (:func:`measure_tasks`): 1, 8, 32 and 64 tasks of one process appending
  the mix, the pool sized to the tasks, to one hot session shared by all of them and
  to one session per task, chatledger and the naive floor;
* **processes** (:func:`measure_processes`): 2 and 4 processes of one task each, the
  same four contenders.

Per contender and round it records the throughput (appends / the round's wall time),
each append's latency (for p50 and p99 over all rounds) and the client's CPU time per
append (``time.process_time`` over the round / its appends: every thread of the
process, so on SQLite the database's own work too).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import queue
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import MetaData, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ... import dialects
from ...schema import raw_messages_table
from ..harness import Store, open_store
from .floor_rows import floor_row

#: Fixed sizes of the message text, bytes; and the label of the mix.
SIZES = ("20", "400", "4000", "40000")
MIX = "mix"
#: Messages generated per content label (appends cycle through them).
POOL = 48
#: Contenders' names in the tables.
LEDGER, NAIVE, TUNED = "chatledger", "naive floor", "tuned floor"
HOT, OWN = "one session", "own sessions"
#: Seed of the contents: every run appends the same messages.
CONTENT_SEED = 41

_WORDS = (
    "the",
    "tool",
    "returned",
    "rows",
    "for",
    "query",
    "status",
    "error",
    "warning",
    "file",
    "path",
    "line",
    "function",
    "result",
    "value",
    "config",
    "request",
    "response",
    "token",
    "model",
    "agent",
    "session",
    "message",
    "retry",
    "commit",
    "index",
    "table",
    "column",
    "json",
    "payload",
    "stream",
    "chunk",
    "output",
    "input",
    "user",
    "assistant",
)


def _text(rng: random.Random, size: int) -> str:
    """``size`` bytes of ASCII words and newlines (log-like, as tool outputs are)."""
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS) if rng.random() > 0.1 else str(rng.randrange(10**6))
        sep = "\n" if rng.random() < 0.08 else " "
        parts.append(word + sep)
        length += len(word) + 1
    return "".join(parts)[:size]


def contents(label: str, count: int = POOL) -> list[Any]:
    """``count`` zett messages for content ``label``, the same on every run.

    A size label: user messages of exactly that many bytes of text. :data:`MIX`: an
    agent transcript's turns in order, a user turn (200-600 B), then assistant turns
    (1-2 KB) each followed, but for the last, by a tool's output (4-40 KB, log-uniform),
    two to four tool calls per user turn.
    """
    from zett_agent.messages import AssistantMessage, ToolMessage, UserMessage

    rng = random.Random(f"{CONTENT_SEED}-{label}")
    if label != MIX:
        size = int(label)
        return [UserMessage(content=_text(rng, size)) for _ in range(count)]
    messages: list[Any] = []
    while len(messages) < count:
        messages.append(UserMessage(content=_text(rng, rng.randint(200, 600))))
        calls = rng.randint(2, 4)
        for call in range(calls + 1):
            messages.append(AssistantMessage(content=_text(rng, rng.randint(1_000, 2_000))))
            if call < calls:
                size = round(4_000 * 10 ** rng.uniform(0, 1))
                messages.append(
                    ToolMessage(content=_text(rng, size), tool_call_id=f"call-{call}", name="shell")
                )
    return messages[:count]


def content_bytes(messages: Sequence[Any]) -> float:
    """Mean bytes of the messages' text (the mix's average size, for the tables)."""
    from zett_agent.messages import UserMessage

    sizes = [len((m.text if isinstance(m, UserMessage) else m.content).encode()) for m in messages]
    return statistics.fmean(sizes)


# -- the naive floor ------------------------------------------------------------------


def _sqlite_durability(engine: AsyncEngine) -> None:
    """WAL with ``synchronous=FULL`` on each new connection, as the ledger's are."""

    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()


class NaiveFloor:
    """The naive floor (see the module): ``create_async_engine(url)`` with SQLAlchemy's
    defaults but the pool's size (``pool_size``, no overflow, when given), one
    ``INSERT`` of chatledger's row committed per call."""

    def __init__(self, url: URL | str, pool_size: int | None = None, sequence_base: int = 0) -> None:
        from zett_agent.ids import new_uuid7
        from zett_agent.messages import AssistantMessage, ToolMessage, UserMessage
        from zett_agent.storage import MessageKind, encode_messages

        url = make_url(url) if isinstance(url, str) else url
        options: dict[str, Any] = {} if pool_size is None else {"pool_size": pool_size, "max_overflow": 0}
        self.engine = create_async_engine(url, **options)
        if not dialects.backend(url.get_backend_name()).server:  # SQLite: a file
            _sqlite_durability(self.engine)
        self._table = raw_messages_table.to_metadata(MetaData())
        self._sequence = itertools.count(sequence_base + 1)
        self._encode = encode_messages
        self._new_id = new_uuid7
        self._kinds = {
            UserMessage: int(MessageKind.USER),
            AssistantMessage: int(MessageKind.ASSISTANT),
            ToolMessage: int(MessageKind.TOOL),
        }
        self._user, self._tool = UserMessage, ToolMessage

    async def create_table(self) -> None:
        async with self.engine.begin() as conn:
            await conn.run_sync(self._table.metadata.create_all)

    async def append(self, session_id: str, request_id: str, message: Any) -> int:
        sequence = next(self._sequence)
        text = message.text if isinstance(message, self._user | self._tool) else message.content
        row = floor_row(
            self._new_id(),
            session_id,
            request_id,
            sequence,
            self._kinds[type(message)],
            text if isinstance(text, str) else "",
            message.name if isinstance(message, self._tool) else None,
            self._encode([message]),
        )
        async with self.engine.begin() as conn:
            await conn.execute(self._table.insert(), row)
        return sequence

    async def close(self) -> None:
        await self.engine.dispose()


# -- results --------------------------------------------------------------------------


@dataclass
class SeenStats:
    """One contender in one configuration, over the rounds."""

    #: Appends per second of each round (all tasks' or processes' appends / its wall time).
    round_per_second: list[float]
    #: Client CPU time per append of each round, ms (``time.process_time``).
    round_cpu_ms: list[float]
    #: Latency of one append, ms, over every append of every round.
    p50_ms: float
    p99_ms: float
    #: Appends that raised (SQLite's "database is locked" past the driver's busy
    #: timeout, a server's deadlock): not retried, left out of the figures above.
    errors: int = 0

    @property
    def per_second(self) -> float:
        return statistics.median(self.round_per_second)

    @property
    def cpu_ms(self) -> float:
        return statistics.median(self.round_cpu_ms)

    @property
    def wall_ms(self) -> float:
        """Wall time per append: the inverse of the throughput, ms."""
        return 1000 / self.per_second


@dataclass
class SeenRun:
    """One configuration (a size, a task count, a process count) and its contenders."""

    #: "size", "tasks" or "processes".
    section: str
    #: The size label (:data:`SIZES`, :data:`MIX`), or the tasks' or processes' count.
    label: str
    #: Mean bytes of the message text appended.
    content_bytes: float
    #: Contender (e.g. ``"chatledger, one session"``) -> its figures.
    contenders: dict[str, SeenStats] = field(default_factory=dict)

    def ratio(self, ours: str, theirs: str) -> float:
        """Median over rounds of (``ours``' throughput / ``theirs``') in the round."""
        a, b = self.contenders[ours].round_per_second, self.contenders[theirs].round_per_second
        return statistics.median(x / y for x, y in zip(a, b, strict=True))

    def cpu_ratio(self, ours: str, theirs: str) -> float:
        """Median over rounds of (``ours``' CPU per append / ``theirs``') in the round."""
        a, b = self.contenders[ours].round_cpu_ms, self.contenders[theirs].round_cpu_ms
        return statistics.median(x / y for x, y in zip(a, b, strict=True))


@dataclass
class Seen:
    """The three sections' runs."""

    sizes: list[SeenRun] = field(default_factory=list)
    tasks: list[SeenRun] = field(default_factory=list)
    processes: list[SeenRun] = field(default_factory=list)


def seen_from_json(data: dict[str, Any] | None) -> Seen:
    if not data:
        return Seen()

    def run(item: dict[str, Any]) -> SeenRun:
        stats = {name: SeenStats(**value) for name, value in item["contenders"].items()}
        return SeenRun(item["section"], item["label"], item["content_bytes"], stats)

    return Seen(*([run(item) for item in data[name]] for name in ("sizes", "tasks", "processes")))


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class _Samples:
    def __init__(self) -> None:
        self.per_second: list[float] = []
        self.cpu_ms: list[float] = []
        self.latencies: list[float] = []
        self.errors = 0

    def stats(self) -> SeenStats:
        ordered = sorted(self.latencies) or [float("nan")]
        p50, p99 = _quantile(ordered, 0.5) * 1000, _quantile(ordered, 0.99) * 1000
        return SeenStats(self.per_second, self.cpu_ms, p50, p99, self.errors)

    def add_round(self, appended: int, seconds: float, cpu: float) -> None:
        """A round's throughput and CPU per append, of the appends that succeeded."""
        self.per_second.append(appended / seconds)
        self.cpu_ms.append(cpu / max(appended, 1) * 1000)


Appender = Callable[[str, str, Any], Awaitable[int]]


async def _timed_round(
    append: Appender, sessions: Sequence[str], appends: int, messages: Sequence[Any], samples: _Samples
) -> None:
    """One task per entry of ``sessions`` (repeated for a hot session), each appending
    ``appends`` messages; the round's throughput, CPU per append and latencies."""
    cursor = itertools.count()

    async def task(session_id: str) -> None:
        for _ in range(appends):
            message = messages[next(cursor) % len(messages)]
            start = time.perf_counter()
            try:
                await append(session_id, "bench", message)
            except Exception:  # counted and shown: what a user would see
                samples.errors += 1
                errors.append(1)
                continue
            samples.latencies.append(time.perf_counter() - start)

    errors: list[int] = []
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(task(session_id) for session_id in sessions))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    samples.add_round(appends * len(sessions) - len(errors), wall, cpu)


def _sessions(tasks: int, shared: bool) -> list[str]:
    run = uuid.uuid4().hex[:8]
    return [f"seen-{run}"] * tasks if shared else [f"seen-{run}-{task}" for task in range(tasks)]


async def measure_sizes(
    ledger: Appender,
    naive: Appender,
    tuned: Appender,
    labels: Sequence[str],
    rounds: int,
    appends: int,
    rng: random.Random,
) -> list[SeenRun]:
    """One task, one session per contender and size: ``rounds`` interleaved rounds of
    ``appends`` appends each (after a few untimed)."""
    contenders = {LEDGER: ledger, NAIVE: naive, TUNED: tuned}
    runs = []
    for label in labels:
        messages = contents(label)
        sessions = {name: _sessions(1, True) for name in contenders}
        samples = {name: _Samples() for name in contenders}
        for name, append in contenders.items():  # untimed: the first appends of a session
            for message in messages[:3]:
                await append(sessions[name][0], "bench", message)
        for _ in range(rounds):
            order = list(contenders)
            rng.shuffle(order)
            for name in order:
                await _timed_round(contenders[name], sessions[name], appends, messages, samples[name])
        runs.append(
            SeenRun(
                "size",
                label,
                content_bytes(messages),
                {name: samples[name].stats() for name in contenders},
            )
        )
    return runs


async def measure_tasks(
    ledger_url: URL,
    naive_url: URL,
    counts: Sequence[int],
    rounds: int,
    appends: int,
    rng: random.Random,
) -> list[SeenRun]:
    """``tasks`` tasks of this process appending the mix, to one session and each to
    its own, through chatledger and the naive floor, each with a pool of ``tasks``
    connections (no overflow). Every round opens each contender's engine, fills its
    pool with untimed appends, times both modes (in a shuffled order) and closes it,
    so that no more than one pool's connections are open at a time."""
    messages = contents(MIX)
    runs = []
    for tasks in counts:
        samples = {f"{kind}, {mode}": _Samples() for kind in (LEDGER, NAIVE) for mode in (HOT, OWN)}
        for _ in range(rounds):
            kinds = [LEDGER, NAIVE]
            rng.shuffle(kinds)
            for kind in kinds:
                store: Store | NaiveFloor
                if kind == LEDGER:
                    store = open_store("chatledger", ledger_url, {"pool_size": tasks, "max_overflow": 0})
                else:
                    store = NaiveFloor(naive_url, pool_size=tasks, sequence_base=10**9 * tasks)
                try:
                    warm = _sessions(tasks, False)
                    await asyncio.gather(
                        *(store.append(s, "bench", messages[0]) for s in warm), return_exceptions=True
                    )
                    modes = [HOT, OWN]
                    rng.shuffle(modes)
                    for mode in modes:
                        sessions = _sessions(tasks, mode == HOT)
                        await _timed_round(
                            store.append, sessions, appends, messages, samples[f"{kind}, {mode}"]
                        )
                finally:
                    await store.close()
        runs.append(
            SeenRun("tasks", str(tasks), content_bytes(messages), {k: v.stats() for k, v in samples.items()})
        )
    return runs


# -- processes ------------------------------------------------------------------------


def _worker(
    worker: int,
    ledger_url: str,
    naive_url: str,
    commands: Any,
    results: Any,
    barrier: Any,
) -> None:
    """A worker process: opens chatledger and the naive floor (one connection each),
    then per command ``(kind, session_id, appends)`` waits for every worker at the
    barrier, appends, and puts ``(latencies, cpu seconds, start, end)``
    (``time.monotonic``, the same clock in every process on Linux and macOS); ``None``
    ends it."""

    async def main() -> None:
        messages = contents(MIX)
        stores: dict[str, Store | NaiveFloor] = {
            LEDGER: open_store("chatledger", ledger_url, {"pool_size": 1, "max_overflow": 0}),
            NAIVE: NaiveFloor(naive_url, pool_size=1, sequence_base=10**12 * (worker + 1)),
        }
        try:
            for name, store in stores.items():
                await store.append(f"warm-{name}-{worker}-{uuid.uuid4().hex[:6]}", "bench", messages[0])
            results.put(("ready", worker))
            offset = worker * 7
            while True:
                command = await asyncio.to_thread(commands.get)
                if command is None:
                    return
                kind, session_id, appends = command
                await asyncio.to_thread(barrier.wait)
                append = stores[kind].append
                latencies = []
                errors = 0
                cpu, start = time.process_time(), time.monotonic()
                for number in range(appends):
                    message = messages[(offset + number) % len(messages)]
                    began = time.perf_counter()
                    try:
                        await append(session_id, "bench", message)
                    except Exception:  # counted and shown: what a user would see
                        errors += 1
                        continue
                    latencies.append(time.perf_counter() - began)
                end = time.monotonic()
                results.put((latencies, time.process_time() - cpu, start, end, errors))
        finally:
            for store in stores.values():
                await store.close()

    try:
        asyncio.run(main())
    except BaseException as error:  # the parent waits for a result: give it the error
        results.put(("error", f"worker {worker}: {type(error).__name__}: {error}"))
        raise


async def _collect(results: Any, workers: Sequence[Any]) -> list[Any]:
    """One result from each of ``workers``; raises when one failed or died."""
    got: list[Any] = []
    while len(got) < len(workers):
        with contextlib.suppress(queue.Empty):
            got.append(await asyncio.to_thread(results.get, True, 1.0))
            continue
        dead = [number for number, process in enumerate(workers) if process.exitcode not in (None, 0)]
        if dead and results.empty():
            raise RuntimeError(f"benchmark worker processes {dead} ended without reporting")
    errors = [item[1] for item in got if item[0] == "error"]
    if errors:
        raise RuntimeError("; ".join(errors))
    return got


async def measure_processes(
    ledger_url: URL,
    naive_url: URL,
    counts: Sequence[int],
    rounds: int,
    appends: int,
    rng: random.Random,
) -> list[SeenRun]:
    """``processes`` spawned processes of one task each appending the mix, to one
    shared session and each to its own, through chatledger and the naive floor, in
    interleaved rounds; the processes start each run together (a barrier) and live
    across the rounds."""
    context = multiprocessing.get_context("spawn")
    messages = contents(MIX)
    rendered = [url.render_as_string(hide_password=False) for url in (ledger_url, naive_url)]
    runs = []
    for processes in counts:
        commands = [context.Queue() for _ in range(processes)]
        results = context.Queue()
        barrier = context.Barrier(processes)
        workers = [
            context.Process(target=_worker, args=(w, *rendered, commands[w], results, barrier), daemon=True)
            for w in range(processes)
        ]
        for process in workers:
            process.start()

        samples = {f"{kind}, {mode}": _Samples() for kind in (LEDGER, NAIVE) for mode in (HOT, OWN)}
        try:
            await _collect(results, workers)  # every worker ready
            for _ in range(rounds):
                order = list(samples)
                rng.shuffle(order)
                for name in order:
                    kind = name.split(", ")[0]
                    sessions = _sessions(processes, name.endswith(HOT))
                    for worker in range(processes):
                        commands[worker].put((kind, sessions[worker], appends))
                    got = await _collect(results, workers)
                    seconds = max(item[3] for item in got) - min(item[2] for item in got)
                    failed = sum(item[4] for item in got)
                    samples[name].errors += failed
                    samples[name].add_round(
                        appends * processes - failed, seconds, sum(item[1] for item in got)
                    )
                    samples[name].latencies += [latency for item in got for latency in item[0]]
        finally:
            for command_queue in commands:
                command_queue.put(None)
            for process in workers:
                await asyncio.to_thread(process.join, 60)
                with contextlib.suppress(Exception):
                    if process.is_alive():
                        process.terminate()
        runs.append(
            SeenRun(
                "processes",
                str(processes),
                content_bytes(messages),
                {k: v.stats() for k, v in samples.items()},
            )
        )
    return runs
