"""The benchmark's load as agents use it: the first load of a session, and its reload
after the messages of one turn, each against the floor (see :mod:`chatledger.tools.bench`).

zett-agent loads the checkpoint and tail of a session at the start of every request,
so a storage loads the same session again and again, a few messages longer each
time. Per session (each one seeded with ``count`` raw messages and no checkpoint,
used for one pair of samples):

* **cold**: the first load of the session by the storage; timed beside a floor read
  of the same rows, in a shuffled order;
* the storage appends ``appends`` messages (untimed), as the agent's turn does;
* **warm**: the reload, timed beside a floor read of the now longer tail.

**The floor** is a bare ``SELECT`` of the session's raw-message rows in sequence
order -- the columns chatledger's load reads -- through SQLAlchemy Core on
chatledger's async driver and engine settings, in a connection of its own: no
counter row, no checkpoint, no transaction of its own, no decoding. Sessions of the
sizes alternate in a shuffled order so that machine drift hits every size alike.

Each call's time inside the driver (SQLAlchemy's ``before_cursor_execute`` to
``after_cursor_execute``: the statement and, on these async drivers, fetching its
rows) is recorded too, so that a missed goal comes with where the time went.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, event, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from ...engine import Ledger
from ...schema import raw_messages_table

#: The four measurements per size, in table order.
KINDS = ("cold", "cold floor", "warm", "warm floor")


@dataclass
class LatencyStats:
    """Timings of one kind of call, in milliseconds."""

    median_ms: float
    p95_ms: float
    samples: int
    #: Median time inside the driver's statement calls (execute and fetch).
    driver_ms: float
    #: Median number of statements sent per call.
    statements: float


class StatementClock:
    """Time spent inside the driver by one engine's statements, and their number."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine.sync_engine
        self._started: float | None = None
        self.seconds = 0.0
        self.count = 0
        event.listen(self._engine, "before_cursor_execute", self._before)
        event.listen(self._engine, "after_cursor_execute", self._after)

    def _before(self, *_: Any) -> None:
        self._started = time.perf_counter()

    def _after(self, *_: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self.count += 1
            self._started = None

    def reset(self) -> None:
        self.seconds, self.count = 0.0, 0

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._before)
        event.remove(self._engine, "after_cursor_execute", self._after)


class LoadFloor:
    """The floor of a load (see the module docstring) on the database ``url`` names."""

    def __init__(self, url: URL) -> None:
        from ...zett.codec import RECORD_COLUMNS  # the columns chatledger's load reads

        self._ledger = Ledger(url)
        self.engine = self._ledger.engine
        self._statement = (
            select(*RECORD_COLUMNS)
            .where(raw_messages_table.c.session_id == bindparam("session_id"))
            .order_by(raw_messages_table.c.sequence)
        )

    async def load(self, session_id: str) -> int:
        """Read the session's rows; return how many there were."""
        async with self.engine.connect() as conn:
            return len((await conn.execute(self._statement, {"session_id": session_id})).all())

    async def close(self) -> None:
        await self._ledger.close()


def _p95(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _stats(samples: Sequence[tuple[float, float, int]]) -> LatencyStats:
    seconds = [sample[0] for sample in samples]
    return LatencyStats(
        median_ms=statistics.median(seconds) * 1000,
        p95_ms=_p95(seconds) * 1000,
        samples=len(samples),
        driver_ms=statistics.median(sample[1] for sample in samples) * 1000,
        statements=statistics.median(sample[2] for sample in samples),
    )


async def measure_agent_loads(
    storage: Any,
    floor: LoadFloor,
    sessions: dict[int, list[str]],
    appends: int,
    rng: random.Random,
    check: Callable[[bool, str], None],
) -> dict[str, dict[str, LatencyStats]]:
    """Cold and warm loads of ``sessions`` (message count -> ids of seeded sessions of
    that many raw messages, no checkpoint, never loaded by ``storage``) against the
    floor; ``appends`` messages are appended by ``storage`` between the two loads.

    Returns message count (as text) -> kind (:data:`KINDS`) -> stats. ``check`` stops
    the benchmark when a load does not return the rows it should.
    """
    from zett_agent.messages import UserMessage

    storage_clock, floor_clock = StatementClock(storage.ledger.engine), StatementClock(floor.engine)
    samples: dict[tuple[int, str], list[tuple[float, float, int]]] = {}

    async def timed(count: int, kind: str, call: Callable[[], Awaitable[Any]]) -> Any:
        clock = floor_clock if kind.endswith("floor") else storage_clock
        clock.reset()
        start = time.perf_counter()
        result = await call()
        elapsed = time.perf_counter() - start
        samples.setdefault((count, kind), []).append((elapsed, clock.seconds, clock.count))
        return result

    async def pair(count: int, kind: str, session_id: str, expected: int) -> None:
        calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            (kind, lambda: storage.load(session_id)),
            (f"{kind} floor", lambda: floor.load(session_id)),
        ]
        rng.shuffle(calls)
        for name, call in calls:
            result = await timed(count, name, call)
            got = result if isinstance(result, int) else len(result.raw_tail)
            check(got == expected, f"{name} load of a {count}-message session gave {got} messages")

    try:
        await storage.count_messages("warm-up")  # connects and checks the schema, untimed
        await floor.load("warm-up")
        rounds = max(len(ids) for ids in sessions.values())
        for index in range(rounds):
            order = [count for count, ids in sessions.items() if index < len(ids)]
            rng.shuffle(order)
            for count in order:
                session_id = sessions[count][index]
                await pair(count, "cold", session_id, count)
                for number in range(appends):
                    await storage.append(session_id, "bench", UserMessage(content=f"turn message {number}"))
                await pair(count, "warm", session_id, count + appends)
    finally:
        storage_clock.close()
        floor_clock.close()
    return {
        str(count): {kind: _stats(samples[(count, kind)]) for kind in KINDS} for count in sorted(sessions)
    }


def breakdown(stats: dict[str, LatencyStats], kind: str) -> str:
    """Where the median of ``kind`` (cold / warm) and of its floor went, measured."""
    ours, floor = stats[kind], stats[f"{kind} floor"]
    return (
        f"{kind} load {ours.median_ms:.2f} ms = {ours.driver_ms:.2f} ms in the driver "
        f"({ours.statements:g} statements) + {ours.median_ms - ours.driver_ms:.2f} ms in Python "
        f"(transaction, result rows, decoding); floor {floor.median_ms:.2f} ms = "
        f"{floor.driver_ms:.2f} ms in the driver ({floor.statements:g} statement) + "
        f"{floor.median_ms - floor.driver_ms:.2f} ms in Python (result rows)"
    )
