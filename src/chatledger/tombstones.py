"""Purging tombstones after a horizon, keeping the rule that an id's sequences and
versions are never valid twice.

A deleted session's tombstone (zett: its counter row with ``deleted_at`` set; rein:
its row with no session JSON; an OpenAI Agents session: its counter row cleared,
``deleted_at`` set; an ADK session: its row with ``deleted_at`` set) keeps the id
and its last sequence and versions (docs/zett.md, "Deleting and starting again").
Each kind of session states which rows are its tombstones as a :class:`Tombstones`
(:attr:`chatledger.kinds.SessionKind.tombstones`); this module knows none of them.
:func:`purge_tombstones` deletes the tombstones older than a cutoff and, in the same
transaction, keeps their high water in a mark
(:mod:`chatledger.marks`): the store, a digest of the id, the last sequence and the
version, nothing else.

**What the horizon promises.** For ``horizon`` after a delete, the tombstone itself
stays: ``export`` and ``copy`` carry it (the id stays deleted in the target), and a
late writer is told when it was deleted. After the horizon only the mark stays (``export``
and ``copy`` carry marks too, by digest, so a copy numbers the id on), and a
writer of any age, holding any view of the id, is treated as the tombstone treated it:

* a zett ``append`` raises :class:`chatledger.SessionDeleted` (nothing written), a
  checkpoint or ``update_session`` is refused as on an unknown session;
* ``create_session(session_id=...)`` starts a new generation numbered on from the
  mark's last sequence, with a ``fields_version`` above the mark's;
* a rein save numbers its version on from the mark's (a compare-and-set at a version
  read before the delete is refused, as it was against the tombstone);
* an OpenAI Agents session's next ``add_items`` starts it anew, its sequences and
  ``generation`` numbered on from the mark's;
* an ADK ``create_session`` of the key starts it anew, its counter and
  ``state_version`` numbered on from the mark's (a stale ``Session`` object is refused);
* an import (``chatledger import``/``copy``) of a session row below the mark is refused.

So no sequence or version is reused, whatever the horizon; a shorter horizon only
forgets sooner when and which session was deleted. Two conditions, both stated in
``docs/retention.md``: every writer runs code of revision 0005 or later (the code of
0004, which ``compatible_from`` lets run, ignores marks; and the OpenAI Agents and ADK
adapters' first code, of 0006, ignores them too: their tombstones are purged only once
every writer of theirs runs this code or later), and on PostgreSQL the
writers' isolation is READ COMMITTED or SERIALIZABLE -- at REPEATABLE READ a first
append that waited for a purge of the same id cannot see its mark, so a ledger whose
database defaults to it writes at READ COMMITTED (``Backend.write_isolation_instead``).

**Conditional.** Candidates are read a page at a time; each is deleted in its own
transaction whose ``DELETE`` checks again that the row is still a tombstone older
than the cutoff and still at the versions the page read: a tombstone revived or
re-created in between (``create_session``, a rein save, an OpenAI add, an ADK create)
is kept. A purge whose COMMIT's answer was lost is looked up (the tombstone still
there, or its mark), so a run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Table, and_, delete, select

from . import clock, marks, validate
from .errors import WrongType
from .selection import PURGE_BATCH, Progress, Selection, count, purge

if TYPE_CHECKING:
    from .engine import Ledger


@dataclass(frozen=True)
class Tombstones:
    """One kind's tombstones: their table and key, which rows are tombstones and when
    each was deleted, the columns a purge checks again, what its mark keeps, and the
    rows of other tables a purge removes with it. Data only: each kind of session
    states its own (:class:`chatledger.kinds.SessionKind`)."""

    table: Table
    #: The mark store of the kind's ids (:mod:`chatledger.marks`).
    store: int
    #: The columns a purge checks again, as its page read them (every write moves one).
    versions: tuple[str, ...]
    #: The columns the mark keeps: the last sequence (``None``, or a NULL in it: 0) and
    #: the version.
    high_water_columns: tuple[str | None, str]
    #: The column that says when a tombstone was deleted.
    deleted: str = "deleted_at"
    #: The key columns (an ADK session's is ``app_name``, ``user_id``, ``id``).
    key: tuple[str, ...] = ("id",)
    #: Tables whose rows of the id go with the tombstone: (table, its key columns).
    leftovers: tuple[tuple[Table, tuple[str, ...]], ...] = ()
    #: The column that tells a tombstone from a session: a tombstone's is set
    #: (``deleted_at``), or, with ``marked_by_null``, NULL (a rein row without its JSON).
    marker: str = "deleted_at"
    marked_by_null: bool = False

    @property
    def live(self) -> ColumnElement[bool]:
        """Rows that are sessions, not tombstones."""
        column = self.table.c[self.marker]
        return column.is_not(None) if self.marked_by_null else column.is_(None)

    def is_tombstone(self, row: Mapping[str, Any]) -> bool:
        """Whether a row of the table (as a mapping of its columns) is a tombstone."""
        return (row[self.marker] is None) == self.marked_by_null

    def older_than(self, cutoff: datetime) -> ColumnElement[bool]:
        column = self.table.c[self.marker]
        tombstone = column.is_(None) if self.marked_by_null else column.is_not(None)
        return tombstone & (self.table.c[self.deleted] < cutoff)

    def high_water(self, seen: Mapping[str, Any]) -> tuple[int, int]:
        sequence, version = self.high_water_columns
        return (0 if sequence is None else int(seen[sequence] or 0)), int(seen[version])

    def values(self, key: Any) -> tuple[str, ...]:
        """The key's values: ``key`` is the id, or the tuple of a key of several columns."""
        return (key,) if len(self.key) == 1 else tuple(key)

    def mark_id(self, key: Any) -> str:
        """The id the mark of ``key`` is kept under (:func:`chatledger.marks.key_id`)."""
        return marks.key_id(self.values(key))

    def where(self, table: Table, columns: tuple[str, ...], key: Any) -> ColumnElement[bool]:
        return and_(*(table.c[name] == value for name, value in zip(columns, self.values(key), strict=True)))


