"""What chatledger's telemetry costs an append: without opentelemetry-api, with the API
and no SDK (OpenTelemetry's no-op providers), and with the SDK recording every span.

    python bench/telemetry_overhead.py [--rounds 9] [--calls 2000]

Each variant runs in a child interpreter of its own (the first blocks the
``opentelemetry`` import, as if it were not installed, so :mod:`chatledger.telemetry`
takes its no-op path at import). The children stay up and time their blocks of
appends in turns, in a shuffled order per round, so machine drift hits all alike. An
append is ``LedgerSessionStorage.append`` with its transaction replaced by a no-op,
as in bench/append_python.py: what is timed is the append's own Python (validation,
codec, the size check, the telemetry span), in CPU time of the thread
(``time.thread_time``). It prints the median per variant and the ratios to the first,
from this one run (docs/telemetry.md keeps a run's figures).
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys

CHILD = r"""
import asyncio, sys, tempfile, time
mode = sys.argv[1]
if mode == "without":
    sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
elif mode == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
from zett_agent.messages import UserMessage
from chatledger import telemetry
from chatledger.zett import LedgerSessionStorage
assert telemetry.ENABLED is (mode != "without")

async def main():
    with tempfile.TemporaryDirectory() as directory:
        storage = LedgerSessionStorage(f"sqlite:///{directory}/bench.sqlite3")
        await storage.count_messages("warm-up")  # migrates and reads the statement limit

        async def no_transaction(work, **_):
            return 1

        storage.ledger.write = no_transaction
        message = UserMessage(content="benchmark message 12345")
        for _ in range(200):
            await storage.append("bench-session", "bench", message)
        print("ready", flush=True)
        for line in sys.stdin:
            calls = int(line)
            start = time.thread_time()
            for _ in range(calls):
                await storage.append("bench-session", "bench", message)
            print((time.thread_time() - start) / calls * 1e6, flush=True)
            if mode == "sdk":
                exporter.clear()
        await storage.close()

asyncio.run(main())
"""

VARIANTS = {
    "without": "no opentelemetry-api (no-op path)",
    "api": "opentelemetry-api, no SDK (no-op providers)",
    "sdk": "SDK recording every span (in-memory exporter)",
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", CHILD, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for name in VARIANTS
    }
    try:
        for child in children.values():
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.rounds):
            order = list(VARIANTS)
            random.shuffle(order)
            for name in order:
                child = children[name]
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write(f"{args.calls}\n")
                child.stdin.flush()
                times[name].append(float(child.stdout.readline()))
    finally:
        for child in children.values():
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=60)
    base = statistics.median(times["without"])
    print(f"append's Python per call, median of {args.rounds} rounds of {args.calls} (CPU time):")
    for name, label in VARIANTS.items():
        median = statistics.median(times[name])
        print(f"  {label:50} {median:7.1f} us   x{median / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
