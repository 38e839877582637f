"""``LedgerSessionService``: Google ADK's ``BaseSessionService`` on the shared ledger."""

from __future__ import annotations

import base64
import binascii
import json
from types import TracebackType
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from .. import telemetry, validate
from ..dsn import display
from ..engine import Ledger
from ..ids import new_uuid7
from ..types import MAX_ADK_SCOPE_LENGTH
from . import rows
from .rows import Deltas, Key
from .uris import service_dsn

__all__ = ["LedgerListSessionsResponse", "LedgerSessionService"]

#: Most sessions one page of :meth:`LedgerSessionService.list_sessions` holds.
MAX_PAGE_SIZE = 1000


class LedgerListSessionsResponse(ListSessionsResponse):
    """ADK's ``ListSessionsResponse`` and, for a paged call, the token of the next page
    (``None`` after the last page)."""

    next_page_token: str | None = None


def _deltas(state: dict[str, Any] | None) -> Deltas:
    # ADK's own split and JSON coercion: temp: keys dropped, app:/user: unprefixed.
    split = _session_util.extract_json_safe_state_delta(state or {})
    return Deltas(app=split["app"], user=split["user"], session=split["session"])


def _scope(app_name: object, user_id: object) -> tuple[str, str]:
    return (
        validate.identifier(app_name, "app_name", limit=MAX_ADK_SCOPE_LENGTH),
        validate.identifier(user_id, "user_id", limit=MAX_ADK_SCOPE_LENGTH),
    )


def _key(app_name: object, user_id: object, session_id: object) -> Key:
    app, user = _scope(app_name, user_id)
    return Key(app, user, validate.identifier(session_id, "session_id"))


def _seen(session: Session) -> int | None:
    marker = session._storage_update_marker
    if marker is None:
        return None
    try:
        return int(marker)
    except ValueError:
        # A marker another service set (ADK's timestamp marker): not this store's.
        raise ValueError(
            f"session {session.id!r} was not read from this service; reload it from it"
        ) from None


def _temp_state(event: Event) -> dict[str, Any]:
    """The ``temp:`` keys of the event's state delta (ADK's ``_apply_temp_state``)."""
    delta = event.actions.state_delta if event.actions else None
    return {key: value for key, value in (delta or {}).items() if key.startswith(State.TEMP_PREFIX)}


def _refresh(session: Session, loaded: rows.Loaded) -> None:
    """Make ``session`` what :meth:`LedgerSessionService.get_session` returns from
    ``loaded``, keeping its ``temp:`` state (the invocation's own)."""
    temp = {key: value for key, value in session.state.items() if key.startswith(State.TEMP_PREFIX)}
    session.events[:] = [Event.model_validate_json(text) for text in loaded.events]
    session.state.clear()
    session.state.update({**loaded.head.state, **temp})
    session.last_update_time = loaded.head.last_update_time
    session._storage_update_marker = str(loaded.head.last_sequence)


def _encode_token(after: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(after)).encode()).decode()


def _decode_token(token: object) -> tuple[str, str]:
    text = validate.text(token, "page_token")
    try:
        after = json.loads(base64.urlsafe_b64decode(text.encode()))
    except (binascii.Error, ValueError):
        after = None
    if not (isinstance(after, list) and len(after) == 2 and all(isinstance(part, str) for part in after)):
        raise ValueError("page_token is not a token list_sessions returned")
    return after[0], after[1]


