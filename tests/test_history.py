"""The history checker: random histories of every writing call, checked against a model.

In the manner of Jepsen and FoundationDB's simulation tests, a hypothesis
``RuleBasedStateMachine`` runs random histories on one database of each target:

- **Operations**, of all four kinds: zett append, snapshot (a checkpoint with
  ``expected_version``), load, delete and create (on a tombstone: a new generation);
  rein save (plain and compare-and-set), load and delete; OpenAI Agents add and
  clear; ADK create, append and delete; purge (every kind); export then import; copy
  into a second database.
- **Writers:** two or three zett storages, two rein stores, three OpenAI Agents
  ledgers and two ADK services, each with its own engine, on the one database;
  appends, checkpoints, rein saves and OpenAI adds run in groups of up to three at
  once (``asyncio.gather``), on one session or several, where the model can still
  say what each may return.
- **Faults:** on the server targets some stores connect through
  :mod:`tests.support.proxy`, which drops a connection before or after the server answered
  its COMMIT, or drops it and refuses connections for a while (a store with a short
  retry budget then raises ``OutcomeUnknown``); on every target, calls are
  cancelled after a random 0-20 ms. An ambiguous call (``OutcomeUnknown``, a
  cancellation) may have been applied or not: an append is settled by repeating the
  identical call (its ``message_id``), which must return its sequence exactly once;
  an ADK append by repeating the identical ``Event`` (stored once); a checkpoint,
  create, delete, rein save or OpenAI add by reading back (each carries content of
  its own). ``StorageUnavailable`` promises nothing was committed: that is checked
  before the call is repeated.
- **Checked after every step** (:mod:`tests.support.history_model`): every session's
  counter row, raw log, checkpoint, summary, rein row, OpenAI items and ADK events
  equal the model's: no
  acknowledged write lost or duplicated, sequences gap-free per generation and never
  reused, checkpoint versions and ids never reused, no deleted session back; every
  error raised is the chatledger error the model expects (never a raw
  ``sqlalchemy.exc`` one).

Each hypothesis example works in a fresh id namespace on the target's one database
(with ids that differ only by case or a trailing space). The state machine is
synchronous: every step runs on one event loop of its own thread (anyio's blocking
portal), kept for the test; each example's stores are closed in ``teardown``.

Examples are derandomized (the same histories every run, so CI is reproducible;
timing of faults and concurrency still varies). ``CHATLEDGER_HISTORY_EXAMPLES``
(default 10) and ``CHATLEDGER_HISTORY_STEPS`` (default 20) set the budget per target;
``CHATLEDGER_HISTORY_RANDOM=1`` draws new histories each run: ``make soak``.
"""

from __future__ import annotations

import asyncio
import functools
import io
import itertools
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from anyio.from_thread import BlockingPortal, start_blocking_portal
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from rein import Session
from rich.console import Console
from sqlalchemy import select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.persistence import SessionView
from zett_agent.messages import UserMessage

from chatledger import (
    ChatledgerError,
    OutcomeUnknown,
    SessionDeleted,
    SnapshotConflict,
    StorageUnavailable,
    VersionConflict,
)
from chatledger.adk import LedgerSessionService
from chatledger.engine import Ledger
from chatledger.migrate import upgrade_database
from chatledger.openai_agents import LedgerSession
from chatledger.rein import LedgerSessionStore
from chatledger.schema import rein_sessions_table, sessions_table
from chatledger.testing.adk import event as adk_event
from chatledger.tools import sessions as session_tools
from chatledger.tools.transfer import ImportReport, copy, export, import_file
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.fresh import fresh_database
from .support.history_model import Checkpoint, LogModel, Message, ReinModel, ZettModel
from .support.proxy import COMMIT, Proxy, commit_point

EXAMPLES = int(os.environ.get("CHATLEDGER_HISTORY_EXAMPLES", "10"))
STEPS = int(os.environ.get("CHATLEDGER_HISTORY_STEPS", "20"))
#: New histories each run (the soak); never in CI, which must be reproducible.
RANDOM = os.environ.get("CHATLEDGER_HISTORY_RANDOM", "") == "1" and os.environ.get("CI") != "true"

#: The ids of one example's sessions, after its namespace: two that differ only by
#: case, one only by a trailing space.
SUFFIXES = ("a", "A", "a ", "b")
#: What a purge selects, after the namespace ("": the whole namespace).
PURGE_PREFIXES = ("", "a", "A", "b")
#: The faults a group of calls may meet (on the server targets; SQLite has no proxy).
FAULTS = ("none", "none", "none", "drop-before", "drop-after-commit", "unreachable")
#: Seconds after which a call is cancelled (``None``: it is not).
CANCELS = (None,) * 20 + (0.0, 0.002, 0.005, 0.01, 0.02)
#: The errors ADK's own services raise, which chatledger's raises as they do.
ADK_ERRORS = AlreadyExistsError | SessionNotFoundError | StaleSessionError
#: The app and user of the histories' ADK sessions.
ADK_APP, ADK_USER = "history", "u"
#: The retry budget of the stores that meet "unreachable": short, so that they give up.
SHORT_BUDGET = 0.5
#: How long the proxy refuses connections in "unreachable", in seconds.
REFUSED_FOR = 1.0
#: Seconds any one step may take before the test fails.
TIMEOUT = 120.0

keys = st.integers(0, len(SUFFIXES) - 1)
stores = st.integers(0, 2)
faults = st.sampled_from(FAULTS)
cancels = st.sampled_from(CANCELS)


def purge_sessions(url: URL, prefix: str, *, older_than_zero: bool) -> Awaitable[Any]:
    """Purge the zett and rein sessions whose id starts with ``prefix`` (and, with
    ``older_than_zero``, were last active before the call): the one call the lead
    swaps for the library's conditional purge (issue 17, branch purge)."""
    return session_tools.purge(
        url,
        Console(file=io.StringIO()),
        older_than=session_tools.parse_age("0s") if older_than_zero else None,
        prefix=prefix,
        dry_run=False,
        yes=True,
    )


# -- one call and its outcome -----------------------------------------------------------


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None

    @property
    def ambiguous(self) -> bool:
        """Applied or not: a cancellation, or a COMMIT whose answer was lost."""
        return isinstance(self.error, asyncio.CancelledError | OutcomeUnknown)

    @property
    def unavailable(self) -> bool:
        """``StorageUnavailable`` proper: nothing of the call was committed."""
        return isinstance(self.error, StorageUnavailable) and not isinstance(self.error, OutcomeUnknown)


def expect_error(outcome: Outcome, *allowed: type[BaseException], what: str) -> None:
    """The call raised one of ``allowed`` (and, as every error, a chatledger error or a
    documented ``ValueError``), not a raw driver error or anything else."""
    error = outcome.error
    assert error is not None, f"{what}: returned {outcome.value!r}, expected one of {allowed}"
    assert not isinstance(error, SQLAlchemyError), f"{what}: a raw sqlalchemy error escaped: {error!r}"
    assert isinstance(error, allowed), f"{what}: raised {type(error).__name__}: {error}; expected {allowed}"
    assert isinstance(
        error, ChatledgerError | ValueError | TypeError | asyncio.CancelledError | ADK_ERRORS
    ), error


