"""A server that stops answering: every call ends within its retry budget, and a stalled
attempt leaves room to retry.

A black-holed connection (the TCP proxy of :mod:`tests.support.proxy` drops every
byte both ways and sends no reset) answers nothing, so only the attempt's own
deadline (:func:`chatledger.deadlines.attempt_limit`) ends a call on it:

* The whole server black-holed: a write, a read, the first call's schema check and a
  replica read each end within budget + slack with ``StorageUnavailable`` (a write
  whose statement that commits itself was sent: ``OutcomeUnknown``, carrying its id);
  once the server answers again, the write's repeat with its id stores it once.
* One attempt black-holed, the rest of the budget free: the attempt is abandoned, its
  connection closed, and the call retried -- a write stalled before its COMMIT is
  written once, one whose COMMIT reached the server is settled, never sent again.
* A slow statement the server is running is not silence: the attempt goes on past
  its deadline and succeeds once.

On PostgreSQL (asyncpg and psycopg) and MariaDB; marked ``faults``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.messages import UserMessage

from chatledger import OutcomeUnknown, StorageUnavailable
from chatledger.deadlines import ATTEMPT_FLOOR, attempt_limit
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.proxy import COMMIT, Proxy, commit_point, running_proxy
from .support.throwaway import LedgerState, ledger_state

pytestmark = pytest.mark.faults

BUDGET = 3.0
LOCK_TIMEOUT = 1.0
#: The budget, one attempt begun just before it ran out (its deadline's floor), and
#: generous slack for a loaded machine.
UPPER_BOUND = BUDGET + LOCK_TIMEOUT + ATTEMPT_FLOOR + 6.0
#: Seconds any wait that should not stall may take before the test fails.
TIMEOUT = 60.0


@pytest.fixture
def server(database: Database) -> Database:
    if database.server is None:
        pytest.skip("SQLite has no network to stall")
    return database


@pytest.fixture
async def proxy(server: Database) -> AsyncIterator[Proxy]:
    async with running_proxy(server.url) as running:
        yield running


def _options(**more: Any) -> dict[str, Any]:
    return {"retry_timeout": BUDGET, "lock_timeout": LOCK_TIMEOUT, **more}


@pytest.fixture
async def storage(proxy: Proxy, server: Database) -> AsyncIterator[LedgerSessionStorage]:
    opened = LedgerSessionStorage(proxy.url(server.url), **_options())
    await opened.ledger.ensure_ready()  # its own reads: stall the proxy after them
    try:
        yield opened
    finally:
        await asyncio.wait_for(opened.close(), TIMEOUT)


async def _ends_within_budget(call: Awaitable[Any]) -> StorageUnavailable:
    """The error ``call`` ends with, asserted to come within :data:`UPPER_BOUND`."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(StorageUnavailable) as caught:
        await asyncio.wait_for(call, TIMEOUT)
    elapsed = loop.time() - started
    assert elapsed < UPPER_BOUND, f"ended after {elapsed:.1f} s: {caught.value}"
    return caught.value


async def _contents(database: Database, session_id: str) -> list[str]:
    async with LedgerSessionStorage(database.url) as direct:
        return [str(record.message.content) for record in await direct.list_raw_messages(session_id)]


def _pool_idle(storage: LedgerSessionStorage) -> None:
    assert storage.ledger.engine.pool.checkedout() == 0, storage.ledger.engine.pool.status()  # type: ignore[attr-defined]


# -- the whole server black-holed ---------------------------------------------------------


async def test_a_write_to_a_black_holed_server_ends_within_the_budget_and_is_stored_once(
    proxy: Proxy, server: Database, storage: LedgerSessionStorage, session_id: str
) -> None:
    assert await storage.append(session_id, "r", UserMessage(content="m1")) == 1
    message_id = str(uuid.uuid4())
    proxy.stall()
    error = await _ends_within_budget(
        storage.append(session_id, "r", UserMessage(content="m2"), message_id=message_id)
    )
    assert f"retry_timeout={BUDGET:g} s" in str(error), error
    if isinstance(error, OutcomeUnknown):  # its statement was sent: it may have committed
        assert error.write_id == message_id
    _pool_idle(storage)
    proxy.unstall()
    # Once the server answers, the repeat with the write's id stores it exactly once.
    again = storage.append(session_id, "r", UserMessage(content="m2"), message_id=message_id)
    assert await asyncio.wait_for(again, TIMEOUT) == 2
    assert await ledger_state(storage, session_id) == LedgerState(2, [1, 2])
    assert await _contents(server, session_id) == ["m1", "m2"]


