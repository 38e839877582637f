"""Decoded raw-log tails a storage loaded before, so that a reload decodes only what is new.

Why a decoded record can be kept: a raw message is immutable once written, and its
sequence is never reused for its session id (a re-created id numbers its messages
after the deleted generation's last sequence). So the record decoded
for ``(session_id, sequence)`` is the same in every later read that contains it.

What the cache holds per session: the contiguous run of records ``first..k`` that
the last load returned (its tail, ``first`` being the checkpoint boundary + 1 at the
time), the decoded checkpoint of that load, and the session row's ``created_at``
as the generation the run belongs to (see :meth:`TailCache.get`). It is bounded by a
number of messages and evicts the least recently loaded session first.

A load still reads the counter row and the checkpoint in its one read transaction,
and takes from the cache only the part of the run inside that transaction's own
tail ``boundary+1..last_sequence``; see :meth:`CachedTail.run`. Records are shared
between the views of successive loads: like the raw log, treat them as read-only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from zett_agent.extensions.persistence import ContextSnapshot, RawMessageRecord


@dataclass(frozen=True)
class CachedTail:
    """One session's cached run of decoded records and its checkpoint.

    Attributes:
        generation: the session row's ``created_at`` when the run was read.
        first: the sequence of ``records[0]``.
        records: records of sequences ``first, first + 1, ...``, without a gap.
        snapshot: the checkpoint that load returned (``None``: none).
    """

    generation: datetime
    first: int
    records: tuple[RawMessageRecord, ...]
    snapshot: ContextSnapshot | None

    @classmethod
    def of(
        cls,
        generation: datetime,
        first: int,
        records: Sequence[RawMessageRecord],
        snapshot: ContextSnapshot | None,
    ) -> CachedTail:
        """The contiguous run of ``records`` from sequence ``first``: it stops before
        the first record whose sequence is not the next one (a row missing from the
        database, which no append leaves), so no record is ever filed under a
        sequence that is not its own."""
        count = next(
            (index for index, record in enumerate(records) if record.sequence != first + index), len(records)
        )
        return cls(generation, first, tuple(records[:count]), snapshot)

    @property
    def cost(self) -> int:
        """What the entry counts against the cache's bound: its records, plus one for
        the entry itself (its checkpoint)."""
        return len(self.records) + 1

    def run(self, boundary: int, through: int) -> tuple[RawMessageRecord, ...]:
        """The cached records ``boundary+1 .. min(k, through)``, where ``k`` is the last
        cached sequence: the head of a tail strictly after ``boundary`` that ends at
        ``through``. Empty unless the cached run holds sequence ``boundary + 1``.

        ``through`` clips a run read by a newer transaction for a load whose own
        transaction saw fewer messages; the run starts at ``boundary + 1``, never
        below, so sequences at or below the stored checkpoint boundary are never
        served. That is also what keeps a deleted generation out, once sequences are
        never reused for an id: its messages all lie at or below the boundary of the
        generation that replaced it (a new generation starts with
        ``compacted_through_sequence`` at the old one's last sequence).
        """
        start, stop = boundary + 1 - self.first, through - self.first + 1
        if start < 0 or stop <= start:
            return ()
        return self.records[start:stop]


class TailCache:
    """A bounded LRU map from session id to its :class:`CachedTail`.

    Args:
        capacity: the most records (plus one per session) held in all; positive.

    Safe to share between threads: every method holds one lock for its few
    dictionary operations.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[str, CachedTail] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """What the entries cost in all (see :attr:`CachedTail.cost`)."""
        return self._size

    def peek(self, session_id: str) -> CachedTail | None:
        """The session's entry, of whatever generation, without touching its recency."""
        return self._entries.get(session_id)

    def get(self, session_id: str, generation: datetime) -> CachedTail | None:
        """The session's entry if it belongs to ``generation`` (the session row's
        ``created_at`` now), marked most recently used.

        The generation check keeps the runs of a deleted session from a re-created one
        on the first revision's schema, where a new generation numbers its messages
        from 1 again: a re-create sets ``created_at`` anew.
        """
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or entry.generation != generation:
                return None
            self._entries.move_to_end(session_id)
            return entry

    def put(self, session_id: str, entry: CachedTail) -> None:
        """Store ``entry`` for the session (replacing its old one) and evict the least
        recently used sessions beyond the capacity; an entry larger than the whole
        capacity is not kept."""
        with self._lock:
            old = self._entries.pop(session_id, None)
            if old is not None:
                self._size -= old.cost
            if entry.cost > self.capacity:
                return
            self._entries[session_id] = entry
            self._size += entry.cost
            while self._size > self.capacity:
                _, evicted = self._entries.popitem(last=False)
                self._size -= evicted.cost

    def discard(self, session_id: str) -> None:
        """Forget the session (it is gone from the database)."""
        with self._lock:
            old = self._entries.pop(session_id, None)
            if old is not None:
                self._size -= old.cost
