"""LangGraph threads' lifecycle, on rows alone (no LangGraph import): list and show, delete
and purge, the rows of an export and their import, the counts of stats. Each is a plain
function of a :class:`chatledger.engine.Ledger`, for the session-kind registry to call.

Values stay as their saver's serializer wrote them (type tag and bytes): these
functions never decode a checkpoint, so they need neither LangGraph nor the key of an
encrypting serializer, and an export imports byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import clock
from ..engine import Ledger
from ..errors import SessionDeleted
from ..schema import (
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_threads_table,
    langgraph_writes_table,
)
from ..selection import PURGE_BATCH, Progress, Selection, count, purge
from . import rows

_threads = langgraph_threads_table
_checkpoints = langgraph_checkpoints_table
_blobs = langgraph_blobs_table
_writes = langgraph_writes_table

#: The thread's columns a purge checks again: every write moves ``version``.
_WRITTEN = ("version",)


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """A live thread as ``sessions list`` shows it: its checkpoints, its latest one in
    the root namespace (its id and metadata's ``step`` and ``source``) and the pending
    writes to that checkpoint."""

    thread_id: str
    generation: int
    created_at: datetime
    updated_at: datetime
    checkpoints: int
    namespaces: int
    latest_checkpoint_id: str | None
    latest_step: int | None
    latest_source: str | None
    pending_writes: int


@dataclass(frozen=True, slots=True)
class CheckpointSummary:
    """One checkpoint as ``sessions show`` lists it, values left encoded."""

    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    metadata: dict[str, Any]
    created_at: datetime
    #: The channels of its pending writes, in writes order (task path, task id, index).
    writes: list[str]


@dataclass(frozen=True, slots=True)
class ThreadCounts:
    """What stats counts of LangGraph's tables."""

    threads: int
    tombstones: int
    checkpoints: int
    blobs: int
    writes: int


@dataclass(slots=True)
class ThreadRows:
    """A thread's rows as an export carries them: the thread row (its generation and
    tombstone) and every checkpoint, blob and write row, each a mapping of its columns."""

    thread: dict[str, Any]
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    blobs: list[dict[str, Any]] = field(default_factory=list)
    writes: list[dict[str, Any]] = field(default_factory=list)


# -- list and show ---------------------------------------------------------------------------


async def _summaries(conn: AsyncConnection, found: Sequence[Any]) -> list[ThreadSummary]:
    summaries = []
    for thread in found:
        of_thread = _checkpoints.c.thread_id == thread.id
        totals = (
            await conn.execute(
                select(func.count(), func.count(func.distinct(_checkpoints.c.checkpoint_ns))).where(of_thread)
            )
        ).one()
        latest = (
            await conn.execute(
                select(_checkpoints.c.checkpoint_id, _checkpoints.c.metadata_json)
                .where(of_thread, _checkpoints.c.checkpoint_ns == "")
                .order_by(_checkpoints.c.checkpoint_id.desc())
                .limit(1)
            )
        ).one_or_none()
        metadata = {} if latest is None else _metadata(latest.metadata_json)
        pending = 0
        if latest is not None:
            pending = int(
                await conn.scalar(
                    select(func.count())
                    .select_from(_writes)
                    .where(
                        _writes.c.thread_id == thread.id,
                        _writes.c.checkpoint_ns == "",
                        _writes.c.checkpoint_id == latest.checkpoint_id,
                    )
                )
                or 0
            )
        step = metadata.get("step")
        source = metadata.get("source")
        summaries.append(
            ThreadSummary(
                thread.id,
                int(thread.generation),
                thread.created_at,
                thread.updated_at,
                int(totals[0]),
                int(totals[1]),
                None if latest is None else latest.checkpoint_id,
                step if isinstance(step, int) and not isinstance(step, bool) else None,
                source if isinstance(source, str) else None,
                pending,
            )
        )
    return summaries


def _metadata(text: str) -> dict[str, Any]:
    try:
        decoded = json.loads(text)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


_THREAD = (_threads.c.id, _threads.c.generation, _threads.c.created_at, _threads.c.updated_at)


async def list_threads(
    ledger: Ledger, *, limit: int, after: tuple[datetime, str] | None = None
) -> list[ThreadSummary]:
    """The live threads, most recently written first (``updated_at``, then id, both
    descending), at most ``limit``, after the position ``after`` (the last listed's
    ``(updated_at, thread_id)``), read on the activity index, in one snapshot."""
    query = select(*_THREAD).where(rows.LIVE)
    if after is not None:
        query = query.where(
            (_threads.c.updated_at < after[0])
            | and_(_threads.c.updated_at == after[0], _threads.c.id < after[1])
        )
    query = query.order_by(_threads.c.updated_at.desc(), _threads.c.id.desc()).limit(limit)

    async def work(conn: AsyncConnection) -> list[ThreadSummary]:
        return await _summaries(conn, (await conn.execute(query)).all())

    result: list[ThreadSummary] = await ledger.read(work)
    return result


async def find_thread(ledger: Ledger, thread_id: str) -> ThreadSummary | None:
    """The live thread ``thread_id``'s summary, or ``None``."""
    query = select(*_THREAD).where(_threads.c.id == thread_id, rows.LIVE)

    async def work(conn: AsyncConnection) -> ThreadSummary | None:
        found = await _summaries(conn, (await conn.execute(query)).all())
        return found[0] if found else None

    result: ThreadSummary | None = await ledger.read(work)
    return result


async def show_thread(ledger: Ledger, thread_id: str, *, limit: int) -> list[CheckpointSummary]:
    """The thread's newest ``limit`` checkpoints of every namespace (checkpoint id
    descending), each with its metadata and its pending writes' channels."""
    query = (
        select(
            _checkpoints.c.checkpoint_ns,
            _checkpoints.c.checkpoint_id,
            _checkpoints.c.parent_checkpoint_id,
            _checkpoints.c.metadata_json,
            _checkpoints.c.created_at,
        )
        .where(_checkpoints.c.thread_id == thread_id)
        .order_by(_checkpoints.c.checkpoint_id.desc(), _checkpoints.c.checkpoint_ns.desc())
        .limit(limit)
    )

    async def work(conn: AsyncConnection) -> list[CheckpointSummary]:
        found = (await conn.execute(query)).all()
        if not found:
            return []
        keys = [(thread_id, row.checkpoint_ns, row.checkpoint_id) for row in found]
        channels: dict[tuple[str, str], list[tuple[str, str, int, str]]] = {}
        for write in await conn.execute(
            select(
                _writes.c.checkpoint_ns,
                _writes.c.checkpoint_id,
                _writes.c.task_path,
                _writes.c.task_id,
                _writes.c.idx,
                _writes.c.channel,
            ).where(tuple_(_writes.c.thread_id, _writes.c.checkpoint_ns, _writes.c.checkpoint_id).in_(keys))
        ):
            channels.setdefault((write.checkpoint_ns, write.checkpoint_id), []).append(
                (write.task_path, write.task_id, int(write.idx), write.channel)
            )
        return [
            CheckpointSummary(
                row.checkpoint_ns,
                row.checkpoint_id,
                row.parent_checkpoint_id,
                _metadata(row.metadata_json),
                row.created_at,
                [channel for *_, channel in sorted(channels.get((row.checkpoint_ns, row.checkpoint_id), []))],
            )
            for row in found
        ]

    result: list[CheckpointSummary] = await ledger.read(work)
    return result


# -- delete and purge --------------------------------------------------------------------------


async def delete_thread(ledger: Ledger, thread_id: str) -> bool:
    """Delete the thread as the saver's ``adelete_thread`` does (a tombstone with its
    horizon); whether a live thread was deleted."""
    return await rows.delete_thread(ledger, thread_id)


async def purge_threads(
    ledger: Ledger, selection: Selection, *, size: int = PURGE_BATCH, progress: Progress | None = None
) -> int:
    """Delete the live threads ``selection`` holds (idle since its cutoff, and/or whose
    id starts with its prefix), each as :func:`delete_thread` does, in a transaction of
    its own that checks the selection and the thread's ``version`` as its page read
    them: a thread written to meanwhile is kept. Returns how many it deleted."""

    async def delete_one(thread_id: str, seen: Mapping[str, Any]) -> bool:
        selected = selection.where(_threads, ledger.backend)

        async def work(conn: AsyncConnection) -> bool:
            return await rows.tombstone(conn, ledger, thread_id, clock.utc_now(), seen, selected)

        async def settle(conn: AsyncConnection) -> bool | None:
            # Still live and as read: not committed (run again, deciding anew); else the
            # tombstone is this purge's or the thread was written to: either way, done.
            state = (
                await conn.execute(
                    select(_threads.c.deleted_at, _threads.c.version).where(_threads.c.id == thread_id)
                )
            ).one_or_none()
            if state is not None and state.deleted_at is None and state.version == seen["version"]:
                return None
            return state is not None and state.deleted_at is not None and state.version == seen["version"] + 1

        result: bool = await ledger.write(work, settle=settle, write_id=thread_id)
        return result

    return await purge(
        ledger,
        _threads,
        rows.LIVE,
        selection,
        delete_one,
        versions=_WRITTEN,
        key=("id",),
        size=size,
        progress=progress,
    )


async def count_selected(ledger: Ledger, selection: Selection) -> int:
    """How many live threads ``selection`` holds now (a purge's dry run)."""
    return await count(ledger, _threads, rows.LIVE, selection)


# -- export and import ------------------------------------------------------------------------


async def export_thread(ledger: Ledger, thread_id: str) -> ThreadRows | None:
    """The thread's rows (a tombstone's too: its id stays deleted where it is imported),
    in one snapshot; ``None`` when the id has no row."""

    async def work(conn: AsyncConnection) -> ThreadRows | None:
        thread = (
            (await conn.execute(select(_threads).where(_threads.c.id == thread_id))).mappings().one_or_none()
        )
        if thread is None:
            return None
        exported = ThreadRows(dict(thread))
        for table, into in (
            (_checkpoints, exported.checkpoints),
            (_blobs, exported.blobs),
            (_writes, exported.writes),
        ):
            into.extend(
                dict(row)
                for row in (
                    await conn.execute(select(table).where(table.c.thread_id == thread_id))
                ).mappings()
            )
        return exported

    result: ThreadRows | None = await ledger.read(work)
    return result


async def import_thread(ledger: Ledger, exported: ThreadRows) -> bool:
    """Write an exported thread, in one transaction under its thread's lock: into a
    thread id with no checkpoints (new, or a tombstone), the rows as exported; a thread
    holding checkpoints already is left alone (a re-run imports nothing twice). A
    tombstone exported stays one (its horizon carried over, never lowered). Returns
    whether it wrote the thread.

    Raises:
        SessionDeleted: a checkpoint of the export is of the instant of the horizon
            of a tombstone the target holds (or of its mark) or before: a deleted
            thread's checkpoints never come back.
    """
    thread = exported.thread
    thread_id = str(thread["id"])

    async def work(conn: AsyncConnection) -> bool:
        now = clock.utc_now()
        held = await rows.lock_thread(conn, ledger, thread_id, now)
        if await conn.scalar(
            select(_checkpoints.c.checkpoint_id).where(_checkpoints.c.thread_id == thread_id).limit(1)
        ):
            return False
        horizon = held.deleted_through
        instants = [rows.instant(str(row["checkpoint_id"])) for row in exported.checkpoints]
        if horizon is not None and any(at is not None and at <= horizon for at in instants):
            raise SessionDeleted(
                f"thread {thread_id!r} was deleted here; its deleted checkpoints are not imported"
            )
        theirs = thread.get("deleted_through")
        highest = max((value for value in (horizon, theirs) if value is not None), default=None)
        await conn.execute(
            update(_threads)
            .where(_threads.c.id == thread_id)
            .values(
                generation=max(int(thread.get("generation") or 1), held.generation),
                deleted_through=highest,
                deleted_at=thread.get("deleted_at") if not exported.checkpoints else None,
                created_at=thread.get("created_at") or now,
            )
        )
        for table, items in (
            (_checkpoints, exported.checkpoints),
            (_blobs, exported.blobs),
            (_writes, exported.writes),
        ):
            for item in items:
                await conn.execute(insert(table).values({**item, "thread_id": thread_id}))
        return True

    async def again(conn: AsyncConnection) -> None:
        return None  # idempotent: a lost COMMIT runs it again, which then writes nothing

    result: bool = await ledger.write(work, settle=again, first_writes=True)
    return result


# -- stats ---------------------------------------------------------------------------------------


async def counts(ledger: Ledger) -> ThreadCounts:
    """The live threads, tombstones, checkpoints, blobs and writes, in one snapshot."""

    async def work(conn: AsyncConnection) -> ThreadCounts:
        live = int(await conn.scalar(select(func.count()).select_from(_threads).where(rows.LIVE)) or 0)
        every = int(await conn.scalar(select(func.count()).select_from(_threads)) or 0)
        sizes = [
            int(await conn.scalar(select(func.count()).select_from(table)) or 0)
            for table in (_checkpoints, _blobs, _writes)
        ]
        return ThreadCounts(live, every - live, *sizes)

    result: ThreadCounts = await ledger.read(work)
    return result
