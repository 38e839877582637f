"""Reads on replicas (``read_dsn``, :mod:`chatledger.replicas`) of local processes
(``tests/support/replicas.py``): a PostgreSQL 15 primary with two streaming standbys
(marked ``failover``, the PostgreSQL HA step) and a MariaDB primary with two GTID
replicas (marked ``galera``, the MariaDB cluster step).

- ``load``, ``list`` and ``get`` read on the replicas, in turn;
- a session this process wrote is read only once the replica has applied the write,
  else on the primary: with a replica's replay paused, the read still holds the write
  (and a reader that was not told the write reads the stale replica);
- the causal check: 2,000 times, the test process appends and a reader process, told
  the write's position, loads the session from a replica: 0 stale reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from rein import Session as ReinSession
from sqlalchemy import text
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import ConfigurationError
from chatledger.engine import Ledger
from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.tools.bench.replicas import measure_replica_loads
from chatledger.zett import LedgerSessionStorage

from .support.backends import Server, fresh_name
from .support.replica_workers import read_told_writes
from .support.replicas import Replicated, replicated
from .support.throwaway import SERVER_TIMEOUT

#: Tries of "append, then load from a replica in another process".
CAUSAL_TRIES = 2000

BACKENDS = [
    pytest.param("postgresql", marks=pytest.mark.failover, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.galera, id="mariadb"),
]


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(request: pytest.FixtureRequest) -> Iterator[Replicated]:
    with replicated(request.param, count=2) as started:
        yield started


@dataclass(frozen=True)
class Database:
    """A fresh migrated database on the primary, replicated: its URLs."""

    primary: str
    replicas: list[str]


def _dsn(url: URL) -> str:
    return url.render_as_string(hide_password=False)


async def _caught_up(primary: URL, replica: URL) -> None:
    """Wait until a replica has applied everything the primary holds (the migration)."""
    deadline = time.monotonic() + SERVER_TIMEOUT
    while True:
        ledger = Ledger(primary, read_dsn=_dsn(replica), replica_wait=SERVER_TIMEOUT)
        try:
            # A write of nothing still reads the primary's position after its COMMIT.
            await ledger.write(lambda conn: conn.scalar(text("SELECT 1")), session="caught-up")
            await ledger.read(lambda conn: conn.scalar(text("SELECT 1")), replica=True, session="caught-up")
            assert ledger.replica_reads.served == 1, f"{replica} did not catch up within {SERVER_TIMEOUT} s"
            return
        except ConfigurationError:
            # PostgreSQL: the database itself not yet replayed on the replica, so there
            # is no connecting to it to wait there.
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
        finally:
            await ledger.close()


@pytest.fixture
async def database(cluster: Replicated) -> AsyncIterator[Database]:
    name = fresh_name("chatledger_replicas")
    primary = Server(cluster.primary.backend, cluster.primary.admin_url)
    await primary.create_database(name)
    try:
        await upgrade_database(primary.database_url(name))
        replicas = [replica.admin_url.set(database=name) for replica in cluster.replicas]
        for url in replicas:
            await _caught_up(primary.database_url(name), url)
        yield Database(_dsn(primary.database_url(name)), [_dsn(url) for url in replicas])
    finally:
        with contextlib.suppress(Exception):
            await primary.drop_database(name)


@contextlib.contextmanager
def paused(cluster: Replicated, index: int) -> Iterator[None]:
    cluster.pause(index)
    try:
        yield
    finally:
        cluster.resume(index)


async def test_load_list_and_get_read_on_the_replicas(database: Database) -> None:
    """200 appends, each loaded at once: every load holds its append, and the replicas
    (in turn) served reads."""
    async with LedgerSessionStorage(database.primary, read_dsn=database.replicas) as storage:
        for index in range(200):
            session_id = f"s-{index % 5}"
            sequence = await storage.append(session_id, "r", UserMessage(content=f"m{index}"))
            view = await storage.load(session_id)
            assert view.raw_tail[-1].sequence == sequence
            assert view.raw_tail[-1].message.content == f"m{index}"
        summary = await storage.get_session("s-4")
        assert summary is not None and summary.message_count == 40
        listed = {found.session_id for found in await storage.list_sessions()}
        assert listed == {f"s-{index}" for index in range(5)}
        assert storage.ledger.replica_reads.served > 0


async def test_a_replica_behind_leaves_the_read_to_the_primary(
    cluster: Replicated, database: Database
) -> None:
    """One replica, its replay paused: a load of a session just written waits
    ``replica_wait`` and reads the primary; a reader told nothing reads the replica,
    which lacks the write (so the first read did not see it by chance)."""
    one = database.replicas[:1]
    async with (
        LedgerSessionStorage(database.primary, read_dsn=one, replica_wait=0.2) as writer,
        LedgerSessionStorage(database.primary, read_dsn=one) as stranger,
    ):
        await writer.append("paused", "r", UserMessage(content="before"))
        assert (await writer.load("paused")).raw_tail[-1].message.content == "before"
        with paused(cluster, 0):
            await writer.append("paused", "r", UserMessage(content="while paused"))
            fell_back = writer.ledger.replica_reads.fell_back
            assert (await writer.load("paused")).raw_tail[-1].message.content == "while paused"
            assert writer.ledger.replica_reads.fell_back == fell_back + 1
            assert (await stranger.load("paused")).raw_tail[-1].message.content == "before"
            # Told the write's position, the other reader waits for it as well.
            position = writer.write_position("paused")
            assert position is not None
            stranger.remember_write("paused", position)
            assert (await stranger.load("paused")).raw_tail[-1].message.content == "while paused"


async def test_rein_loads_and_lists_on_the_replicas(database: Database) -> None:
    async with LedgerSessionStore(database.primary, read_dsn=database.replicas) as store:
        for version in range(1, 21):
            await store.asave("rein-1", ReinSession(iteration=version))
            loaded = await store.aload_versioned("rein-1")
            assert loaded is not None and loaded.version == version
        assert [info.id for info in await store.alist_sessions()] == ["rein-1"]
        assert store.ledger.replica_reads.served > 0


async def test_causal_reads_across_processes(database: Database) -> None:
    """The causal check: this process appends, a reader process told each write's
    position loads the session from a replica at once: 0 stale reads in 2,000."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    reader = context.Process(target=read_told_writes, args=(theirs, database.primary, database.replicas))
    reader.start()
    try:
        assert await asyncio.to_thread(ours.poll, SERVER_TIMEOUT) and ours.recv() == "ready"
        async with LedgerSessionStorage(database.primary, read_dsn=database.replicas) as writer:
            started = time.monotonic()
            for index in range(CAUSAL_TRIES):
                session_id = f"causal-{index % 8}"
                content = f"{index}-{uuid.uuid4().hex[:8]}"
                await writer.append(session_id, "w", UserMessage(content=content))
                ours.send((session_id, writer.write_position(session_id), content))
                assert await asyncio.to_thread(ours.poll, SERVER_TIMEOUT)
                ours.recv()
            ours.send(None)
            stale, served, fell_back, mean_wait = ours.recv()
        elapsed = time.monotonic() - started
        print(
            f"\ncausal check: {CAUSAL_TRIES} tries in {elapsed:.1f} s, {stale} stale; "
            f"{served} loads served by a replica, {fell_back} by the primary; "
            f"mean wait for the replica {mean_wait * 1000:.1f} ms"
        )
        assert stale == 0
        assert served + fell_back == CAUSAL_TRIES
        assert served > 0
    finally:
        reader.join(timeout=30)
        if reader.is_alive():
            reader.kill()


async def test_the_bench_measures_loads_on_0_1_and_2_replicas(cluster: Replicated) -> None:
    loads = await measure_replica_loads(
        cluster.primary.admin_url, [replica.admin_url for replica in cluster.replicas], processes=2, loads=20
    )
    assert loads.note == ""
    assert [run.replicas for run in loads.runs] == [0, 1, 2]
    assert loads.runs[0].served == 0
    assert all(run.served >= run.loads and run.fell_back == 0 for run in loads.runs[1:])
    assert all(run.per_second > 0 for run in loads.runs)
