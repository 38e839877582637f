"""The statements of an OpenAI Agents session: add, read, pop and clear, each one
transaction of the ledger (``openai_sessions`` is the counter row, ``openai_items`` the
items; see :mod:`chatledger.schema`).

Every write locks the session's counter row first (its ``UPDATE``), so the writes of
one session are serialized by the database, whichever process makes them: an add's
range of sequences is gap-free, and two pops never retract the same item.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy import Row, bindparam, case, delete, func, insert, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import clock, marks, telemetry, validate
from ..engine import Ledger
from ..errors import ConstraintViolation
from ..identity import Found, WriteIdentity, counter_generation
from ..schema import openai_items_table as _items
from ..schema import openai_sessions_table as _sessions
from ..selection import PURGE_BATCH, Progress, Selection, purge
from ..types import BigInt

#: Largest ``LIMIT`` bound: a BIGINT (the SDK's compaction asks for 2**31 - 1 items).
_MAX_LIMIT = 2**63 - 1
#: Times an add is made again after a concurrent first add created the counter row.
_FIRST_ADD_RACES = 3
#: Session ids per ``IN`` list of :func:`list_recent`'s item counts (bounded parameters).
_COUNTED_PER_STATEMENT = 500

_live = _items.c.retracted_at.is_(None)
#: A session whose items clear_session erased, until the next add.
_cleared = _sessions.c.deleted_at.is_not(None)
_of_session = _items.c.session_id


@dataclass(frozen=True)
class _Range:
    """A new counter row's last sequence and generation, as an add inserted them."""

    last_sequence: int
    generation: int


_raw_decode = json.JSONDecoder().raw_decode


def loads(text: str) -> Any:
    """``json.loads(text)``, the same value or error, faster on the texts an add stores
    (no whitespace around them): the decoder's ``raw_decode`` without the whitespace
    checks, and ``json.loads`` itself on any text it did not take whole."""
    try:
        item, end = _raw_decode(text)
    except ValueError:
        return json.loads(text)  # leading whitespace, or the error itself
    return item if end == len(text) else json.loads(text)


def decode(session_id: str, sequence: int, item_json: str) -> Any:
    """One stored item; a row that is not a JSON object (invalid JSON, or JSON such as a
    ``null`` written by SQL) is named, never skipped silently or returned as an item.

    Raises:
        ValueError: the row is not a JSON object; names the session and the sequence.
    """
    try:
        item = loads(item_json)
    except ValueError as error:
        raise ValueError(
            f"OpenAI Agents session {session_id!r}: item {sequence} is stored as invalid JSON: {error}"
        ) from None
    if not isinstance(item, dict):
        raise ValueError(
            f"OpenAI Agents session {session_id!r}: item {sequence} is stored as invalid JSON: "
            f"{type(item).__name__} {item_json[:40]!r} is not a JSON object (an input item)"
        )
    return item


