"""The LangGraph saver's transactions on ``langgraph_threads``, ``langgraph_checkpoints``,
``langgraph_blobs`` and ``langgraph_writes``: each a ``work`` (and ``settle``) closure
for :class:`chatledger.engine.Ledger`.

Every write of a thread locks its thread row first (an ``UPDATE`` that moves its
``version``, returning the row where the database can, or the row's ``INSERT``), so the
writers of one thread take turns and what each reads of the thread under that lock
stays true until its COMMIT: whether the thread is a tombstone, and its
``deleted_through`` horizon. Its rows then go in as one insert per table that keeps, or
replaces, a row stored under the same key (:attr:`chatledger.dialects.Backend.merge_insert`),
so a put asks nothing else first; the statements of these hot paths are built once.

**Stale writes.** A delete erases a thread's checkpoints, blobs and writes and keeps
its row as a tombstone, raising ``deleted_through`` to the instant of the latest
checkpoint the thread held (:func:`instant`: LangGraph's checkpoint ids are
time-ordered UUIDs, version 6). A put of a checkpoint, or of writes to a checkpoint,
whose id (a put's: its parent's, when it has one) is of that instant or before and
that the live generation does not hold is a write of a run from before the delete:
refused with :class:`chatledger.SessionDeleted`, nothing written. A run started after
the delete writes later ids, and its first put starts the thread's next generation.
An id that is no time-ordered UUID has no instant, and only its absence judges it.

A purged tombstone leaves a mark (:mod:`chatledger.marks`, :data:`chatledger.marks.LANGGRAPH`)
holding ``deleted_through`` and the generation: the write that creates the thread's
row again takes it, and the row goes on as the tombstone would have.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import clock, marks
from ..dialects import Backend
from ..engine import Ledger
from ..errors import SessionDeleted
from ..identity import Found, Generation, Part, WriteIdentity, counter_generation
from ..savepoints import insert_unless_present
from ..schema import (
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_threads_table,
    langgraph_writes_table,
)

_threads = langgraph_threads_table
_checkpoints = langgraph_checkpoints_table
_blobs = langgraph_blobs_table
_writes = langgraph_writes_table

#: Live threads (not tombstones).
LIVE = _threads.c.deleted_at.is_(None)


@dataclass(frozen=True, slots=True)
class Blob:
    """One channel value at one version: the serializer's type tag and bytes (``None``
    for LangGraph's "empty")."""

    channel: str
    version: str
    type: str
    data: bytes | None


@dataclass(frozen=True, slots=True)
class Stored:
    """One checkpoint row as stored: the serialized checkpoint (its primitive channel
    values inline) and the metadata's JSON."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    data: bytes
    metadata_json: str
    run_id: str | None


@dataclass(frozen=True, slots=True)
class Write:
    """One pending write of a task, keyed as LangGraph keys it."""

    task_id: str
    idx: int
    task_path: str
    channel: str
    type: str
    data: bytes | None


@dataclass(frozen=True, slots=True)
class Loaded:
    """A checkpoint as read in one snapshot: its row, the blobs its channel versions
    name (those found), and its pending writes (unsorted)."""

    row: Stored
    blobs: list[Blob]
    writes: list[Write]


#: Which (channel, version) blobs a stored checkpoint needs: decodes it (the saver's serde).
Wanted = Callable[[Stored], Iterable[tuple[str, str]]]

_STORED = (
    _checkpoints.c.thread_id,
    _checkpoints.c.checkpoint_ns,
    _checkpoints.c.checkpoint_id,
    _checkpoints.c.parent_checkpoint_id,
    _checkpoints.c.checkpoint_type,
    _checkpoints.c.checkpoint_blob,
    _checkpoints.c.metadata_json,
    _checkpoints.c.run_id,
)


def _stored(row: Any) -> Stored:
    return Stored(
        row.thread_id,
        row.checkpoint_ns,
        row.checkpoint_id,
        row.parent_checkpoint_id,
        row.checkpoint_type,
        row.checkpoint_blob,
        row.metadata_json,
        row.run_id,
    )


def _write(row: Any) -> Write:
    return Write(row.task_id, int(row.idx), row.task_path, row.channel, row.value_type, row.value_blob)


def _deleted(thread_id: str) -> SessionDeleted:
    return SessionDeleted(
        f"thread {thread_id!r} was deleted after this write's run read it; the write is refused "
        "(nothing written). Start the thread again with a new run (no checkpoint_id in the config)."
    )


def _bytes(data: bytes | None) -> str | None:
    """The content part of serialized bytes: their SHA-256, in hex."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def _generation(thread_id: str) -> Generation:
    """The thread's generation (a delete moves it), or its purged tombstone's mark's."""
    return counter_generation(
        _threads,
        lambda: _threads.c.id == thread_id,
        "generation",
        marks.LANGGRAPH,
        lambda: thread_id,
        "version",
    )


