"""The append's Python time per call: a micro-benchmark that holds still on a busy machine.

    python bench/append_python.py [--dsn DSN ...]

1. **Before the transaction**: ``LedgerSessionStorage.append`` with its transaction
   replaced by a no-op, so what is timed is the append's own Python: validation, zett's
   codec and the read-back check, the row, the size check. CPU time of the thread
   (``time.thread_time``), best and median of 9 runs of 3,000 calls, for a user
   message and for an assistant message with a tool call.
2. With ``--dsn`` (admin DSNs, as for ``chatledger bench``): real appends into fresh
   databases, chatledger and the bench's floor alternating in blocks of 100, and the
   CPU time of the event loop's thread per append (the store, SQLAlchemy, the
   driver's client side), p50 of each and their difference, next to the wall p50s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from typing import Any

from zett_agent.messages import AssistantMessage, ToolCall, UserMessage

from chatledger.dsn import resolve_dsn
from chatledger.migrate import upgrade_database
from chatledger.tools.bench.workloads import Floor, fresh_databases
from chatledger.zett import LedgerSessionStorage

MESSAGES = {
    "user message": UserMessage(content="benchmark message 12345"),
    "assistant + tool call": AssistantMessage(
        content="let me look", tool_calls=(ToolCall("c1", "grep", {"pattern": "x", "path": "/src"}),)
    ),
}


async def before_the_transaction() -> None:
    with tempfile.TemporaryDirectory() as directory:
        storage = LedgerSessionStorage(f"sqlite:///{directory}/python.sqlite3")
        await storage.count_messages("warm-up")  # migrates and reads the statement limit

        async def no_transaction(work: Any, **_: Any) -> int:
            return 1

        storage.ledger.write = no_transaction  # type: ignore[method-assign]
        for name, message in MESSAGES.items():
            runs = []
            for _ in range(9):
                start = time.thread_time()
                for _ in range(3000):
                    await storage.append("append-python-1a2b3c4d", "bench", message)
                runs.append((time.thread_time() - start) / 3000 * 1e6)
            best, median = min(runs), statistics.median(runs)
            print(f"before the transaction, {name}: best {best:.1f} us, median {median:.1f} us")
        await storage.close()


async def loop_thread(dsn: str, appends: int) -> None:
    admin = resolve_dsn(dsn)
    async with fresh_databases(admin) as databases:
        await upgrade_database(databases.ledger)
        storage = LedgerSessionStorage(databases.ledger)
        floor = Floor(databases.floor)
        await floor.create_table()
        contenders = {"chatledger": storage.append, "floor": floor.append}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        try:
            for append in contenders.values():  # warm-up: connections, caches
                for number in range(200):
                    await append("s", "bench", UserMessage(content=f"warm-up {number}"))
            for block in range(appends // 100):
                order = list(contenders) if block % 2 else list(reversed(contenders))
                for name in order:
                    for number in range(100):
                        message = UserMessage(content=f"benchmark message {block} {number}")
                        wall, cpu = time.perf_counter(), time.thread_time()
                        await contenders[name]("s", "bench", message)
                        samples[name].append((time.perf_counter() - wall, time.thread_time() - cpu))
        finally:
            await storage.close()
            await floor.close()
    cpu = {name: statistics.median(c for _, c in values) * 1e6 for name, values in samples.items()}
    wall = {name: statistics.median(w for w, _ in values) * 1e3 for name, values in samples.items()}
    backend = admin.get_backend_name()
    for name in contenders:
        print(f"{backend} {name}: event loop thread CPU p50 {cpu[name]:.0f} us, wall p50 {wall[name]:.2f} ms")
    print(f"{backend} chatledger - floor: CPU {cpu['chatledger'] - cpu['floor']:.0f} us per append")


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", action="append", default=[], help="admin DSN, repeatable")
    parser.add_argument("--appends", type=int, default=3000, help="appends per contender and DSN")
    args = parser.parse_args(argv)
    await before_the_transaction()
    for dsn in args.dsn:
        await loop_thread(dsn, args.appends)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