class LedgerSessionService(BaseSessionService):
    """ADK sessions in SQLite, PostgreSQL or MySQL/MariaDB, beside zett's and rein's.

    Built like ADK's ``DatabaseSessionService``: swap
    ``DatabaseSessionService(db_url=url)`` for ``LedgerSessionService(db_url=url)``.

    Args:
        db_url: ``postgresql://``, ``mysql://``, ``mariadb://`` or ``sqlite:///path``
            (a driver in the URL, such as ``+asyncpg``, is fine); ``None`` reads
            ``CHATLEDGER_DSN``, then the embedded SQLite default.
        uri: instead of ``db_url``, ADK's session service URI
            (``chatledger+postgresql://…``, ``chatledger+sqlite:///path``…), as ADK's
            service registry passes it (``--session_service_uri``, ``services.yaml``);
            see :func:`chatledger.adk.register`.
        agents_dir: ADK's agents directory, which ADK's factories pass; unused.
        engine: instead of ``db_url``, an ``AsyncEngine`` of your own (``db_engine=``,
            ADK's name, is the same); :meth:`close` leaves it open.
        **options: :class:`chatledger.options.LedgerOptions` (pool sizes, retries...).

    Raises:
        ValueError / TypeError: a bad URL or option, or both a URL and an engine, or
            both ``db_url`` and ``uri``.

    Each event is one entry of its session's raw log (``adk_events``) with a gap-free
    sequence; an append whose COMMIT was lost is settled by ``Event.id``, so it is
    stored once. A ``Session`` carries the sequence it last saw (ADK's
    ``_storage_update_marker``); appending from one that another writer has overtaken
    raises ADK's ``StaleSessionError``. ``app:`` and ``user:`` state is shared by the
    app's / user's sessions and merged key by key under a row lock, so concurrent
    updates are never lost; ``temp:`` state and partial events are never stored.

    A server database must be migrated first (``chatledger migrate``); the embedded
    SQLite database upgrades itself.
    """

    def __init__(
        self,
        db_url: str | URL | None = None,
        *,
        uri: str | None = None,
        agents_dir: str | None = None,
        engine: AsyncEngine | None = None,
        db_engine: AsyncEngine | None = None,
        **options: Any,
    ) -> None:
        if engine is not None and db_engine is not None:
            raise ValueError("give engine= or db_engine= (the same thing), not both")
        if uri is not None:
            if db_url is not None:
                raise ValueError("give db_url= or uri= (ADK's service URI), not both")
            db_url = service_dsn(uri)
        del agents_dir  # ADK's factories pass the agents directory; the ledger needs none
        if options.get("read_dsn") is not None:
            # Replica reads serve the zett and rein stores (docs/scaling.md).
            raise ValueError("read_dsn: LedgerSessionService reads on the primary only; leave read_dsn unset")
        self.ledger = Ledger(db_url, engine=engine if engine is not None else db_engine, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({display(self.ledger.url)!r})"

    async def close(self) -> None:
        """Dispose of the connection pool (not of a caller's engine); stored sessions stay."""
        await self.ledger.close()

    async def __aenter__(self) -> LedgerSessionService:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (a new UUIDv7 id when ``session_id`` is ``None``).

        ``state``'s ``app:`` and ``user:`` keys go to the shared state, ``temp:`` keys
        are dropped. Creating an id that was deleted starts it again.

        Raises:
            AlreadyExistsError: a live session has the id (ADK's error).
            ValueError / TypeError: an empty, too long or non-str id or name; state
                that is not JSON.
        """
        key = _key(app_name, user_id, new_uuid7() if session_id is None else session_id)
        if state is not None and not isinstance(state, dict):
            raise TypeError(f"state must be a dict, not {type(state).__name__}")
        with telemetry.operation(self.ledger, "adk", "create_session", key.id):
            head = await rows.create(self.ledger, key, _deltas(state))
        return self._session(key, head, [])

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events in order (``None`` if there is none).

        ``config.num_recent_events``: only the newest that many; ``after_timestamp``:
        only the events with ``timestamp >= after_timestamp`` (seconds since the
        epoch). Both read on an index; the order is the log's, never the timestamps'.
        """
        key = _key(app_name, user_id, session_id)
        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        with telemetry.operation(self.ledger, "adk", "get_session", key.id):
            loaded = await rows.load(self.ledger, key, recent, after)
        if loaded is None:
            return None
        return self._session(key, loaded.head, [Event.model_validate_json(text) for text in loaded.events])

    async def list_sessions(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> LedgerListSessionsResponse:
        """The app's sessions (one user's when ``user_id``), without events, state merged.

        Without ``page_size`` (ADK's call): all of them, last update oldest first, as
        ADK orders them. With ``page_size`` (1 to :data:`MAX_PAGE_SIZE`): one page in
        (``user_id``, id) order, read on the primary key's index, and
        ``next_page_token`` to pass as ``page_token`` for the next (``None`` after the
        last page); sessions created meanwhile after the page's end are listed later.
        """
        app = validate.identifier(app_name, "app_name", limit=MAX_ADK_SCOPE_LENGTH)
        user = None if user_id is None else _scope(app, user_id)[1]
        limit = (
            None
            if page_size is None
            else validate.integer(page_size, "page_size", minimum=1, maximum=MAX_PAGE_SIZE)
        )
        if page_token is not None and limit is None:
            raise ValueError("page_token needs page_size")
        after = None if page_token is None else _decode_token(page_token)
        with telemetry.operation(self.ledger, "adk", "list_sessions", app):
            # One more than the page: whether a next page exists, without a count.
            found = await rows.list_page(self.ledger, app, user, None if limit is None else limit + 1, after)
        token = None
        if limit is not None and len(found) > limit:
            found = found[:limit]
            token = _encode_token((found[-1].user_id, found[-1].id))
        sessions = [self._session(Key(app, item.user_id, item.id), item.head, []) for item in found]
        return LedgerListSessionsResponse(sessions=sessions, next_page_token=token)

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events; a missing one is no error (as in ADK).

        A ``Session`` object read before the delete can never append again: to the
        tombstone it gets ``SessionNotFoundError``, to the id created anew
        ``StaleSessionError``.
        """
        key = _key(app_name, user_id, session_id)
        with telemetry.operation(self.ledger, "adk", "delete_session", key.id):
            await rows.delete_session(self.ledger, key)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state, keys without the prefix (``{}`` if none)."""
        app, user = _scope(app_name, user_id)
        return await rows.user_state(self.ledger, app, user)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` as the next entry of ``session``'s log and apply it to ``session``.

        A partial event is returned unstored. ``temp:`` keys reach ``session.state``
        only. Afterwards ``session`` holds what :meth:`get_session` returns (its
        ``last_update_time`` the event's ``timestamp``, as ADK's own services keep it),
        ``temp:`` state aside; a refused append leaves it as it was.

        Exactly once, by the event's identity (:mod:`chatledger.identity`): a retry
        after a lost COMMIT, or a repeat of the same ``Event``, finds it by
        ``Event.id`` and stores nothing more (``session`` is then read again, so it
        never holds the event twice); an event the session's delete erased after its
        COMMIT was lost counts as appended.

        Raises:
            StaleSessionError: another writer appended to the session since
                ``session`` was read (ADK's error and message); reload it.
            SessionNotFoundError: the session does not exist or was deleted.
            IdentityConflict: (a ``ValueError``) the session holds another event
                with this ``Event.id`` and other content; nothing was stored.
            TypeError / ValueError: not a ``Session`` / ``Event``; an id too long.
        """
        if not isinstance(session, Session):
            raise TypeError(f"session must be a google.adk Session, not {type(session).__name__}")
        if not isinstance(event, Event):
            raise TypeError(f"event must be a google.adk Event, not {type(event).__name__}")
        if event.partial:
            return event
        key = _key(session.app_name, session.user_id, session.id)
        event_id = validate.identifier(event.id, "event.id")
        seen = _seen(session)
        # Kept for the caller's session, applied once the event is stored.
        temp = _temp_state(event)
        event = self._trim_temp_delta_state(event)
        deltas = _deltas(event.actions.state_delta if event.actions else None)
        last = session.events[-1].id if session.events else None
        with telemetry.operation(self.ledger, "adk", "append_event", key.id) as span:
            appended = await rows.append(
                self.ledger,
                key,
                seen,
                last,
                event_id,
                event.timestamp,
                event.model_dump_json(exclude_none=True),
                deltas,
            )
            span.set("chatledger.sequence", appended.sequence)
            # Stored before (a repeat): what the session holds now, read again.
            loaded = await rows.load(self.ledger, key, None, None) if appended.settled else None
        if loaded is None:
            session._storage_update_marker = str(appended.sequence)
            session.last_update_time = event.timestamp
            self._commit_event_to_session(session, event)
        else:
            _refresh(session, loaded)
        session.state.update(temp)
        return event

    @staticmethod
    def _session(key: Key, head: rows.Head, events: list[Event]) -> Session:
        session = Session(
            id=key.id,
            app_name=key.app_name,
            user_id=key.user_id,
            state=head.state,
            events=events,
            last_update_time=head.last_update_time,
        )
        session._storage_update_marker = str(head.last_sequence)
        return session
