"""Faults: what a store shared across services must survive.

* A writer killed with SIGKILL inside its append transaction leaves no partial row:
  the counter row never drifts from the stored messages (all three backends).
* The database server restarts mid-run: a write caught in its COMMIT without a way
  to look it up fails with ``OutcomeUnknown`` (never a raw driver exception); every
  other call -- appends in flight, a load started while the server is down -- is
  retried within the retry budget and succeeds once the server is back (a pooled
  connection the restart killed fails before any COMMIT and is replaced), and every
  acknowledged append survives with its sequence, once. Run on a throwaway
  PostgreSQL and MariaDB (:mod:`tests.support.throwaway`), never on the shared servers other
  tests use; both a clean shutdown and a crash.
* An exhausted pool gives a clear timeout error.

The long ones are marked ``faults``; ``.ci/run`` runs them as their own step.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.messages import UserMessage

from chatledger import OutcomeUnknown, StorageUnavailable
from chatledger.dsn import display
from chatledger.zett import LedgerSessionStorage, codec

from .conftest import Database
from .support.backends import Servers
from .support.throwaway import (
    HANG_POINTS,
    ROOT,
    LedgerState,
    ThrowawayServer,
    ledger_state,
    migrated_database,
    shared_server,
    throwaway_server,
    writer_command,
)

#: Seconds any single wait in these tests may take before the test fails.
TIMEOUT = 60.0


def _dsn(database: Database) -> str:
    return database.url.render_as_string(hide_password=False)


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT} s waiting for {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _writer(*command: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """A writer process (see :func:`tests.support.throwaway.writer_command`), killed on the way out."""
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await asyncio.wait_for(process.communicate(), TIMEOUT)


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None and process.stderr is not None
    line = await asyncio.wait_for(process.stdout.readline(), TIMEOUT)
    if not line:
        await asyncio.wait_for(process.wait(), TIMEOUT)
        errors = await process.stderr.read()
        raise AssertionError(f"writer exited with {process.returncode}: {errors.decode(errors='replace')}")
    return line.decode().strip()


async def _sigkill(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(process.wait(), TIMEOUT) == -signal.SIGKILL


# -- SIGKILL ----------------------------------------------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("point", HANG_POINTS)
async def test_writer_killed_inside_its_transaction_leaves_no_partial_row(
    database: Database, storage: LedgerSessionStorage, session_id: str, point: str
) -> None:
    for index in range(3):
        await storage.append(session_id, "before", UserMessage(content=f"m{index}"))

    async with _writer(*writer_command("hang", _dsn(database), session_id, point)) as process:
        # The writer has advanced the counter to 4 (and, before-commit, inserted row 4)
        # in its open transaction, and holds the counter row's lock.
        assert await _line(process) == "READY"
        await _sigkill(process)

    assert await ledger_state(storage, session_id) == LedgerState(3, [1, 2, 3])
    # The lock died with the writer: the next append gets the next sequence.
    assert (
        await asyncio.wait_for(storage.append(session_id, "after", UserMessage(content="m3")), TIMEOUT) == 4
    )
    state = await ledger_state(storage, session_id)
    assert state == LedgerState(4, [1, 2, 3, 4])
    assert [record.message.content for record in (await storage.load(session_id)).raw_tail] == [
        "m0",
        "m1",
        "m2",
        "m3",
    ]


@pytest.mark.faults
async def test_writer_killed_at_random_moments_never_lets_counter_drift(
    database: Database, storage: LedgerSessionStorage, session_id: str
) -> None:
    acked: dict[int, str] = {}
    for _round in range(3):
        async with _writer(*writer_command("loop", _dsn(database), session_id)) as process:
            assert await _line(process) == "READY"
            # Kill it while it appends back to back: most likely inside a transaction.
            for _ in range(random.randint(10, 40)):
                _, sequence, text = (await _line(process)).split(" ", 2)
                assert int(sequence) not in acked, f"sequence {sequence} acknowledged twice"
                acked[int(sequence)] = text
            await _sigkill(process)
        state = await ledger_state(storage, session_id)
        assert state.consistent, state
        # An append may have committed without the writer living to acknowledge it.
        assert set(acked) <= set(state.sequences)

    records = await storage.list_raw_messages(session_id, limit=10_000)
    stored = {record.sequence: record.message.content for record in records}
    assert {sequence: stored[sequence] for sequence in acked} == acked
    counter = (await ledger_state(storage, session_id)).counter
    assert await storage.append(session_id, "after", UserMessage(content="next")) == counter + 1


# -- the server restarts mid-run --------------------------------------------------------


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def throwaway(request: pytest.FixtureRequest) -> Iterator[ThrowawayServer]:
    """A private server of this backend that the test may stop and start."""
    with throwaway_server(request.param) as server:
        yield server


def _append_values(session_id: str) -> dict[str, object]:
    return {"id": session_id, "parent_session_id": None, "title": None, "agent_name": None, "session_type": 0}


@pytest.mark.faults
@pytest.mark.parametrize("crash", [False, True], ids=["clean-shutdown", "crash"])
async def test_server_restart_mid_run(throwaway: ThrowawayServer, crash: bool) -> None:
    async with migrated_database(throwaway.server) as url:
        # A budget longer than the server takes to come back: calls recover instead of failing.
        storage = LedgerSessionStorage(
            url, pool_size=8, max_overflow=0, pool_timeout=10, retry_timeout=TIMEOUT
        )
        try:
            await _restart_under_load(throwaway, storage, crash=crash)
        finally:
            await storage.close()
            if not throwaway.running:  # a failure while it was down: the database must go
                await asyncio.to_thread(throwaway.start)


async def _restart_under_load(server: ThrowawayServer, storage: LedgerSessionStorage, *, crash: bool) -> None:
    run = uuid.uuid4().hex[:8]
    shared = f"restart-{run}-shared"
    writers = 4
    acked: list[tuple[str, int, str]] = []
    failures: list[Exception] = []
    acked_after_restart = [0] * writers
    restarted = asyncio.Event()
    stop = asyncio.Event()

    async def writer(number: int) -> None:
        index = 0
        while not stop.is_set():
            for session in (shared, f"restart-{run}-{number}"):
                text = f"{number}:{index}"
                index += 1
                after = restarted.is_set()
                try:
                    sequence = await asyncio.wait_for(
                        storage.append(session, "load", UserMessage(content=text)), TIMEOUT
                    )
                except Exception as error:  # every one is checked below
                    failures.append(error)
                    await asyncio.sleep(0.02)
                    continue
                acked.append((session, sequence, text))
                if after:
                    acked_after_restart[number] += 1

    # One call held open inside its transaction while the server goes down: surely in flight.
    held_session = f"restart-{run}-held"
    assert await storage.append(held_session, "held", UserMessage(content="kept")) == 1
    inside, resume = asyncio.Event(), asyncio.Event()
    row = codec.raw_row(
        session_id=held_session,
        request_id="held",
        message=UserMessage(content="lost"),
        timing=None,
        metadata=None,
        tags=None,
        usage=None,
        now=datetime.now(UTC),
    )

    async def held_work(conn: AsyncConnection) -> int | None:
        # The append's own statements, then the transaction waits for the server to go.
        sequence = await storage.ledger.backend.append_message(
            conn, _append_values(held_session), row, row["created_at"]
        )
        inside.set()
        await resume.wait()
        return sequence  # the COMMIT meets the dead connection

    tasks = [asyncio.create_task(writer(number)) for number in range(writers)]
    try:
        await _until(lambda: len(acked) >= 40, "appends before the restart")
        held = asyncio.create_task(storage.ledger.write(held_work))
        await asyncio.wait_for(inside.wait(), TIMEOUT)

        await asyncio.to_thread(server.stop, crash=crash)
        resume.set()
        # Its COMMIT met the dead connection, and this write has no id to look up.
        with pytest.raises(OutcomeUnknown) as in_flight:
            await asyncio.wait_for(held, TIMEOUT)
        assert in_flight.value.write_id is None
        # A call made while the server is down keeps retrying, and succeeds once it is back.
        while_down = asyncio.create_task(storage.load(shared))
        await asyncio.sleep(0.3)
        assert not while_down.done()
        await asyncio.to_thread(server.start)
        restarted.set()
        assert len((await asyncio.wait_for(while_down, TIMEOUT)).raw_tail) > 0

        await _until(lambda: min(acked_after_restart) >= 10, "appends after the restart")
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), TIMEOUT)
        resume.set()

    where = display(storage.url)
    assert where in str(in_flight.value) and "connection" in str(in_flight.value), in_flight.value
    # No append of the writers failed: each was retried (and, if its COMMIT was under
    # way, looked up by its message id) until the server was back.
    assert not failures, [f"{type(error).__name__}: {error}" for error in failures]

    # The held call's allocation was rolled back with its transaction.
    assert await ledger_state(storage, held_session) == LedgerState(1, [1])
    assert await storage.append(held_session, "held", UserMessage(content="after")) == 2

    # Nothing acknowledged is lost, and the counters match the rows.
    assert len({(session, sequence) for session, sequence, _ in acked}) == len(acked), "acked twice"
    for session in {session for session, _, _ in acked}:
        state = await ledger_state(storage, session)
        assert state.consistent, (session, state)
        stored = {
            record.sequence: record.message.content
            for record in await storage.list_raw_messages(session, limit=100_000)
        }
        for acked_session, sequence, text in acked:
            if acked_session == session:
                assert stored.get(sequence) == text, (session, sequence, text)


# -- an exhausted pool ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
async def server_database(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[URL]:
    """A migrated database on this machine's server of the backend. SQLite is not
    among them: it has no fixed-size pool (the pool options apply to servers)."""
    async with migrated_database(shared_server(servers, request.param)) as url:
        yield url


async def test_exhausted_pool_gives_a_clear_timeout_error(server_database: URL, session_id: str) -> None:
    async with LedgerSessionStorage(
        server_database, pool_size=1, max_overflow=0, pool_timeout=0.5
    ) as storage:
        await storage.append(session_id, "r", UserMessage(content="hello"))
        holding, release = asyncio.Event(), asyncio.Event()

        async def hold(conn: AsyncConnection) -> None:
            holding.set()
            await release.wait()

        held = asyncio.create_task(storage.ledger.read(hold))
        try:
            await asyncio.wait_for(holding.wait(), TIMEOUT)
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(StorageUnavailable) as caught:
                await asyncio.wait_for(storage.load(session_id), TIMEOUT)
            waited = loop.time() - started
        finally:
            release.set()
            await asyncio.wait_for(held, TIMEOUT)
        assert 0.4 <= waited < 10
        message = str(caught.value)
        assert "no connection" in message and "within 0.5 s" in message, message
        assert "pool_size=1" in message and "max_overflow=0" in message, message
        assert display(storage.url) in message
        # The pool serves again once the connection is back.
        assert [record.sequence for record in (await storage.load(session_id)).raw_tail] == [1]
