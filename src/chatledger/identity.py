"""One write identity for every kind of session, and the settle that decides from it.

A write whose COMMIT may be lost (:mod:`chatledger.transactions`) carries three things,
the same for a zett message, a checkpoint, a rein save, an OpenAI Agents add and an
ADK event:

* **its id**, fixed before the first attempt: a raw message's row id (zett's
  ``message_id``), a checkpoint's, a rein save's write id, an OpenAI add's first item
  id, ADK's ``Event.id``;
* **its content**, as the store keeps it (:attr:`WriteIdentity.content`), compared by
  its :func:`digest`. Nothing more is stored for it: the digest of the stored write
  is computed from its stored row when a settle finds it;
* **the generation it was made in**, told by the attempt before its COMMIT
  (:meth:`WriteIdentity.made`) with the result the call returns for it. A
  generation is a number of the session's id that only grows, and grows past every
  write a delete, clear or purge erased (the kind's ``generation`` reads it; see
  :func:`counter_generation`).

**The settle** after an ambiguous COMMIT (and before a failure of the write itself is
raised: the first COMMIT may have landed late) decides the same way for every kind:

1. A stored write has the id and the same content: this write, committed once; its
   result is returned and nothing is written again.
2. A stored write has the id and other content: :class:`chatledger.IdentityConflict`,
   never a silent success (nothing of this call was written).
3. No stored write has the id, and the session's generation has moved past the one
   an attempt whose COMMIT was lost wrote in: the write was overtaken by a delete,
   clear or purge. It is settled as written and then deleted: the attempt's result
   is returned, never a refusal. (An attempt that was in fact not committed and a
   delete that came after it look the same; the call is then reported as if its write
   came just before that delete, which nobody read in between.)
4. Otherwise it was not written, and the write runs again.

A write whose attempt could not tell its generation before its COMMIT -- one statement
that commits itself, whose reply carries its sequence (zett's one-statement append)
-- settles by 1, 2 and 4 only: overtaken by a delete before its settle, it is retried
as any write to a deleted session is, and refused as one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, Table, select
from sqlalchemy.ext.asyncio import AsyncConnection

from . import marks
from .errors import IdentityConflict

T = TypeVar("T")

#: One part of a write's content: text, a number, or nothing.
Part = str | int | float | None


def digest(parts: tuple[Part, ...]) -> str:
    """SHA-256 of ``parts``, each typed and length-prefixed (so no two tuples of parts
    share a digest by their concatenation), 64 lowercase hex digits."""
    hashed = hashlib.sha256()
    for part in parts:
        if part is None:
            hashed.update(b"n;")
            continue
        tag = b"s" if isinstance(part, str) else b"i" if isinstance(part, int) else b"f"
        value = (part if isinstance(part, str) else repr(part)).encode("utf-8", "surrogatepass")
        hashed.update(b"%s%d:%s;" % (tag, len(value), value))
    return hashed.hexdigest()


@dataclass(frozen=True, slots=True)
class Found(Generic[T]):
    """A write a settle found by its id: what the call returns for it, and its content
    as stored (``None``: the store keeps none to compare, for an id the call mints
    itself and nothing else can carry, such as a rein save's write id)."""

    result: T
    content: tuple[Part, ...] | None


#: Looks the write up by its id, in the settle's read transaction.
Find = Callable[[AsyncConnection], Awaitable["Found[T] | None"]]
#: The session's generation now (``None``: the id has no counter row and no mark).
Generation = Callable[[AsyncConnection], Awaitable[int | None]]


class WriteIdentity(Generic[T]):
    """What one write is known by across a lost COMMIT (see the module).

    Args:
        id: The write's id, fixed before the first attempt.
        content: The write's content as the store keeps it (what ``find``'s
            :attr:`Found.content` holds for a stored write); compared by
            :func:`digest`, computed only when a settle finds a write.
        find: Looks the write up by its id.
        generation: Reads the session's generation; ``None`` for a kind whose record of
            a write outlives every delete (rein's write log), never overtaken.
        names: What the id is, for :class:`chatledger.IdentityConflict`'s message
            (``"message_id"``, ``"ADK Event.id"``...).
        of: What it is the id of (``"a message"``, ``"an event"``...).
    """

    __slots__ = ("_candidate", "_made", "content", "find", "generation", "id", "names", "of")

    def __init__(
        self,
        id: str,
        content: tuple[Part, ...] | None,
        *,
        find: Find[T],
        generation: Generation | None,
        names: str,
        of: str,
    ) -> None:
        self.id = id
        self.content = content
        self.find = find
        self.generation = generation
        self.names = names
        self.of = of
        #: What the running attempt made, told before its COMMIT: (generation, result).
        self._made: tuple[int, T] | None = None
        #: What the last attempt whose COMMIT was lost made.
        self._candidate: tuple[int, T] | None = None

    def made(self, generation: int, result: T) -> None:
        """Told by the write's work, last, before its COMMIT: the generation it wrote
        in and the result the call returns for it (what a settle returns when a delete,
        clear or purge has erased the write since)."""
        self._made = (generation, result)

    def attempting(self) -> None:
        """A new attempt begins: it has made nothing yet."""
        self._made = None

    def lost(self) -> None:
        """The running attempt's COMMIT was lost: what it made may be stored."""
        if self._made is not None:
            self._candidate = self._made

    async def settle(self, conn: AsyncConnection) -> T | None:
        """The settle of the module's rules, in the caller's read transaction: the
        write's result if it was committed (and maybe deleted since), ``None`` if not.

        Raises:
            IdentityConflict: a stored write with the id has other content.
        """
        stored = await self.find(conn)
        if stored is not None:
            if (
                stored.content is not None
                and self.content is not None
                and digest(stored.content) != digest(self.content)
            ):
                raise IdentityConflict(
                    f"{self.names} {self.id!r} is already the id of another write: {self.of} stored with "
                    f"other content. An id names one write (a repeat of the same write with its id is "
                    "stored once); give this one an id of its own. Nothing was written",
                    write_id=self.id,
                )
            return stored.result
        candidate = self._candidate
        if candidate is None or self.generation is None:
            return None
        made_in, result = candidate
        now = await self.generation(conn)
        if now is not None and now > made_in:
            return result  # written, then erased by a delete, clear or purge
        return None


def counter_generation(
    table: Table,
    where: Callable[[], ColumnElement[bool]],
    column: str,
    store: int,
    mark_id: Callable[[], str],
    mark_column: str,
) -> Generation:
    """The generation of a session id kept in ``column`` of its counter row (found by
    ``where()`` in ``table``), or, once its tombstone was purged, in ``mark_column``
    (``last_sequence`` or ``version``) of its high-water mark (:mod:`chatledger.marks`,
    ``store`` and ``mark_id()``). The statement is built when a settle reads it, not
    for every write."""

    async def generation(conn: AsyncConnection) -> int | None:
        found = await conn.scalar(select(table.c[column]).where(where()))
        if found is not None:
            return int(found)
        mark = await marks.seen(conn, store, mark_id())
        return None if mark is None else int(getattr(mark, mark_column))

    return generation
