"""The ADK service's transactions on ``adk_sessions``, ``adk_events``, ``adk_app_states``
and ``adk_user_states``: each a ``work`` (and ``settle``) closure for :class:`Ledger`.

A session row is the sequence counter of its raw log of events: an append bumps
``last_sequence`` compare-and-set on the value the caller's ``Session`` object saw
(its ``_storage_update_marker``), so sequences are gap-free and a stale object is
refused by the counter, never by a timestamp. ``app:`` and ``user:`` state rows are
merged under their row lock (an ``UPDATE`` first, then the read and the write of the
merged JSON), so concurrent deltas to different keys are never lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from sqlalchemy import ColumnElement, Table, and_, delete, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import clock, marks, validate
from ..engine import Ledger
from ..errors import ConstraintViolation
from ..identity import Found, Generation, WriteIdentity, counter_generation
from ..savepoints import insert_unless_present
from ..schema import adk_app_states_table as _apps
from ..schema import adk_events_table as _events
from ..schema import adk_sessions_table as _sessions
from ..schema import adk_user_states_table as _users
from ..selection import PURGE_BATCH, Progress, Selection, purge

#: ADK's own words for a stale session (``DatabaseSessionService``'s message).
STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)

#: A session row that is not a tombstone.
_live = _sessions.c.deleted_at.is_(None)

Work = Callable[[AsyncConnection], Coroutine[Any, Any, Any]]


@dataclass(frozen=True, slots=True)
class Key:
    """ADK's key of a session: (app_name, user_id, session id)."""

    app_name: str
    user_id: str
    id: str

    def session(self) -> ColumnElement[bool]:
        return and_(
            _sessions.c.app_name == self.app_name,
            _sessions.c.user_id == self.user_id,
            _sessions.c.id == self.id,
        )

    def events(self) -> ColumnElement[bool]:
        return and_(
            _events.c.app_name == self.app_name,
            _events.c.user_id == self.user_id,
            _events.c.session_id == self.id,
        )


@dataclass(frozen=True, slots=True)
class Deltas:
    """An event's or a create's state split by scope, ``temp:`` keys dropped, JSON-safe."""

    app: dict[str, Any]
    user: dict[str, Any]
    session: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Head:
    """A session's counter row as a read saw it, with the shared state merged in, and
    the timestamp of its newest event (``None``: it has none)."""

    last_sequence: int
    state: dict[str, Any]
    updated_at: datetime
    last_event_at: float | None = None

    @property
    def last_update_time(self) -> float:
        """ADK's ``Session.last_update_time``: the newest event's timestamp, as ADK's own
        services keep it; the session's creation without events."""
        return self.updated_at.timestamp() if self.last_event_at is None else self.last_event_at


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append stored: the event's sequence, and whether a settle found it
    stored before this call's attempt (``settled``: the caller's ``Session`` may lack
    what was appended since, and is read again)."""

    sequence: int
    settled: bool = False


@dataclass(frozen=True, slots=True)
class Loaded:
    """:func:`load`'s answer: the head and the events' JSON texts, oldest first."""

    head: Head
    events: list[str]


@dataclass(frozen=True, slots=True)
class Listed:
    """One session of a :func:`list_page`: its key, merged state, counter and head."""

    user_id: str
    id: str
    head: Head


def _decode(text: object, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(f"{what} holds no JSON text")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{what} is stored as JSON that is not an object")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise ValueError(f"expected a stored integer, not {value!r}")
    return value


def merged(app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]) -> dict[str, Any]:
    """ADK's merged view: session state, then ``app:`` and ``user:`` keys prefixed."""
    state = dict(session)
    state.update({f"app:{key}": value for key, value in app.items()})
    state.update({f"user:{key}": value for key, value in user.items()})
    return state


# -- shared state ------------------------------------------------------------------------


def _scope(table: Table, app_name: str, user_id: str) -> tuple[ColumnElement[bool], dict[str, str]]:
    if table is _apps:
        return _apps.c.app_name == app_name, {"app_name": app_name}
    where = and_(_users.c.app_name == app_name, _users.c.user_id == user_id)
    return where, {"app_name": app_name, "user_id": user_id}


