"""Exactly-once writes across a lost COMMIT, through a real TCP proxy (tests/support/proxy.py)
between the store and PostgreSQL / MariaDB.

* Lost while the COMMIT was under way (the server committed, the client never heard):
  the append looks its message id up after reconnecting and returns the stored
  sequence; the session holds exactly one copy.
* The race: the client's connection is dropped and the server gets the COMMIT only
  later, while the client has reconnected, looked the id up (not there yet) and runs
  the append again; the primary key of the message id stops the second copy, and the
  append settles again.
* The database stays unreachable: ``OutcomeUnknown`` carrying the message id; a later
  append with that ``message_id`` returns the stored sequence.
* Lost before the COMMIT, or a pooled connection the server dropped (no pre-ping):
  nothing was committed, the call is retried and succeeds.
* A write without a lookup (``update_session``) lost in its COMMIT: ``OutcomeUnknown``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from rein import Message, Session
from sqlalchemy import select, update
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import IdentityConflict, OutcomeUnknown, StorageUnavailable, retention
from chatledger.engine import Ledger
from chatledger.openai_agents import LedgerSession
from chatledger.rein import LedgerSessionStore
from chatledger.schema import rein_sessions_table, sessions_table
from chatledger.tools.bench.floor import RoundTrips
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import Servers
from .support.proxy import Proxy, commit_point, running_proxy
from .support.schema_helpers import on_connection
from .support.throwaway import LedgerState, ledger_state, migrated_database, shared_server

#: Seconds any single wait may take before the test fails.
TIMEOUT = 60.0


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
async def server_url(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[URL]:
    """A migrated database on this machine's server of the backend."""
    server = shared_server(servers, request.param)
    async with migrated_database(server) as url:
        await server.default_to_serializable(str(url.database))
        yield url


@pytest.fixture
async def proxy(server_url: URL) -> AsyncIterator[Proxy]:
    async with running_proxy(server_url) as running:
        yield running


async def _store(proxy: Proxy, server_url: URL, **options: object) -> LedgerSessionStorage:
    storage = LedgerSessionStorage(proxy.url(server_url), **options)
    await storage.ledger.ensure_ready()  # its reads commit too: arm the proxy after them
    return storage


async def _fill(storage: LedgerSessionStorage, session_id: str, count: int) -> None:
    for index in range(1, count + 1):
        assert await storage.append(session_id, "r", UserMessage(content=f"m{index}")) == index


async def _contents(server_url: URL, session_id: str) -> list[str]:
    async with LedgerSessionStorage(server_url) as direct:
        return [record.message.content for record in await direct.list_raw_messages(session_id)]


async def test_append_lost_in_its_commit_returns_the_stored_sequence_once(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url)
    try:
        await _fill(storage, session_id, 3)
        lost = f"m4-{uuid.uuid4().hex}"
        proxy.arm("drop-after-commit", commit_point(storage.ledger, lost))
        sequence = await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content=lost)), TIMEOUT)
        assert not proxy.armed
        assert proxy.events("commit answered"), proxy.log  # the server did commit it
        assert sequence == 4
        assert await ledger_state(storage, session_id) == LedgerState(4, [1, 2, 3, 4])
        assert await _contents(server_url, session_id) == ["m1", "m2", "m3", lost]
        assert await storage.append(session_id, "r", UserMessage(content="m5")) == 5
    finally:
        await storage.close()


