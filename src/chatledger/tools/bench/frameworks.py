"""The frameworks' own session stores beside chatledger's adapters, on one backend.

* **OpenAI Agents SDK**: its ``SQLAlchemySession`` (and, on SQLite, its
  ``SQLiteSession``) against :class:`chatledger.openai_agents.LedgerSession`:
  ``add_items`` of one turn (2 items) into a growing session, ``get_items()`` of a
  session of ``framework_items`` items and ``get_items(20)`` of its newest;
* **Google ADK**: its ``DatabaseSessionService`` against
  :class:`chatledger.adk.LedgerSessionService`: ``append_event`` (one event with a
  ``user:`` state delta, from the ``Session`` the last append returned) and
  ``get_session`` of a session of ``framework_items`` events, whole and its newest 20;
* **LangGraph**: its own saver of the backend (``AsyncPostgresSaver``,
  ``AsyncSqliteSaver``, ``AIOMySQLSaver``) against
  :class:`chatledger.langgraph.LedgerSaver`: ``put`` (a checkpoint with one changed
  channel, on a growing thread), ``put_writes`` (a task's 2 writes), ``get_tuple``
  (latest, and by id) and ``list(limit=10)``, on a thread of 10 checkpoints and on one
  of ``5 * framework_items`` (10,000 by default), so the two rows show whether a
  thread's length costs anything. No concurrency round: LangGraph's runs of one
  thread take turns by design.

Each store's calls run in the bench's interleaved rounds (:func:`.measure.measure_calls`),
so the ratios (chatledger's calls per second / the framework's own) come from one run
on one machine. Then a concurrency round per store: ``framework_tasks`` tasks write
``framework_writes`` times each to one session at once (ADK: each write reads the
session first, as a service handling a request would), and the session is read back
to count the writes lost or stored twice, the errors, and ADK's refusals
(``StaleSessionError``: nothing written, by design).

Every store gets a fresh database of its own (see :func:`.workloads.fresh_databases`):
the SDK's ``agent_sessions`` table has the name of chatledger's. The SDK's
``SQLAlchemySession`` declares ``VARCHAR`` without a length, which MySQL/MariaDB
cannot create; there its tables are made by hand, the same with ``VARCHAR(255)``,
and the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, String
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine

from ... import dialects, kinds
from ...migrate import upgrade_database
from ..harness import error_kinds
from .measure import Call, measure_calls
from .results import FrameworkConcurrency, Frameworks, FrameworkStore, Sizes, check
from .workloads import Databases, fresh_databases

OPENAI, ADK = kinds.OPENAI.label, kinds.ADK.label

#: One kind's section: its framework's own store(s) beside chatledger's adapter, on the
#: run's fresh databases (a SQLite file path beside them where the backend is SQLite).
Measure = Callable[[Databases, Path | None, Sizes, random.Random], Awaitable[list[FrameworkStore]]]
#: The sections, by kind name (:func:`measures`); a kind without one is not measured here.
_MEASURES: dict[str, Measure] = {}


def measures(kind: kinds.SessionKind) -> Callable[[Measure], Measure]:
    """Register the decorated function as the bench's section of ``kind``."""

    def register(measure: Measure) -> Measure:
        _MEASURES[kind.name] = measure
        return measure

    return register


#: The newest items / events a bounded read asks for.
RECENT = 20
#: Seconds one write of the concurrency round may take before it counts as an error.
WRITE_TIMEOUT = 60.0
#: Items per ``add_items`` while filling the session ``get_items`` reads.
FILL_CHUNK = 100


def _error(error: BaseException) -> str:
    """The error's class and first line (SQLAlchemy's next lines are the SQL)."""
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first}"


