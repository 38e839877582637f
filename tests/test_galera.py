"""chatledger on a 3-node MariaDB Galera cluster (local processes, ``tests/support/galera.py``).

Galera replicates every commit to all nodes before acknowledging it (certification:
a write set that conflicts with one certified first is rolled back with error
1213, which chatledger retries), but the other nodes apply it afterwards. So:

- appends spread over the nodes are whole: no error, gap, duplicate or lost
  acknowledgement, every node holds the same rows;
- the append keeps its two statements, never revisions 0008's and 0010's procedures
  (Galera's abort of a transaction inside a stored procedure is not handled as for
  statements);
- a snapshot race has exactly one winner cluster-wide;
- reads are causal only with ``wsrep_sync_wait`` (set per connection by
  :func:`chatledger.dialects.configure_galera`): a load or list on any node sees
  every append acknowledged before it on any node;
- a killed node's clients get ``StorageUnavailable``, the others go on, nothing
  acknowledged is lost, and the node rejoins.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest
from rich.console import Console
from sqlalchemy import text
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import StorageUnavailable
from chatledger.migrate import upgrade_database
from chatledger.tools.cli import run
from chatledger.tools.stress import run_stress
from chatledger.zett import LedgerSessionStorage

from .support.backends import Server, fresh_name
from .support.galera import GaleraCluster, galera_cluster
from .support.race_workers import snapshot_at
from .support.throwaway import ledger_state

pytestmark = pytest.mark.galera

#: Tries of "append on node 1, read on node 3 at once".
CAUSAL_TRIES = 2000
#: The retry budget of the surviving nodes' clients when a node is killed.
SURVIVOR_BUDGET = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    with galera_cluster() as started:
        yield started


@pytest.fixture
async def nodes(cluster: GaleraCluster) -> AsyncIterator[list[URL]]:
    """A fresh migrated database (created through node 1, replicated), as each node's URL."""
    name = fresh_name("chatledger_galera")
    first = Server("mysql", cluster.urls[0])
    await first.create_database(name)
    try:
        await upgrade_database(first.database_url(name))
        yield [url.set(database=name) for url in cluster.urls]
    finally:
        with contextlib.suppress(Exception):
            await first.drop_database(name)


def _dsn(url: URL) -> str:
    return url.render_as_string(hide_password=False)


async def test_sync_wait_is_set_on_galera_connections(nodes: list[URL]) -> None:
    async with LedgerSessionStorage(nodes[2]) as storage:
        value = await storage.ledger.read(lambda conn: conn.scalar(text("SELECT @@session.wsrep_sync_wait")))
    assert int(value) & 1


async def test_appends_keep_their_two_statements_on_galera(nodes: list[URL]) -> None:
    async with LedgerSessionStorage(nodes[0]) as storage:
        assert await storage.append(fresh_name("two"), "r", UserMessage(content="one")) == 1
        assert storage.ledger.backend.counted_append is not None
        assert storage.ledger.append_message is storage.ledger.backend.append_message
        # Nor revision 0010's, which commits inside the procedure.
        assert storage.ledger.backend.single_append is not None
        assert storage.ledger.single_append is None


async def test_appends_spread_over_the_nodes_are_whole(nodes: list[URL]) -> None:
    """9 processes x 40 appends to one session, 3 per node, each append read back at
    once through the next node."""
    report = await run_stress([_dsn(url) for url in nodes], processes=9, appends=40, own_sessions=False)
    assert report.errors == 0, report.error_samples
    assert report.acknowledged == 9 * 40
    assert (report.gaps, report.duplicates, report.lost) == (0, 0, 0)
    assert (report.disagreeing_nodes, report.unreachable_nodes) == (0, 0)
    assert report.causal_reads == report.acknowledged and report.causal_misses == 0


async def test_snapshot_race_has_one_winner_cluster_wide(nodes: list[URL], session_id: str) -> None:
    async with LedgerSessionStorage(nodes[0]) as storage:
        for index in range(10):
            await storage.append(session_id, "r", UserMessage(content=f"m{index}"))
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=9, mp_context=context) as pool:
        start = manager.Barrier(9, timeout=120)  # the racers start together, each once connected
        futures = [
            pool.submit(snapshot_at, _dsn(nodes[worker % 3]), session_id, 2 + worker % 8, start)
            for worker in range(9)
        ]
        outcomes = [future.result(timeout=180) for future in futures]
    assert sorted(outcomes) == ["conflict"] * 8 + ["ok"]
    views = []
    for url in nodes:
        async with LedgerSessionStorage(url) as storage:
            views.append(await storage.load(session_id))
    assert all(view.snapshot is not None and view.snapshot.version == 1 for view in views)
    assert len({view.snapshot.compacted_through_sequence for view in views if view.snapshot}) == 1


