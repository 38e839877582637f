"""Google ADK's session service on the ledger (``chatledger.adk``), on every target: the
conformance suite, ADK's real ``Runner`` with a scripted model, paging, the
exactly-once settle by ``Event.id``, and 8 processes appending to one session."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor

import pytest
from google.adk.agents.llm_agent import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from sqlalchemy import func, select

from chatledger import IdentityConflict
from chatledger.adk import LedgerSessionService
from chatledger.adk.rows import Deltas, Key, append
from chatledger.schema import adk_events_table as events
from chatledger.testing import AdkSessionServiceContract
from chatledger.testing.adk import event
from chatledger.tools.bench.floor import RoundTrips

from .conftest import Database
from .support.adk_scripted import ScriptedLlm, call, text
from .support.race_workers import append_adk_events

PROCESSES = 8


@pytest.fixture
async def service(database: Database) -> AsyncIterator[LedgerSessionService]:
    async with LedgerSessionService(database.url) as opened:
        yield opened


@pytest.fixture
def app() -> str:
    return f"app-{uuid.uuid4().hex[:12]}"


class TestAdkContract(AdkSessionServiceContract):
    """The conformance suite on chatledger's service, on every target (``service`` above)."""


def _texts(session: Session) -> list[str]:
    return [
        part.text for item in session.events if item.content for part in item.content.parts or [] if part.text
    ]


# -- ADK's Runner ------------------------------------------------------------------------


def add_to_cart(item: str, tool_context: ToolContext) -> dict[str, str]:
    """Put ``item`` in the user's cart."""
    cart = list(tool_context.state.get("user:cart", []))
    tool_context.state["user:cart"] = [*cart, item]
    tool_context.state["temp:scratch"] = item
    return {"added": item}


def _runner(service: LedgerSessionService, app: str, replies: list[object]) -> tuple[Runner, ScriptedLlm]:
    model = ScriptedLlm(replies=replies)
    agent = LlmAgent(name="shop", model=model, instruction="Help shopping.", tools=[add_to_cart])
    return Runner(app_name=app, agent=agent, session_service=service), model


async def _turn(runner: Runner, session_id: str, message: str) -> list[str]:
    said = []
    async for item in runner.run_async(
        user_id="u",
        session_id=session_id,
        new_message=types.Content(role="user", parts=[types.Part(text=message)]),
    ):
        if item.content and item.content.parts:
            said += [part.text for part in item.content.parts if part.text]
    return said


async def test_runner_turns_with_tool_calls_survive_a_restart(database: Database, app: str) -> None:
    async with LedgerSessionService(database.url) as first:
        session = await first.create_session(app_name=app, user_id="u")
        runner, _ = _runner(
            first, app, [call("add_to_cart", item="tea"), text("Tea added."), text("Anything else?")]
        )
        assert await _turn(runner, session.id, "add tea") == ["Tea added."]
        assert await _turn(runner, session.id, "thanks") == ["Anything else?"]
    # A new process, in effect: a new service and runner on the same database.
    async with LedgerSessionService(database.url) as second:
        runner, model = _runner(second, app, [call("add_to_cart", item="milk"), text("Milk added.")])
        assert await _turn(runner, session.id, "and milk") == ["Milk added."]
        # The model was sent the whole conversation, the first process's part included.
        sent = [part.text for content in model.requests[0] for part in content.parts or [] if part.text]
        assert sent[:3] == ["add tea", "Tea added.", "thanks"]
        stored = await second.get_session(app_name=app, user_id="u", session_id=session.id)
        assert stored is not None
        assert _texts(stored) == [
            "add tea",
            "Tea added.",
            "thanks",
            "Anything else?",
            "and milk",
            "Milk added.",
        ]
        calls = [
            part.function_call.name
            for item in stored.events
            for part in item.content.parts or []
            if item.content and part.function_call
        ]
        responses = [
            part.function_response.response
            for item in stored.events
            if item.content
            for part in item.content.parts or []
            if part.function_response
        ]
        assert calls == ["add_to_cart", "add_to_cart"] and responses == [{"added": "tea"}, {"added": "milk"}]
        assert stored.state["user:cart"] == ["tea", "milk"]
        assert not any(key.startswith("temp:") for key in stored.state)
        # Gap-free sequences, one per event.
        count = await second.ledger.read(
            lambda conn: conn.scalar(select(func.count()).where(events.c.app_name == app))
        )
        assert count == len(stored.events)


# -- paging, validation ------------------------------------------------------------------


async def test_list_sessions_pages_in_key_order(service: LedgerSessionService, app: str) -> None:
    names = [(user, f"s{index:02d}") for user in ("u", "v") for index in range(7)]
    for user, name in names:
        await service.create_session(app_name=app, user_id=user, session_id=name)
    await service.delete_session(app_name=app, user_id="u", session_id="s03")
    pages, token = [], None
    while True:
        page = await service.list_sessions(app_name=app, page_size=4, page_token=token)
        pages.append([(item.user_id, item.id) for item in page.sessions])
        token = page.next_page_token
        if token is None:
            break
    assert [key for page in pages for key in page] == [key for key in names if key != ("u", "s03")]
    assert [len(page) for page in pages] == [4, 4, 4, 1]
    one_user = await service.list_sessions(app_name=app, user_id="v", page_size=50)
    assert [item.id for item in one_user.sessions] == [f"s{index:02d}" for index in range(7)]
    assert one_user.next_page_token is None