async def _concurrently(
    sizes: Sizes, write: Callable[[int, int], Awaitable[str]], refusal: type[BaseException] | None
) -> tuple[set[str], int, list[str]]:
    """Run ``write(task, number)`` (which returns the key of what it wrote)
    ``framework_writes`` times in each of ``framework_tasks`` tasks at once:
    ``(acknowledged keys, refusals, errors)``."""
    acknowledged: set[str] = set()
    refused = 0
    errors: list[str] = []

    async def worker(task: int) -> None:
        nonlocal refused
        for number in range(sizes.framework_writes):
            try:
                acknowledged.add(await asyncio.wait_for(write(task, number), WRITE_TIMEOUT))
            except Exception as error:
                if refusal is not None and isinstance(error, refusal):
                    refused += 1
                else:
                    errors.append(_error(error))

    await asyncio.gather(*(worker(task) for task in range(sizes.framework_tasks)))
    return acknowledged, refused, errors


def _tally(
    sizes: Sizes, acknowledged: set[str], stored: list[str], refused: int, errors: list[str]
) -> FrameworkConcurrency:
    counts = Counter(stored)
    return FrameworkConcurrency(
        tasks=sizes.framework_tasks,
        attempted=sizes.framework_tasks * sizes.framework_writes,
        acknowledged=len(acknowledged),
        refused=refused,
        errors=len(errors),
        lost=len(acknowledged - set(counts)),
        duplicates=sum(count - 1 for count in counts.values() if count > 1),
        error_kinds=error_kinds(errors),
    )


async def _close(opened: list[Any]) -> None:
    for item in opened:
        close = getattr(item, "close", None)  # SQLAlchemySession has none: its engine is disposed
        if close is not None:
            closed = close()
            if asyncio.iscoroutine(closed):
                await closed


# -- OpenAI Agents SDK ------------------------------------------------------------------


def _item(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


async def _sdk_tables(engine: Any, session: Any) -> str:
    """Create the SDK ``SQLAlchemySession``'s tables; where its ``VARCHAR`` without a
    length does not compile (MySQL/MariaDB), the same tables with ``VARCHAR(255)``.
    Returns the note for the report ("" when the SDK made them)."""
    # The SDK keeps its tables in the private ``_metadata``: the only way to its DDL.
    metadata: MetaData = session._metadata
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        return ""
    except Exception as error:
        reason = _error(error)
    by_hand = MetaData()
    for table in metadata.sorted_tables:
        copy = table.to_metadata(by_hand)
        for column in copy.columns:
            if isinstance(column.type, String) and column.type.length is None:
                column.type = String(255)
    async with engine.begin() as conn:
        await conn.run_sync(by_hand.create_all)
    return f"the SDK cannot create its tables ({reason}): made by hand, VARCHAR(255)"


@measures(kinds.OPENAI)
async def _openai(
    databases: Databases, sqlite_path: Path | None, sizes: Sizes, rng: random.Random
) -> list[FrameworkStore]:
    """The SDK's ``SQLAlchemySession`` on the floor's database (its ``agent_sessions``
    has the name of chatledger's), its ``SQLiteSession`` on SQLite."""
    sdk_url, ledger_url = databases.floor, databases.ledger
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from agents.memory import SQLiteSession

    from ...openai_agents import LedgerSession

    sdk_engine = create_async_engine(sdk_url)
    run = uuid.uuid4().hex[:8]
    opens: dict[str, Callable[[str], Any]] = {
        "LedgerSession": lambda sid: LedgerSession.from_url(sid, url=ledger_url),
        "SQLAlchemySession": lambda sid: SQLAlchemySession(sid, engine=sdk_engine),
    }
    if sqlite_path is not None:
        opens["SQLiteSession"] = lambda sid: SQLiteSession(sid, sqlite_path)
    opened: list[Any] = []

    def session(kind: str, sid: str) -> Any:
        opened.append(opens[kind](sid))
        return opened[-1]

    stores = {kind: FrameworkStore(OPENAI, kind, kind == "LedgerSession") for kind in opens}
    try:
        try:
            stores["SQLAlchemySession"].note = await _sdk_tables(
                sdk_engine, session("SQLAlchemySession", "x")
            )
        except Exception as error:
            stores["SQLAlchemySession"].note = f"not measured: cannot create tables ({_error(error)})"
            del opens["SQLAlchemySession"]
        calls: dict[tuple[str, str], Call] = {}
        turns = 0

        async def add_turn(target: Any) -> None:
            nonlocal turns
            turns += 1
            await target.add_items([_item(f"question {turns}"), _item(f"answer {turns}", "assistant")])

        for kind in opens:
            full = session(kind, f"full-{run}")
            for start in range(0, sizes.framework_items, FILL_CHUNK):
                count = min(FILL_CHUNK, sizes.framework_items - start)
                await full.add_items([_item(f"item {start + n}") for n in range(count)])
            check(len(await full.get_items()) == sizes.framework_items, f"{kind} get_items")
            calls[kind, "add_items, 2 items"] = functools.partial(add_turn, session(kind, f"add-{run}"))
            calls[kind, f"get_items(), {sizes.framework_items} items"] = full.get_items
            calls[kind, f"get_items({RECENT})"] = functools.partial(full.get_items, RECENT)
        for (kind, label), stats in (await measure_calls(calls, sizes.framework_rounds, rng)).items():
            stores[kind].timings[label] = stats

        if sizes.framework_tasks and sizes.framework_writes:
            for kind in opens:
                sid = f"conc-{run}-{kind}"
                writers = [session(kind, sid) for _ in range(sizes.framework_tasks)]

                async def add(task: int, number: int, writers: list[Any] = writers) -> str:
                    await writers[task].add_items([_item(f"{task}-{number}")])
                    return f"{task}-{number}"

                acked, refused, errors = await _concurrently(sizes, add, None)
                stored = [str(item["content"]) for item in await session(kind, sid).get_items()]
                stores[kind].concurrency = _tally(sizes, acked, stored, refused, errors)
    finally:
        await _close(opened)
        await sdk_engine.dispose()
    return list(stores.values())


# -- Google ADK -----------------------------------------------------------------------


def _event(text: str, state: dict[str, Any]) -> Any:
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    return Event(
        author="user",
        invocation_id="bench",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=state),
    )