def no_surprise(outcome: Outcome, what: str) -> None:
    """A call that may only succeed, be ambiguous or be unavailable raised nothing else."""
    if outcome.error is not None and not outcome.ambiguous and not outcome.unavailable:
        expect_error(outcome, OutcomeUnknown, what=what)


# -- the world of one test: its database, a proxy, a second database, observers ----------


@dataclass
class World:
    database: Database
    url: URL
    #: The same database through the proxy (``None`` on SQLite).
    proxy: Proxy | None
    mirror: URL
    tmp: Path
    observer: LedgerSessionStorage
    rein_observer: LedgerSessionStore
    mirror_observer: LedgerSessionStorage
    mirror_rein_observer: LedgerSessionStore
    #: The OpenAI Agents and ADK readers of the database and of the mirror.
    openai_observers: tuple[Ledger, Ledger]
    adk_observers: tuple[LedgerSessionService, LedgerSessionService]
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    #: What the histories met: outcomes per call kind, faults met (printed at the end).
    tally: Counter[str] = field(default_factory=Counter)

    @property
    def proxied(self) -> URL:
        return self.proxy.url(self.url) if self.proxy is not None else self.url

    async def quiesce(self) -> None:
        """Wait until no other transaction is open on the database: a cancelled call, or
        one whose connection the proxy dropped, may have sent its COMMIT, which the
        server then finishes (or rolls back) after the call ended; only after that does
        reading back say whether it was applied. Fails, naming them, when transactions
        stay open for :data:`QUIESCE_WITHIN` seconds (a transaction leaked, holding its
        locks)."""
        if facts_of(self.database.backend).file_write_lock:
            # The write lock: granted once a writer still committing is done.
            await self.observer.ledger.write(_nothing)
            return
        query = text(BUSY[self.database.backend])
        deadline = time.monotonic() + QUIESCE_WITHIN
        while True:
            busy = await self.observer.ledger.read(lambda conn: _rows(conn, query))
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"transactions still open {QUIESCE_WITHIN} s after the calls ended: {busy}"
                )
            await asyncio.sleep(0.02)


#: Other connections of the database inside a transaction or a statement.
BUSY = {
    "postgresql": "SELECT pid, state, xact_start, left(query, 200) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'",
    "mysql": "SELECT id, command, state, left(info, 200) FROM information_schema.processlist "
    "WHERE db = DATABASE() AND id <> CONNECTION_ID() AND (command <> 'Sleep' OR id IN "
    "(SELECT trx_mysql_thread_id FROM information_schema.innodb_trx))",
}
#: Seconds a transaction may stay open after the calls of a step ended.
QUIESCE_WITHIN = 30.0


async def _nothing(conn: AsyncConnection) -> None:
    return None


async def _rows(conn: AsyncConnection, query: Any) -> list[Any]:
    return list(await conn.execute(query))


class HistoryProxy(Proxy):
    """:class:`tests.support.proxy.Proxy`, which also drops the server's side when the client's
    side of a connection fails (a reset): a client that aborts its socket -- as a
    cancelled call's driver may -- is gone, and a real network lets the server see it.
    (``Proxy`` keeps that server connection open, so its transaction holds its locks
    until the proxy closes: an artefact of the proxy, not of the store.)"""

    async def _to_server(self, pair: Any, reader: asyncio.StreamReader) -> None:
        try:
            await super()._to_server(pair, reader)
        finally:
            if not pair.swallow:  # a COMMIT under way: _to_client drops both once answered
                pair.close()


@asynccontextmanager
async def running_history_proxy(upstream: URL) -> AsyncIterator[Proxy]:
    proxy = HistoryProxy(upstream.host or "127.0.0.1", upstream.port or PORTS[upstream.get_backend_name()])
    await proxy.accept()
    try:
        yield proxy
    finally:
        await proxy.close()


PORTS = {"postgresql": 5432, "mysql": 3306}


async def open_world(database: Database, tmp: Path) -> World:
    stack = AsyncExitStack()
    proxy = await stack.enter_async_context(running_history_proxy(database.url)) if database.server else None
    mirror = await stack.enter_async_context(fresh_database(database.server, tmp, prefix="chatledger_mirror"))
    await upgrade_database(mirror)
    observers = [LedgerSessionStorage(url, load_cache_messages=0) for url in (database.url, mirror)]
    rein_observers = [LedgerSessionStore(url) for url in (database.url, mirror)]
    for observer in observers:
        stack.push_async_callback(observer.close)
    for rein_observer in rein_observers:
        stack.push_async_callback(rein_observer.aclose)
    ledgers = (Ledger(database.url), Ledger(mirror))
    services = (LedgerSessionService(database.url), LedgerSessionService(mirror))
    for ledger in ledgers:
        stack.push_async_callback(ledger.close)
    for service in services:
        stack.push_async_callback(service.close)
    return World(
        database, database.url, proxy, mirror, tmp, observers[0], rein_observers[0], observers[1],
        rein_observers[1], ledgers, services, stack,
    )  # fmt: skip


async def close_world(world: World) -> None:
    await world.stack.aclose()


async def _keep_reopening(proxy: Proxy) -> None:
    """Accept connections again :data:`REFUSED_FOR` seconds after the proxy began refusing."""
    while True:
        await asyncio.sleep(0.05)
        refusing = proxy.events("refusing")
        if proxy._server is None and refusing and time.monotonic() - refusing[-1] >= REFUSED_FOR:
            await proxy.accept()


async def _one(call: Callable[[], Awaitable[Any]], cancel: float | None) -> Outcome:
    task = asyncio.ensure_future(call())
    if cancel is not None:
        await asyncio.wait({task}, timeout=cancel)
        task.cancel()
    try:
        return Outcome(value=await task)
    except asyncio.CancelledError as error:
        if not task.cancelled():
            raise
        return Outcome(error=error)
    except Exception as error:
        return Outcome(error=error)


# -- the machine --------------------------------------------------------------------------


@dataclass(frozen=True)
class Export:
    path: Path
    #: ("zett" / "rein", id) -> the session's revision when exported.
    revisions: dict[tuple[str, str], int]