@pytest.mark.parametrize(
    ("call_", "words"),
    [
        (lambda s: s.create_session(app_name="", user_id="u"), "app_name"),
        (lambda s: s.create_session(app_name="a", user_id="u" * 129), "user_id"),
        (lambda s: s.create_session(app_name="a", user_id="u", session_id="x\x00"), "session_id"),
        (lambda s: s.get_session(app_name="a", user_id=3, session_id="s"), "user_id"),
        (lambda s: s.list_sessions(app_name="a", page_size=0), "page_size"),
        (lambda s: s.list_sessions(app_name="a", page_size=2, page_token="garbage"), "page_token"),
        (lambda s: s.list_sessions(app_name="a", page_token="x"), "page_token"),
    ],
)
async def test_bad_input_is_refused_before_any_write(
    service: LedgerSessionService, call_: object, words: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=words):
        await call_(service)  # type: ignore[operator]


async def test_stale_marker_from_another_service_is_refused(service: LedgerSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    session._storage_update_marker = "2026-12-02T14:00:00"
    with pytest.raises(ValueError, match="not read from this service"):
        await service.append_event(session, event("x"))


async def test_session_built_by_hand_is_checked_by_its_last_event(
    service: LedgerSessionService, app: str
) -> None:
    made = await service.create_session(app_name=app, user_id="u", session_id="s")
    await service.append_event(made, event("one"))
    by_hand = Session(id="s", app_name=app, user_id="u", events=list(made.events))
    await service.append_event(by_hand, event("two"))
    with pytest.raises(StaleSessionError):
        await service.append_event(
            Session(id="s", app_name=app, user_id="u", events=list(made.events)), event("x")
        )


# -- exactly once ------------------------------------------------------------------------


async def test_a_repeat_of_a_committed_append_settles_by_event_id(
    service: LedgerSessionService, app: str
) -> None:
    """What a retry after a lost COMMIT meets: the event is in, the counter moved past
    what the caller saw. The work's refusal is settled by the event's identity, not raised."""
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    item = event("once", {"user:n": 1})
    await service.append_event(session, item)
    key, deltas = Key(app, "u", "s"), Deltas({}, {"n": 1}, {})
    stored_json = item.model_dump_json(exclude_none=True)
    appended = await append(service.ledger, key, 0, None, item.id, item.timestamp, stored_json, deltas)
    assert appended.sequence == 1 and appended.settled
    stored = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert stored is not None and [e.id for e in stored.events] == [item.id]


async def test_an_event_id_reused_with_other_content_is_refused(
    service: LedgerSessionService, app: str
) -> None:
    """Another event under a stored event's id (other text, a state delta) is an
    ``IdentityConflict``: nothing of it is stored, and the caller's ``Session`` is left
    as ``get_session`` returns it."""
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    original = event("original")
    original.id = "e1"
    await service.append_event(session, original)
    fresh = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert fresh is not None
    other = event("other", {"k": "v", "user:u": 1})
    other.id = "e1"
    with pytest.raises(IdentityConflict, match="e1") as refused:
        await service.append_event(fresh, other)
    assert refused.value.write_id == "e1"
    stored = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert stored is not None and _texts(stored) == ["original"] and stored.state == {}
    assert fresh == stored
    assert await service.get_user_state(app_name=app, user_id="u") == {}


async def test_the_same_event_appended_twice_is_held_once(service: LedgerSessionService, app: str) -> None:
    """An app's retry of an ``Event`` it appended: stored once, and the caller's
    ``Session`` holds it once, as ``get_session`` returns it."""
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    item = event("twice", {"k": 1, "temp:t": "kept"})
    await service.append_event(session, item)
    await service.append_event(session, item)
    stored = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert stored is not None and [e.id for e in stored.events] == [item.id]
    assert [e.id for e in session.events] == [item.id]
    assert session.state == {"k": 1, "temp:t": "kept"}  # temp: state stays the invocation's
    session.state.pop("temp:t")
    assert session == stored
    await service.append_event(session, event("next"))  # its counter is current
    assert _texts(session) == ["twice", "next"]


async def test_a_repeat_from_a_stale_session_leaves_it_as_stored(
    service: LedgerSessionService, app: str
) -> None:
    """A repeat of a stored event from a ``Session`` read before other events were
    appended: settled, and the caller's ``Session`` is read again, so that it never looks
    current while missing the events in between."""
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    stale = session.model_copy(deep=True)
    item = event("first")
    await service.append_event(session, item)
    await service.append_event(session, event("second"))
    await service.append_event(stale, item)
    stored = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert stale == stored and _texts(stale) == ["first", "second"]


async def test_last_update_time_is_the_newest_events_timestamp(
    service: LedgerSessionService, app: str
) -> None:
    """As ADK's own services have it: after ``append_event``, in the caller's ``Session``,
    in ``get_session`` and in ``list_sessions`` (which orders by it)."""
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    other = await service.create_session(app_name=app, user_id="u", session_id="t")
    later = event("later", timestamp=session.last_update_time + 10)
    await service.append_event(session, later)
    assert session.last_update_time == later.timestamp
    stored = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert stored is not None and stored.last_update_time == later.timestamp and stored == session
    earlier = event("earlier", timestamp=1700000000.123)
    await service.append_event(other, earlier)
    listed = (await service.list_sessions(app_name=app, user_id="u")).sessions
    assert [(item.id, item.last_update_time) for item in listed] == [
        ("t", earlier.timestamp),
        ("s", later.timestamp),
    ]


# -- processes ---------------------------------------------------------------------------


async def test_processes_append_to_one_session(service: LedgerSessionService, database: Database) -> None:
    session_id = f"race-{uuid.uuid4()}"
    await service.create_session(app_name="race", user_id="u", session_id=session_id)
    dsn = database.url.render_as_string(hide_password=False)
    per_worker = 6
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=PROCESSES, mp_context=context) as pool:
        start = manager.Barrier(PROCESSES + 1, timeout=120)
        futures = [
            asyncio.wrap_future(pool.submit(append_adk_events, dsn, session_id, worker, per_worker, start))
            for worker in range(PROCESSES)
        ]
        await asyncio.to_thread(start.wait)
        outcomes = await asyncio.wait_for(asyncio.gather(*futures), 300)
    assert [appended for appended, _ in outcomes] == [per_worker] * PROCESSES
    stored = await service.get_session(app_name="race", user_id="u", session_id=session_id)
    assert stored is not None
    texts = _texts(stored)
    assert sorted(texts) == sorted(
        f"{w}:{i}" for w in range(PROCESSES) for i in range(per_worker)
    )  # no loss, no dup
    for worker in range(PROCESSES):  # each writer's events in its own order
        assert [t for t in texts if t.startswith(f"{worker}:")] == [
            f"{worker}:{i}" for i in range(per_worker)
        ]
    sequences = await service.ledger.read(
        lambda conn: conn.scalars(
            select(events.c.sequence).where(events.c.session_id == session_id).order_by(events.c.sequence)
        )
    )
    assert list(sequences) == list(range(1, PROCESSES * per_worker + 1))  # gap-free
    assert {key: value for key, value in stored.state.items() if key.startswith("user:w")} == {
        f"user:w{worker}": per_worker - 1 for worker in range(PROCESSES)
    }
    fresh = await service.get_session(
        app_name="race", user_id="u", session_id=session_id, config=GetSessionConfig(num_recent_events=0)
    )
    assert fresh is not None and fresh._storage_update_marker == str(PROCESSES * per_worker)