async def test_append_racing_its_own_late_commit_is_stored_once(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url)
    try:
        await _fill(storage, session_id, 2)
        accepted = proxy.accepted
        late = f"m3-{uuid.uuid4().hex}"
        proxy.arm("commit-late", commit_point(storage.ledger, late), delay=1.0)
        sequence = await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content=late)), TIMEOUT)
        assert sequence == 3
        # The late message reaches the server, which commits it, or fails it on the message
        # id when it is the one statement that commits itself and the retry came first.
        await asyncio.wait_for(proxy.noted("commit answered"), TIMEOUT)
        # The client had reconnected (and looked its write up) before the server got
        # the COMMIT: the race the message id's primary key settles.
        dropped, forwarded = proxy.events("client dropped"), proxy.events("commit forwarded")
        assert dropped and forwarded, proxy.log
        reconnected = [at for at, event in proxy.log if event == "accepted" and at > dropped[0]]
        assert proxy.accepted > accepted and reconnected and reconnected[0] < forwarded[0], proxy.log
        assert await ledger_state(storage, session_id) == LedgerState(3, [1, 2, 3])
        assert await _contents(server_url, session_id) == ["m1", "m2", late]
    finally:
        await storage.close()


async def test_snapshot_lost_in_its_commit_returns_the_stored_checkpoint(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url)
    try:
        await _fill(storage, session_id, 3)
        for action in ("drop-after-commit", "commit-late"):
            expected = 0 if action == "drop-after-commit" else 1
            proxy.arm(action, delay=1.0)
            checkpoint = await asyncio.wait_for(
                storage.snapshot(
                    session_id, CompactedMessage(content=f"c{expected}"), 1 + expected, expected
                ),
                TIMEOUT,
            )
            assert not proxy.armed
            assert checkpoint.version == expected + 1
            view = await storage.load(session_id)
            assert view.snapshot is not None and view.snapshot.id == checkpoint.id
            assert view.snapshot.compacted_message.content == f"c{expected}"
    finally:
        await storage.close()


async def test_unreachable_after_a_lost_commit_raises_outcome_unknown_then_settles(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url, retry_timeout=2)
    try:
        await _fill(storage, session_id, 2)
        lost = f"m3-{uuid.uuid4().hex}"
        proxy.arm("drop-after-commit", commit_point(storage.ledger, lost), refuse_after=True)
        started = asyncio.get_running_loop().time()
        with pytest.raises(OutcomeUnknown) as caught:
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content=lost)), TIMEOUT)
        elapsed = asyncio.get_running_loop().time() - started
        assert proxy.events("commit answered") and proxy.events("refusing"), proxy.log
        assert elapsed < 2 + 10, elapsed
        message_id = caught.value.write_id
        assert message_id is not None and len(message_id) == 36
        message = str(caught.value)
        assert "unknown" in message and message_id in message and "Repeat the identical call" in message
        assert await _contents(server_url, session_id) == ["m1", "m2", lost]  # it was committed

        await proxy.accept()
        again = await storage.append(session_id, "r", UserMessage(content=lost), message_id=message_id)
        assert again == 3
        assert await ledger_state(storage, session_id) == LedgerState(3, [1, 2, 3])
        # The id is the message's: used for another session it is refused.
        with pytest.raises(ValueError, match="message_id"):
            await storage.append(f"{session_id}-other", "r", UserMessage(content="x"), message_id=message_id)
        assert await storage.get_session(f"{session_id}-other") is None
    finally:
        await storage.close()