async def test_a_read_from_a_black_holed_server_ends_within_the_budget(
    proxy: Proxy, storage: LedgerSessionStorage, session_id: str
) -> None:
    assert await storage.append(session_id, "r", UserMessage(content="m1")) == 1
    proxy.stall()
    error = await _ends_within_budget(storage.load(session_id))
    assert not isinstance(error, OutcomeUnknown)
    assert "nothing from this call was committed" in str(error) and "abandoned" in str(error), error
    _pool_idle(storage)
    proxy.unstall()
    loaded = await asyncio.wait_for(storage.load(session_id), TIMEOUT)
    assert [record.sequence for record in loaded.raw_tail] == [1]


async def test_the_schema_check_on_a_black_holed_server_ends_within_the_budget(
    proxy: Proxy, server: Database, session_id: str
) -> None:
    proxy.stall()  # before the first call: its schema check (and isolation probe) stalls
    fresh = LedgerSessionStorage(proxy.url(server.url), **_options())
    try:
        error = await _ends_within_budget(fresh.load(session_id))
        assert not isinstance(error, OutcomeUnknown)
        assert not fresh.ledger.readiness.ready
        proxy.unstall()
        loaded = await asyncio.wait_for(fresh.load(session_id), TIMEOUT)
        assert loaded.raw_tail == [] and fresh.ledger.readiness.ready
    finally:
        await asyncio.wait_for(fresh.close(), TIMEOUT)


async def test_a_black_holed_replica_leaves_the_read_to_the_primary(
    proxy: Proxy, server: Database, session_id: str
) -> None:
    # The "replica" is the primary itself, behind the proxy: only its silence matters.
    replicated = LedgerSessionStorage(server.url, read_dsn=str(proxy.url(server.url)), **_options())
    try:
        assert await replicated.append(session_id, "r", UserMessage(content="m1")) == 1
        proxy.stall()
        loop = asyncio.get_running_loop()
        started = loop.time()
        loaded = await asyncio.wait_for(replicated.load(session_id), TIMEOUT)
        assert loop.time() - started < UPPER_BOUND
        assert [record.sequence for record in loaded.raw_tail] == [1]
        assert replicated.ledger.replica_reads.fell_back >= 1
        for replica in replicated.ledger.connections.replicas:
            assert replica.engine.pool.checkedout() == 0, replica.engine.pool.status()  # type: ignore[attr-defined]
    finally:
        await asyncio.wait_for(replicated.close(), TIMEOUT)


# -- one attempt black-holed --------------------------------------------------------------


@pytest.mark.parametrize("first", [False, True], ids=["warm", "first-append"])
async def test_a_write_stalled_before_its_commit_is_retried_and_stored_once(
    proxy: Proxy, server: Database, storage: LedgerSessionStorage, session_id: str, first: bool
) -> None:
    # first-append: the connection never ran the append's statement, so the server
    # waits to read the rest of a message that never comes (PostgreSQL: ClientRead).
    before = [] if first else ["m1"]
    for content in before:
        assert await storage.append(session_id, "r", UserMessage(content=content)) == 1
    stalled = f"m2-{uuid.uuid4().hex}"
    # The statement that carries the message (or its transaction's COMMIT) goes nowhere.
    proxy.arm("stall-before", re.compile(re.escape(stalled.encode())))
    appended = storage.append(session_id, "r", UserMessage(content=stalled))
    assert await asyncio.wait_for(appended, UPPER_BOUND) == len(before) + 1
    assert not proxy.armed and proxy.events("stalled before"), proxy.log
    assert await ledger_state(storage, session_id) == LedgerState(
        len(before) + 1, list(range(1, len(before) + 2))
    )
    assert await _contents(server, session_id) == [*before, stalled]