async def test_reads_on_another_node_see_every_acknowledged_append(nodes: list[URL]) -> None:
    """Append on node 1, then at once a load (even tries) or a list (odd tries) on node 3."""
    misses = []
    async with LedgerSessionStorage(nodes[0]) as writer, LedgerSessionStorage(nodes[2]) as reader:
        for attempt in range(CAUSAL_TRIES):
            session = f"causal-{attempt // 50}"  # short sessions keep each load small
            content = f"try {attempt}"
            sequence = await writer.append(session, "r", UserMessage(content=content))
            if attempt % 2 == 0:
                view = await reader.load(session)
                seen = [record.message for record in view.raw_tail if record.sequence == sequence]
            else:
                records = await reader.list_raw_messages(session, after_sequence=sequence - 1)
                seen = [record.message for record in records]
            if [getattr(message, "content", None) for message in seen] != [content]:
                misses.append(attempt)
    assert misses == []


async def test_killed_node_clients_fail_others_go_on_nothing_lost_node_rejoins(
    cluster: GaleraCluster, nodes: list[URL], session_id: str
) -> None:
    acked: list[list[tuple[int, str]]] = [[], [], []]
    errors: list[list[BaseException]] = [[], [], []]
    killed_at: list[int] = [0, 0, 0]
    stop = asyncio.Event()
    killed, survivors_went_on = asyncio.Event(), asyncio.Event()

    async def writer(node: int, storage: LedgerSessionStorage) -> None:
        index = 0
        while not stop.is_set():
            content = f"node{node + 1}-{index}"
            index += 1
            try:
                sequence = await storage.append(session_id, "r", UserMessage(content=content))
                acked[node].append((sequence, content))
                if killed.is_set() and all(len(acked[other]) > killed_at[other] for other in (0, 1)):
                    survivors_went_on.set()
            except Exception as error:
                errors[node].append(error)
            # Paced as a service's requests are: three writers in a tight loop on one
            # session would keep failing each other's certification.
            await asyncio.sleep(0.02)

    async with contextlib.AsyncExitStack() as stack:
        # The survivors' budget outlasts the cluster's view change after the kill (their
        # certification conflicts are retried); the killed node's clients give up soon,
        # with the documented error, rather than waiting for it to rejoin.
        storages = [
            await stack.enter_async_context(
                LedgerSessionStorage(url, pool_timeout=5, retry_timeout=2 if node == 2 else SURVIVOR_BUDGET)
            )
            for node, url in enumerate(nodes)
        ]
        for storage in storages:
            await storage.ledger.ensure_ready()
        tasks = [asyncio.create_task(writer(node, storage)) for node, storage in enumerate(storages)]
        try:
            await asyncio.sleep(1.5)
            await asyncio.to_thread(cluster.kill, 2)
            killed_at[:] = [len(done) for done in acked]
            killed.set()
            await asyncio.to_thread(cluster.wait_for_size, 2)
            await asyncio.sleep(1.5)
            # A survivor's append caught in the view change may stall until its
            # attempt's deadline (a third of its budget) abandons it and a retry goes
            # on: wait for that, within the survivors' budget, before the rejoin.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(survivors_went_on.wait(), SURVIVOR_BUDGET)
            during = [len(done) for done in acked]
            await asyncio.to_thread(cluster.rejoin, 2)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    # The killed node's client got the documented error, and only that.
    assert errors[2], "the killed node's writer saw no error"
    others = [error for error in errors[2] if not isinstance(error, StorageUnavailable)]
    assert others == [], others[:3]
    # The others went on: no error, and appends acknowledged while node 3 was down.
    assert errors[0] == [] and errors[1] == [], (errors[0][:3], errors[1][:3])
    assert during[0] > killed_at[0] and during[1] > killed_at[1]
    # Nothing acknowledged is lost, on any node, the rejoined one included.
    expected = {sequence: content for done in acked for sequence, content in done}
    for url in nodes:
        async with LedgerSessionStorage(url) as storage:
            state = await ledger_state(storage, session_id)
            assert state.consistent, state
            records = await storage.list_raw_messages(session_id, limit=10**6)
        stored = {record.sequence: getattr(record.message, "content", None) for record in records}
        assert {sequence: stored.get(sequence) for sequence in expected} == expected
    assert cluster.nodes[2].status("wsrep_local_state_comment") == "Synced"


async def test_stress_command_reports_the_cluster(
    nodes: list[URL], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["stress", "--cluster", "--processes", "3", "--appends", "10", "--shared-only"]
    for url in nodes:
        argv += ["--dsn", _dsn(url)]
    assert await run(argv, Console(width=120, highlight=False)) == 0
    out = capsys.readouterr().out
    rows = [
        [cell.strip() for cell in line.split("│") if cell.strip()] for line in out.splitlines() if "│" in line
    ]
    # backend, appends/s, acknowledged, errors, retries, gaps, duplicates, lost
    assert rows[0][0] == "mysql" and rows[0][2:4] == ["30", "0"] and rows[0][5:] == ["0", "0", "0"]
    # nodes, causal reads, causal misses, errors per node, disagreeing, unreachable
    assert rows[1] == ["3", "30", "0", "0/0/0", "0", "0"]


async def test_stress_cluster_needs_every_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["stress", "--cluster", "--dsn", "mysql://root@127.0.0.1:1/x"]) == 2
    assert "--cluster needs the DSN of every node" in capsys.readouterr().err
