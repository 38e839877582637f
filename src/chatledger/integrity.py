"""Raw messages written past their session's counter row, by a writer outside chatledger.

chatledger numbers a session's raw messages on its counter row
(``agent_sessions.last_sequence``) and never reads ``MAX(sequence)``. A writer that
numbers by ``MAX(sequence) + 1`` instead -- zett-agent's own store, still running on a
database after ``chatledger adopt`` -- inserts rows past the counter and leaves it
behind: chatledger's next append to that session takes the sequence that writer took,
and the database refuses it as a duplicate of ``(session_id, sequence)``.

:func:`past_counter` finds such sessions (``chatledger check``), one index probe per
session; :func:`outside_writes` explains a refused append of one session
(:class:`chatledger.CorruptData`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .dsn import as_argument
from .errors import CorruptData
from .schema import raw_messages_table as _raw
from .schema import sessions_table as _sessions

#: The highest sequence a session's raw log holds, as SQL.
_MAX = "(SELECT MAX(sequence) FROM raw_messages WHERE raw_messages.session_id = agent_sessions.id)"
#: The statement that moves every live session's counter row past the raw messages
#: another writer added (plain SQL that PostgreSQL, MySQL/MariaDB and SQLite run as it
#: is). Not a deleted session's: raising a tombstone's counter would number its next
#: generation on from those rows and show them as that generation's messages.
REPAIR = (
    f"UPDATE agent_sessions SET last_sequence = {_MAX} WHERE deleted_at IS NULL AND last_sequence < {_MAX}"
)
#: The statement that removes the raw messages another writer added to deleted
#: sessions: deleting a session erases its raw log, so every raw message a tombstone
#: holds was written past it, and belongs to no generation.
REPAIR_DELETED = (
    "DELETE FROM raw_messages "
    "WHERE session_id IN (SELECT id FROM agent_sessions WHERE deleted_at IS NOT NULL)"
)

#: The cause, as every message about such rows gives it.
CAUSE = (
    "raw messages were written outside chatledger, e.g. by zett-agent's own store after "
    "`chatledger adopt` (it numbers by MAX(sequence) + 1 and leaves the counter row behind)"
)


@dataclass(frozen=True)
class PastCounter:
    """A session whose raw log runs past its counter row."""

    session_id: str
    #: The counter row's ``last_sequence``: the last sequence chatledger allocated.
    last_sequence: int
    #: The highest sequence stored.
    highest: int


#: The session's highest stored sequence: the last entry of its run in the
#: ``(session_id, sequence)`` index, one probe (a backward index read, LIMIT 1; a
#: correlated ``MAX`` is not read that way on MySQL/MariaDB).
_HIGHEST = (
    select(_raw.c.sequence)
    .where(_raw.c.session_id == _sessions.c.id)
    .order_by(_raw.c.sequence.desc())
    .limit(1)
    .correlate(_sessions)
    .scalar_subquery()
)


def past_counter(connection: Connection, limit: int = 20) -> tuple[list[PastCounter], bool]:
    """The first ``limit`` sessions (by id) holding raw messages past their counter row,
    and whether there are more. Reads every counter row once and probes the raw log's
    ``(session_id, sequence)`` index once per session (checked with EXPLAIN in
    ``tests/test_explain.py``): no scan of the raw messages."""
    statement = (
        select(_sessions.c.id, _sessions.c.last_sequence, _HIGHEST.label("highest"))
        .where(_sessions.c.last_sequence < _HIGHEST)
        .order_by(_sessions.c.id)
        .limit(limit + 1)
    )
    found = [
        PastCounter(row.id, int(row.last_sequence), int(row.highest)) for row in connection.execute(statement)
    ]
    return found[:limit], len(found) > limit


def describe_past_counter(found: list[PastCounter], more: bool) -> str:
    """``chatledger check``'s report of :func:`past_counter`'s sessions, with the fix."""
    listed = ", ".join(
        f"{item.session_id!r} (last_sequence {item.last_sequence}, raw messages up to {item.highest})"
        for item in found
    )
    which = (
        f"sessions {listed}{' and more' if more else ''} hold"
        if more or len(found) > 1
        else f"session {listed} holds"
    )
    return (
        f"{CAUSE}: {which} raw messages past the counter row, where chatledger's appends fail "
        f"until the counter is moved past them. Stop that writer, then, as the schema owner: {REPAIR}; "
        "and for the deleted sessions among them (tombstones, whose raw log a delete erased): "
        f"{REPAIR_DELETED}"
    )


async def outside_writes(conn: AsyncConnection, url: URL, session_id: str) -> CorruptData | None:
    """Why an append to ``session_id`` met a duplicate ``(session_id, sequence)``: the
    :class:`chatledger.CorruptData` naming the session, the sequence the append took,
    the counter row's ``last_sequence`` and the cause, when raw messages lie past the
    counter row; ``None`` when they do not (the duplicate was something else)."""
    last = await conn.scalar(select(_sessions.c.last_sequence).where(_sessions.c.id == session_id))
    highest = await conn.scalar(select(func.max(_raw.c.sequence)).where(_raw.c.session_id == session_id))
    if last is None or highest is None or highest <= last:
        return None
    return CorruptData(
        f"session {session_id!r}: an append could not store its message at sequence {last + 1}, "
        f"the next after the counter row's last_sequence {last}: the raw log holds messages up to "
        f"sequence {highest} already; nothing was written. The cause: {CAUSE}. Stop that writer and "
        f"run `chatledger check --dsn {as_argument(url)}`: it lists such sessions and how to move "
        "their counters"
    )