async def _merge_shared(
    conn: AsyncConnection, table: Table, app_name: str, user_id: str, delta: Mapping[str, Any], now: datetime
) -> None:
    """Merge ``delta`` into one ``app:``/``user:`` state row, creating it if missing.

    The ``UPDATE`` of the version takes the row's lock first, so the read and write
    of the merged JSON that follow cannot interleave with another writer's: two
    concurrent deltas both land (no lost update). A racing first insert of the row
    fails on its primary key inside a savepoint and the merge goes on as an update; on
    InnoDB two first inserts may deadlock instead (the UPDATEs' gap locks), and the
    ledger runs the transaction again (:func:`chatledger.savepoints.insert_unless_present`).
    """
    if not delta:
        return
    where, key = _scope(table, app_name, user_id)
    while True:
        bumped = await conn.execute(
            update(table).where(where).values(version=table.c.version + 1, updated_at=now)
        )
        if bumped.rowcount == 1:
            break
        created = insert(table).values(
            **key, state_json=validate.json_text(dict(delta), "state"), version=1, updated_at=now
        )
        if await insert_unless_present(conn, created):
            return
        # another writer created it first: merge into theirs
    stored = _decode(await conn.scalar(select(table.c.state_json).where(where)), table.name)
    stored.update(delta)
    await conn.execute(update(table).where(where).values(state_json=validate.json_text(stored, "state")))