async def test_a_write_stalled_after_its_commit_is_settled_not_sent_again(
    proxy: Proxy, server: Database, storage: LedgerSessionStorage, session_id: str
) -> None:
    assert await storage.append(session_id, "r", UserMessage(content="m1")) == 1
    stalled = f"m2-{uuid.uuid4().hex}"
    proxy.arm("stall-after-commit", commit_point(storage.ledger, stalled))
    appended = storage.append(session_id, "r", UserMessage(content=stalled))
    assert await asyncio.wait_for(appended, UPPER_BOUND) == 2
    assert not proxy.armed and proxy.events("commit forwarded"), proxy.log
    assert await ledger_state(storage, session_id) == LedgerState(2, [1, 2])
    assert await _contents(server, session_id) == ["m1", stalled]
    assert await storage.append(session_id, "r", UserMessage(content="m3")) == 3


@pytest.mark.parametrize("kind", ["read", "probe"])
async def test_a_read_stalled_once_is_retried_within_the_budget(
    proxy: Proxy, storage: LedgerSessionStorage, kind: str
) -> None:
    marker = f"stall-{uuid.uuid4().hex}"

    async def work(conn: AsyncConnection) -> Any:
        return await conn.scalar(text(f"SELECT '{marker}'"))

    ledger = storage.ledger
    call: Callable[[], Awaitable[Any]] = (
        (lambda: ledger.read(work))
        if kind == "read"
        else (lambda: ledger.transactions.run(work, write=True, probe=True))
    )
    proxy.arm("stall-before", re.compile(re.escape(marker.encode())))
    assert await asyncio.wait_for(call(), UPPER_BOUND) == marker
    assert proxy.events("stalled before"), proxy.log
    _pool_idle(storage)


async def test_a_stalled_commit_of_a_write_without_a_lookup_is_outcome_unknown(
    proxy: Proxy, storage: LedgerSessionStorage
) -> None:
    marker = f"stall-{uuid.uuid4().hex}"

    async def work(conn: AsyncConnection) -> Any:
        return await conn.scalar(text(f"SELECT '{marker}'"))

    proxy.arm("stall-after-commit", COMMIT, after=marker.encode())
    error = await _ends_within_budget(storage.ledger.write(work))
    assert isinstance(error, OutcomeUnknown), error
    _pool_idle(storage)


# -- slow, not silent ---------------------------------------------------------------------


async def test_a_statement_running_past_the_deadline_is_not_abandoned(
    server: Database, proxy: Proxy, storage: LedgerSessionStorage, session_id: str
) -> None:
    sleep = facts_of(server.backend).sleep
    assert sleep is not None
    options = storage.ledger.options
    # Past two quiet deadlines, within the call's budget.
    seconds = min(2.5 * attempt_limit(options, 0.0), options.retry_timeout - 0.5)
    runs = 0

    async def work(conn: AsyncConnection) -> int:
        nonlocal runs
        runs += 1
        await conn.execute(text(sleep.format(seconds=seconds)))
        return runs

    assert await asyncio.wait_for(storage.ledger.write(work), TIMEOUT) == 1
    assert runs == 1
    _pool_idle(storage)


@pytest.mark.parametrize("pool", ["pool", "one-connection"])
async def test_a_statement_running_past_the_budget_is_abandoned_and_its_session_ended(
    server: Database, proxy: Proxy, storage: LedgerSessionStorage, pool: str
) -> None:
    sleep = facts_of(server.backend).sleep
    assert sleep is not None
    if pool == "one-connection":  # the question finds no pooled connection free
        storage = LedgerSessionStorage(proxy.url(server.url), **_options(pool_size=1, max_overflow=0))
        await storage.ledger.ensure_ready()
    options = storage.ledger.options
    seconds = options.retry_timeout + 30  # a stuck server that still answers questions

    async def work(conn: AsyncConnection) -> None:
        await conn.execute(text(sleep.format(seconds=seconds)))

    error = await _ends_within_budget(storage.ledger.write(work))
    assert isinstance(error, OutcomeUnknown) or "nothing from this call was committed" in str(error)
    _pool_idle(storage)
    # Its server session was ended with it: no statement of ours sleeps on.
    running = facts_of(server.backend).running
    assert running is not None
    marker = sleep.format(seconds=seconds)
    async with LedgerSessionStorage(server.url) as direct:
        for _ in range(50):
            left = await direct.ledger.read(lambda conn: conn.scalar(text(running), {"q": marker}))
            if not left:
                break
            await asyncio.sleep(0.1)
    assert not left, f"{left} sessions still run {marker!r}"
    if pool == "one-connection":
        await asyncio.wait_for(storage.close(), TIMEOUT)
