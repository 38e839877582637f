"""Which sessions a purge deletes, and the purge: the one place that decides.

A :class:`Selection` is the sessions last active before an instant and/or whose id
starts with a prefix. Its condition (:meth:`Selection.where`) is used twice: to page
the candidates (a read), and again in each candidate's deleting transaction, in the
WHERE of the tombstone ``UPDATE``. A session written to after its page was read has
moved its ``updated_at`` past the cutoff, so the ``UPDATE`` matches no row and the
session stays, with what was written. :func:`purge` does both; the zett storage's
``purge_sessions``, the rein store's ``purge`` and the OpenAI and ADK adapters'
``purge_sessions`` call it with their own delete.

An id prefix is matched literally (``%``, ``_`` and ``\\`` are characters) and byte
for byte on every backend (:func:`id_prefix`).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Table, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from . import clock, validate
from .errors import WrongType

if TYPE_CHECKING:
    from .dialects import Backend
    from .engine import Ledger

#: Candidates read per page while purging.
PURGE_BATCH = 500

#: Called after each candidate's conditional delete with its id (an ADK session's:
#: the tuple ``(app_name, user_id, id)``) and whether it was deleted (``False``: written
#: to, or deleted, since its page was read). May return an awaitable, which is awaited
#: before the purge goes on.
Progress = Callable[[Any, bool], object]

_LAST_CHARACTER = chr(0x10FFFF)


def prefix_upper_bound(prefix: str) -> str | None:
    """The string above every string that starts with ``prefix`` and below every other
    string above ``prefix``, in code point order (which is UTF-8's byte order): the
    prefix with its last character advanced, trailing U+10FFFF dropped first. ``None``
    when the prefix is all U+10FFFF (no string lies above its matches)."""
    head = prefix.rstrip(_LAST_CHARACTER)
    if not head:
        return None
    code = ord(head[-1]) + 1
    if 0xD800 <= code <= 0xDFFF:  # surrogates are no character of a UTF-8 string
        code = 0xE000
    return head[:-1] + chr(code)


def id_prefix(column: ColumnElement[str], prefix: str, backend: Backend) -> ColumnElement[bool]:
    """Rows whose ``column`` (an id) starts with ``prefix``: literally (``%``, ``_``
    and ``\\`` are characters) and byte for byte (case, accents and trailing spaces
    count), on every backend.

    Two conditions. A range, ``prefix <= id < prefix_upper_bound(prefix)``, compared in
    byte order (:attr:`Backend.byte_order_collation`), which an index on the id in
    that order can serve, and which alone holds exactly the ids that start with the
    prefix. And an exact check that does not depend on the order: ``LIKE 'prefix%'``
    with the pattern characters escaped where ``LIKE`` compares exactly
    (:attr:`Backend.literal_like`), else ``substr(id, 1, n) = prefix`` (SQLite,
    whose ``LIKE`` folds ASCII case; its ``substr`` and ``length`` count characters).

    ``prefix`` must be validated (:func:`chatledger.validate.identifier`).
    """
    ordered = column.collate(backend.byte_order_collation) if backend.byte_order_collation else column
    conditions = [ordered >= prefix]
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        conditions.append(ordered < upper)
    if backend.literal_like:
        conditions.append(column.startswith(prefix, autoescape=True))
    else:
        head: ColumnElement[str] = func.substr(column, 1, len(prefix), type_=column.type)
        if backend.byte_order_collation:
            head = head.collate(backend.byte_order_collation)
        conditions.append(head == prefix)
    return and_(*conditions)


@dataclass(frozen=True)
class Selection:
    """Sessions last active (``updated_at``) before ``idle_before`` and/or whose id
    starts with ``prefix``; both ``None`` selects every session (only for a single
    id's delete: :meth:`of` refuses it)."""

    #: The cutoff, a timezone-aware UTC instant; ``None`` for any activity.
    idle_before: datetime | None = None
    #: The id prefix, matched literally and byte for byte (:func:`id_prefix`).
    prefix: str | None = None

    @classmethod
    def of(
        cls,
        *,
        idle_before: datetime | None = None,
        older_than: timedelta | None = None,
        prefix: str | None = None,
    ) -> Selection:
        """A validated selection of sessions to purge.

        Args:
            idle_before: last active before this instant (timezone-aware; any zone).
            older_than: last active longer ago than this, counted from now (the
                storage's clock): ``idle_before`` is ``utc_now() - older_than``.
            prefix: the id starts with this (1-255 characters, not blank, no NUL).

        Raises:
            ValueError: both ``idle_before`` and ``older_than``; neither of them nor
                ``prefix``; a naive ``idle_before`` or one outside the instants every
                backend stores; a negative ``older_than``; a bad ``prefix``. Each names
                the field.
            WrongType: an argument of the wrong type (a ``TypeError`` and a ``ValueError``).
        """
        cutoff: datetime | None
        if older_than is not None:
            if idle_before is not None:
                raise ValueError("give idle_before or older_than, not both")
            if not isinstance(older_than, timedelta):
                raise WrongType(f"older_than must be a timedelta, not {type(older_than).__name__}")
            if older_than < timedelta(0):
                raise ValueError("older_than must not be negative")
            try:
                idle_before = clock.utc_now() - older_than
            except OverflowError:
                raise ValueError(f"older_than {older_than} reaches before year 1") from None
            cutoff = validate.aware(idle_before, "older_than")
        else:
            cutoff = validate.optional_aware(idle_before, "idle_before")
        chosen = None if prefix is None else validate.identifier(prefix, "prefix")
        if cutoff is None and chosen is None:
            raise ValueError("say what to purge: idle_before (or older_than) and/or prefix")
        return cls(cutoff, chosen)

    def where(self, table: Table, backend: Backend) -> list[ColumnElement[bool]]:
        """The selection's conditions on a sessions table (``id``, ``updated_at``); the
        caller adds the one that leaves tombstones out."""
        conditions: list[ColumnElement[bool]] = []
        if self.idle_before is not None:
            conditions.append(table.c.updated_at < self.idle_before)
        if self.prefix is not None:
            conditions.append(id_prefix(table.c.id, self.prefix, backend))
        return conditions


async def count(ledger: Ledger, table: Table, live: ColumnElement[bool], selection: Selection) -> int:
    """How many live sessions of ``table`` the selection holds now."""
    statement = select(func.count()).select_from(table).where(live, *selection.where(table, ledger.backend))

    async def work(conn: AsyncConnection) -> int:
        return int(await conn.scalar(statement) or 0)

    return await ledger.read(work)


def _after(order: Sequence[ColumnElement[Any]], row: Any) -> ColumnElement[bool]:
    """Rows after ``row`` in ``order`` (lexicographic, column by column): the keyset of
    the next page."""
    values = [row._mapping[column.key] for column in order]
    return or_(
        *(and_(*(order[j] == values[j] for j in range(i)), order[i] > values[i]) for i in range(len(order)))
    )


async def candidates(
    ledger: Ledger,
    table: Table,
    live: ColumnElement[bool],
    selection: Selection,
    size: int = PURGE_BATCH,
    *,
    versions: Sequence[str] = (),
    key: Sequence[str] = ("id",),
) -> AsyncIterator[list[Any]]:
    """The live sessions selected, a page of at most ``size`` rows at a time, each page
    its own read; each row has the ``key`` columns (``id``; an ADK session's
    ``app_name``, ``user_id``, ``id``) and the ``versions`` columns named (what
    :func:`purge` checks again when it deletes). Keyset paging, so a deletion cannot
    make a page repeat or skip a session: with a cutoff, in activity order
    (``updated_at``, then the key; the activity index); by prefix alone, in key order
    (the primary key's range)."""
    conditions = [live, *selection.where(table, ledger.backend)]
    keys = [table.c[name] for name in key]
    order = [table.c.updated_at, *keys] if selection.idle_before is not None else keys
    after: Any = None
    while True:
        statement = select(*order, *(table.c[name] for name in versions)).where(*conditions)
        if after is not None:
            statement = statement.where(_after(order, after))
        statement = statement.order_by(*order).limit(size)

        async def work(conn: AsyncConnection, statement: Any = statement) -> list[Any]:
            return list(await conn.execute(statement))

        rows = await ledger.read(work)
        if not rows:
            return
        yield rows
        after = rows[-1]


async def purge(
    ledger: Ledger,
    table: Table,
    live: ColumnElement[bool],
    selection: Selection,
    delete: Callable[[Any, Mapping[str, Any]], Awaitable[bool]],
    *,
    versions: Sequence[str] = (),
    key: Sequence[str] = ("id",),
    size: int = PURGE_BATCH,
    progress: Progress | None = None,
) -> int:
    """Page the selected sessions (:func:`candidates`) and ``delete`` each, which must
    decide again in its own transaction: the selection, and the ``versions`` columns
    still as the page read them (given as the mapping), in its tombstone ``UPDATE``'s
    WHERE. A session written to after its page was read is kept, even by a write that
    leaves ``updated_at`` alone (a checkpoint: "last active" is the raw log's last
    message, as zett-agent defines it). ``delete`` and ``progress`` get the session's
    id, or with a ``key`` of several columns the tuple of their values (an ADK
    session's ``(app_name, user_id, id)``). Returns how many it deleted."""
    deleted = 0
    async for page in candidates(ledger, table, live, selection, size, versions=versions, key=key):
        for row in page:
            mapping = row._mapping
            session = mapping[key[0]] if len(key) == 1 else tuple(mapping[name] for name in key)
            done = await delete(session, {name: mapping[name] for name in versions})
            deleted += done
            if progress is not None:
                reported = progress(session, done)
                if inspect.isawaitable(reported):
                    await reported
    return deleted
