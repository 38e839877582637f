"""High-water marks: what a purged tombstone remembered, without the id.

A deleted session keeps a tombstone (its counter row) so that no sequence or version
of its id is ever valid again (docs/zett.md, "Deleting and starting again"). Purging the
tombstone (:mod:`chatledger.tombstones`) replaces it, in the deleting transaction, by
a row of ``high_water_marks``: the store (:data:`ZETT`, :data:`REIN`, :data:`OPENAI`,
:data:`ADK`, :data:`LANGGRAPH`), the SHA-256 of the id's UTF-8 bytes (:func:`digest`; an ADK session's
id is its whole key, :func:`adk_id`), the last sequence and the version the id
reached, and when it was purged. No title, parent, timestamp of the session or id is
kept; an id one already knows can still be checked against its digest.

Invariant: an id has a row in its store's table or a mark, never both for long. Every
path that creates a session looks the mark up in its own transaction and either
refuses (a zett append: the id stays deleted, as with its tombstone) or numbers on
from it and removes it (``create_session``, a rein save, an import), so a mark acts
exactly as the tombstone it replaced:

* :func:`reached` -- the mark of an id, by a locking read (MySQL's locking reads see
  the last committed row whatever the snapshot; PostgreSQL at READ COMMITTED reads
  each statement anew).
* :func:`kept` -- whether an id has a mark (a plain read); :func:`seen`, the mark itself.
* :func:`take` -- the same, removing the mark: the new row carries the high water on.
* :func:`raise_to` -- write the mark of a purged tombstone (never lowering one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from .savepoints import insert_unless_present
from .schema import high_water_marks_table

#: The store of a zett session id (``agent_sessions``).
ZETT = 0
#: The store of a rein session id (``rein_sessions``).
REIN = 1
#: The store of an OpenAI Agents session id (``openai_sessions``): the mark keeps its last
#: sequence and its ``generation``.
OPENAI = 2
#: The store of an ADK session (``adk_sessions``), keyed by :func:`adk_id`: the mark keeps
#: its last sequence and its ``state_version``.
ADK = 3
#: The store of a LangGraph thread (``langgraph_threads``): the mark keeps, as its last
#: sequence, the thread's ``deleted_through`` (the instant of its latest deleted
#: checkpoint, 0 for none), and its ``generation`` as its version.
LANGGRAPH = 4

_marks = high_water_marks_table


def digest(id: str) -> str:
    """The key of ``id``'s mark: SHA-256 of its UTF-8 bytes, 64 lowercase hex digits."""
    return hashlib.sha256(id.encode("utf-8")).hexdigest()


def key_id(key: Sequence[str]) -> str:
    """The id the mark of a session keyed by ``key`` is kept under: its id, or for a key
    of several columns the compact JSON array of their values; :func:`digest`ed like
    any other id."""
    if len(key) == 1:
        return key[0]
    return json.dumps(list(key), ensure_ascii=False, separators=(",", ":"))


def adk_id(app_name: str, user_id: str, id: str) -> str:
    """The id an ADK session's mark is kept under: its whole key (ADK's sessions are
    keyed by app, user and id), as a compact JSON array of the three (:func:`key_id`)."""
    return key_id((app_name, user_id, id))


def _this(store: int, id: str) -> Any:
    return and_(_marks.c.store == store, _marks.c.id_digest == digest(id))


async def reached(conn: AsyncConnection, store: int, id: str) -> Any | None:
    """The mark of ``id`` in ``store`` (``last_sequence``, ``version``), or ``None``;
    a locking read, in the caller's write transaction."""
    statement = select(_marks.c.last_sequence, _marks.c.version).where(_this(store, id))
    return (await conn.execute(statement.with_for_update())).one_or_none()


async def kept(conn: AsyncConnection, store: int, id: str) -> bool:
    """Whether ``id`` has a mark in ``store``: a plain read (a read transaction's, as a
    settle runs in)."""
    return await conn.scalar(select(_marks.c.id_digest).where(_this(store, id))) is not None


async def seen(conn: AsyncConnection, store: int, id: str) -> Any | None:
    """The mark of ``id`` in ``store`` (``last_sequence``, ``version``) by a plain read, or
    ``None`` (what a settle reads)."""
    statement = select(_marks.c.last_sequence, _marks.c.version).where(_this(store, id))
    return (await conn.execute(statement)).one_or_none()


async def take(conn: AsyncConnection, store: int, id: str) -> Any | None:
    """:func:`reached`, and the mark removed: the caller's new row under the id carries
    the high water on (in the same transaction)."""
    mark = await reached(conn, store, id)
    if mark is not None:
        await conn.execute(delete(_marks).where(_this(store, id)))
    return mark


async def raise_to(
    conn: AsyncConnection, store: int, id: str, last_sequence: int, version: int, now: datetime
) -> None:
    """Keep ``id``'s high water at least at ``last_sequence`` and ``version``, in the
    transaction that deletes its tombstone (whose row lock serialises purges of the id)."""
    await raise_digest(conn, store, digest(id), last_sequence, version, now)


async def raise_digest(
    conn: AsyncConnection, store: int, id_digest: str, last_sequence: int, version: int, now: datetime
) -> None:
    """:func:`raise_to` by the id's digest (an import's marks carry no id).

    The INSERT first, in a savepoint: on MySQL/MariaDB a locking read of a missing mark
    takes a gap lock, and two purges whose digests fall in one gap then deadlock on
    their INSERTs; an INSERT takes no gap lock. A mark already there (rare: an earlier
    purge of the id, or an imported one) is raised instead, never lowered."""
    this = and_(_marks.c.store == store, _marks.c.id_digest == id_digest)
    first = insert(_marks).values(
        store=store, id_digest=id_digest, last_sequence=last_sequence, version=version, purged_at=now
    )
    if await insert_unless_present(conn, first):
        return
    mark = (
        await conn.execute(select(_marks.c.last_sequence, _marks.c.version).where(this).with_for_update())
    ).one()
    await conn.execute(
        update(_marks)
        .where(this)
        .values(
            last_sequence=max(last_sequence, mark.last_sequence),
            version=max(version, mark.version),
            purged_at=now,
        )
    )