class HistoryMachine(RuleBasedStateMachine):
    world: ClassVar[World]
    portal: ClassVar[BlockingPortal]

    def __init__(self) -> None:
        super().__init__()
        world = self.world
        self.ns = f"h{uuid.uuid4().hex[:10]}/"
        self.ids = [self.ns + suffix for suffix in SUFFIXES]
        self.zett = {id: ZettModel() for id in self.ids}
        self.rein = {id: ReinModel() for id in self.ids}
        self.openai = {id: LogModel() for id in self.ids}
        self.adk = {id: LogModel() for id in self.ids}
        #: Every kind's models, by the kind's name (what export and copy count).
        self.models: dict[str, dict[str, Any]] = {
            "zett": self.zett, "rein": self.rein, "openai": self.openai, "adk": self.adk,
        }  # fmt: skip
        # Store 0 direct; on the servers 1 through the proxy, 2 through it with a short
        # retry budget (the one that gives up: OutcomeUnknown).
        self.stores = [
            LedgerSessionStorage(world.url),
            LedgerSessionStorage(world.proxied),
            LedgerSessionStorage(world.proxied, retry_timeout=SHORT_BUDGET),
        ]
        self.rein_stores = [
            LedgerSessionStore(world.url),
            LedgerSessionStore(world.proxied, retry_timeout=SHORT_BUDGET),
        ]
        # As the zett stores: direct, through the proxy, through it with a short budget.
        self.ledgers = [
            Ledger(world.url),
            Ledger(world.proxied),
            Ledger(world.proxied, retry_timeout=SHORT_BUDGET),
        ]
        self.services = [
            LedgerSessionService(world.url),
            LedgerSessionService(world.proxied, retry_timeout=SHORT_BUDGET),
        ]
        #: A step wrote OpenAI or ADK sessions: the invariant reads them back.
        self.logs_changed = False
        self.counter = itertools.count(1)
        self.checkpoint_ids: set[str] = set()
        self.exports: list[Export] = []
        #: What the mirror database holds of this namespace: (kind, id) -> the model then.
        self.mirrored: dict[tuple[str, str], ZettModel | ReinModel | LogModel] = {}
        self.events: list[str] = []

    def run(self, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        async def bounded() -> Any:
            return await asyncio.wait_for(function(*args), TIMEOUT)

        try:
            return self.portal.call(bounded)
        finally:
            for name in self.events:
                event(name)
                self.world.tally[name] += 1
            self.events.clear()

    def teardown(self) -> None:
        async def close() -> None:
            for store in self.stores:
                await store.close()
            for rein_store in self.rein_stores:
                await rein_store.aclose()
            for ledger in self.ledgers:
                await ledger.close()
            for service in self.services:
                await service.close()

        self.portal.call(close)

    # -- running a group of calls under a fault ----------------------------------------

    async def group(
        self,
        calls: Sequence[tuple[Callable[[], Awaitable[Any]], float | None]],
        fault: str,
        label: str,
        commit: re.Pattern[bytes] = COMMIT,
    ) -> list[Outcome]:
        """Run ``calls`` at once (each cancelled after its delay, if any) under ``fault``,
        which acts on the message ``commit`` matches (:func:`commit_point`); then wait for
        the database to finish what they sent (:meth:`World.quiesce`)."""
        proxy = self.world.proxy
        met = len(proxy.log) if proxy is not None else 0
        reopening: asyncio.Task[None] | None = None
        if proxy is not None and fault != "none":
            if fault == "unreachable":
                proxy.arm("drop-after-commit", commit, refuse_after=True)
                reopening = asyncio.create_task(_keep_reopening(proxy))
            else:
                proxy.arm(fault, commit)
        try:
            outcomes = list(await asyncio.gather(*(_one(call, cancel) for call, cancel in calls)))
            if fault != "none" or any(cancel is not None for _, cancel in calls):
                await self.world.quiesce()
            for outcome in outcomes:
                self.events.append(f"{label}: {type(outcome.error).__name__ if outcome.error else 'ok'}")
            if proxy is not None and fault != "none":
                hit = any(event in ("dropped before", "commit answered") for _, event in proxy.log[met:])
                self.events.append(f"fault {fault}: {'met' if hit else 'not met'}")
            return outcomes
        finally:
            if proxy is not None:
                proxy._plan = None
                if reopening is not None:
                    reopening.cancel()
                if proxy._server is None:
                    await proxy.accept()

    def through(self, store: int, fault: str, *, rein: bool = False) -> int:
        """The store a group's first call uses: under a fault, one behind the proxy (for
        "unreachable", the one with the short retry budget, which gives up)."""
        if fault == "none" or self.world.proxy is None:
            return store
        if rein:
            return 1
        return 2 if fault == "unreachable" else max(store, 1)

    def fresh_text(self, kind: str) -> str:
        return f"{kind}{next(self.counter)}"

    # -- zett: append -----------------------------------------------------------------

    @rule(
        calls=st.lists(st.tuples(stores, keys, cancels), min_size=1, max_size=3),
        fault=faults,
        reader=st.booleans(),
    )
    def appends(self, calls: list[tuple[int, int, float | None]], fault: str, reader: bool) -> None:
        """Up to three appends at once, from different stores, to one session or several;
        with ``reader``, a load of the first one's session runs alongside."""
        self.run(self._appends, calls, fault, reader)

    @rule(store=stores, key=keys)
    def append(self, store: int, key: int) -> None:
        """One append, without fault: histories grow sessions long enough to checkpoint."""
        self.run(self._appends, [(store, key, None)], "none", False)

    async def _appends(self, calls: list[tuple[int, int, float | None]], fault: str, reader: bool) -> None:
        plan = [
            (
                self.through(store, fault) if n == 0 else store,
                self.ids[key],
                Message(str(uuid.uuid4()), self.fresh_text("m")),
                cancel,
            )
            for n, (store, key, cancel) in enumerate(calls)
        ]
        before = {id: self.zett[id].frozen() for _, id, _, _ in plan}

        def append(store: int, id: str, message: Message) -> Callable[[], Awaitable[int]]:
            return lambda: self.stores[store].append(
                id, "r", UserMessage(content=message.content), message_id=message.message_id
            )

        group = [(append(store, id, message), cancel) for store, id, message, cancel in plan]
        if reader:
            group.append((lambda: self.stores[0].load(plan[0][1]), None))
        # The first append's commit: its one statement on a live session; else (a new
        # session or a tombstone, where that statement writes nothing) its transaction's.
        first_store, first_id, first_message, _ = plan[0]
        live = self.zett[first_id].live
        commit = commit_point(self.stores[first_store].ledger, first_message.message_id) if live else COMMIT
        outcomes = await self.group(group, fault, "append", commit)
        for id, model in before.items():
            mine = [
                (store, message, outcomes[n])
                for n, (store, each, message, _) in enumerate(plan)
                if each == id
            ]
            await self._settle_appends(id, model, mine)
        if reader:
            view = outcomes[-1]
            assert view.error is None, f"a load alongside appends raised {view.error!r}"
            self._check_prefix_view(view.value, before[plan[0][1]], self.zett[plan[0][1]])

    async def _settle_appends(
        self, id: str, before: ZettModel, calls: list[tuple[int, Message, Outcome]]
    ) -> None:
        acknowledged: dict[int, Message] = {}
        for store, message, outcome in calls:
            what = f"append of {message.content} to {id!r}"
            if (before.row and not before.live) or before.marked:
                # A tombstone (or its mark): never revived by an append, not even one repeated.
                if outcome.ambiguous or outcome.unavailable:
                    outcome = await _one(functools.partial(self._repeat_append, store, id, message), None)
                expect_error(outcome, SessionDeleted, what=what)
                continue
            if isinstance(outcome.error, OutcomeUnknown):
                assert outcome.error.write_id == message.message_id, (what, outcome.error.write_id)
            if outcome.unavailable:
                stored = await self.world.observer.list_raw_messages(id)
                assert message.message_id not in {r.id for r in stored}, (
                    f"{what}: StorageUnavailable, yet stored"
                )
            if outcome.ambiguous or outcome.unavailable:
                # Repeat the identical call: its sequence, stored once.
                outcome = Outcome(value=await self._repeat_append(store, id, message))
            assert outcome.error is None, f"{what}: raised {outcome.error!r}"
            sequence = outcome.value
            assert isinstance(sequence, int), (what, outcome)
            assert sequence not in acknowledged, f"{what}: sequence {sequence} acknowledged twice"
            acknowledged[sequence] = message
        model = self.zett[id]
        expected = list(range(model.last + 1, model.last + 1 + len(acknowledged)))
        assert sorted(acknowledged) == expected, (
            f"appends to {id!r}: sequences {sorted(acknowledged)}, expected {expected}"
        )
        for sequence in expected:
            assert model.append(acknowledged[sequence]) == sequence

    async def _repeat_append(self, store: int, id: str, message: Message) -> int:
        return await self.stores[store].append(
            id, "r", UserMessage(content=message.content), message_id=message.message_id
        )

    def _check_prefix_view(self, view: SessionView, before: ZettModel, after: ZettModel) -> None:
        """A load alongside appends sees the log before them plus a prefix of what they
        appended, never a gap or a message not acknowledged."""
        if not before.live and not after.live:
            assert view.snapshot is None and view.raw_tail == [], view
            return
        tail = [(r.sequence, r.id, r.message.content) for r in view.raw_tail]
        if not before.live and not tail:
            return
        expected = [record for record in after.records() if record[0] > after.boundary]
        already = [record for record in before.records() if record[0] > before.boundary]
        assert tail == expected[: len(tail)] and len(tail) >= len(already), (tail, expected, already)

    # -- zett: snapshot -----------------------------------------------------------------

    @rule(
        key=keys,
        writers=st.lists(st.tuples(stores, cancels), min_size=1, max_size=2),
        pick=st.integers(0, 2**16),
        version=st.sampled_from(["current", "current", "current", "stale", "old-generation"]),
        fault=faults,
    )
    def snapshots(
        self, key: int, writers: list[tuple[int, float | None]], pick: int, version: str, fault: str
    ) -> None:
        """One or two checkpoints at once, with the same ``expected_version``."""
        writers = [(self.through(writers[0][0], fault), writers[0][1]), *writers[1:]]
        id = self.ids[key]
        if version == "current":
            # Mostly a session that has messages to compact, so that checkpoints are stored.
            ready = [each for each, model in self.zett.items() if model.live and model.last > model.boundary]
            id = ready[pick % len(ready)] if ready and pick % 4 else id
        self.run(self._snapshots, id, writers, pick, version, fault)

    async def _snapshots(
        self, id: str, writers: list[tuple[int, float | None]], pick: int, version: str, fault: str
    ) -> None:
        model = self.zett[id]
        expected_version = model.version
        boundary = model.last + 1  # names no sequence: refused
        if model.live and model.last > model.boundary:
            boundary = model.boundary + 1 + pick % (model.last - model.boundary)
        if version == "stale":
            expected_version = model.version - 1 if model.version else model.version + 1
        elif version == "old-generation" and model.base:
            boundary = 1 + pick % model.base  # computed before the delete
        contents = [self.fresh_text("c") for _ in writers]

        def snapshot(store: int, content: str) -> Callable[[], Awaitable[Any]]:
            return lambda: self.stores[store].snapshot(
                id, CompactedMessage(content=content), boundary, expected_version
            )

        outcomes = await self.group(
            [
                (snapshot(store, content), cancel)
                for (store, cancel), content in zip(writers, contents, strict=True)
            ],
            fault,
            "snapshot",
        )
        what = f"checkpoint of {id!r} through {boundary} at version {expected_version} ({version})"
        refusal: tuple[type[BaseException], ...] | None = None
        if not model.row:
            refusal = (ValueError,)
        elif not model.live:
            refusal = (SessionDeleted,)
        elif expected_version != model.version or boundary <= model.base:
            refusal = (SnapshotConflict,)
        elif not model.boundary < boundary <= model.last:
            refusal = (ValueError,)  # documented: no such sequence past the checkpoint
        view = await self.world.observer.load(id)
        stored = view.snapshot
        winners: list[Checkpoint] = []
        for outcome, content in zip(outcomes, contents, strict=True):
            if outcome.error is None:
                got = outcome.value
                assert refusal is None, f"{what}: stored {got!r}, expected {refusal}"
                winners.append(Checkpoint(got.id, got.version, got.compacted_through_sequence, content))
                assert got.compacted_message.content == content and got.session_id == id, (what, got)
            elif outcome.ambiguous or outcome.unavailable:
                # Read back: each checkpoint has its own content.
                if stored is not None and stored.compacted_message.content == content:
                    assert not outcome.unavailable, f"{what}: StorageUnavailable, yet stored"
                    if isinstance(outcome.error, OutcomeUnknown):
                        assert outcome.error.write_id == stored.id, (what, outcome.error.write_id, stored.id)
                    winners.append(
                        Checkpoint(stored.id, stored.version, stored.compacted_through_sequence, content)
                    )
                no_surprise(outcome, what)
            elif refusal is not None:
                expect_error(outcome, *refusal, what=what)
            else:  # the other writer of the same version won
                expect_error(outcome, SnapshotConflict, what=what)
        if refusal is not None:
            assert not winners, (what, winners)
            return
        # One is stored; unless every call was cancelled or lost, which may leave none.
        decided = any(o.error is None or isinstance(o.error, SnapshotConflict) for o in outcomes)
        assert len(winners) == 1 if decided else len(winners) <= 1, (
            f"{what}: {len(winners)} stored: {winners}"
        )
        if not winners:
            assert stored is None or stored.version == expected_version, (what, stored)
            return
        winner = winners[0]
        assert (winner.version, winner.boundary) == (expected_version + 1, boundary), (what, winner)
        assert winner.id not in self.checkpoint_ids, f"{what}: checkpoint id {winner.id} used before"
        self.checkpoint_ids.add(winner.id)
        model.checkpoint = winner
        model.revision += 1

    # -- zett: load, delete, create -------------------------------------------------------

    @rule(store=stores, key=keys)
    def load(self, store: int, key: int) -> None:
        id = self.ids[key]
        self.events.append("load")
        view = self.run(self.stores[store].load, id)
        check_view(view, self.zett[id], f"load of {id!r} through store {store}")

    @rule(store=stores, key=keys, fault=faults, cancel=cancels)
    def delete(self, store: int, key: int, fault: str, cancel: float | None) -> None:
        self.run(self._delete, self.through(store, fault), self.ids[key], fault, cancel)

    async def _delete(self, store: int, id: str, fault: str, cancel: float | None) -> None:
        model = self.zett[id]
        (outcome,) = await self.group(
            [(lambda: self.stores[store].delete_session(id), cancel)], fault, "delete"
        )
        what = f"delete of {id!r}"
        if outcome.ambiguous or outcome.unavailable:
            live = await self.world.observer.get_session(id) is not None
            assert not (outcome.unavailable and model.live and not live), (
                f"{what}: StorageUnavailable, yet applied"
            )
            no_surprise(outcome, what)
            if not live or not model.live:
                if model.live:
                    model.delete()
                return
            outcome = await _one(lambda: self.stores[store].delete_session(id), None)  # repeat
        assert outcome.error is None, f"{what}: raised {outcome.error!r}"
        assert outcome.value is model.live, (
            f"{what}: returned {outcome.value}, the session was live: {model.live}"
        )
        if model.live:
            model.delete()

    @rule(store=stores, key=keys, session_type=st.integers(0, 3), fault=faults, cancel=cancels)
    def create(self, store: int, key: int, session_type: int, fault: str, cancel: float | None) -> None:
        self.run(self._create, self.through(store, fault), self.ids[key], session_type, fault, cancel)

    async def _create(self, store: int, id: str, session_type: int, fault: str, cancel: float | None) -> None:
        model = self.zett[id]

        def create() -> Awaitable[Any]:
            return self.stores[store].create_session(session_id=id, session_type=session_type)

        (outcome,) = await self.group([(create, cancel)], fault, "create")
        what = f"create of {id!r}"
        if model.live:
            if outcome.ambiguous or outcome.unavailable:
                outcome = await _one(create, None)
            expect_error(outcome, ValueError, what=what)  # documented: "Session already exists"
            assert "already exists" in str(outcome.error), outcome.error
            return
        if outcome.ambiguous or outcome.unavailable:
            summary = await self.world.observer.get_session(id)
            if summary is not None:
                assert not outcome.unavailable, f"{what}: StorageUnavailable, yet applied"
                assert (summary.session_type, summary.message_count) == (session_type, 0), summary
                model.create(session_type)
                return
            no_surprise(outcome, what)
            outcome = await _one(create, None)  # repeat
        assert outcome.error is None, f"{what}: raised {outcome.error!r}"
        summary = outcome.value
        assert (summary.session_id, summary.session_type, summary.message_count) == (id, session_type, 0)
        model.create(session_type)

    # -- rein -------------------------------------------------------------------------

    @rule(
        calls=st.lists(st.tuples(st.integers(0, 1), keys, cancels), min_size=1, max_size=3),
        mode=st.sampled_from(["plain", "plain", "compare-and-set", "stale"]),
        fault=faults,
    )
    def rein_saves(self, calls: list[tuple[int, int, float | None]], mode: str, fault: str) -> None:
        """Up to three rein saves at once: plain ones (last writer wins), or
        compare-and-set ones with the version read before (one wins per id), or with a
        stale version (none does)."""
        calls = [(self.through(calls[0][0], fault, rein=True), *calls[0][1:]), *calls[1:]]
        self.run(self._rein_saves, calls, mode, fault)

    async def _rein_saves(self, calls: list[tuple[int, int, float | None]], mode: str, fault: str) -> None:
        plan = [(store, self.ids[key], next(self.counter), cancel) for store, key, cancel in calls]
        before = {id: self.rein[id].frozen() for _, id, _, _ in plan}
        expected_version: dict[str, int | None] = {}
        for id, model in before.items():
            if mode == "plain":
                expected_version[id] = None
            elif mode == "compare-and-set":
                expected_version[id] = model.version if model.live else 0
            else:
                expected_version[id] = (model.version - 1) if model.live else max(model.version, 1)

        def save(store: int, id: str, iteration: int) -> Callable[[], Awaitable[None]]:
            return lambda: self.rein_stores[store].asave(
                id, Session(iteration=iteration), expected_version=expected_version[id]
            )

        outcomes = await self.group(
            [(save(s, id, it), cancel) for s, id, it, cancel in plan], fault, "rein save"
        )
        for id, model in before.items():
            what = f"rein saves of {id!r} ({mode}, expected_version {expected_version[id]})"
            mine = [(it, outcomes[n]) for n, (_, each, it, _) in enumerate(plan) if each == id]
            acknowledged = [it for it, outcome in mine if outcome.error is None]
            maybe = [it for it, outcome in mine if outcome.ambiguous]
            for _, outcome in mine:
                if outcome.error is not None and not outcome.ambiguous and not outcome.unavailable:
                    expect_error(outcome, VersionConflict, what=what)
            found = await self.world.rein_observer.aload_versioned(id)
            applied = 0 if found is None else found.version - model.version
            if found is None:
                assert not acknowledged and not model.live, (what, acknowledged)
                continue
            assert len(acknowledged) <= applied <= len(acknowledged) + len(maybe), (
                what,
                applied,
                acknowledged,
                maybe,
            )
            if mode == "compare-and-set":
                # One wins; unless every call was cancelled or lost, which may leave none.
                decided = any(o.error is None or isinstance(o.error, VersionConflict) for _, o in mine)
                assert applied == 1 if decided else applied <= 1, f"{what}: {applied} saves applied"
            elif mode == "stale":
                assert applied == 0, f"{what}: a stale save applied"
            if applied:
                assert found.session.iteration in acknowledged + maybe, (what, found)
                current = self.rein[id]
                current.version += applied - 1
                current.save(found.session.iteration)
                current.revision += applied - 1

    @rule(store=st.integers(0, 1), key=keys, fault=faults, cancel=cancels)
    def rein_delete(self, store: int, key: int, fault: str, cancel: float | None) -> None:
        self.run(self._rein_delete, self.through(store, fault, rein=True), self.ids[key], fault, cancel)

    async def _rein_delete(self, store: int, id: str, fault: str, cancel: float | None) -> None:
        model = self.rein[id]
        (outcome,) = await self.group(
            [(lambda: self.rein_stores[store].adelete(id), cancel)], fault, "rein delete"
        )
        what = f"rein delete of {id!r}"
        if outcome.ambiguous or outcome.unavailable:
            live = await self.world.rein_observer.acontains(id)
            assert not (outcome.unavailable and model.live and not live), (
                f"{what}: StorageUnavailable, yet applied"
            )
            if model.live and not live:
                model.delete()
            no_surprise(outcome, what)
            return
        no_surprise(outcome, what)
        assert outcome.value is model.live, (what, outcome.value)
        if model.live:
            model.delete()

    @rule(store=st.integers(0, 1), key=keys)
    def rein_load(self, store: int, key: int) -> None:
        id = self.ids[key]
        found = self.run(self.rein_stores[store].aload_versioned, id)
        check_rein(found, self.rein[id], f"rein load of {id!r}")

    # -- OpenAI Agents ------------------------------------------------------------------

    async def _read_log(self, kind: str, id: str, *, mirror: bool = False) -> tuple[bool, list[str]]:
        """Whether an OpenAI or ADK session is live (an OpenAI one: holds items), and the
        texts of its items or events, as the adapter reads them."""
        if kind == "openai":
            ledger = self.world.openai_observers[1 if mirror else 0]
            items = [str(item["content"]) for item in await LedgerSession(id, ledger=ledger).get_items()]
            return bool(items), items
        service = self.world.adk_observers[1 if mirror else 0]
        found = await service.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=id)
        if found is None:
            return False, []
        texts = [str(part.text) for item in found.events if item.content for part in item.content.parts or []]
        return True, texts

    async def _entries(self, kind: str, id: str) -> list[str]:
        return (await self._read_log(kind, id))[1]

    async def _check_log(
        self, kind: str, id: str, model: LogModel, what: str, *, mirror: bool = False
    ) -> None:
        assert await self._read_log(kind, id, mirror=mirror) == (model.live, model.entries), (what, model)

    @rule(
        calls=st.lists(st.tuples(stores, keys, st.integers(1, 2), cancels), min_size=1, max_size=3),
        fault=faults,
    )
    def openai_adds(self, calls: list[tuple[int, int, int, float | None]], fault: str) -> None:
        """Up to three OpenAI adds (of one or two items) at once, from different ledgers."""
        calls = [(self.through(calls[0][0], fault), *calls[0][1:]), *calls[1:]]
        self.run(self._openai_adds, calls, fault)

    async def _openai_adds(self, calls: list[tuple[int, int, int, float | None]], fault: str) -> None:
        self.logs_changed = True
        plan = [
            (store, self.ids[key], [self.fresh_text("o") for _ in range(count)], cancel)
            for store, key, count, cancel in calls
        ]

        def add(store: int, id: str, texts: list[str]) -> Callable[[], Awaitable[None]]:
            session = LedgerSession(id, ledger=self.ledgers[store])
            return lambda: session.add_items([{"role": "user", "content": text} for text in texts])

        outcomes = await self.group(
            [(add(store, id, texts), cancel) for store, id, texts, cancel in plan], fault, "openai add"
        )
        for id in dict.fromkeys(id for _, id, _, _ in plan):
            model = self.openai[id]
            mine = [(texts, outcomes[n]) for n, (_, each, texts, _) in enumerate(plan) if each == id]
            what = f"openai adds to {id!r}"
            stored = await self._entries("openai", id)
            kept = model.entries if model.live else []
            assert stored[: len(kept)] == kept, (what, stored, model)
            # What follows: the adds applied, each whole, in one piece, once.
            rest, applied = stored[len(kept) :], []
            while rest:
                match = [texts for texts, _ in mine if texts[0] == rest[0] and texts not in applied]
                assert match and rest[: len(match[0])] == match[0], (what, stored, mine)
                applied.append(match[0])
                rest = rest[len(match[0]) :]
            for texts, outcome in mine:
                if outcome.error is None:
                    assert texts in applied, f"{what}: {texts} acknowledged, not stored: {stored}"
                elif outcome.unavailable:
                    assert texts not in applied, f"{what}: {texts} StorageUnavailable, yet stored"
                else:
                    no_surprise(outcome, what)
            for texts in applied:
                model.add(texts)

    @rule(store=stores, key=keys, fault=faults, cancel=cancels)
    def openai_clear(self, store: int, key: int, fault: str, cancel: float | None) -> None:
        """Clear an OpenAI session that holds items (the first such from ``key`` on)."""
        live = [id for id in self.ids[key:] + self.ids[:key] if self.openai[id].live]
        if not live:
            self.events.append("openai clear: nothing to clear")
            return
        id = live[0]
        self.run(self._openai_clear, self.through(store, fault), id, fault, cancel)

    async def _openai_clear(self, store: int, id: str, fault: str, cancel: float | None) -> None:
        self.logs_changed = True
        model = self.openai[id]
        session = LedgerSession(id, ledger=self.ledgers[store])
        (outcome,) = await self.group([(session.clear_session, cancel)], fault, "openai clear")
        what = f"openai clear of {id!r}"
        if outcome.error is not None:
            no_surprise(outcome, what)
            stored = await self._entries("openai", id)
            if stored == model.entries:
                return  # not applied
            assert not outcome.unavailable and stored == [], (what, stored, model)
        model.delete()

    # -- ADK ------------------------------------------------------------------------------

    async def _adk_create(self, id: str) -> None:
        model = self.adk[id]
        create = functools.partial(
            self.services[0].create_session, app_name=ADK_APP, user_id=ADK_USER, session_id=id
        )
        outcome = await _one(create, None)
        self.events.append(f"adk create: {type(outcome.error).__name__ if outcome.error else 'ok'}")
        if model.live:
            expect_error(outcome, AlreadyExistsError, what=f"adk create of live {id!r}")
            return
        assert outcome.error is None, f"adk create of {id!r}: raised {outcome.error!r}"
        model.create()

    @rule(store=st.integers(0, 1), key=keys, fault=faults, cancel=cancels)
    def adk_append(self, store: int, key: int, fault: str, cancel: float | None) -> None:
        """One ADK append from a session just read (created first, or again, when there
        is none: a create of a live one is refused); an ambiguous one is settled by
        repeating the identical ``Event``, which must be stored once."""
        self.run(
            self._adk_append,
            1 if fault != "none" and self.world.proxy else store,
            self.ids[key],
            fault,
            cancel,
        )

    async def _adk_append(self, store: int, id: str, fault: str, cancel: float | None) -> None:
        self.logs_changed = True
        model = self.adk[id]
        service = self.services[store]
        get = functools.partial(service.get_session, app_name=ADK_APP, user_id=ADK_USER, session_id=id)
        if not model.live or store == 0:
            await self._adk_create(id)
        session = await get()
        assert session is not None, f"adk session {id!r} lost"
        text = self.fresh_text("e")
        made = adk_event(text)
        (outcome,) = await self.group(
            [(lambda: service.append_event(session, made), cancel)], fault, "adk append"
        )
        what = f"adk append of {text} to {id!r}"
        if outcome.error is not None:
            no_surprise(outcome, what)
            if outcome.unavailable:
                assert text not in await self._entries("adk", id), f"{what}: StorageUnavailable, yet stored"
            again = await get()  # the identical Event, from the session as stored now
            assert again is not None, what
            outcome = await _one(lambda: service.append_event(again, made), None)
        assert outcome.error is None, f"{what}: raised {outcome.error!r}"
        model.add([text])

    @rule(store=st.integers(0, 1), key=keys, fault=faults, cancel=cancels)
    def adk_delete(self, store: int, key: int, fault: str, cancel: float | None) -> None:
        self.run(
            self._adk_delete,
            1 if fault != "none" and self.world.proxy else store,
            self.ids[key],
            fault,
            cancel,
        )

    async def _adk_delete(self, store: int, id: str, fault: str, cancel: float | None) -> None:
        self.logs_changed = True
        model = self.adk[id]
        service = self.services[store]
        delete = functools.partial(service.delete_session, ADK_APP, ADK_USER, id)
        (outcome,) = await self.group([(delete, cancel)], fault, "adk delete")
        what = f"adk delete of {id!r}"
        if outcome.error is not None:
            no_surprise(outcome, what)
            live, _ = await self._read_log("adk", id)
            assert not (outcome.unavailable and model.live and not live), (
                f"{what}: StorageUnavailable, yet applied"
            )
            if model.live and not live:
                model.delete()
            return
        if model.live:
            model.delete()

    # -- purge ------------------------------------------------------------------------

    @rule(
        prefix=st.sampled_from(PURGE_PREFIXES),
        older_than_zero=st.booleans(),
        racer=st.none() | st.tuples(stores, keys, st.sampled_from([0.0, 0.005, 0.02, 0.05])),
    )
    def purge(self, prefix: str, older_than_zero: bool, racer: tuple[int, int, float] | None) -> None:
        """Purge by prefix (and last activity before now); with ``racer``, an append
        runs alongside: an acknowledged append makes its session active after the
        cutoff, so a purge by age must leave it (with its message)."""
        racer = racer if older_than_zero else None
        self.events.append(
            f"purge{' by age' if older_than_zero else ''}{' with an append racing' if racer else ''}"
        )
        self.run(self._purge, self.ns + prefix, older_than_zero, racer)

    async def _purge(self, prefix: str, older_than_zero: bool, racer: tuple[int, int, float] | None) -> None:
        self.logs_changed = True
        before = {id: model.frozen() for id, model in self.zett.items()}
        purging = purge_sessions(self.world.url, prefix, older_than_zero=older_than_zero)
        racing: tuple[str, Message, Outcome] | None = None
        if racer is None:
            await purging
        else:
            store, key, delay = racer
            id, message = self.ids[key], Message(str(uuid.uuid4()), self.fresh_text("m"))

            async def append() -> int:
                await asyncio.sleep(delay)
                return await self.stores[store].append(
                    id, "r", UserMessage(content=message.content), message_id=message.message_id
                )

            status, outcome = await asyncio.gather(purging, _one(append, None))
            assert status == 0
            racing = (id, message, outcome)
        active = None
        if racing is not None:
            id, message, outcome = racing
            what = f"append of {message.content} to {id!r} alongside a purge"
            model = self.zett[id]
            if (before[id].row and not before[id].live) or before[id].marked:
                expect_error(outcome, SessionDeleted, what=what)
            elif outcome.error is None:
                assert model.append(message) == outcome.value, (what, outcome.value, model.last)
                active = id
            else:  # the purge deleted it first
                expect_error(outcome, SessionDeleted, what=what)
                assert before[id].live and id.startswith(prefix), what
        rows = await self._zett_rows()
        for id, model in self.zett.items():
            selected = model.live and id.startswith(prefix) and id != active
            live = rows.get(id) is not None and rows[id].deleted_at is None
            if selected:
                assert not live, f"purge of {prefix!r} left {id!r}"
                model.delete()
            elif model.live and not live:
                raise AssertionError(
                    f"purge of {prefix!r} (older than 0 s: {older_than_zero}) deleted {id!r}"
                )
        for id, rein in self.rein.items():
            live = await self.world.rein_observer.acontains(id)
            if rein.live and id.startswith(prefix):
                assert not live, f"purge of {prefix!r} left rein session {id!r}"
                rein.delete()
            elif rein.live and not live:
                raise AssertionError(f"purge of {prefix!r} deleted rein session {id!r}")
        for kind in ("openai", "adk"):
            for id, log in self.models[kind].items():
                live, _ = await self._read_log(kind, id)
                if log.live and id.startswith(prefix):
                    assert not live, f"purge of {prefix!r} left {kind} session {id!r}"
                    log.delete()
                elif log.live and not live:
                    raise AssertionError(f"purge of {prefix!r} deleted {kind} session {id!r}")

    @rule(store=stores, fault=faults)
    def purge_tombstones(self, store: int, fault: str) -> None:
        """Purge every tombstone (zett's, rein's), each replaced by its high-water mark;
        under a fault, then once more without one to finish (the purge is conditional)."""
        self.events.append("purge tombstones")
        self.run(self._purge_tombstones, self.through(store, fault), fault)

    async def _purge_tombstones(self, store: int, fault: str) -> None:
        async def purge() -> Any:
            before = datetime.now(UTC) + timedelta(seconds=1)  # every tombstone so far
            # Both to their end before the outcome: a gather that raised on one would
            # leave the other purging in the background, into the steps that follow.
            done = await asyncio.gather(
                self.stores[store].purge_tombstones(deleted_before=before),
                self.rein_stores[min(store, 1)].apurge_tombstones(deleted_before=before),
                return_exceptions=True,
            )
            for result in done:
                if isinstance(result, BaseException):
                    raise result
            return done

        (outcome,) = await self.group([(purge, None)], fault, "purge tombstones")
        if outcome.error is not None:
            # A lost COMMIT is settled: only a budget spent while unreachable ends it.
            expect_error(outcome, StorageUnavailable, what="purge of tombstones")
            outcome = await _one(purge, None)
        assert outcome.error is None, f"purge of tombstones: raised {outcome.error!r}"
        for model in [*self.zett.values(), *self.rein.values()]:
            if model.row and not model.live:
                model.purge()

    # -- export, import, copy -----------------------------------------------------------

    @rule(
        chosen=st.sets(keys, min_size=1),
        which=st.sampled_from(["this", "this", "oldest", "previous"]),
        proxied=st.booleans(),
        fault=st.sampled_from(["none", "drop-before", "drop-after-commit"]),
    )
    def export_import(self, chosen: set[int], which: str, proxied: bool, fault: str) -> None:
        """Export sessions, then import this export or an earlier one into the same
        database: nothing changes; each session is identical, or differs when it
        changed since (a deleted one is never revived)."""
        self.run(self._export_import, [self.ids[key] for key in sorted(chosen)], which, proxied, fault)

    def _revisions(self, ids: Sequence[str]) -> dict[tuple[str, str], int]:
        return {
            (kind, id): models[id].revision
            for kind, models in self.models.items()
            for id in ids
            if models[id].row
        }

    def _model(self, kind: str, id: str) -> ZettModel | ReinModel | LogModel:
        model: ZettModel | ReinModel | LogModel = self.models[kind][id]
        return model

    def _current(self, kind: str, id: str) -> int:
        return self._model(kind, id).revision

    async def _export_import(self, ids: list[str], which: str, proxied: bool, fault: str) -> None:
        self.logs_changed = True
        path = self.world.tmp / f"{self.ns.rstrip('/')}-{next(self.counter)}.jsonl"
        with path.open("w", encoding="utf-8", newline="\n") as output:
            await export(self.world.url, output, ids=ids)
        self.exports.append(Export(path, self._revisions(ids)))
        chosen = {"this": self.exports[-1], "oldest": self.exports[0], "previous": self.exports[-2:][0]}[
            which
        ]
        url = self.world.proxied if proxied else self.world.url
        (outcome,) = await self.group([(lambda: import_file(url, str(chosen.path)), None)], fault, "import")
        if outcome.error is not None:
            # Under a fault, the budget may run out (nothing is left half-imported: each
            # session is one transaction, and an import run again skips what arrived).
            expect_error(outcome, StorageUnavailable, what=f"import of {chosen.path.name} under {fault}")
            outcome = await _one(lambda: import_file(self.world.url, str(chosen.path)), None)
        assert outcome.error is None, f"import of {chosen.path.name}: raised {outcome.error!r}"
        report: ImportReport = outcome.value
        # A session whose tombstone was purged since is refused: it would reuse the mark's.
        purged = sum(self._model(kind, id).marked for kind, id in chosen.revisions)
        same = sum(
            self._current(kind, id) == revision and not self._model(kind, id).marked
            for (kind, id), revision in chosen.revisions.items()
        )
        assert (report.imported, report.failed, report.complete) == (0, purged, True), report
        assert (report.identical, report.differing) == (same, len(chosen.revisions) - same - purged), (
            report,
            chosen.revisions,
        )

    @rule(chosen=st.sets(keys, min_size=1))
    def copy_sessions(self, chosen: set[int]) -> None:
        """Copy sessions into the second database: new ones arrive exact, ones copied
        before are identical while unchanged here, else reported and left alone."""
        self.events.append("copy")
        self.run(self._copy, [self.ids[key] for key in sorted(chosen)])

    async def _copy(self, ids: list[str]) -> None:
        report = await copy(self.world.url, self.world.mirror, ids=ids)
        arrived, identical, differing = [], 0, 0
        for (kind, id), revision in self._revisions(ids).items():
            there = self.mirrored.get((kind, id))
            if there is None:
                self.mirrored[(kind, id)] = self._model(kind, id).frozen()
                arrived.append((kind, id))
            elif there.revision == revision:
                identical += 1
            else:
                differing += 1
        assert (report.imported, report.identical, report.differing, report.failed, report.complete) == (
            len(arrived), identical, differing, 0, True,
        ), (report, arrived)  # fmt: skip
        for kind, id in arrived:
            model = self.mirrored[(kind, id)]
            if isinstance(model, ZettModel):
                await check_zett(self.world.mirror_observer, id, model, f"the copy of {id!r}")
            elif isinstance(model, LogModel):
                await self._check_log(kind, id, model, f"the copy of {kind} session {id!r}", mirror=True)
            else:
                check_rein(
                    await self.world.mirror_rein_observer.aload_versioned(id), model, f"the copy of {id!r}"
                )

    # -- checked after every step --------------------------------------------------------

    async def _zett_rows(self) -> dict[str, Any]:
        s = sessions_table

        async def work(conn: AsyncConnection) -> dict[str, Any]:
            statement = select(
                s.c.id,
                s.c.last_sequence,
                s.c.base_sequence,
                s.c.snapshot_version,
                s.c.deleted_at,
                s.c.session_type,
            ).where(s.c.id.in_(self.ids))
            return {row.id: row for row in await conn.execute(statement)}

        return dict(await self.world.observer.ledger.read(work))

    async def _rein_rows(self) -> dict[str, Any]:
        r = rein_sessions_table

        async def work(conn: AsyncConnection) -> dict[str, Any]:
            statement = select(r.c.id, r.c.version, r.c.session_json.is_(None).label("tombstone")).where(
                r.c.id.in_(self.ids)
            )
            return {row.id: row for row in await conn.execute(statement)}

        return dict(await self.world.observer.ledger.read(work))

    @invariant()
    def matches_the_model(self) -> None:
        self.events.append("step")
        self.run(self._matches)

    async def _matches(self) -> None:
        rows = await self._zett_rows()
        assert set(rows) == {id for id, model in self.zett.items() if model.row}, rows
        for id, model in self.zett.items():
            row = rows.get(id)
            if row is not None:
                assert (row.deleted_at is None, row.last_sequence, row.base_sequence) == (
                    model.live, model.last, model.base,
                ), (id, row, model)  # fmt: skip
                if model.live:
                    assert (row.snapshot_version, row.session_type) == (model.version, model.session_type), (
                        id,
                        row,
                    )
            await check_zett(self.world.observer, id, model, f"session {id!r}")
        rein_rows = await self._rein_rows()
        assert set(rein_rows) == {id for id, model in self.rein.items() if model.row}, rein_rows
        for id, model in self.rein.items():
            row = rein_rows.get(id)
            if row is not None:
                assert (row.version, not row.tombstone) == (model.version, model.live), (id, row, model)
            check_rein(await self.world.rein_observer.aload_versioned(id), model, f"rein session {id!r}")
        if self.logs_changed:  # only their own steps, purges and imports write them
            self.logs_changed = False
            for kind in ("openai", "adk"):
                for id, log in self.models[kind].items():
                    await self._check_log(kind, id, log, f"{kind} session {id!r}")