@measures(kinds.ADK)
async def _adk(
    databases: Databases, sqlite_path: Path | None, sizes: Sizes, rng: random.Random
) -> list[FrameworkStore]:
    """ADK's ``DatabaseSessionService`` on the zett database, on chatledger's async driver."""
    adk_url, ledger_url = databases.zett.set(drivername=databases.ledger.drivername), databases.ledger
    from google.adk.errors import StaleSessionError
    from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
    from google.adk.sessions.database_session_service import DatabaseSessionService

    from ...adk import LedgerSessionService

    services: dict[str, BaseSessionService] = {"LedgerSessionService": LedgerSessionService(ledger_url)}
    stores = {kind: FrameworkStore(ADK, kind, True) for kind in services}
    stores["DatabaseSessionService"] = FrameworkStore(ADK, "DatabaseSessionService", False)
    try:
        theirs = DatabaseSessionService(db_url=adk_url.render_as_string(hide_password=False))
        services["DatabaseSessionService"] = theirs
        try:
            # ADK creates its tables on first use: a failure to is the store's, not the run's.
            await theirs.create_session(app_name="bench", user_id="u", session_id="probe")
        except Exception as error:
            stores["DatabaseSessionService"].note = f"not measured: cannot create tables ({_error(error)})"
            del services["DatabaseSessionService"]
            await theirs.close()
        run = uuid.uuid4().hex[:8]
        counter = 0

        def next_event() -> Any:
            nonlocal counter
            counter += 1
            return _event(f"benchmark event {counter}", {"user:n": counter})

        async def append(service: BaseSessionService, session: Any) -> None:
            await service.append_event(session, next_event())

        calls: dict[tuple[str, str], Call] = {}
        for kind, service in services.items():
            long = await service.create_session(app_name="bench", user_id="u", session_id=f"long-{run}")
            for _ in range(sizes.framework_items):
                await service.append_event(long, next_event())
            get = functools.partial(service.get_session, app_name="bench", user_id="u", session_id=long.id)
            whole = await get()
            check(whole is not None and len(whole.events) == sizes.framework_items, f"{kind} get_session")
            growing = await service.create_session(app_name="bench", user_id="u", session_id=f"add-{run}")
            calls[kind, "append_event"] = functools.partial(append, service, growing)
            calls[kind, f"get_session, {sizes.framework_items} events"] = get
            recent = GetSessionConfig(num_recent_events=RECENT)
            calls[kind, f"get_session, newest {RECENT}"] = functools.partial(get, config=recent)
        for (kind, label), stats in (await measure_calls(calls, sizes.framework_rounds, rng)).items():
            stores[kind].timings[label] = stats

        if sizes.framework_tasks and sizes.framework_writes:
            sid = f"conc-{run}"
            for kind, service in services.items():
                await service.create_session(app_name="bench", user_id="u", session_id=sid)

                async def write(
                    task: int, number: int, service: BaseSessionService = service, kind: str = kind
                ) -> str:
                    # Read, then append: a request handler's turn, racing the others'.
                    session = await service.get_session(app_name="bench", user_id="u", session_id=sid)
                    check(session is not None, f"{kind} concurrent get_session")
                    made = next_event()
                    await service.append_event(session, made)  # type: ignore[arg-type]
                    return str(made.id)

                acked, refused, errors = await _concurrently(sizes, write, StaleSessionError)
                read = await service.get_session(app_name="bench", user_id="u", session_id=sid)
                stored = [str(item.id) for item in (read.events if read is not None else [])]
                stores[kind].concurrency = _tally(sizes, acked, stored, refused, errors)
    finally:
        for service in services.values():
            await service.close()  # type: ignore[attr-defined]
    return list(stores.values())