def _checkpoint_content(
    parent_checkpoint_id: str | None, type: str, data: bytes, metadata_json: str
) -> tuple[Part, ...]:
    return (parent_checkpoint_id, type, _bytes(data), metadata_json)


def _writes_content(writes: Iterable[Write | None]) -> tuple[Part, ...]:
    parts: list[Part] = []
    for write in writes:
        parts += (
            [None]
            if write is None
            else [write.task_id, write.idx, write.task_path, write.channel, write.type, _bytes(write.data)]
        )
    return tuple(parts)


class _Settled(Exception):
    """A retry found, under the thread's lock, the write an earlier attempt's COMMIT made
    after all (the server finished it late): the attempt rolls back (its ``version``
    bump with it) and the ledger's settle after a failed attempt returns the write."""


# -- the thread row ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thread:
    """The thread row as its writer locked it."""

    generation: int
    deleted_at: datetime | None
    deleted_through: int | None


class _Statements:
    """The statements of the saver's hot paths on one backend, built once: SQLAlchemy
    then reuses their cache keys and compiled forms on every call.

    ``returning``: the database returns an ``UPDATE``'s rows (SQLAlchemy's
    ``dialect.update_returning``), so the thread row's lock reads the row back in the
    same statement."""

    def __init__(self, backend: Backend, returning: bool) -> None:
        self.returning = returning
        this = _threads.c.id == bindparam("thread_id", type_=_threads.c.id.type)
        updated_at = _threads.c.updated_at
        bump = (
            update(_threads)
            .where(this)
            .values(
                version=_threads.c.version + 1,
                updated_at=backend.greatest(
                    updated_at, bindparam("now", type_=updated_at.type), type_=updated_at.type
                ),
            )
        )
        columns = (_threads.c.generation, _threads.c.deleted_at, _threads.c.deleted_through)
        self.bump = bump.returning(*columns) if returning else bump
        self.thread = select(*columns).where(this)
        self.checkpoint = backend.merge_insert(
            _checkpoints,
            (
                "parent_checkpoint_id",
                "checkpoint_type",
                "checkpoint_blob",
                "metadata_json",
                "run_id",
                "write_id",
            ),
        )
        self.blobs = backend.merge_insert(_blobs, ())
        self.writes = backend.merge_insert(_writes, ())
        self.replace_writes = backend.merge_insert(
            _writes, ("task_path", "channel", "value_type", "value_blob", "write_id")
        )


_built: dict[tuple[str, bool], _Statements] = {}


def _statements(ledger: Ledger, conn: AsyncConnection) -> _Statements:
    returning = bool(conn.dialect.update_returning)
    key = (ledger.backend.name, returning)
    found = _built.get(key)
    if found is None:
        found = _built[key] = _Statements(ledger.backend, returning)
    return found


async def _execute(conn: AsyncConnection, statement: Any, rows: Sequence[dict[str, Any]]) -> None:
    """One row as one statement, more as the driver's ``executemany``: a statement per
    row (asyncpg, psycopg, SQLite), or rows batched into multi-row ``INSERT``s of up to
    about 1 MB each (aiomysql), below any server's default packet limit; a row larger
    than that goes alone, and the statement limit was checked for each row."""
    if len(rows) == 1:
        await conn.execute(statement, rows[0])
    elif rows:
        await conn.execute(statement, list(rows))


async def lock_thread(conn: AsyncConnection, ledger: Ledger, thread_id: str, now: datetime) -> Thread:
    """Lock ``thread_id``'s row, creating it for a new thread, and move its ``version``
    (every write does: a purge that read the thread before it keeps it). One statement
    for a thread that exists where the database returns an ``UPDATE``'s rows; else the
    row is read back after it."""
    built = _statements(ledger, conn)
    params = {"thread_id": thread_id, "now": now}
    moved = await conn.execute(built.bump, params)
    if built.returning:
        row = moved.one_or_none()
        if row is not None:
            return Thread(int(row.generation), row.deleted_at, row.deleted_through)
        bumped = False
    else:
        bumped = moved.rowcount == 1
    if not bumped:
        # A new row: a purged tombstone's mark, if any, makes it that tombstone again.
        mark = await marks.take(conn, marks.LANGGRAPH, thread_id)
        carried: dict[str, Any] = {}
        if mark is not None:
            carried = {"generation": int(mark.version), "deleted_at": now}
            if int(mark.last_sequence):
                carried["deleted_through"] = int(mark.last_sequence)
        new = insert(_threads).values(id=thread_id, created_at=now, updated_at=now, **carried)
        if not await insert_unless_present(conn, new):
            await conn.execute(built.bump, params)
    row = (await conn.execute(built.thread, params)).one()
    return Thread(int(row.generation), row.deleted_at, row.deleted_through)