async def test_no_free_connection_to_settle_a_lost_commit_is_outcome_unknown(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    """The COMMIT's answer is lost, and the settle then finds no pooled connection free
    in time (the only one serves a call queued behind a row lock): the write was
    committed, so the call must not say that nothing was (a plain
    ``StorageUnavailable``, which invites a repeat without the id that stores it twice)."""
    storage = await _store(
        proxy, server_url, pool_size=1, max_overflow=0, pool_timeout=1, retry_timeout=5, lock_timeout=10
    )
    other = f"{session_id}-other"
    holder = create_async_engine(server_url, poolclass=NullPool)
    try:
        await _fill(storage, session_id, 1)
        await _fill(storage, other, 1)
        async with holder.connect() as held, held.begin():
            # The queued call waits on this row lock, holding the pool's one connection.
            await held.execute(
                select(sessions_table.c.id).where(sessions_table.c.id == other).with_for_update()
            )
            content = f"m2-{uuid.uuid4().hex}"
            proxy.arm("drop-after-commit", commit_point(storage.ledger, content))
            lost = asyncio.create_task(storage.append(session_id, "r", UserMessage(content=content)))
            await asyncio.sleep(0)
            queued = asyncio.create_task(storage.append(other, "r", UserMessage(content="queued")))
            with pytest.raises(OutcomeUnknown) as caught:
                await asyncio.wait_for(lost, TIMEOUT)
        assert await asyncio.wait_for(queued, TIMEOUT) == 2
        assert await _contents(server_url, session_id) == ["m1", content]  # it was committed
        again = await storage.append(
            session_id, "r", UserMessage(content=content), message_id=caught.value.write_id
        )
        assert again == 2
        assert await _contents(server_url, session_id) == ["m1", content]
    finally:
        await holder.dispose()
        await storage.close()


async def test_repeating_a_message_id_with_another_message_is_an_identity_conflict(
    server_url: URL, session_id: str
) -> None:
    """A message id names one message: repeated with other content (or for another
    session), the append is refused with ``IdentityConflict`` and writes nothing."""
    async with LedgerSessionStorage(server_url) as storage:
        message_id = str(uuid.uuid4())
        assert await storage.append(session_id, "r", UserMessage(content="a"), message_id=message_id) == 1
        for session, content, request in ((session_id, "b", "r"), (session_id, "a", "other request")):
            with pytest.raises(IdentityConflict, match="message_id") as refused:
                await storage.append(session, request, UserMessage(content=content), message_id=message_id)
            assert refused.value.write_id == message_id
        assert await ledger_state(storage, session_id) == LedgerState(1, [1])
        assert await _contents(server_url, session_id) == ["a"]


@pytest.mark.parametrize("since", ["deleted", "created again", "purged"])
async def test_append_committed_then_deleted_before_its_settle_returns_its_sequence(
    proxy: Proxy, server_url: URL, session_id: str, since: str
) -> None:
    """The append (a transaction: it changes the title) commits and its answer is lost;
    the writer cannot reach the database while another deletes the session (and creates
    it again, or purges its tombstone). The settle finds the message erased by that
    delete: appended, then deleted, so its sequence is returned, not ``SessionDeleted``."""
    storage = await _store(proxy, server_url, retry_timeout=30)
    try:
        await _fill(storage, session_id, 2)
        proxy.arm("drop-after-commit", refuse_after=True)
        lost = f"m3-{uuid.uuid4().hex}"
        appending = asyncio.create_task(
            storage.append(session_id, "r", UserMessage(content=lost), title="a new title")
        )
        await asyncio.wait_for(proxy.noted("commit answered"), TIMEOUT)
        assert await _contents(server_url, session_id) == ["m1", "m2", lost]  # committed
        async with LedgerSessionStorage(server_url) as other:
            assert await other.delete_session(session_id)
            if since == "created again":
                await other.create_session(session_id=session_id)
            if since == "purged":
                assert await other.purge_tombstones(horizon=timedelta(0)) >= 1
        await proxy.accept()
        assert await asyncio.wait_for(appending, TIMEOUT) == 3
    finally:
        await storage.close()


async def test_openai_add_committed_then_cleared_before_its_settle_is_done(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    """The same for an OpenAI Agents add overtaken by another writer's ``clear_session``."""
    session = LedgerSession.from_url(session_id, url=proxy.url(server_url), retry_timeout=30)
    try:
        await session.add_items([{"role": "user", "content": "a"}])
        proxy.arm("drop-after-commit", refuse_after=True)
        adding = asyncio.create_task(session.add_items([{"role": "user", "content": "b"}]))
        await asyncio.wait_for(proxy.noted("commit answered"), TIMEOUT)
        other = LedgerSession(session_id, ledger=Ledger(server_url))
        try:
            assert len(await other.get_items()) == 2
            await other.clear_session()
        finally:
            await other.ledger.close()
        await proxy.accept()
        await asyncio.wait_for(adding, TIMEOUT)
        assert await session.get_items() == []
    finally:
        await session.close()


async def test_connection_lost_before_commit_is_retried(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url)
    try:
        await _fill(storage, session_id, 2)
        marker = f"never-sent-{uuid.uuid4().hex}"
        proxy.arm("drop-before", marker.encode())
        sequence = await asyncio.wait_for(
            storage.append(session_id, "r", UserMessage(content=marker)), TIMEOUT
        )
        assert proxy.events("dropped before"), proxy.log
        assert sequence == 3
        assert storage.ledger.retries >= 1
        assert await _contents(server_url, session_id) == ["m1", "m2", marker]
    finally:
        await storage.close()


async def test_pooled_connection_dropped_by_the_server_is_retried_without_pre_ping(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url, pool_size=2, max_overflow=0)
    try:
        assert storage.ledger.engine.pool._pre_ping is False  # type: ignore[attr-defined]
        await _fill(storage, session_id, 2)
        proxy.sever()  # every pooled connection is dead now; the pool does not know
        assert (
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content="m3")), TIMEOUT) == 3
        )
        proxy.sever()
        view = await asyncio.wait_for(storage.load(session_id), TIMEOUT)
        assert [record.sequence for record in view.raw_tail] == [1, 2, 3]
        assert storage.ledger.retries >= 2
    finally:
        await storage.close()