# -- comparing what a store returns with the model ---------------------------------------


def check_view(view: SessionView, model: ZettModel, what: str) -> None:
    if not model.live:
        assert view.snapshot is None and view.raw_tail == [], f"{what}: deleted or unknown, yet {view}"
        return
    assert view.session_type == model.session_type, (what, view.session_type)
    checkpoint = model.checkpoint
    if checkpoint is None:
        assert view.snapshot is None, (what, view.snapshot)
    else:
        got = view.snapshot
        assert got is not None, f"{what}: checkpoint {checkpoint} lost"
        assert (got.id, got.version, got.compacted_through_sequence, got.compacted_message.content) == (
            checkpoint.id, checkpoint.version, checkpoint.boundary, checkpoint.content,
        ), (what, got)  # fmt: skip
    tail = [(record.sequence, record.id, record.message.content) for record in view.raw_tail]
    assert tail == [record for record in model.records() if record[0] > model.boundary], (what, tail, model)


async def check_zett(storage: LedgerSessionStorage, id: str, model: ZettModel, what: str) -> None:
    summary = await storage.get_session(id)
    if not model.live:
        assert summary is None, f"{what}: deleted or never created, yet {summary}"
    else:
        assert summary is not None, f"{what}: lost"
        assert (summary.message_count, summary.session_type) == (len(model.messages), model.session_type), (
            what,
            summary,
        )
    records = await storage.list_raw_messages(id)
    assert [(r.sequence, r.id, r.message.content) for r in records] == model.records(), (what, records, model)
    check_view(await storage.load(id), model, what)


def check_rein(found: Any, model: ReinModel, what: str) -> None:
    if not model.live:
        assert found is None, f"{what}: deleted or never saved, yet {found}"
        return
    assert found is not None, f"{what}: lost"
    assert (found.session, found.version) == (Session(iteration=model.iteration), model.version), (
        what,
        found,
    )


# -- the test ---------------------------------------------------------------------------

HISTORY_SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    derandomize=not RANDOM,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
    # Concurrency and faults make no two runs of a history alike: shrinking one would
    # take minutes and seldom hold; the failing history is printed whole.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    report_multiple_bugs=False,
)


def test_history(database: Database, tmp_path: Path) -> None:
    with start_blocking_portal() as portal:
        world = portal.call(open_world, database, tmp_path)
        try:
            machine = type(
                "HistoryOn" + database.target.replace("-", "_").replace(".", "_"),
                (HistoryMachine,),
                {"world": world, "portal": portal},
            )
            run_state_machine_as_test(machine, settings=HISTORY_SETTINGS)
        finally:
            portal.call(close_world, world)
            print(f"\nhistories on {database.target} met:", dict(sorted(world.tally.items())))