def encode(item: object, field: str, *, ensure_ascii: bool = False) -> str:
    """One item's JSON text as an add stores it (key order kept: the SDK's rewind
    compares items by their serialization); ``ensure_ascii``: non-ASCII characters
    escaped (``\\u00e9``), as the SDK's own session stores them by default.

    Raises:
        TypeError: ``item`` is not a dict (an input item); names ``field``.
        ValueError: it is not JSON serializable, nested too deep, or not storable text.
    """
    if not isinstance(item, dict):
        raise TypeError(f"{field} must be a dict (an input item), not {type(item).__name__}")
    validate.json_depth(item, field)
    try:
        text = json.dumps(item, ensure_ascii=ensure_ascii, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{field} must be JSON serializable: {error}") from None
    return validate.text(text, field)


#: The add's parameters: the session, the instant, and the number of items.
_SESSION_ID = bindparam("session_id", type_=_sessions.c.id.type)
_NOW = bindparam("now", type_=_sessions.c.updated_at.type)
_COUNT = bindparam("count", type_=BigInt)
#: The add's statements, built once per backend and RETURNING support (their cache
#: keys and compiled forms then reused on every add): :func:`_bump`, and the one
#: statement of a backend that has :attr:`chatledger.dialects.Backend.items_add`.
_BUMPS: dict[tuple[str, bool], Any] = {}
_ONE_STATEMENT: dict[str, Any] = {}
_RANGE = select(_sessions.c.last_sequence, _sessions.c.generation).where(_sessions.c.id == _SESSION_ID)
_ITEM_INSERT = insert(_items)


def _bump(greatest: Callable[..., Any], returning: bool) -> Any:
    """The add's first statement: lock the counter row and take ``count`` sequences; a
    cleared session starts its next generation here (``created_at`` before
    ``deleted_at``: MySQL assigns left to right). ``updated_at`` never moves back
    (:meth:`chatledger.dialects.Backend.latest`). ``returning``: the range comes back
    with it (where the database returns an ``UPDATE``'s rows), one statement fewer
    than reading it after."""
    updated_at = _sessions.c.updated_at
    bump = (
        update(_sessions)
        .where(_sessions.c.id == _SESSION_ID)
        .ordered_values(
            (
                _sessions.c.created_at,
                case((_sessions.c.deleted_at.is_not(None), _NOW), else_=_sessions.c.created_at),
            ),
            (_sessions.c.last_sequence, _sessions.c.last_sequence + _COUNT),
            (updated_at, greatest(updated_at, _NOW, type_=updated_at.type)),
            (_sessions.c.deleted_at, null()),
        )
    )
    return bump.returning(_sessions.c.last_sequence, _sessions.c.generation) if returning else bump


#: Bytes an array parameter adds per element: its quotes and separator.
_ELEMENT_BYTES = 4


def _fits_one_statement(limit: int, item_ids: list[str], texts: list[str]) -> bool:
    """Whether an add's items fit ``limit`` (bytes) together, as ``items_add`` binds
    them: :func:`chatledger.validate.statement_size` of all of them, counted only when
    the cheap bound of four bytes per character does not fit already."""
    values = [*texts, *item_ids]
    overhead = _ELEMENT_BYTES * len(values)
    if validate.STATEMENT_OVERHEAD + validate.MAX_CHARACTER_BYTES * sum(map(len, values)) + overhead <= limit:
        return True
    return validate.statement_size(*values) + overhead <= limit


async def add(ledger: Ledger, session_id: str, item_ids: list[str], texts: list[str]) -> None:
    """Append ``texts`` (one item's JSON each, ids ``item_ids`` fixed by the caller before
    the first attempt) as one gap-free range of sequences, in one transaction.

    Exactly once across a lost COMMIT, by the add's identity (:mod:`chatledger.identity`):
    the first item's id, the items' texts, and the session's ``generation`` it wrote
    in; an add overtaken by a ``clear_session`` (or a delete or purge) settles as done:
    it happened before the clear, which erased it.
    """
    count = len(texts)
    backend = ledger.backend
    # The one statement binds all the items in one array parameter (one protocol
    # message; psycopg escapes each element's quotes and backslashes once more): only
    # an add that fits the statement limit whole, else the items go row by row.
    one_statement = backend.items_add is not None and _fits_one_statement(
        ledger.statement_limit, item_ids, texts
    )

    async def work(conn: AsyncConnection) -> bool:
        now = clock.utc_now()
        params = {"session_id": session_id, "now": now, "count": count}
        if one_statement:
            assert backend.items_add is not None
            statement = _ONE_STATEMENT.get(backend.name)
            if statement is None:
                statement = _ONE_STATEMENT[backend.name] = backend.items_add(_bump(backend.greatest, True))
            written = await conn.execute(statement, {**params, "item_ids": item_ids, "item_jsons": texts})
            generation = written.scalars().first()
            if generation is not None:
                identity.made(int(generation), True)
                return True
        # Where SQLAlchemy's dialect says the database returns an UPDATE's rows.
        returning = conn.dialect.update_returning
        key = (backend.name, returning)
        bump = _BUMPS.get(key)
        if bump is None:
            bump = _BUMPS[key] = _bump(backend.greatest, returning)
        moved = await conn.execute(bump, params)
        row: Any = moved.one_or_none() if returning else None
        if row is None and (returning or moved.rowcount == 0):
            # The first add (or the first since a purge of the session's tombstone): its
            # mark, if any, carries the sequences and the generation on. A concurrent
            # first add inserts the row too and one of the two fails on the key, which
            # add_items then makes again (see below).
            mark = await marks.take(conn, marks.OPENAI, session_id)
            base = 0 if mark is None else int(mark.last_sequence)
            row = _Range(last_sequence=base + count, generation=1 if mark is None else int(mark.version) + 1)
            await conn.execute(
                insert(_sessions).values(
                    id=session_id,
                    last_sequence=row.last_sequence,
                    base_sequence=base,
                    generation=row.generation,
                    created_at=now,
                    updated_at=now,
                )
            )
        if row is None:
            row = (await conn.execute(_RANGE, {"session_id": session_id})).one()
        first = row.last_sequence - count + 1
        await conn.execute(
            _ITEM_INSERT,
            [
                {
                    "session_id": session_id,
                    "sequence": first + offset,
                    "item_id": item_id,
                    "item_json": text,
                    "created_at": now,
                }
                for offset, (item_id, text) in enumerate(zip(item_ids, texts, strict=True))
            ],
        )
        identity.made(int(row.generation), True)
        return True

    async def find(conn: AsyncConnection) -> Found[bool] | None:
        # The add's items from its first item's sequence on, found by the first item's id.
        first = (
            select(_items.c.sequence)
            .where(_items.c.session_id == session_id, _items.c.item_id == item_ids[0])
            .scalar_subquery()
        )
        stored_items = (
            select(_items.c.item_json)
            .where(_items.c.session_id == session_id, _items.c.sequence >= first)
            .order_by(_items.c.sequence)
            .limit(count)
        )
        stored = tuple((await conn.scalars(stored_items)).all())
        return Found(True, stored) if stored else None

    identity = WriteIdentity(
        item_ids[0],
        tuple(texts),
        find=find,
        generation=counter_generation(
            _sessions,
            lambda: _sessions.c.id == session_id,
            "generation",
            marks.OPENAI,
            lambda: session_id,
            "version",
        ),
        names="item id",
        of="an add of this session",
    )

    with telemetry.operation(ledger, "openai", "add_items", session_id) as span:
        span.set("chatledger.items", count)
        # Its first statement writes (the bump): SQLite's BEGIN comes with it.
        await _first_add_retried(lambda: ledger.write(work, identity=identity, first_writes=True))


async def _first_add_retried(call: Callable[[], Awaitable[bool]]) -> None:
    """``call`` made again when it lost the race to create the counter row: the row
    exists then, and the next attempt takes the ``UPDATE`` path (same item ids, so a
    write that was committed is settled, not repeated)."""
    for attempt in range(_FIRST_ADD_RACES):
        try:
            await call()
            return
        except ConstraintViolation:
            if attempt == _FIRST_ADD_RACES - 1:
                raise


#: get_items' two statements, built once (their cache keys memoized with them), on
#: ``ix_openai_items_live`` (session_id, retracted_at, sequence) in index order; the
#: item texts alone, the least the driver parses per row.
_READ_WHERE = (_items.c.session_id == bindparam("session_id"), _live)
_READ_ALL = select(_items.c.item_json).where(*_READ_WHERE).order_by(_items.c.sequence)
_READ_NEWEST = (
    select(_items.c.item_json)
    .where(*_READ_WHERE)
    .order_by(_items.c.sequence.desc())
    .limit(bindparam("limit", type_=BigInt))
)


async def read(ledger: Ledger, session_id: str, limit: int | None) -> list[Any]:
    """The live items in sequence order: all, or the newest ``limit`` (read newest first
    through ``ix_openai_items_live``, so the cost is O(limit)), in one ``SELECT``: a
    snapshot by itself (``Ledger.read(single_statement=True)``)."""
    if limit is not None and limit <= 0:
        return []
    params: dict[str, object] = {"session_id": session_id}
    statement = _READ_ALL
    if limit is not None:
        statement, params["limit"] = _READ_NEWEST, min(limit, _MAX_LIMIT)

    async def work(conn: AsyncConnection) -> Sequence[str]:
        return (await conn.scalars(statement, params)).all()

    with telemetry.operation(ledger, "openai", "get_items", session_id) as span:
        texts = await ledger.read(work, single_statement=True)
        span.set("db.response.returned_rows", len(texts))
    if limit is not None:
        texts = texts[::-1]
    try:
        found = list(map(loads, texts))
    except ValueError as error:
        await _name_invalid(ledger, session_id, limit, error)
    if not all(type(item) is dict for item in found):  # JSON, but not an item (a NULL)
        await _name_invalid(ledger, session_id, limit, ValueError("an item is not a JSON object"))
    return found


async def _name_invalid(ledger: Ledger, session_id: str, limit: int | None, error: ValueError) -> NoReturn:
    """A read found an item that is not a JSON object: read the items again with their
    sequences to name it (:func:`decode` raises); one fixed since (retracted, cleared)
    is named by the error alone."""
    statement = select(_items.c.sequence, _items.c.item_json).where(_items.c.session_id == session_id, _live)
    if limit is None:
        statement = statement.order_by(_items.c.sequence)
    else:
        statement = statement.order_by(_items.c.sequence.desc()).limit(min(limit, _MAX_LIMIT))

    async def work(conn: AsyncConnection) -> Sequence[Row[Any, Any]]:
        return (await conn.execute(statement)).all()

    for row in await ledger.read(work, single_statement=True):
        decode(session_id, row.sequence, row.item_json)
    raise ValueError(
        f"OpenAI Agents session {session_id!r}: an item was read as invalid JSON: {error}"
    ) from None


@dataclass(frozen=True, slots=True)
class _Popped:
    """What a pop did: the item it retracted (``None``: the session was empty)."""

    item: Any


async def pop(ledger: Ledger, session_id: str) -> Any:
    """Retract the newest live item and return it (``None`` when there is none).

    The retraction keeps the row and its sequence (never reused). Exactly once across a
    lost COMMIT: the settle looks for this attempt's retraction (the item's sequence and
    the instant it was retracted at, to the microsecond); an item erased by a clear since
    was popped before it.

    Raises:
        ValueError: the newest live item is not a JSON object (:func:`decode`); it is
            left in place.
    """
    latest = ledger.backend.latest
    attempted: list[tuple[int, Any, Any]] = []  # sequence, retracted_at, item

    async def work(conn: AsyncConnection) -> _Popped:
        attempted.clear()
        now = clock.utc_now()
        # The counter row's lock serializes the session's pops and adds.
        locked = await conn.execute(
            update(_sessions)
            .where(_sessions.c.id == session_id, _sessions.c.deleted_at.is_(None))
            .values(updated_at=latest(_sessions.c.updated_at, now))
        )
        if locked.rowcount == 0:
            return _Popped(None)
        newest = (
            await conn.execute(
                select(_items.c.sequence, _items.c.item_json)
                .where(_items.c.session_id == session_id, _live)
                .order_by(_items.c.sequence.desc())
                .limit(1)
                .with_for_update()
            )
        ).one_or_none()
        if newest is None:
            return _Popped(None)
        item = decode(session_id, newest.sequence, newest.item_json)
        retracted = await conn.execute(
            update(_items)
            .where(_items.c.session_id == session_id, _items.c.sequence == newest.sequence, _live)
            .values(retracted_at=now)
        )
        if retracted.rowcount != 1:  # pragma: no cover - the counter row's lock rules it out
            raise RuntimeError(f"item {newest.sequence} of {session_id!r} was retracted under the lock")
        attempted[:] = [(newest.sequence, now, item)]
        return _Popped(item)

    async def settle(conn: AsyncConnection) -> _Popped | None:
        if not attempted:
            return None
        sequence, at, item = attempted[0]
        row = (
            await conn.execute(
                select(_items.c.retracted_at).where(
                    _items.c.session_id == session_id, _items.c.sequence == sequence
                )
            )
        ).one_or_none()
        if row is None or row.retracted_at == at:
            return _Popped(item)
        return None

    with telemetry.operation(ledger, "openai", "pop_item", session_id) as span:
        popped = await ledger.write(work, settle=settle)
        span.set("chatledger.popped", popped.item is not None)
        return popped.item


async def clear(ledger: Ledger, session_id: str) -> None:
    """Erase the session's items and start its next generation: the counter row stays
    (``deleted_at`` set, ``base_sequence`` at the last sequence), so no sequence is ever
    used twice and an add whose COMMIT was lost before the clear is not made again."""
    latest = ledger.backend.latest
    # The generation the last attempt made (0: it had nothing to clear), once it
    # reached its COMMIT.
    attempted: list[int] = []

    async def work(conn: AsyncConnection) -> bool:
        attempted.clear()
        now = clock.utc_now()
        cleared = await conn.execute(
            update(_sessions)
            .where(_sessions.c.id == session_id, _sessions.c.deleted_at.is_(None))
            .values(
                generation=_sessions.c.generation + 1,
                base_sequence=_sessions.c.last_sequence,
                deleted_at=now,
                updated_at=latest(_sessions.c.updated_at, now),
            )
        )
        if cleared.rowcount == 0:  # never added to, or cleared already: nothing to erase
            attempted[:] = [0]
            return True
        generation = (
            await conn.execute(select(_sessions.c.generation).where(_sessions.c.id == session_id))
        ).scalar_one()
        await conn.execute(delete(_items).where(_items.c.session_id == session_id))
        attempted[:] = [generation]
        return True

    async def settle(conn: AsyncConnection) -> bool | None:
        if not attempted:
            return None  # the attempt failed before its COMMIT
        if attempted[0] == 0:
            return True  # it had nothing to clear: done either way
        generation = await conn.scalar(select(_sessions.c.generation).where(_sessions.c.id == session_id))
        return True if generation is not None and generation >= attempted[0] else None

    with telemetry.operation(ledger, "openai", "clear_session", session_id):
        await ledger.write(work, settle=settle)


#: The columns a purge checks again: every add moves ``last_sequence``, every clear
#: ``generation``, and a pop only ``updated_at`` (it takes no sequence): a session
#: popped after its page was read is kept, even by a purge with no cutoff (by prefix).
_WRITTEN = ("last_sequence", "generation", "updated_at")


async def delete_session(ledger: Ledger, session_id: str, *, idle_before: datetime | None = None) -> bool:
    """Delete the session ``session_id``, as :func:`clear` does: its items are erased,
    its counter row stays as the tombstone (``deleted_at`` set, the next generation
    taken), and the next ``add_items`` starts it anew numbered on after it.

    With ``idle_before`` (timezone-aware) only a session last written to
    before it is deleted, as the deleting ``UPDATE`` decides. Returns whether a session
    was deleted (``False``: none under the id, cleared already, or active since).
    A lost COMMIT raises ``OutcomeUnknown``: retried, the delete could erase what was
    added after it.

    Raises:
        ValueError: a naive ``idle_before`` or one outside the instants every backend
            stores. WrongType: ``idle_before`` is not a ``datetime``.
    """
    cutoff = validate.optional_aware(idle_before, "idle_before")
    return await _delete(ledger, session_id, Selection(idle_before=cutoff))


async def purge_sessions(
    ledger: Ledger, selection: Selection, *, size: int = PURGE_BATCH, progress: Progress | None = None
) -> int:
    """Delete the sessions ``selection`` holds (:mod:`chatledger.selection`), each as
    :func:`delete_session` does, in a transaction of its own whose ``UPDATE`` checks the
    selection and the counter row as its page read it (``last_sequence``,
    ``generation``, ``updated_at``): a session added to, popped or cleared meanwhile is
    kept. Returns how many it deleted; ``progress`` gets each id and whether it was
    deleted."""

    async def delete_one(session_id: str, seen: Mapping[str, Any]) -> bool:
        return await _delete(ledger, session_id, selection, seen)

    return await purge(
        ledger,
        _sessions,
        _sessions.c.deleted_at.is_(None),
        selection,
        delete_one,
        versions=_WRITTEN,
        size=size,
        progress=progress,
    )


async def _delete(
    ledger: Ledger, session_id: str, selection: Selection, seen: Mapping[str, Any] | None = None
) -> bool:
    """The one delete: clears the session if it is live and still in ``selection`` (and,
    for a purge, still at the counter row ``seen`` when its page was read)."""
    latest = ledger.backend.latest
    selected = selection.where(_sessions, ledger.backend)
    selected += [_sessions.c[name] == value for name, value in (seen or {}).items()]
    this = [_sessions.c.id == session_id, _sessions.c.deleted_at.is_(None), *selected]

    async def work(conn: AsyncConnection) -> bool:
        now = clock.utc_now()
        # The counter row first: its lock makes a concurrent add wait, which then starts
        # the next generation after the tombstone.
        cleared = await conn.execute(
            update(_sessions)
            .where(*this)
            .values(
                generation=_sessions.c.generation + 1,
                base_sequence=_sessions.c.last_sequence,
                deleted_at=now,
                updated_at=latest(_sessions.c.updated_at, now),
            )
        )
        if cleared.rowcount != 1:
            return False
        await conn.execute(delete(_items).where(_items.c.session_id == session_id))
        return True

    async def settle(conn: AsyncConnection) -> bool | None:
        # A purge's delete whose COMMIT's answer was lost: still live and selected, it
        # was not committed (try again); the tombstone of that very row (one generation
        # on, the same last sequence), it was; anything else was written meanwhile: kept.
        assert seen is not None
        if await conn.scalar(select(_sessions.c.id).where(*this)) is not None:
            return None
        ours = await conn.scalar(
            select(_sessions.c.id).where(
                _sessions.c.id == session_id,
                _cleared,
                _sessions.c.last_sequence == seen["last_sequence"],
                _sessions.c.generation == seen["generation"] + 1,
            )
        )
        return ours is not None

    with telemetry.operation(ledger, "openai", "delete", session_id) as span:
        deleted: bool = await ledger.write(work, settle=None if seen is None else settle)
        span.set("chatledger.deleted", deleted)
        return deleted


async def count_live(ledger: Ledger, session_id: str) -> int:
    """How many live items the session has (for tools and tests)."""

    async def work(conn: AsyncConnection) -> int:
        found = await conn.scalar(
            select(func.count()).select_from(_items).where(_items.c.session_id == session_id, _live)
        )
        return int(found or 0)

    return await ledger.read(work)


# -- for tools: listing and inspecting -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """A session as ``chatledger sessions`` lists it: its live items, the items of its
    current generation that ``pop_item`` retracted, and its times (UTC)."""

    id: str
    items: int
    popped: int
    created_at: datetime
    updated_at: datetime


async def _live_counts(conn: AsyncConnection, ids: list[str]) -> dict[str, int]:
    """Live items per session, on ``ix_openai_items_live``, a bounded ``IN`` list at a time."""
    counts: dict[str, int] = {}
    for start in range(0, len(ids), _COUNTED_PER_STATEMENT):
        chunk = ids[start : start + _COUNTED_PER_STATEMENT]
        found = await conn.execute(
            select(_of_session, func.count().label("live"))
            .where(_of_session.in_(chunk), _live)
            .group_by(_of_session)
        )
        counts.update({row.session_id: int(row.live) for row in found})
    return counts


def _summaries(rows: Any, counts: dict[str, int]) -> list[Summary]:
    # The current generation's items are sequences base_sequence+1..last_sequence, gap-free
    # (a clear erases the rows, a pop keeps them): those not live were popped.
    return [
        Summary(
            row.id,
            counts.get(row.id, 0),
            int(row.last_sequence) - int(row.base_sequence) - counts.get(row.id, 0),
            row.created_at,
            row.updated_at,
        )
        for row in rows
    ]


_SUMMARY = (
    _sessions.c.id,
    _sessions.c.last_sequence,
    _sessions.c.base_sequence,
    _sessions.c.created_at,
    _sessions.c.updated_at,
)


async def list_recent(conn: AsyncConnection, limit: int, *, tombstone_first: bool) -> list[Summary]:
    """The ``limit`` sessions written to last (newest first, then id), inside the caller's
    read transaction: on ``ix_openai_sessions_activity`` (``tombstone_first``: the
    backend's :attr:`~chatledger.dialects.Backend.order_live_by_tombstone`), their live
    item counts on ``ix_openai_items_live``. A cleared session that nothing was added to
    since is left out (the SDK sees it empty)."""
    tombstone = (_sessions.c.deleted_at.desc(),) if tombstone_first else ()
    rows = (
        await conn.execute(
            select(*_SUMMARY)
            .where(_sessions.c.deleted_at.is_(None))
            .order_by(*tombstone, _sessions.c.updated_at.desc(), _sessions.c.id.desc())
            .limit(limit)
        )
    ).all()
    return _summaries(rows, await _live_counts(conn, [row.id for row in rows]))


async def summary(ledger: Ledger, session_id: str) -> Summary | None:
    """The session ``session_id`` (``None``: never added to, or cleared since), in one read."""

    async def work(conn: AsyncConnection) -> Summary | None:
        rows = (
            await conn.execute(
                select(*_SUMMARY).where(_sessions.c.id == session_id, _sessions.c.deleted_at.is_(None))
            )
        ).all()
        found = _summaries(rows, await _live_counts(conn, [session_id] if rows else []))
        return found[0] if found else None

    result: Summary | None = await ledger.read(work)
    return result