# -- LangGraph -------------------------------------------------------------------------

#: Checkpoints of the short thread; the long one's are ``LONG_FACTOR * framework_items``.
SHORT_THREAD = 10
LONG_FACTOR = 5


def _plain(url: URL) -> str:
    """The URL as LangGraph's own savers take it: no SQLAlchemy driver."""
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=False)


def _own_savers() -> list[tuple[str, str, Callable[[URL, Path | None], Any]]]:
    """(backend name, saver class, opener) of each LangGraph saver of a backend; the
    opener returns the saver's async context manager."""
    from ...dialects import mysql, postgresql, sqlite

    def postgres(url: URL, _path: Path | None) -> Any:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        return AsyncPostgresSaver.from_conn_string(_plain(url))

    def mysql_saver(url: URL, _path: Path | None) -> Any:
        from langgraph.checkpoint.mysql.aio import AIOMySQLSaver

        return AIOMySQLSaver.from_conn_string(_plain(url))

    def sqlite_saver(_url: URL, path: Path | None) -> Any:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        assert path is not None
        return AsyncSqliteSaver.from_conn_string(str(path.with_name("langgraph.sqlite3")))

    return [
        (postgresql.ASYNCPG.name, "AsyncPostgresSaver", postgres),
        (mysql.AIOMYSQL.name, "AIOMySQLSaver", mysql_saver),
        (sqlite.AIOSQLITE.name, "AsyncSqliteSaver", sqlite_saver),
    ]


