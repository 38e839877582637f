"""chatledger's ADK session service beside ADK's own ``DatabaseSessionService``.

    python bench/adk_services.py --dsn postgresql://postgres@127.0.0.1/postgres \\
        --dsn mysql://root@127.0.0.1/mysql --dsn sqlite:///tmp/ [--events 600]

Per admin DSN (as for ``chatledger bench``): two fresh databases, one per service, and
on each the same operations, the services alternating in blocks of 50: wall time p50
of ``append_event`` (one event with a ``user:`` state delta, from the ``Session`` the
last append returned), then of ``get_session`` of the whole session (``--events``
events) and of its newest 20 events. Figures only; no assertion on them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService

from chatledger.adk import LedgerSessionService
from chatledger.dsn import resolve_dsn
from chatledger.migrate import upgrade_database
from chatledger.testing.adk import event
from chatledger.tools.bench.workloads import fresh_databases

BLOCK = 50


async def _p50(call: Callable[[], Awaitable[Any]], times: int) -> float:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


async def compare(dsn: str, events: int) -> None:
    admin = resolve_dsn(dsn)
    async with fresh_databases(admin) as databases:
        await upgrade_database(databases.ledger)
        services: dict[str, BaseSessionService] = {
            "chatledger": LedgerSessionService(databases.ledger),
            # The floor's database, with chatledger's async driver: ADK makes its tables there.
            "adk": DatabaseSessionService(db_url=databases.floor.render_as_string(hide_password=False)),
        }
        sessions = {
            name: await service.create_session(app_name="bench", user_id="u", session_id="s")
            for name, service in services.items()
        }
        appends: dict[str, list[float]] = {name: [] for name in services}
        try:
            for block in range(events // BLOCK):
                for name in list(services) if block % 2 else list(reversed(services)):
                    for number in range(BLOCK):
                        item = event(f"benchmark event {block} {number}", {"user:n": number})
                        start = time.perf_counter()
                        await services[name].append_event(sessions[name], item)
                        appends[name].append(time.perf_counter() - start)
            backend = admin.get_backend_name()
            for name, service in services.items():
                whole = await _p50(
                    lambda service=service: service.get_session(
                        app_name="bench", user_id="u", session_id="s"
                    ),
                    9,
                )
                recent = await _p50(
                    lambda service=service: service.get_session(
                        app_name="bench",
                        user_id="u",
                        session_id="s",
                        config=GetSessionConfig(num_recent_events=20),
                    ),
                    25,
                )
                print(
                    f"{backend} {name}: append_event p50 {statistics.median(appends[name]) * 1e3:.2f} ms, "
                    f"get_session ({events} events) p50 {whole:.1f} ms, newest 20 p50 {recent:.2f} ms"
                )
        finally:
            for service in services.values():
                await service.close()  # type: ignore[attr-defined]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", action="append", default=[], help="admin DSN, repeatable")
    parser.add_argument("--events", type=int, default=600, help="events per service and DSN")
    args = parser.parse_args(argv)
    for dsn in args.dsn or ["sqlite:///"]:
        await compare(dsn, args.events)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