async def test_first_shared_state_rows_created_at_once(service: LedgerSessionService) -> None:
    """16 appends at once, each the first write of its app's ``app:`` row and of a new
    user's ``user:`` row: none fails and no key is lost. On InnoDB the racing first
    INSERTs can deadlock (the UPDATEs' gap locks), which ends the transaction with its
    savepoint; the ledger must see the deadlock and run the append again, not the
    failed ROLLBACK TO SAVEPOINT (error 1305) that follows it."""
    for _round in range(5):
        app = f"app-{uuid.uuid4().hex[:12]}"
        sessions = [
            await service.create_session(app_name=app, user_id=f"u{index % 4}") for index in range(16)
        ]
        await asyncio.gather(
            *(
                service.append_event(session, event("x", {f"app:k{index}": index, f"user:k{index}": index}))
                for index, session in enumerate(sessions)
            )
        )
        fresh = await service.create_session(app_name=app, user_id="u0")
        assert {key for key in fresh.state if key.startswith("app:")} == {
            f"app:k{index}" for index in range(16)
        }
        assert {key for key in fresh.state if key.startswith("user:")} == {
            f"user:k{index}" for index in range(16) if index % 4 == 0
        }


#: The statements of an append_event without state deltas, on every backend: the
#: counter bump and the event's INSERT (the session's last_update_time is the event's
#: timestamp, so nothing is read after).
APPEND_STATEMENTS = ["UPDATE adk_sessions", "INSERT INTO adk_events"]


async def test_an_append_costs_its_bump_and_its_insert(service: LedgerSessionService, app: str) -> None:
    """An append to a session read by this process sends no BEGIN of its own on SQLite
    (its first statement writes) and no read."""
    session = await service.create_session(app_name=app, user_id="u")
    await service.append_event(session, event("first"))
    trips = RoundTrips(service.ledger.engine)
    try:
        await service.append_event(session, event("counted"))
        expected = APPEND_STATEMENTS
        pairs = zip(trips.sent, expected, strict=True)
        assert len(trips.sent) == len(expected) and all(sent.startswith(start) for sent, start in pairs), (
            trips.sent
        )
    finally:
        trips.close()
    again = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert again is not None and len(again.events) == 2
    assert again.last_update_time == session.last_update_time