class _Thread:
    """A thread one saver writes: its checkpoints chained, each with a changed channel."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver, self.thread_id = saver, thread_id
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.version: Any = None
        self.ids: list[str] = []

    async def put(self) -> None:
        from langgraph.checkpoint.base import Checkpoint
        from langgraph.checkpoint.base.id import uuid6

        self.version = self.saver.get_next_version(self.version, None)
        step = len(self.ids)
        checkpoint = Checkpoint(
            v=1,
            id=str(uuid6()),
            ts="2026-01-01T00:00:00+00:00",
            channel_values={
                "messages": [f"message {step}", {"role": "assistant", "step": step}],
                "step": step,
            },
            channel_versions={"messages": self.version, "step": self.version},
            versions_seen={},
            updated_channels=["messages", "step"],
        )
        metadata = {"source": "loop", "step": step, "parents": {}}
        self.config = await self.saver.aput(self.config, checkpoint, metadata, {"messages": self.version})
        self.ids.append(self.config["configurable"]["checkpoint_id"])

    async def put_writes(self) -> None:
        task = str(uuid.uuid4())
        await self.saver.aput_writes(self.config, [("messages", ["a write"]), ("step", 1)], task)

    def at(self, checkpoint_id: str | None = None) -> dict[str, Any]:
        configurable: dict[str, Any] = {"thread_id": self.thread_id, "checkpoint_ns": ""}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    async def list10(self) -> None:
        found = [item async for item in self.saver.alist(self.at(), limit=10)]
        check(len(found) == min(10, len(self.ids)), "list(limit=10)")


@measures(kinds.LANGGRAPH)
async def _langgraph(
    databases: Databases, sqlite_path: Path | None, sizes: Sizes, rng: random.Random
) -> list[FrameworkStore]:
    """LangGraph's own saver of the backend on the floor's database (its tables' names
    differ from chatledger's), against LedgerSaver on chatledger's."""
    from ...langgraph import LedgerSaver

    label = kinds.LANGGRAPH.label
    backend = databases.ledger.get_backend_name()
    stores = {"LedgerSaver": FrameworkStore(label, "LedgerSaver", True)}
    openers: dict[str, Callable[[], Any]] = {"LedgerSaver": lambda: LedgerSaver.from_url(databases.ledger)}
    for name, own, opener in _own_savers():
        if name == backend:
            stores[own] = FrameworkStore(label, own, False)
            openers[own] = functools.partial(opener, databases.floor, sqlite_path)
    run = uuid.uuid4().hex[:8]
    long = LONG_FACTOR * sizes.framework_items
    calls: dict[tuple[str, str], Call] = {}
    async with contextlib.AsyncExitStack() as stack:
        for kind in list(openers):
            try:
                saver = await stack.enter_async_context(openers[kind]())
                setup = getattr(saver, "setup", None)
                if setup is not None and not isinstance(saver, LedgerSaver):
                    await setup()
                growing = _Thread(saver, f"put-{run}")
                await growing.put()
                await growing.put_writes()
            except Exception as error:  # its own saver cannot run here: a note, not the run's end
                stores[kind].note = f"not measured: {_error(error)}"
                continue
            threads = {}
            for length in (SHORT_THREAD, long):
                thread = threads[length] = _Thread(saver, f"read-{length}-{run}")
                for _ in range(length):
                    await thread.put()
            short = threads[SHORT_THREAD]
            calls[kind, "put"] = growing.put
            calls[kind, "put_writes, 2 writes"] = growing.put_writes
            for length, thread in threads.items():
                calls[kind, f"get_tuple latest, thread of {length:,}"] = functools.partial(
                    saver.aget_tuple, thread.at()
                )
            calls[kind, "get_tuple by id"] = functools.partial(
                saver.aget_tuple, short.at(short.ids[len(short.ids) // 2])
            )
            calls[kind, "list(limit=10)"] = threads[long].list10
        for (kind, name), stats in (await measure_calls(calls, sizes.framework_rounds, rng)).items():
            stores[kind].timings[name] = stats
    return list(stores.values())


# -- the section ----------------------------------------------------------------------


async def measure_frameworks(
    admin: URL, sizes: Sizes, rng: random.Random, say: Callable[[str], None]
) -> Frameworks:
    """Each registered kind's section (:func:`measures`), in registry order, on the server
    ``admin`` names, each store in a fresh database; ``framework_items`` 0: not
    measured. A framework that is not installed is a note."""
    if not sizes.framework_items:
        return Frameworks(note="not measured: framework_items is 0")
    backend = dialects.backend(admin.get_backend_name())
    result = Frameworks()
    notes = []
    async with fresh_databases(admin) as databases:
        await upgrade_database(databases.ledger)
        sqlite_path = None if backend.server else Path(str(databases.floor.database)).with_name("sdk.sqlite3")
        for kind in kinds.registered():
            measure = _MEASURES.get(kind.name)
            if measure is None:
                continue
            say(f"frameworks: {kind.label}, {sizes.framework_items} items, {sizes.framework_rounds} rounds")
            try:
                result.stores += await measure(databases, sqlite_path, sizes, rng)
            except ModuleNotFoundError as error:
                notes.append(f"{kind.label} not measured: {error.name} is not installed")
    result.note = "; ".join(notes)
    return result
