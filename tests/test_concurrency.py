"""Several processes sharing one store: appends from many processes, racing snapshots."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
from sqlalchemy import text
from zett_agent.messages import UserMessage

from chatledger.tools.stress import run_stress
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.race_workers import snapshot_at

PROCESSES = 8


async def test_processes_append_to_shared_and_own_sessions(database: Database) -> None:
    report = await run_stress(
        database.url.render_as_string(hide_password=False), processes=PROCESSES, appends=25
    )
    assert report.errors == 0, report.error_samples
    assert report.acknowledged == PROCESSES * 25 * 2
    assert (report.gaps, report.duplicates, report.lost) == (0, 0, 0)


async def test_racing_snapshots_one_wins_and_loads_never_see_half(
    storage: LedgerSessionStorage, database: Database, session_id: str
) -> None:
    for index in range(10):
        await storage.append(session_id, "r", UserMessage(content=f"m{index}"))
    dsn = database.url.render_as_string(hide_password=False)
    views = []
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=6, mp_context=context) as pool:
        # Six racers and this watcher start together, each once connected.
        start = manager.Barrier(7, timeout=120)
        futures = [
            asyncio.wrap_future(pool.submit(snapshot_at, dsn, session_id, 2 + worker, start))
            for worker in range(6)
        ]
        await asyncio.to_thread(start.wait)
        racing = asyncio.gather(*futures)
        while not racing.done():
            views.append(await storage.load(session_id))
            await asyncio.sleep(0.005)
        outcomes = await asyncio.wait_for(racing, 120)
    assert sorted(outcomes) == ["conflict"] * 5 + ["ok"]
    for view in views:
        if view.snapshot is None:
            assert [record.sequence for record in view.raw_tail] == list(range(1, 11))
        else:
            assert view.snapshot.version == 1
            boundary = view.snapshot.compacted_through_sequence
            assert [record.sequence for record in view.raw_tail] == list(range(boundary + 1, 11))
    final = await storage.load(session_id)
    assert final.snapshot is not None and final.snapshot.version == 1


@pytest.mark.requires("serializable_default")
async def test_serializable_mode_is_in_force(storage: LedgerSessionStorage) -> None:
    """CI runs the suite a second time with the PostgreSQL database defaulting to SERIALIZABLE."""
    level = await storage.ledger.write(lambda conn: conn.scalar(text("SHOW transaction_isolation")))
    assert level == "serializable"


async def test_concurrent_tasks_in_one_process(storage: LedgerSessionStorage, session_id: str) -> None:
    sequences = await asyncio.gather(
        *(storage.append(session_id, "r", UserMessage(content=str(index))) for index in range(40))
    )
    assert sorted(sequences) == list(range(1, 41))
