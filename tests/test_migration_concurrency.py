"""Upgrades are serialised: of many processes (or stores of one process) upgrading one
empty database at once, through ``auto_upgrade``, ``chatledger upgrade`` or ``alembic
upgrade``, one runs the revisions and the others wait for it, see the new revision
and go on, also behind PgBouncer's transaction pooling. A lock held too long gives a
clear error."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection

from chatledger import SchemaNotReady, migrate
from chatledger.migrate import (
    SchemaState,
    database_state,
    head_revision,
    revisions,
    run_locked,
    upgrade_database,
)
from chatledger.tools.cli import run

from .conftest import Database
from .support.backends import Servers, fresh_name
from .support.migration_workers import UpgradeCounter, first_call, upgrade_at_once
from .support.schema_helpers import (
    BOOKKEEPING,
    SCHEMA_TABLES,
    drift,
    dsn_of,
    fresh_database,
    on_connection,
    table_names,
)
from .support.throwaway import ThrowawayPgBouncer, pgbouncer_missing, require, shared_server

PROCESSES = 8
#: Generous upper bound for "does not hang".
DEADLINE = 300


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path) as url:
        yield url


async def assert_upgraded_once(url: URL, upgrades: int) -> None:
    # Every shipped revision ran once, all of them by one of the upgraders.
    assert upgrades == len(list(ScriptDirectory.from_config(migrate.alembic_config()).walk_revisions()))
    head = head_revision()
    assert await database_state(url) == SchemaState(head, revisions().compatible_from[head])
    assert await on_connection(url, table_names) == SCHEMA_TABLES | BOOKKEEPING
    assert await on_connection(url, drift) == []


def run_processes(dsn: str, kinds: list[str]) -> list[tuple[str, str, int]]:
    """One spawned process per kind, released together by a barrier; their reports."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(kinds))
    results: Any = context.Queue()
    workers = [context.Process(target=upgrade_at_once, args=(kind, dsn, barrier, results)) for kind in kinds]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=DEADLINE) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    return reports


@pytest.mark.parametrize(
    "kinds",
    [
        ["auto_upgrade"] * PROCESSES,
        ["auto_upgrade"] * 3 + ["chatledger upgrade"] * 3 + ["alembic upgrade"] * 2,
    ],
    ids=["auto_upgrade", "mixed"],
)
async def test_processes_upgrading_at_once_upgrade_once(fresh_url: URL, kinds: list[str]) -> None:
    reports = await asyncio.to_thread(run_processes, dsn_of(fresh_url), kinds)
    assert sorted(kind for kind, _, _ in reports) == sorted(kinds)
    assert [outcome for _, outcome, _ in reports] == ["ok"] * len(kinds), reports
    await assert_upgraded_once(fresh_url, sum(upgrades for _, _, upgrades in reports))


async def test_stores_of_one_process_upgrading_at_once_upgrade_once(fresh_url: URL) -> None:
    """Stores on one event loop and on loops of other threads (as the rein store runs
    one): Alembic's process-wide context would mix their connections up."""
    counter = UpgradeCounter.install()
    try:
        dsn = dsn_of(fresh_url)
        threads = [asyncio.to_thread(asyncio.run, first_call(dsn)) for _ in range(2)]
        async with asyncio.timeout(DEADLINE):
            await asyncio.gather(*(first_call(dsn) for _ in range(4)), *threads)
    finally:
        logging.getLogger("alembic.runtime.migration").removeHandler(counter)
    await assert_upgraded_once(fresh_url, counter.upgrades)


async def test_schema_lock_held_too_long_gives_a_clear_error(fresh_url: URL) -> None:
    """Another process's migration holding the schema lock (here: a thread of this one,
    on a connection of its own) makes an upgrade wait, then give up with a message."""
    holding, release = threading.Event(), threading.Event()

    def hold(connection: Connection) -> None:
        holding.set()
        release.wait(DEADLINE)

    holder = threading.Thread(target=asyncio.run, args=(run_locked(fresh_url, hold),))
    holder.start()
    try:
        assert await asyncio.to_thread(holding.wait, DEADLINE)
        with pytest.raises(SchemaNotReady, match=r"waited 0.5 s for the schema lock") as raised:
            await upgrade_database(fresh_url, lock_timeout=0.5)
        assert "another process" in str(raised.value)
        assert await run(["upgrade", "--dsn", dsn_of(fresh_url), "--lock-timeout", "0.5"]) == 2
    finally:
        release.set()
        await asyncio.to_thread(holder.join, DEADLINE)
    assert await database_state(fresh_url) == SchemaState(None, None)
    assert await upgrade_database(fresh_url, lock_timeout=30) == head_revision()


@pytest.mark.parametrize("lock_timeout", [0, -1, float("nan"), float("inf")])
async def test_lock_timeout_must_be_positive(tmp_path: Path, lock_timeout: float) -> None:
    url = URL.create("sqlite+aiosqlite", database=str(tmp_path / "never.sqlite3"))
    with pytest.raises(ValueError, match="lock_timeout must be a positive number of seconds"):
        await upgrade_database(url, lock_timeout=lock_timeout)
    assert not (tmp_path / "never.sqlite3").exists()


async def test_processes_upgrading_at_once_behind_pgbouncer(servers: Servers) -> None:
    """The PostgreSQL lock is a transaction's (``pg_advisory_xact_lock``), so it holds
    behind PgBouncer's transaction pooling, where a session's lock would not."""
    require("postgresql", pgbouncer_missing())
    server = shared_server(servers, "postgresql")
    name = fresh_name("chatledger_mig")
    upstream = await server.create_database(name)
    bouncer = ThrowawayPgBouncer(upstream, pool_size=2)
    try:
        pooled = bouncer.url(name)
        reports = await asyncio.to_thread(
            run_processes, dsn_of(pooled), ["auto_upgrade behind pgbouncer"] * 4
        )
        assert [outcome for _, outcome, _ in reports] == ["ok"] * 4, reports
        await assert_upgraded_once(upstream, sum(upgrades for _, _, upgrades in reports))
    finally:
        bouncer.close()
        await server.drop_database(name)