async def test_unreachable_database_gives_storage_unavailable_within_the_budget(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url, retry_timeout=1.5)
    try:
        await _fill(storage, session_id, 1)
        # No pooled connection: the append's every attempt is refused before it sends
        # anything (one sent on a connection that is then lost may have committed:
        # test_a_commit_lost_on_its_way_is_outcome_unknown_then_stored_once).
        await storage.ledger.engine.dispose()
        proxy.refuse()
        proxy.sever()
        started = asyncio.get_running_loop().time()
        with pytest.raises(StorageUnavailable) as caught:
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content="m2")), TIMEOUT)
        assert asyncio.get_running_loop().time() - started < 1.5 + 10
        assert not isinstance(caught.value, OutcomeUnknown)
        assert "retry budget" in str(caught.value) and "nothing from this call was committed" in str(
            caught.value
        )

    finally:
        await storage.close()

    # Back within the budget: the call recovers instead of failing.
    patient = LedgerSessionStorage(proxy.url(server_url), retry_timeout=TIMEOUT)
    try:
        load = asyncio.create_task(patient.load(session_id))
        await asyncio.sleep(0.5)
        assert not load.done()
        await proxy.accept()
        view = await asyncio.wait_for(load, TIMEOUT)
        assert [record.sequence for record in view.raw_tail] == [1]
        assert patient.ledger.retries >= 1
    finally:
        await patient.close()


async def test_a_commit_lost_on_its_way_is_outcome_unknown_then_stored_once(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    """The message that commits the append (its COMMIT, or its one statement that
    commits itself) is lost on its way to the server, which then stays unreachable for
    the budget: the client cannot know it never arrived, so ``OutcomeUnknown`` carrying
    the message id; the repeat with that id, once the database answers, stores the
    message once."""
    storage = await _store(proxy, server_url, retry_timeout=1.5)
    try:
        await _fill(storage, session_id, 1)
        lost = f"m2-{uuid.uuid4().hex}"
        proxy.arm("drop-before", commit_point(storage.ledger, lost))
        proxy.refuse()  # the pooled connection stays, until the proxy drops it
        with pytest.raises(OutcomeUnknown) as caught:
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content=lost)), TIMEOUT)
        assert proxy.events("dropped before"), proxy.log
        await proxy.accept()
        write_id = caught.value.write_id
        again = await storage.append(session_id, "r", UserMessage(content=lost), message_id=write_id)
        assert again == 2
        assert await ledger_state(storage, session_id) == LedgerState(2, [1, 2])
        assert await _contents(server_url, session_id) == ["m1", lost]
    finally:
        await storage.close()