async def _holds(conn: AsyncConnection, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> bool:
    found = await conn.scalar(
        select(_checkpoints.c.checkpoint_id).where(
            _checkpoints.c.thread_id == thread_id,
            _checkpoints.c.checkpoint_ns == checkpoint_ns,
            _checkpoints.c.checkpoint_id == checkpoint_id,
        )
    )
    return found is not None


async def _refuse_stale(
    conn: AsyncConnection, thread: Thread, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> None:
    """Refuse a write that names ``checkpoint_id`` when a delete erased it: of the
    thread's horizon's instant or before, and not held by its live generation."""
    horizon, at = thread.deleted_through, instant(checkpoint_id)
    stale = horizon is not None and at is not None and at <= horizon
    if stale and not await _holds(conn, thread_id, checkpoint_ns, checkpoint_id):
        raise _deleted(thread_id)


# -- put -----------------------------------------------------------------------------------


async def put(ledger: Ledger, row: Stored, blobs: Sequence[Blob], write_id: str) -> None:
    """Store one checkpoint and the blobs of the channels it changed, in one transaction,
    exactly once: its write identity (:mod:`chatledger.identity`) is keyed as LangGraph's
    savers key a checkpoint, (thread, namespace, checkpoint id), its content the parent,
    the serialized checkpoint and the metadata; ``write_id`` names the call in the row.

    A checkpoint stored already under its key is replaced (as LangGraph's savers do);
    a blob stored already under its (channel, version) is kept. A put to a tombstone
    starts the thread's next generation, unless it is stale (see the module).

    Raises:
        SessionDeleted: the put is a stale write of a deleted thread; nothing written.
        IdentityConflict: its COMMIT was lost and the checkpoint's key holds other
            content (another put replaced it, or this one was not committed over an
            earlier one); nothing of this call written.
    """
    key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
    attempts = 0

    async def find(conn: AsyncConnection) -> Found[bool] | None:
        this = and_(
            _checkpoints.c.thread_id == row.thread_id,
            _checkpoints.c.checkpoint_ns == row.checkpoint_ns,
            _checkpoints.c.checkpoint_id == row.checkpoint_id,
        )
        found = (
            await conn.execute(
                select(
                    _checkpoints.c.parent_checkpoint_id,
                    _checkpoints.c.checkpoint_type,
                    _checkpoints.c.checkpoint_blob,
                    _checkpoints.c.metadata_json,
                ).where(this)
            )
        ).one_or_none()
        if found is None:
            return None
        content = _checkpoint_content(
            found.parent_checkpoint_id, found.checkpoint_type, found.checkpoint_blob, found.metadata_json
        )
        return Found(True, content)

    identity = WriteIdentity(
        marks.key_id(key),
        _checkpoint_content(row.parent_checkpoint_id, row.type, row.data, row.metadata_json),
        find=find,
        generation=_generation(row.thread_id),
        names="LangGraph checkpoint (thread_id, checkpoint_ns, checkpoint_id)",
        of="a checkpoint",
    )

    async def work(conn: AsyncConnection) -> bool:
        nonlocal attempts
        attempts += 1
        now = clock.utc_now()
        thread = await lock_thread(conn, ledger, row.thread_id, now)
        if attempts > 1 and await identity.settle(conn):
            raise _Settled  # a COMMIT the server finished late: rolled back, then settled
        named = row.parent_checkpoint_id if row.parent_checkpoint_id is not None else row.checkpoint_id
        await _refuse_stale(conn, thread, row.thread_id, row.checkpoint_ns, named)
        if thread.deleted_at is not None:  # the next generation starts
            await conn.execute(update(_threads).where(_threads.c.id == row.thread_id).values(deleted_at=None))
        built = _statements(ledger, conn)
        if blobs:
            await _execute(
                conn,
                built.blobs,
                [
                    {
                        "thread_id": row.thread_id,
                        "checkpoint_ns": row.checkpoint_ns,
                        "channel": blob.channel,
                        "version": blob.version,
                        "value_type": blob.type,
                        "value_blob": blob.data,
                        "created_at": now,
                    }
                    for blob in {(blob.channel, blob.version): blob for blob in blobs}.values()
                ],
            )
        await conn.execute(
            built.checkpoint,
            {
                "thread_id": key[0],
                "checkpoint_ns": key[1],
                "checkpoint_id": key[2],
                "parent_checkpoint_id": row.parent_checkpoint_id,
                "checkpoint_type": row.type,
                "checkpoint_blob": row.data,
                "metadata_json": row.metadata_json,
                "run_id": row.run_id,
                "write_id": write_id,
                "created_at": now,
            },
        )
        identity.made(thread.generation, True)
        return True

    await ledger.write(work, identity=identity, first_writes=True)


# -- put_writes ----------------------------------------------------------------------------


async def put_writes(
    ledger: Ledger,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    writes: Sequence[Write],
    *,
    replace: bool,
    write_id: str,
) -> None:
    """Store a task's pending writes to a checkpoint, in one transaction, exactly once.

    Keyed as LangGraph keys them, (thread, namespace, checkpoint, task, ``idx``): a write
    whose key is stored already is kept, or, with ``replace`` (every write of the call
    is to a special channel of ``WRITES_IDX_MAP``), replaced. The checkpoint need not be
    stored yet (a run saves a step's writes beside its checkpoint's put), but one a
    delete erased is refused.

    Exactly once: its write identity (:mod:`chatledger.identity`) is keyed as LangGraph's
    savers key a write, (thread, namespace, checkpoint, task, ``idx``), by the call's
    first write; its content is every write of the call, the stored ones compared with
    them. ``write_id`` names the call in the rows.

    Raises:
        SessionDeleted: the writes are stale writes of a deleted thread; nothing written.
        IdentityConflict: its COMMIT was lost (or the call was retried) and the first
            write's key holds other content of a write that is kept (not ``replace``);
            nothing of this call written. With ``replace`` other content is replaced,
            as LangGraph's savers upsert a special channel's write.
    """
    if not writes:
        return
    task_ids = sorted({write.task_id for write in writes})
    of_checkpoint = and_(
        _writes.c.thread_id == thread_id,
        _writes.c.checkpoint_ns == checkpoint_ns,
        _writes.c.checkpoint_id == checkpoint_id,
    )

    first = writes[0]
    attempts = 0
    # A key given twice in one call is stored once, its first write kept (or, replacing,
    # its last): the content compared is what the call stores.
    kept: dict[tuple[str, int], Write] = {}
    for write in writes:
        if replace or (write.task_id, write.idx) not in kept:
            kept[(write.task_id, write.idx)] = write

    async def find(conn: AsyncConnection) -> Found[bool] | None:
        # Its writes commit together: the first one's key says whether it is stored.
        stored = {
            (found.task_id, int(found.idx)): _write(found)
            for found in await conn.execute(
                select(*_WRITE_COLUMNS).where(of_checkpoint, _writes.c.task_id.in_(task_ids))
            )
        }
        if (first.task_id, first.idx) not in stored:
            return None
        content = _writes_content(stored.get(key) for key in kept)
        if replace and content != mine:
            # Special channels are replaced (an interrupt raised again on resume, a
            # task's error again): other content under the key is the write this call
            # replaces, not another write's identity. Not found: the work replaces it.
            return None
        return Found(True, content)

    mine = _writes_content(kept.values())
    identity = WriteIdentity(
        marks.key_id((thread_id, checkpoint_ns, checkpoint_id, first.task_id, str(first.idx))),
        mine,
        find=find,
        generation=_generation(thread_id),
        names="LangGraph write (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)",
        of="a task's writes",
    )

    async def work(conn: AsyncConnection) -> bool:
        nonlocal attempts
        attempts += 1
        now = clock.utc_now()
        thread = await lock_thread(conn, ledger, thread_id, now)
        if attempts > 1 and await identity.settle(conn):
            raise _Settled
        await _refuse_stale(conn, thread, thread_id, checkpoint_ns, checkpoint_id)
        # Each key once, as the call stores it (``kept``): an insert that keeps a
        # stored write under its key, or, replacing, one that replaces it.
        built = _statements(ledger, conn)
        await _execute(
            conn,
            built.replace_writes if replace else built.writes,
            [
                {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                    "task_id": write.task_id,
                    "idx": write.idx,
                    "task_path": write.task_path,
                    "channel": write.channel,
                    "value_type": write.type,
                    "value_blob": write.data,
                    "write_id": write_id,
                    "created_at": now,
                }
                for write in kept.values()
            ],
        )
        identity.made(thread.generation, True)
        return True

    await ledger.write(work, identity=identity, first_writes=True)


# -- read ----------------------------------------------------------------------------------


def _checkpoint_key(thread_id: str, checkpoint_ns: str) -> ColumnElement[bool]:
    return and_(_checkpoints.c.thread_id == thread_id, _checkpoints.c.checkpoint_ns == checkpoint_ns)


#: A pending write's columns, brought along with its checkpoint (``w_<name>``).
_WRITE_COLUMNS = (
    _writes.c.task_id,
    _writes.c.idx,
    _writes.c.task_path,
    _writes.c.channel,
    _writes.c.value_type,
    _writes.c.value_blob,
)


def _with_writes(checkpoints: Select[Any], order: Sequence[Column[Any]]) -> Select[Any]:
    """The checkpoints ``checkpoints`` selects (its own order and limit), each with its
    pending writes in the same statement: a row per write (``w_`` columns ``NULL`` for
    a checkpoint with none), in ``order`` (descending) of the checkpoints, each
    checkpoint's rows together. No ``order`` for one checkpoint: no sort either."""
    found = checkpoints.subquery("found")
    joined = found.outerjoin(
        _writes,
        and_(
            _writes.c.thread_id == found.c.thread_id,
            _writes.c.checkpoint_ns == found.c.checkpoint_ns,
            _writes.c.checkpoint_id == found.c.checkpoint_id,
        ),
    )
    return (
        select(*found.c, *(column.label(f"w_{column.name}") for column in _WRITE_COLUMNS))
        .select_from(joined)
        .order_by(*(found.c[column.name].desc() for column in order))
    )


def _gathered(found: Iterable[Any]) -> list[tuple[Stored, list[Write]]]:
    """The rows of a :func:`_with_writes` statement as checkpoints and their writes."""
    gathered: list[tuple[Stored, list[Write]]] = []
    last: tuple[str, str, str] | None = None
    for row in found:
        key = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
        if key != last:
            gathered.append((_stored(row), []))
            last = key
        if row.w_task_id is not None:
            gathered[-1][1].append(
                Write(
                    row.w_task_id,
                    int(row.w_idx),
                    row.w_task_path,
                    row.w_channel,
                    row.w_value_type,
                    row.w_value_blob,
                )
            )
    return gathered


_BLOB_COLUMNS = (
    _blobs.c.thread_id,
    _blobs.c.checkpoint_ns,
    _blobs.c.channel,
    _blobs.c.version,
    _blobs.c.value_type,
    _blobs.c.value_blob,
)
#: The blobs of one thread's namespace whose channel is one of ``channels`` and version
#: one of ``versions``: each an equality or an ``IN`` list on the primary key's columns,
#: so every backend searches the key (SQLite scans the table for a row value ``IN`` a
#: list of more than one). A superset of the keys wanted; the caller keeps those.
_BLOBS = select(*_BLOB_COLUMNS).where(
    _blobs.c.thread_id == bindparam("thread_id", type_=_blobs.c.thread_id.type),
    _blobs.c.checkpoint_ns == bindparam("checkpoint_ns", type_=_blobs.c.checkpoint_ns.type),
    _blobs.c.channel.in_(bindparam("channels", expanding=True)),
    _blobs.c.version.in_(bindparam("versions", expanding=True)),
)


def _blobs_of(keys: Iterable[tuple[str, str, str, str]]) -> tuple[Select[Any], dict[str, Any]]:
    """The statement and parameters of :data:`_BLOBS` for ``keys`` (thread, namespace,
    channel, version); of more than one namespace, one such condition each, or-ed."""
    groups: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for thread_id, checkpoint_ns, channel, version in keys:
        channels, versions = groups.setdefault((thread_id, checkpoint_ns), (set(), set()))
        channels.add(channel)
        versions.add(version)
    if len(groups) == 1:
        ((thread_id, checkpoint_ns), (channels, versions)) = groups.popitem()
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "channels": sorted(channels),
            "versions": sorted(versions),
        }
        return _BLOBS, params
    query = select(*_BLOB_COLUMNS).where(
        or_(
            *(
                and_(
                    _blobs.c.thread_id == thread_id,
                    _blobs.c.checkpoint_ns == checkpoint_ns,
                    _blobs.c.channel.in_(sorted(channels)),
                    _blobs.c.version.in_(sorted(versions)),
                )
                for (thread_id, checkpoint_ns), (channels, versions) in sorted(groups.items())
            )
        )
    )
    return query, {}


async def _complete(
    conn: AsyncConnection, found: Sequence[tuple[Stored, list[Write]]], wanted: Wanted
) -> list[Loaded]:
    """The blobs of the checkpoints ``found`` (with their writes), in the caller's read
    transaction: one statement, none when no checkpoint needs a blob."""
    needs = [(row, set(wanted(row))) for row, _ in found]
    blob_keys = {
        (row.thread_id, row.checkpoint_ns, channel, version)
        for row, needed in needs
        for channel, version in needed
    }
    blobs: dict[tuple[str, str], list[Blob]] = {}
    if blob_keys:
        query, params = _blobs_of(blob_keys)
        for blob in await conn.execute(query, params):
            blobs.setdefault((blob.thread_id, blob.checkpoint_ns), []).append(
                Blob(blob.channel, blob.version, blob.value_type, blob.value_blob)
            )
    return [
        Loaded(
            row,
            [
                blob
                for blob in blobs.get((row.thread_id, row.checkpoint_ns), [])
                if (blob.channel, blob.version) in needed
            ],
            writes,
        )
        for (row, needed), (_, writes) in zip(needs, found, strict=True)
    ]


_OF_NAMESPACE = and_(
    _checkpoints.c.thread_id == bindparam("thread_id", type_=_checkpoints.c.thread_id.type),
    _checkpoints.c.checkpoint_ns == bindparam("checkpoint_ns", type_=_checkpoints.c.checkpoint_ns.type),
)
#: A namespace's latest checkpoint (read backwards on the primary key), with its writes.
_LATEST = _with_writes(
    select(*_STORED).where(_OF_NAMESPACE).order_by(_checkpoints.c.checkpoint_id.desc()).limit(1),
    (),
)
#: One checkpoint by its id, with its writes.
_BY_ID = _with_writes(
    select(*_STORED).where(
        _OF_NAMESPACE,
        _checkpoints.c.checkpoint_id == bindparam("checkpoint_id", type_=_checkpoints.c.checkpoint_id.type),
    ),
    (),
)


async def get(
    ledger: Ledger, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None, wanted: Wanted
) -> Loaded | None:
    """The checkpoint ``checkpoint_id`` of the thread's namespace, or its latest (the
    highest id, read backwards on the primary key: one row whatever the thread's
    length), with its pending writes in the same statement, and its blobs, in one
    snapshot."""
    params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    query = _LATEST
    if checkpoint_id is not None:
        query, params["checkpoint_id"] = _BY_ID, checkpoint_id

    async def work(conn: AsyncConnection) -> Loaded | None:
        found = _gathered(await conn.execute(query, params))
        if not found:
            return None
        return (await _complete(conn, found, wanted))[0]

    result: Loaded | None = await ledger.read(work)
    return result


async def page(
    ledger: Ledger,
    *,
    thread_id: str | None,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
    after: Sequence[Any] | None,
    size: int,
    wanted: Wanted,
    run_id: str | None = None,
) -> list[Loaded]:
    """One page of checkpoints, newest first (checkpoint id descending, then thread and
    namespace descending), of one thread (and namespace) when given, below ``before``'s
    id, after the position ``after`` (the order's values of the previous page's last
    row), with their pending writes in the same statement and their blobs, in one
    snapshot. With the thread and namespace given, the primary key reads it in order."""
    order = [_checkpoints.c.checkpoint_id]
    query = select(*_STORED)
    if thread_id is not None:
        query = query.where(_checkpoints.c.thread_id == thread_id)
    else:
        order.append(_checkpoints.c.thread_id)
    if checkpoint_ns is not None:
        query = query.where(_checkpoints.c.checkpoint_ns == checkpoint_ns)
    else:
        order.append(_checkpoints.c.checkpoint_ns)
    if checkpoint_id is not None:
        query = query.where(_checkpoints.c.checkpoint_id == checkpoint_id)
    if before is not None:
        query = query.where(_checkpoints.c.checkpoint_id < before)
    if run_id is not None:
        query = query.where(_checkpoints.c.run_id == run_id)
    if after is not None:
        query = query.where(
            or_(
                *(
                    and_(*(order[j] == after[j] for j in range(i)), order[i] < after[i])
                    for i in range(len(order))
                )
            )
        )
    query = query.order_by(*(column.desc() for column in order)).limit(size)
    joined = _with_writes(query, order)

    async def work(conn: AsyncConnection) -> list[Loaded]:
        return await _complete(conn, _gathered(await conn.execute(joined)), wanted)

    result: list[Loaded] = await ledger.read(work)
    return result


def position(loaded: Loaded, thread_id: str | None, checkpoint_ns: str | None) -> list[Any]:
    """The order's values of ``loaded`` for :func:`page`'s ``after``."""
    values: list[Any] = [loaded.row.checkpoint_id]
    if thread_id is None:
        values.append(loaded.row.thread_id)
    if checkpoint_ns is None:
        values.append(loaded.row.checkpoint_ns)
    return values


# -- delete ----------------------------------------------------------------------------------


#: UUID time (100 ns since 1582-10-15) of the Unix epoch: a UUIDv7's milliseconds start there.
_UNIX_EPOCH = 0x01B21DD213814000


def instant(checkpoint_id: str) -> int | None:
    """The time a checkpoint id was made, in 100 ns since 1582-10-15 (the UUID time), for
    a time-ordered UUID (version 6, as LangGraph makes them; 1 and 7 too); ``None`` for
    any other id."""
    try:
        made = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if made.version == 6:
        bits = made.int >> 64
        return ((bits >> 32) << 28) | (((bits >> 16) & 0xFFFF) << 12) | (bits & 0x0FFF)
    if made.version == 1:
        return made.time
    if made.version == 7:
        return (made.int >> 80) * 10_000 + _UNIX_EPOCH
    return None


async def _horizon(conn: AsyncConnection, thread_id: str, known: int | None) -> int | None:
    """The latest instant of the checkpoints the thread holds or its writes name, or ``known``."""
    instants = [known] if known is not None else []
    for column, table in ((_checkpoints.c.checkpoint_id, _checkpoints), (_writes.c.checkpoint_id, _writes)):
        for checkpoint_id in await conn.scalars(
            select(column).where(table.c.thread_id == thread_id).distinct()
        ):
            at = instant(checkpoint_id)
            if at is not None:
                instants.append(at)
    return max(instants) if instants else None


async def _erase(conn: AsyncConnection, thread_id: str) -> None:
    for table in (_writes, _blobs, _checkpoints):
        await conn.execute(delete(table).where(table.c.thread_id == thread_id))


async def tombstone(
    conn: AsyncConnection,
    ledger: Ledger,
    thread_id: str,
    now: datetime,
    seen: Mapping[str, Any] | None = None,
    selected: Sequence[ColumnElement[bool]] = (),
) -> bool:
    """In the caller's transaction: erase the thread's checkpoints, blobs and writes and
    leave its row a tombstone, its horizon raised; ``seen`` (a purge's): only if the row
    is still live, at these column values and in ``selected`` (the purge's conditions),
    decided by the locking ``UPDATE`` itself. Returns whether a live thread was deleted
    (a tombstone has its leftovers erased, and stays one)."""
    this = _threads.c.id == thread_id
    conditions = [this, *selected, *(_threads.c[name] == value for name, value in (seen or {}).items())]
    if seen is not None:
        conditions.append(LIVE)
    moved = await conn.execute(
        update(_threads)
        .where(*conditions)
        .values(version=_threads.c.version + 1, updated_at=ledger.backend.latest(_threads.c.updated_at, now))
    )
    if moved.rowcount != 1:
        return False
    row = (await conn.execute(select(_threads.c.deleted_at, _threads.c.deleted_through).where(this))).one()
    horizon = await _horizon(conn, thread_id, row.deleted_through)
    await _erase(conn, thread_id)
    live = row.deleted_at is None
    values: dict[str, Any] = {"deleted_through": horizon}
    if live:
        values.update(generation=_threads.c.generation + 1, deleted_at=now)
    await conn.execute(update(_threads).where(this).values(**values))
    return live


async def delete_thread(ledger: Ledger, thread_id: str) -> bool:
    """Delete the thread: its checkpoints, blobs and writes are erased and its row
    becomes a tombstone (see the module: stale writes of a run from before are refused).
    Returns whether a live thread was deleted (a missing one is no error)."""

    async def work(conn: AsyncConnection) -> bool:
        return await tombstone(conn, ledger, thread_id, clock.utc_now())

    async def settle(conn: AsyncConnection) -> bool | None:
        row = (
            await conn.execute(select(_threads.c.deleted_at).where(_threads.c.id == thread_id))
        ).one_or_none()
        return None if row is None or row.deleted_at is None else True

    result: bool = await ledger.write(work, settle=settle, write_id=thread_id, first_writes=True)
    return result


async def _again(conn: AsyncConnection) -> None:
    """The settle of an idempotent write: run it again (what it did, done twice, is
    what it did once)."""
    return None


async def runs_threads(ledger: Ledger, run_ids: Sequence[str]) -> list[str]:
    """The threads holding checkpoints of ``run_ids`` (read on the ``run_id`` index)."""

    async def work(conn: AsyncConnection) -> list[str]:
        found = await conn.scalars(
            select(_checkpoints.c.thread_id).where(_checkpoints.c.run_id.in_(run_ids)).distinct()
        )
        return sorted(found)

    result: list[str] = await ledger.read(work)
    return result


async def delete_runs(ledger: Ledger, thread_id: str, run_ids: Sequence[str]) -> int:
    """Delete the thread's checkpoints of ``run_ids`` and their writes, in one
    transaction under the thread's lock; the blobs stay (other checkpoints may refer to
    them: :func:`keep_latest` frees those no kept checkpoint refers to). Idempotent, so
    a lost COMMIT is run again. Returns how many checkpoints it deleted."""
    of_runs = and_(_checkpoints.c.thread_id == thread_id, _checkpoints.c.run_id.in_(run_ids))

    async def work(conn: AsyncConnection) -> int:
        await lock_thread(conn, ledger, thread_id, clock.utc_now())
        doomed = (
            await conn.execute(
                select(_checkpoints.c.checkpoint_ns, _checkpoints.c.checkpoint_id).where(of_runs)
            )
        ).all()
        if not doomed:
            return 0
        keys = [(thread_id, ns, checkpoint_id) for ns, checkpoint_id in doomed]
        await conn.execute(
            delete(_writes).where(
                tuple_(_writes.c.thread_id, _writes.c.checkpoint_ns, _writes.c.checkpoint_id).in_(keys)
            )
        )
        await conn.execute(delete(_checkpoints).where(of_runs))
        return len(doomed)

    result: int = await ledger.write(work, settle=_again, first_writes=True)
    return result


class DeltaThread(NotImplementedError):
    """keep_latest cannot prune a thread whose graph uses a ``DeltaChannel``."""


async def keep_latest(ledger: Ledger, thread_id: str, referenced: Wanted) -> int:
    """Keep only the latest checkpoint of each of the thread's namespaces, in one
    transaction under the thread's lock: the older checkpoints go with their writes
    (writes of a checkpoint above the latest, saved before their checkpoint, stay), and
    the blobs that no kept checkpoint refers to (``referenced``: the saver's decode);
    a kept checkpoint's parent link is cleared. Idempotent. Returns how many checkpoints
    it deleted.

    Raises:
        DeltaThread: the thread's metadata records a ``DeltaChannel``, whose values
            its older checkpoints' writes rebuild (as LangGraph's PostgreSQL saver).
    """

    async def work(conn: AsyncConnection) -> int:
        await lock_thread(conn, ledger, thread_id, clock.utc_now())
        delta = await conn.scalar(
            select(_checkpoints.c.checkpoint_id)
            .where(
                _checkpoints.c.thread_id == thread_id,
                _checkpoints.c.metadata_json.contains('"counters_since_delta_snapshot"', autoescape=True),
            )
            .limit(1)
        )
        if delta is not None:
            raise DeltaThread(f"keep_latest can't prune threads that use a DeltaChannel: {thread_id}")
        heads = (
            await conn.execute(
                select(_checkpoints.c.checkpoint_ns, func.max(_checkpoints.c.checkpoint_id))
                .where(_checkpoints.c.thread_id == thread_id)
                .group_by(_checkpoints.c.checkpoint_ns)
            )
        ).all()
        deleted = 0
        for checkpoint_ns, head in heads:
            older = and_(_checkpoint_key(thread_id, checkpoint_ns), _checkpoints.c.checkpoint_id < head)
            gone = await conn.execute(delete(_checkpoints).where(older))
            deleted += gone.rowcount
            await conn.execute(
                delete(_writes).where(
                    _writes.c.thread_id == thread_id,
                    _writes.c.checkpoint_ns == checkpoint_ns,
                    _writes.c.checkpoint_id < head,
                )
            )
            kept = (
                await conn.execute(
                    select(*_STORED).where(
                        _checkpoint_key(thread_id, checkpoint_ns), _checkpoints.c.checkpoint_id == head
                    )
                )
            ).one()
            await conn.execute(
                update(_checkpoints)
                .where(_checkpoint_key(thread_id, checkpoint_ns), _checkpoints.c.checkpoint_id == head)
                .values(parent_checkpoint_id=None)
            )
            needed = set(referenced(_stored(kept)))
            stored = (
                await conn.execute(
                    select(_blobs.c.channel, _blobs.c.version).where(
                        _blobs.c.thread_id == thread_id, _blobs.c.checkpoint_ns == checkpoint_ns
                    )
                )
            ).all()
            unused = [(channel, version) for channel, version in stored if (channel, version) not in needed]
            if unused:
                await conn.execute(
                    delete(_blobs).where(
                        _blobs.c.thread_id == thread_id,
                        _blobs.c.checkpoint_ns == checkpoint_ns,
                        tuple_(_blobs.c.channel, _blobs.c.version).in_(unused),
                    )
                )
        return deleted

    result: int = await ledger.write(work, settle=_again, first_writes=True)
    return result


# -- copy ------------------------------------------------------------------------------------


async def copy_thread(ledger: Ledger, source: str, target: str) -> int:
    """Copy every checkpoint, blob and write of ``source`` to ``target``, in one
    transaction holding both threads' locks (taken in id order): a row ``target`` holds
    already under the same key is kept. A copy into a tombstone starts its next
    generation (an explicit copy is no stale write). Idempotent. Returns how many
    checkpoints it copied; a missing ``source`` copies nothing and leaves ``target`` alone.
    """

    async def work(conn: AsyncConnection) -> int:
        now = clock.utc_now()
        exists = await conn.scalar(
            select(_checkpoints.c.checkpoint_id).where(_checkpoints.c.thread_id == source).limit(1)
        )
        if exists is None:
            return 0
        for thread_id in sorted({source, target}):
            await lock_thread(conn, ledger, thread_id, now)
        await conn.execute(update(_threads).where(_threads.c.id == target).values(deleted_at=None))
        copied = 0
        for table, key in (
            (_checkpoints, ("checkpoint_ns", "checkpoint_id")),
            (_blobs, ("checkpoint_ns", "channel", "version")),
            (_writes, ("checkpoint_ns", "checkpoint_id", "task_id", "idx")),
        ):
            held = {
                tuple(row)
                for row in await conn.execute(
                    select(*(table.c[name] for name in key)).where(table.c.thread_id == target)
                )
            }
            for row in (
                (await conn.execute(select(table).where(table.c.thread_id == source))).mappings().all()
            ):
                if tuple(row[name] for name in key) in held:
                    continue
                await conn.execute(insert(table).values({**row, "thread_id": target}))
                copied += table is _checkpoints
        return copied

    result: int = await ledger.write(work, settle=_again)
    return result