async def _shared(
    conn: AsyncConnection, app_name: str, user_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    app = await conn.scalar(select(_apps.c.state_json).where(_apps.c.app_name == app_name))
    user = await conn.scalar(
        select(_users.c.state_json).where(_users.c.app_name == app_name, _users.c.user_id == user_id)
    )
    return (
        {} if app is None else _decode(app, "adk_app_states"),
        {} if user is None else _decode(user, "adk_user_states"),
    )


async def user_state(ledger: Ledger, app_name: str, user_id: str) -> dict[str, Any]:
    """The ``user:`` state of a user of an app, keys without the prefix (``{}`` if none)."""

    async def work(conn: AsyncConnection) -> dict[str, Any]:
        return (await _shared(conn, app_name, user_id))[1]

    result: dict[str, Any] = await ledger.read(work)
    return result


def _generation(key: Key) -> Generation:
    """The generation of the session ``key`` (:mod:`chatledger.identity`): its
    ``base_sequence``, which every delete moves past its counter (a new generation
    starts there), or the last sequence its purged tombstone's mark keeps."""
    return counter_generation(
        _sessions,
        key.session,
        "base_sequence",
        marks.ADK,
        lambda: marks.adk_id(key.app_name, key.user_id, key.id),
        "last_sequence",
    )


# -- create ------------------------------------------------------------------------------


async def create(ledger: Ledger, key: Key, deltas: Deltas) -> Head:
    """Create (or, over its tombstone, start again) the session ``key``.

    Raises:
        AlreadyExistsError: a live session has the key (ADK's error and words).
    """
    state_json = validate.json_text(deltas.session, "state")
    await ledger.check_statement_size("state", state_json)
    # Fixed before the first attempt: settle finds the row this create made by it.
    stamp = clock.utc_now()
    exists = AlreadyExistsError(f"Session with id {key.id} already exists.")

    async def head(conn: AsyncConnection) -> Head:
        last = await conn.scalar(select(_sessions.c.last_sequence).where(key.session()))
        app, user = await _shared(conn, key.app_name, key.user_id)
        return Head(_int(last), merged(app, user, deltas.session), stamp)

    async def work(conn: AsyncConnection) -> Head:
        current = (await conn.execute(select(_live.label("live")).where(key.session()))).one_or_none()
        if current is not None and current.live:
            raise exists
        values = {"state_json": state_json, "created_at": stamp, "updated_at": stamp}
        revived = 0
        if current is not None:  # a tombstone: the key starts again, numbering on from it (see delete)
            revived = (
                await conn.execute(
                    update(_sessions)
                    .where(key.session(), _sessions.c.deleted_at.is_not(None))
                    .values(deleted_at=None, state_version=_sessions.c.state_version + 1, **values)
                )
            ).rowcount
        if revived != 1:
            # No row, or the tombstone read above was purged before the UPDATE could lock
            # it: the purge's mark, if any, carries the counter and the state version on.
            mark = await marks.take(conn, marks.ADK, marks.adk_id(key.app_name, key.user_id, key.id))
            base = 0 if mark is None else int(mark.last_sequence)
            await conn.execute(
                insert(_sessions).values(
                    app_name=key.app_name,
                    user_id=key.user_id,
                    id=key.id,
                    last_sequence=base,
                    base_sequence=base,
                    state_version=1 if mark is None else int(mark.version) + 1,
                    **values,
                )
            )
        await _merge_shared(conn, _apps, key.app_name, key.user_id, deltas.app, stamp)
        await _merge_shared(conn, _users, key.app_name, key.user_id, deltas.user, stamp)
        made = await head(conn)
        # A new generation starts with no event: its base_sequence is its counter, which
        # a delete moves past.
        identity.made(made.last_sequence, made)
        return made

    async def find(conn: AsyncConnection) -> Found[Head] | None:
        # The stamp is this call's own: a live row created at it is this create's.
        made = await conn.scalar(select(_sessions.c.created_at).where(key.session(), _live))
        return None if made != stamp else Found(await head(conn), None)

    identity = WriteIdentity(
        key.id,
        None,
        find=find,
        generation=_generation(key),
        names="ADK session id",
        of="a session",
    )
    try:
        result: Head = await ledger.write(work, identity=identity)
    except ConstraintViolation:  # a racing create of the same key won
        raise exists from None
    return result


# -- append ------------------------------------------------------------------------------


async def _refuse(conn: AsyncConnection, key: Key) -> None:
    live = await conn.scalar(select(_live).where(key.session()))
    if not live:
        raise SessionNotFoundError(f"Session {key.id} not found.")
    raise StaleSessionError(STALE_MESSAGE)


async def _expected(conn: AsyncConnection, key: Key, seen: int | None, last_event_id: str | None) -> int:
    """The counter value the caller's ``Session`` saw: its marker, or for an object made
    without one (built by hand), the sequence of its last event (the generation's base
    when it has none)."""
    if seen is not None:
        return seen
    if last_event_id is None:
        base = await conn.scalar(select(_sessions.c.base_sequence).where(key.session(), _live))
        if base is None:
            await _refuse(conn, key)
        return _int(base)
    found = await conn.scalar(
        select(_events.c.sequence).where(key.events(), _events.c.event_id == last_event_id)
    )
    if found is None:
        await _refuse(conn, key)
        raise StaleSessionError(STALE_MESSAGE)
    return _int(found)


async def append(
    ledger: Ledger,
    key: Key,
    seen: int | None,
    last_event_id: str | None,
    event_id: str,
    timestamp: float,
    event_json: str,
    deltas: Deltas,
) -> Appended:
    """Append one event as the next sequence of its session's log, with its state deltas,
    in one transaction; exactly once across a lost COMMIT, by the event's identity
    (:mod:`chatledger.identity`): its id ``event_id``, its content ``event_json``, and the
    generation it was made in.

    Returns:
        The event's sequence, and whether it was found stored before (a repeat of an
        append that was committed, by this call's lost COMMIT or an earlier call).

    Raises:
        StaleSessionError: the counter moved past ``seen`` (another writer appended).
        SessionNotFoundError: no live session has the key.
        IdentityConflict: another event with the id ``event_id`` is stored with other
            content; nothing written.
    """
    session_delta = validate.json_text(deltas.session, "state_delta")
    await ledger.check_statement_size(
        "event",
        event_json,
        session_delta,
        validate.json_text(deltas.app, "state_delta"),
        validate.json_text(deltas.user, "state_delta"),
    )
    latest = ledger.backend.latest

    async def work(conn: AsyncConnection) -> Appended:
        now = clock.utc_now()
        expected = await _expected(conn, key, seen, last_event_id)
        bump = (
            update(_sessions)
            .where(key.session(), _live, _sessions.c.last_sequence == expected)
            .values(
                last_sequence=_sessions.c.last_sequence + 1, updated_at=latest(_sessions.c.updated_at, now)
            )
        )
        moved = await conn.execute(bump)
        if moved.rowcount != 1:
            await _refuse(conn, key)
        sequence = expected + 1
        if deltas.session:
            # Under the lock the counter update took: no other writer is between.
            stored = _decode(
                await conn.scalar(select(_sessions.c.state_json).where(key.session())), "adk_sessions"
            )
            stored.update(deltas.session)
            await conn.execute(
                update(_sessions)
                .where(key.session())
                .values(
                    state_json=validate.json_text(stored, "state"),
                    state_version=_sessions.c.state_version + 1,
                )
            )
        await _merge_shared(conn, _apps, key.app_name, key.user_id, deltas.app, now)
        await _merge_shared(conn, _users, key.app_name, key.user_id, deltas.user, now)
        await conn.execute(
            insert(_events).values(
                app_name=key.app_name,
                user_id=key.user_id,
                session_id=key.id,
                sequence=sequence,
                event_id=event_id,
                timestamp=timestamp,
                event_json=event_json,
                created_at=now,
            )
        )
        appended = Appended(sequence)
        # The counter was at expected, which a delete moves past (base_sequence).
        identity.made(expected, appended)
        return appended

    async def find(conn: AsyncConnection) -> Found[Appended] | None:
        row = (
            await conn.execute(
                select(_events.c.sequence, _events.c.event_json).where(
                    key.events(), _events.c.event_id == event_id
                )
            )
        ).one_or_none()
        return None if row is None else Found(Appended(int(row.sequence), settled=True), (row.event_json,))

    identity = WriteIdentity(
        event_id,
        (event_json,),
        find=find,
        generation=_generation(key),
        names="ADK Event.id",
        of="an event of this session",
    )
    # With the caller's marker, the first statement is the bump: SQLite's BEGIN comes with it.
    result: Appended = await ledger.write(work, identity=identity, first_writes=seen is not None)
    return result


# -- read --------------------------------------------------------------------------------

#: The timestamp of a session row's newest event (NULL without one): the event at its
#: counter, a lookup on the primary key of ``adk_events`` (a delete moves the counter
#: past the events it erases, and a new generation starts with none).
_NEWEST_EVENT_AT = (
    select(_events.c.timestamp)
    .where(
        _events.c.app_name == _sessions.c.app_name,
        _events.c.user_id == _sessions.c.user_id,
        _events.c.session_id == _sessions.c.id,
        _events.c.sequence == _sessions.c.last_sequence,
    )
    .scalar_subquery()
    .label("last_event_at")
)


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


async def load(ledger: Ledger, key: Key, recent: int | None, after: float | None) -> Loaded | None:
    """The live session ``key`` and its newest ``recent`` events (all when ``None``)
    with ``timestamp >= after`` (any when ``None``), oldest first, in one snapshot."""

    async def work(conn: AsyncConnection) -> Loaded | None:
        row = (
            await conn.execute(
                select(
                    _sessions.c.last_sequence,
                    _sessions.c.base_sequence,
                    _sessions.c.state_json,
                    _sessions.c.updated_at,
                    _NEWEST_EVENT_AT,
                ).where(key.session(), _live)
            )
        ).one_or_none()
        if row is None:
            return None
        events: Sequence[str] = []
        if recent != 0:
            query = (
                select(_events.c.event_json)
                .where(
                    key.events(),
                    _events.c.sequence > row.base_sequence,
                    _events.c.sequence <= row.last_sequence,
                )
                .order_by(_events.c.sequence.desc())
            )
            if after is not None:
                query = query.where(_events.c.timestamp >= after)
            if recent is not None:
                query = query.limit(recent)
            events = list(await conn.scalars(query))
        app, user = await _shared(conn, key.app_name, key.user_id)
        state = merged(app, user, _decode(row.state_json, "adk_sessions"))
        head = Head(int(row.last_sequence), state, row.updated_at, _float(row.last_event_at))
        return Loaded(head, list(reversed(events)))

    result: Loaded | None = await ledger.read(work)
    return result


async def list_page(
    ledger: Ledger, app_name: str, user_id: str | None, limit: int | None, after: tuple[str, str] | None
) -> list[Listed]:
    """The live sessions of an app (of one user when ``user_id``), without events.

    ``limit`` given: a page of at most ``limit`` in key order (``user_id``, ``id``)
    after the key ``after``, on the primary key's index. ``limit`` ``None``: all, in
    ADK's order (last update oldest first: :attr:`Head.last_update_time`, then user
    and id).
    """

    async def work(conn: AsyncConnection) -> list[Listed]:
        query = select(
            _sessions.c.user_id,
            _sessions.c.id,
            _sessions.c.last_sequence,
            _sessions.c.state_json,
            _sessions.c.updated_at,
            _NEWEST_EVENT_AT,
        ).where(_sessions.c.app_name == app_name, _live)
        if user_id is not None:
            query = query.where(_sessions.c.user_id == user_id)
        if limit is not None:
            if after is not None:
                query = query.where(
                    or_(
                        _sessions.c.user_id > after[0],
                        and_(_sessions.c.user_id == after[0], _sessions.c.id > after[1]),
                    )
                )
            query = query.order_by(_sessions.c.user_id, _sessions.c.id).limit(limit)
        rows = (await conn.execute(query)).all()
        app = await conn.scalar(select(_apps.c.state_json).where(_apps.c.app_name == app_name))
        app_state = {} if app is None else _decode(app, "adk_app_states")
        users: dict[str, dict[str, Any]] = {}
        for user in sorted({row.user_id for row in rows}):
            found = await conn.scalar(
                select(_users.c.state_json).where(_users.c.app_name == app_name, _users.c.user_id == user)
            )
            users[user] = {} if found is None else _decode(found, "adk_user_states")
        listed = [
            Listed(
                row.user_id,
                row.id,
                Head(
                    int(row.last_sequence),
                    merged(app_state, users[row.user_id], _decode(row.state_json, "adk_sessions")),
                    row.updated_at,
                    _float(row.last_event_at),
                ),
            )
            for row in rows
        ]
        if limit is None:
            listed.sort(key=lambda item: (item.head.last_update_time, item.user_id, item.id))
        return listed

    result: list[Listed] = await ledger.read(work)
    return result


@dataclass(frozen=True, slots=True)
class Stored:
    """A live session as ``chatledger sessions`` lists it: its key, how many events its
    log holds, its times (UTC)."""

    key: Key
    events: int
    created_at: datetime
    updated_at: datetime


_STORED = (
    _sessions.c.app_name,
    _sessions.c.user_id,
    _sessions.c.id,
    _sessions.c.last_sequence,
    _sessions.c.base_sequence,
    _sessions.c.created_at,
    _sessions.c.updated_at,
)


def _stored(rows: Sequence[Any]) -> list[Stored]:
    # A live generation's events are sequences base_sequence+1..last_sequence, gap-free.
    return [
        Stored(
            Key(row.app_name, row.user_id, row.id),
            int(row.last_sequence) - int(row.base_sequence),
            row.created_at,
            row.updated_at,
        )
        for row in rows
    ]


async def list_by_key(conn: AsyncConnection, limit: int) -> list[Stored]:
    """The first ``limit`` live sessions in key order (app, user, id), inside the caller's
    read transaction, on the primary key (``adk_sessions`` has no index by activity)."""
    query = (
        select(*_STORED)
        .where(_live)
        .order_by(_sessions.c.app_name, _sessions.c.user_id, _sessions.c.id)
        .limit(limit)
    )
    return _stored((await conn.execute(query)).all())


async def find(
    ledger: Ledger, session_id: str, app_name: str | None = None, user_id: str | None = None
) -> list[Stored]:
    """The live sessions with the id ``session_id``, in every app and user (or only
    ``app_name``'s, ``user_id``'s), in key order. With both, a lookup on the primary key;
    with ``app_name`` alone, a range of it; else a scan of ``adk_sessions`` (its key
    starts with the app and the user)."""
    query = select(*_STORED).where(_sessions.c.id == session_id, _live)
    if app_name is not None:
        query = query.where(_sessions.c.app_name == app_name)
    if user_id is not None:
        query = query.where(_sessions.c.user_id == user_id)
    query = query.order_by(_sessions.c.app_name, _sessions.c.user_id)

    async def work(conn: AsyncConnection) -> list[Stored]:
        return _stored((await conn.execute(query)).all())

    result: list[Stored] = await ledger.read(work)
    return result


# -- delete ------------------------------------------------------------------------------


async def delete_session(ledger: Ledger, key: Key) -> bool:
    """Delete the session ``key``: its events are erased and its row becomes a tombstone.

    The counter is moved on by one as the row becomes a tombstone, and the next
    generation numbers on from there: a ``Session`` object read before the delete
    never matches the counter again, so its appends are refused (``SessionNotFoundError``
    while the tombstone stands, ``StaleSessionError`` once the key was created again).
    ``app:`` and ``user:`` state stays: the app's and user's other sessions share it.

    Returns:
        Whether a live session was deleted (a missing one is no error, as in ADK).
    """
    return await _delete(ledger, key, Selection())


async def keys_of(ledger: Ledger, session_id: str) -> list[Key]:
    """The keys of the live sessions with the id ``session_id``, in every app and user,
    in key order (a scan of ``adk_sessions``: its key starts with the app and user)."""
    query = (
        select(_sessions.c.app_name, _sessions.c.user_id)
        .where(_sessions.c.id == session_id, _live)
        .order_by(_sessions.c.app_name, _sessions.c.user_id)
    )

    async def work(conn: AsyncConnection) -> list[Key]:
        return [Key(row.app_name, row.user_id, session_id) for row in await conn.execute(query)]

    result: list[Key] = await ledger.read(work)
    return result


#: The columns a purge checks again: every append (and delete) moves ``last_sequence``,
#: every change of the session state ``state_version``.
_WRITTEN = ("last_sequence", "state_version")
#: The key columns a purge pages by.
_KEY = ("app_name", "user_id", "id")


def scope(app_name: str | None = None, user_id: str | None = None) -> ColumnElement[bool]:
    """Live sessions, only ``app_name``'s and/or ``user_id``'s if given (what a purge
    and its count select from)."""
    conditions: list[ColumnElement[bool]] = [_live]
    if app_name is not None:
        conditions.append(_sessions.c.app_name == app_name)
    if user_id is not None:
        conditions.append(_sessions.c.user_id == user_id)
    return and_(*conditions)


async def purge_sessions(
    ledger: Ledger,
    selection: Selection,
    *,
    app_name: str | None = None,
    user_id: str | None = None,
    size: int = PURGE_BATCH,
    progress: Progress | None = None,
) -> int:
    """Delete the sessions ``selection`` holds (:mod:`chatledger.selection`; its prefix
    is of the session id), of every app and user or only ``app_name``'s / ``user_id``'s,
    each as :func:`delete_session` does, in a transaction of its own whose ``UPDATE``
    checks the selection and the row as its page read it: a session appended to or
    whose state changed meanwhile is kept. ``app:`` and ``user:`` state stays. Returns
    how many it deleted; ``progress`` gets each ``(app_name, user_id, id)`` and whether
    it was deleted."""

    async def delete_one(found: tuple[str, str, str], seen: Mapping[str, Any]) -> bool:
        return await _delete(ledger, Key(*found), selection, seen)

    return await purge(
        ledger,
        _sessions,
        scope(app_name, user_id),
        selection,
        delete_one,
        versions=_WRITTEN,
        key=_KEY,
        size=size,
        progress=progress,
    )


async def _delete(
    ledger: Ledger, key: Key, selection: Selection, seen: Mapping[str, Any] | None = None
) -> bool:
    """The one delete: tombstones the session if it is live and still in ``selection``
    (and, for a purge, still as ``seen`` when its page was read)."""
    latest = ledger.backend.latest
    selected = selection.where(_sessions, ledger.backend)
    selected += [_sessions.c[name] == value for name, value in (seen or {}).items()]

    async def work(conn: AsyncConnection) -> bool:
        now = clock.utc_now()
        gone = await conn.execute(
            update(_sessions)
            .where(key.session(), _live, *selected)
            .values(
                last_sequence=_sessions.c.last_sequence + 1,
                deleted_at=now,
                state_json="{}",
                state_version=_sessions.c.state_version + 1,
                updated_at=latest(_sessions.c.updated_at, now),
            )
        )
        if gone.rowcount != 1:
            return False
        # A statement of its own: MySQL's SET sees the columns assigned before it.
        await conn.execute(
            update(_sessions).where(key.session()).values(base_sequence=_sessions.c.last_sequence)
        )
        await conn.execute(delete(_events).where(key.events()))
        return True

    async def settle(conn: AsyncConnection) -> bool | None:
        if seen is None:
            live = await conn.scalar(select(_live).where(key.session()))
            return None if live else True
        # A purge's delete whose COMMIT's answer was lost: still live and selected, it
        # was not committed (try again); the tombstone of that very row (its counter and
        # state version one on), it was; anything else was written meanwhile: kept.
        if await conn.scalar(select(_sessions.c.id).where(key.session(), _live, *selected)) is not None:
            return None
        ours = await conn.scalar(
            select(_sessions.c.id).where(
                key.session(),
                _sessions.c.deleted_at.is_not(None),
                _sessions.c.last_sequence == seen["last_sequence"] + 1,
                _sessions.c.state_version == seen["state_version"] + 1,
            )
        )
        return ours is not None

    result: bool = await ledger.write(work, settle=settle, write_id=key.id)
    return result