def cutoff(horizon: timedelta | None, deleted_before: datetime | None) -> datetime:
    """The validated cutoff of a tombstone purge: ``deleted_before`` itself, or
    ``utc_now() - horizon``.

    Raises:
        ValueError: both or neither given; a negative ``horizon``; a naive
            ``deleted_before`` or one outside the instants every backend stores.
        WrongType: a ``horizon`` that is not a ``timedelta`` (a ``TypeError`` and a ``ValueError``).
    """
    if (horizon is None) == (deleted_before is None):
        raise ValueError("give horizon or deleted_before, one of them")
    if deleted_before is not None:
        return validate.aware(deleted_before, "deleted_before")
    if not isinstance(horizon, timedelta):
        raise WrongType(f"horizon must be a timedelta, not {type(horizon).__name__}")
    if horizon < timedelta(0):
        raise ValueError("horizon must not be negative")
    try:
        return validate.aware(clock.utc_now() - horizon, "horizon")
    except OverflowError:
        raise ValueError(f"horizon {horizon} reaches before year 1") from None


async def pending(ledger: Ledger, store: Tombstones, cutoff: datetime) -> int:
    """How many of ``store``'s tombstones are older than ``cutoff`` now (a dry run)."""
    return await count(ledger, store.table, store.older_than(cutoff), Selection())


async def purge_tombstones(
    ledger: Ledger,
    store: Tombstones,
    cutoff: datetime,
    *,
    size: int = PURGE_BATCH,
    progress: Progress | None = None,
) -> int:
    """Delete ``store``'s tombstones older than ``cutoff`` (timezone-aware), each in its
    own conditional transaction that writes its mark; returns how many it purged.
    Pages of ``size`` tombstones, in key order."""
    table = store.table
    older = store.older_than(cutoff)

    async def purge_one(key: Any, seen: Mapping[str, Any]) -> bool:
        this = store.where(table, store.key, key)
        as_read = [older, *(table.c[name] == value for name, value in seen.items())]

        async def work(conn: Any) -> bool:
            # The DELETE first: it takes the row lock (SQLite's write lock) and decides.
            gone = await conn.execute(delete(table).where(this, *as_read))
            if gone.rowcount != 1:
                return False
            last_sequence, version = store.high_water(seen)
            await marks.raise_to(
                conn, store.store, store.mark_id(key), last_sequence, version, clock.utc_now()
            )
            # Nothing is left of a tombstone but rows an outside writer put there.
            for leftover, columns in store.leftovers:
                await conn.execute(delete(leftover).where(store.where(leftover, columns, key)))
            return True

        async def settle(conn: Any) -> bool | None:
            # The COMMIT's answer was lost: the tombstone still there, as read, means it
            # was not committed (try again; the DELETE decides anew). Gone with its mark
            # there: purged, by this call or another purge. Gone and no mark: re-created
            # since (the mark carried on by the new row), so counted as kept.
            still = await conn.scalar(select(table.c[store.key[-1]]).where(this, *as_read))
            if still is not None:
                return None
            return await marks.kept(conn, store.store, store.mark_id(key))

        # A retention run goes on after a lost COMMIT: the purge is looked up, not left unknown.
        return await ledger.write(work, settle=settle)

    return await purge(
        ledger,
        table,
        older,
        Selection(),
        purge_one,
        versions=store.versions,
        key=store.key,
        size=size,
        progress=progress,
    )
