"""The conformance suite of Google ADK's ``BaseSessionService`` contract.

:class:`AdkSessionServiceContract` is a class of pytest tests; a test module
subclasses it with a ``service`` fixture giving the service under test (an empty
store, or one no other test uses the app names of: every test makes its own). The
tests use ADK's public API only, so the suite runs on ADK's own services too.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.genai import types

if TYPE_CHECKING:
    from .kinds import Driver

__all__ = ["TESTS", "AdkSessionServiceContract", "event"]


def event(
    text: str, state: dict[str, Any] | None = None, *, author: str = "user", timestamp: float | None = None
) -> Event:
    """An event with one text part and ``state`` as its state delta (keys as given,
    ``app:``/``user:``/``temp:`` prefixes included)."""
    made = Event(
        author=author,
        invocation_id="inv",
        content=types.Content(role="user" if author == "user" else "model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(state or {})),
    )
    if timestamp is not None:
        made.timestamp = timestamp
    return made


def _texts(events: list[Event]) -> list[str]:
    return [
        part.text or ""
        for item in events
        if item.content and item.content.parts
        for part in item.content.parts
    ]


# -- the contract ------------------------------------------------------------------------


# -- create and get ------------------------------------------------------------------


async def test_create_then_get(service: BaseSessionService, app: str) -> None:
    made = await service.create_session(app_name=app, user_id="u", state={"k": 1}, session_id="s1")
    assert (made.id, made.app_name, made.user_id, made.state, made.events) == (
        "s1",
        app,
        "u",
        {"k": 1},
        [],
    )
    got = await service.get_session(app_name=app, user_id="u", session_id="s1")
    assert got is not None and got.state == {"k": 1} and got.events == []


async def test_generated_ids_differ(service: BaseSessionService, app: str) -> None:
    first = await service.create_session(app_name=app, user_id="u")
    second = await service.create_session(app_name=app, user_id="u")
    assert first.id and second.id and first.id != second.id


async def test_existing_id_is_refused(service: BaseSessionService, app: str) -> None:
    await service.create_session(app_name=app, user_id="u", session_id="s")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=app, user_id="u", session_id="s")


async def test_missing_session_is_none(service: BaseSessionService, app: str) -> None:
    assert await service.get_session(app_name=app, user_id="u", session_id="nope") is None


async def test_key_is_app_user_and_id(service: BaseSessionService, app: str) -> None:
    await service.create_session(app_name=app, user_id="u1", session_id="s", state={"who": 1})
    await service.create_session(app_name=app, user_id="u2", session_id="s", state={"who": 2})
    one = await service.get_session(app_name=app, user_id="u1", session_id="s")
    two = await service.get_session(app_name=app, user_id="u2", session_id="s")
    assert one is not None and two is not None and (one.state["who"], two.state["who"]) == (1, 2)
    assert await service.get_session(app_name=app + "x", user_id="u1", session_id="s") is None


# -- events --------------------------------------------------------------------------


async def test_events_read_back_in_order(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    written = [event(f"m{index}", author="user" if index % 2 == 0 else "agent") for index in range(6)]
    for item in written:
        await service.append_event(session, item)
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None
    assert [item.id for item in got.events] == [item.id for item in written]
    assert _texts(got.events) == [f"m{index}" for index in range(6)]
    assert [item.author for item in got.events] == [item.author for item in written]


async def test_equal_timestamps_keep_append_order(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    # Eight: a service ordering them by anything else matches by chance once in 8! runs.
    for index in range(8):
        await service.append_event(session, event(f"m{index}", timestamp=1_800_000_000.0))
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and _texts(got.events) == [f"m{index}" for index in range(8)]


async def test_partial_events_are_not_stored(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    partial = event("chunk", author="agent")
    partial.partial = True
    await service.append_event(session, partial)
    await service.append_event(session, event("whole", author="agent"))
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and _texts(got.events) == ["whole"]


async def test_num_recent_events(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    for index in range(5):
        await service.append_event(session, event(f"m{index}"))
    for recent, expected in ((2, ["m3", "m4"]), (0, []), (9, [f"m{index}" for index in range(5)])):
        got = await service.get_session(
            app_name=app,
            user_id="u",
            session_id=session.id,
            config=GetSessionConfig(num_recent_events=recent),
        )
        assert got is not None and _texts(got.events) == expected


async def test_after_timestamp(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    for index in range(5):
        await service.append_event(session, event(f"m{index}", timestamp=1_800_000_000.0 + index))
    got = await service.get_session(
        app_name=app,
        user_id="u",
        session_id=session.id,
        config=GetSessionConfig(after_timestamp=1_800_000_002.0),
    )
    assert got is not None and _texts(got.events) == ["m2", "m3", "m4"]
    both = await service.get_session(
        app_name=app,
        user_id="u",
        session_id=session.id,
        config=GetSessionConfig(after_timestamp=1_800_000_001.0, num_recent_events=2),
    )
    assert both is not None and _texts(both.events) == ["m3", "m4"]


# -- state ---------------------------------------------------------------------------


async def test_state_scopes(service: BaseSessionService, app: str) -> None:
    first = await service.create_session(
        app_name=app, user_id="u", state={"s": 1, "app:a": 1, "user:u": 1, "temp:t": 1}
    )
    assert first.state == {"s": 1, "app:a": 1, "user:u": 1}
    await service.append_event(first, event("x", {"s": 2, "app:a": 2, "user:u": 2, "temp:t": 2}))
    assert first.state["temp:t"] == 2  # the invocation still sees it
    same_user = await service.create_session(app_name=app, user_id="u")
    other_user = await service.create_session(app_name=app, user_id="v")
    assert same_user.state == {"app:a": 2, "user:u": 2}
    assert other_user.state == {"app:a": 2}
    got = await service.get_session(app_name=app, user_id="u", session_id=first.id)
    assert got is not None and got.state == {"s": 2, "app:a": 2, "user:u": 2}
    assert all("temp:t" not in (item.actions.state_delta or {}) for item in got.events)


async def test_concurrent_user_state_updates_are_all_kept(service: BaseSessionService, app: str) -> None:
    sessions = [await service.create_session(app_name=app, user_id="u") for _ in range(8)]
    await asyncio.gather(
        *(
            service.append_event(session, event("x", {f"user:k{index}": index, "app:shared": index}))
            for index, session in enumerate(sessions)
        )
    )
    fresh = await service.create_session(app_name=app, user_id="u")
    assert {key: value for key, value in fresh.state.items() if key.startswith("user:")} == {
        f"user:k{index}": index for index in range(8)
    }
    assert fresh.state["app:shared"] in range(8)


# -- staleness -----------------------------------------------------------------------


async def test_stale_session_is_refused(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    await service.append_event(session, event("first"))
    other = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert other is not None
    await service.append_event(other, event("by another writer"))
    with pytest.raises(StaleSessionError):
        await service.append_event(session, event("stale"))
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and _texts(got.events) == ["first", "by another writer"]
    await service.append_event(got, event("after reload"))


async def test_appending_to_a_missing_session_is_refused(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    await service.delete_session(app_name=app, user_id="u", session_id=session.id)
    with pytest.raises((SessionNotFoundError, StaleSessionError)):
        await service.append_event(session, event("late"))
    assert await service.get_session(app_name=app, user_id="u", session_id=session.id) is None


# -- list and delete -----------------------------------------------------------------


async def test_list_sessions(service: BaseSessionService, app: str) -> None:
    for user, name in (("u", "a"), ("u", "b"), ("v", "c")):
        made = await service.create_session(app_name=app, user_id=user, session_id=name, state={"n": name})
        await service.append_event(made, event("x"))
    mine = await service.list_sessions(app_name=app, user_id="u")
    assert sorted(item.id for item in mine.sessions) == ["a", "b"]
    assert all(item.events == [] for item in mine.sessions)
    everyone = await service.list_sessions(app_name=app)
    assert sorted((item.user_id, item.id, item.state["n"]) for item in everyone.sessions) == [
        ("u", "a", "a"),
        ("u", "b", "b"),
        ("v", "c", "c"),
    ]
    assert (await service.list_sessions(app_name=app + "x")).sessions == []


async def test_list_sessions_last_updated_last(service: BaseSessionService, app: str) -> None:
    made = [await service.create_session(app_name=app, user_id="u", session_id=name) for name in "abc"]
    await service.append_event(made[0], event("touch a last"))
    listed = await service.list_sessions(app_name=app, user_id="u")
    assert listed.sessions[-1].id == "a"


async def test_delete_session(service: BaseSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u", session_id="s")
    await service.append_event(session, event("x"))
    await service.delete_session(app_name=app, user_id="u", session_id="s")
    assert await service.get_session(app_name=app, user_id="u", session_id="s") is None
    assert (await service.list_sessions(app_name=app, user_id="u")).sessions == []
    await service.delete_session(app_name=app, user_id="u", session_id="s")  # missing: no error


async def test_created_again_after_delete_starts_empty(service: BaseSessionService, app: str) -> None:
    old = await service.create_session(app_name=app, user_id="u", session_id="s", state={"old": 1})
    await service.append_event(old, event("old"))
    await service.delete_session(app_name=app, user_id="u", session_id="s")
    new = await service.create_session(app_name=app, user_id="u", session_id="s")
    assert new.state == {} and new.events == []
    with pytest.raises((StaleSessionError, SessionNotFoundError)):
        await service.append_event(old, event("stale writer"))
    await service.append_event(new, event("new"))
    got = await service.get_session(app_name=app, user_id="u", session_id="s")
    assert got is not None and _texts(got.events) == ["new"]


#: The contract's tests by name (module functions, so that a subclass can wrap one).
TESTS: dict[str, Callable[..., Awaitable[None]]] = {
    "test_create_then_get": test_create_then_get,
    "test_generated_ids_differ": test_generated_ids_differ,
    "test_existing_id_is_refused": test_existing_id_is_refused,
    "test_missing_session_is_none": test_missing_session_is_none,
    "test_key_is_app_user_and_id": test_key_is_app_user_and_id,
    "test_events_read_back_in_order": test_events_read_back_in_order,
    "test_equal_timestamps_keep_append_order": test_equal_timestamps_keep_append_order,
    "test_partial_events_are_not_stored": test_partial_events_are_not_stored,
    "test_num_recent_events": test_num_recent_events,
    "test_after_timestamp": test_after_timestamp,
    "test_state_scopes": test_state_scopes,
    "test_concurrent_user_state_updates_are_all_kept": test_concurrent_user_state_updates_are_all_kept,
    "test_stale_session_is_refused": test_stale_session_is_refused,
    "test_appending_to_a_missing_session_is_refused": test_appending_to_a_missing_session_is_refused,
    "test_list_sessions": test_list_sessions,
    "test_list_sessions_last_updated_last": test_list_sessions_last_updated_last,
    "test_delete_session": test_delete_session,
    "test_created_again_after_delete_starts_empty": test_created_again_after_delete_starts_empty,
}


class AdkSessionServiceContract:
    """ADK's session service contract: sessions, events, the three state scopes,
    staleness and deletion, as methods. Subclass it with a ``service`` fixture::

        class TestMyService(AdkSessionServiceContract):
            @pytest.fixture
            async def service(self):
                async with MyService(...) as opened:
                    yield opened

    A service that differs from the contract on purpose overrides that test with
    :func:`chatledger.testing.expected_to_differ`.
    """

    @pytest.fixture
    def app(self) -> str:
        """An app name no other test uses (the tests may share one database)."""
        return f"app-{uuid.uuid4().hex[:12]}"


for _name, _test in TESTS.items():
    setattr(AdkSessionServiceContract, _name, staticmethod(_test))


# -- the kind driver (chatledger.testing.kinds) --------------------------------------------

#: The app and user of the kind contract's ADK sessions.
DRIVER_APP, DRIVER_USER = "kind-contract", "u"
DRIVER_SCOPE = {"app_name": DRIVER_APP, "user_id": DRIVER_USER}


class _Writer:
    """A :class:`chatledger.testing.kinds.Writer` of ADK sessions: chatledger's service."""

    def __init__(self, url: Any, **options: Any) -> None:
        from ..adk import LedgerSessionService

        self.service = LedgerSessionService(url, **options)
        self.ledger = self.service.ledger
        #: The events written with an id, by (id, text): a repeat is the same ``Event``.
        self.events: dict[tuple[str, str], Event] = {}

    async def ready(self) -> None:
        await self.ledger.ensure_ready()

    async def create(self, session_id: str) -> Any:
        return await self.service.create_session(
            app_name=DRIVER_APP, user_id=DRIVER_USER, session_id=session_id
        )

    async def write(
        self, handle: Any, text: str, *, write_id: str | None = None, in_transaction: bool = False
    ) -> str:
        made = event(text)
        if write_id is not None:
            made = self.events.setdefault((write_id, text), made)
            made.id = write_id
        stored = await self.service.append_event(handle, made)
        return str(stored.id)

    async def texts(self, session_id: str) -> list[str]:
        found = await self.service.get_session(
            app_name=DRIVER_APP, user_id=DRIVER_USER, session_id=session_id
        )
        if found is None:
            return []
        return [str(part.text) for item in found.events if item.content for part in item.content.parts or []]

    async def stale_write(self, handle: Any, text: str) -> str:
        return await self.write(handle, text)

    def commit_point(self, text: str, *, in_transaction: bool) -> bytes | None:
        return None

    async def close(self) -> None:
        await self.service.close()


def driver() -> Driver:
    """The ADK kind's driver for :mod:`chatledger.testing.kinds`."""
    from .. import kinds
    from .kinds import Driver

    return Driver(
        kinds.ADK,
        _Writer,
        identity="ADK Event.id",
        scope=DRIVER_SCOPE,
        refused=(SessionNotFoundError, StaleSessionError),
    )