async def test_a_pooled_connection_the_driver_saw_close_sends_nothing(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    """The server dropped the pooled connection and the driver saw it
    (``Backend.connection_closed``): the append's statement, even one that commits
    itself, is never sent, so nothing was committed (``StorageUnavailable`` once the
    budget is spent, not ``OutcomeUnknown``)."""
    storage = await _store(proxy, server_url, retry_timeout=1.5, pool_size=1, max_overflow=0)
    try:
        await _fill(storage, session_id, 1)
        async with storage.ledger.engine.connect() as conn:  # the pool's one connection
            driver_connection = (await conn.get_raw_connection()).driver_connection
        proxy.refuse()
        proxy.sever()
        for _ in range(500):  # the event loop reads the end of the connection
            if storage.ledger.backend.connection_closed(driver_connection):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.skip(f"{storage.ledger.backend.driver} does not tell a closed connection before using it")
        with pytest.raises(StorageUnavailable) as caught:
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content="m2")), TIMEOUT)
        assert not isinstance(caught.value, OutcomeUnknown), caught.value
        assert "nothing from this call was committed" in str(caught.value)
    finally:
        await storage.close()


async def test_write_without_lookup_lost_in_its_commit_raises_outcome_unknown(
    proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = await _store(proxy, server_url)
    try:
        await storage.create_session(session_id=session_id, title="before")
        proxy.arm("drop-after-commit")
        with pytest.raises(OutcomeUnknown) as caught:
            await asyncio.wait_for(storage.update_session(session_id, title="after"), TIMEOUT)
        assert caught.value.write_id is None
        assert "unknown" in str(caught.value)
        summary = await storage.get_session(session_id)
        assert summary is not None and summary.title == "after"  # it was applied
    finally:
        await storage.close()


@pytest.mark.parametrize("part", ["idle-zett", "idle-rein", "tombstones"])
async def test_a_retention_delete_lost_in_its_commit_is_looked_up_and_the_run_goes_on(
    proxy: Proxy, server_url: URL, session_id: str, part: str
) -> None:
    """The conditional delete of an idle session (zett, rein) and the purge of a
    tombstone settle a lost COMMIT (the row as its page read it, or what the delete left),
    instead of ending the run with OutcomeUnknown."""
    ids = [f"{session_id}-{number}" for number in range(4)]
    kind = "rein" if part == "idle-rein" else "zett"
    async with LedgerSessionStorage(server_url) as storage, LedgerSessionStore(server_url) as store:
        for id in ids:
            if kind == "rein":
                await store.asave(id, Session(messages=[Message(role="user", content="kept?")]))
            else:
                await storage.append(id, "r", UserMessage(content="kept?"))
                if part == "tombstones":
                    await storage.delete_session(id)
    table = rein_sessions_table if kind == "rein" else sessions_table
    column = "deleted_at" if part == "tombstones" else "updated_at"
    await on_connection(
        server_url,
        lambda conn: conn.execute(
            update(table).where(table.c.id.in_(ids)).values({column: datetime.now(UTC) - timedelta(days=10)})
        ),
    )

    def progress(id: str, done: bool) -> None:
        if id == ids[0]:  # the next COMMIT is the second candidate's
            proxy.arm("drop-after-commit")

    policy = (
        retention.Policy(tombstones_after=timedelta(days=1))
        if part == "tombstones"
        else retention.Policy(idle=timedelta(days=1))
    )
    report = await asyncio.wait_for(
        retention.apply(proxy.url(server_url), policy, kinds=(kind,), progress=progress), TIMEOUT
    )
    assert not proxy.armed  # a COMMIT's answer was lost
    done = report.tombstones if part == "tombstones" else report.sessions
    assert done == {kind: len(ids)}
    async with LedgerSessionStorage(server_url) as storage, LedgerSessionStore(server_url) as store:
        for id in ids:
            assert (await store.aload(id) if kind == "rein" else await storage.get_session(id)) is None


#: The statements of one append, per backend: exactly-once adds none. SQLite sends no
#: BEGIN of its own: sqlite3 begins the transaction with the first INSERT, which is the
#: whole append there: revision 0007's trigger moves the counter row along. PostgreSQL:
#: one statement committed by itself, the counter's UPDATE feeding the insert. MySQL:
#: revision 0010's procedure, which moves the counter row along, inserts and commits.
APPEND_STATEMENTS = {
    "postgresql": ["WITH"],
    "mysql": ["CALL chatledger_append_committed_v2("],
    "sqlite": ["INSERT INTO raw_messages"],
}
#: An append changing the session's title or agent name: the one-statement append
#: (SQLite's insert, the statement or procedure that commits itself) finds the fields
#: to change and writes nothing, and the counter upsert (which sets them) and the insert
#: follow, in a transaction (PostgreSQL: in one statement; MySQL: revision 0008's
#: procedure).
CHANGING_STATEMENTS = {
    **APPEND_STATEMENTS,
    "postgresql": ["WITH", "WITH"],
    "mysql": ["CALL chatledger_append_committed_v2(", "CALL chatledger_append("],
    "sqlite": ["INSERT INTO raw_messages", "INSERT INTO agent_sessions", "INSERT INTO raw_messages"],
}
#: Its round trips (SQLite: hops to aiosqlite's thread): the statements, and the BEGIN
#: (PostgreSQL's drivers) and COMMIT of a transaction (none for a statement that commits
#: itself); no ROLLBACK when the connection goes back to the pool
#: (tests/test_pool_reset.py). SQLite: a cursor, the statement, its fetch and its close
#: per statement, then the COMMIT. MySQL: the CALL that commits itself; changing: it,
#: then the transaction's CALL and COMMIT.
APPEND_ROUND_TRIPS = {"postgresql": 1, "mysql": 1, "sqlite": 5}
CHANGING_ROUND_TRIPS = {**APPEND_ROUND_TRIPS, "postgresql": 4, "mysql": 3, "sqlite": 12}


@pytest.mark.parametrize(
    "fields",
    [{}, {"title": "first", "agent_name": "first"}, {"title": "changed", "agent_name": "changed"}],
    ids=["without-fields", "with-the-stored-fields", "changing-title-and-agent-name"],
)
async def test_exactly_once_costs_the_append_no_statement(
    database: Database, session_id: str, fields: dict[str, str]
) -> None:
    """Neither exactly-once nor a title or agent name given costs the append a
    statement, and its transaction costs no round trip of its own at either end but the
    COMMIT (and the BEGIN of a driver that sends one); a title or agent name that
    changes the stored one costs SQLite the counter upsert (the first append given
    them; the second finds them stored). Counted on appends past a session's first,
    which also looks up a high-water mark."""
    async with LedgerSessionStorage(database.url) as storage:
        await storage.append(session_id, "r", UserMessage(content="warm"), title="first", agent_name="first")
        await storage.append(session_id, "r", UserMessage(content="warm again"))
        trips = RoundTrips(storage.ledger.engine)
        try:
            for sequence in (3, 4):
                trips.reset()
                assert (
                    await storage.append(session_id, "r", UserMessage(content="counted"), **fields)
                    == sequence
                )
                changing = sequence == 3 and fields.get("title", "first") != "first"
                expected = (CHANGING_STATEMENTS if changing else APPEND_STATEMENTS)[database.backend]
                assert trips.statements == len(expected), trips.sent
                assert all(sent.startswith(start) for sent, start in zip(trips.sent, expected, strict=True))
                trips_pinned = CHANGING_ROUND_TRIPS if changing else APPEND_ROUND_TRIPS
                assert trips.round_trips == trips_pinned[database.backend]
        finally:
            trips.close()
        summary = await storage.get_session(session_id)
        assert summary is not None
        assert (summary.title, summary.agent_name) == (
            fields.get("title", "first"),
            fields.get("agent_name", "first"),
        )
