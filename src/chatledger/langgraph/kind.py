"""LangGraph's threads as the tools handle them: :class:`Operations` of the ``langgraph``
kind (:data:`chatledger.kinds.LANGGRAPH`), over the thread functions of
:mod:`.threads`, which read rows alone: no value is decoded, so neither LangGraph nor
the key of an encrypting serializer is needed to list, show, delete or purge.

``sessions list`` shows each live thread with its checkpoints, its latest checkpoint
of the root namespace (its id, step and source) and the pending writes to it;
``sessions show`` adds the newest checkpoints of every namespace with their metadata
and their pending writes' channels.

**Moving in** (``chatledger import --langgraph DSN``) reads LangGraph's own savers'
tables (:class:`SaverTables`), two layouts:

- ``AsyncPostgresSaver``'s and ``AIOMySQLSaver``'s ``checkpoints`` (the checkpoint as
  JSON, its primitive channel values inline), ``checkpoint_blobs`` and
  ``checkpoint_writes``: the checkpoint becomes the serializer's bytes, the blobs and
  writes are carried byte for byte;
- ``AsyncSqliteSaver``'s ``checkpoints`` (the whole checkpoint, serialized) and
  ``writes``: each checkpoint is split as :class:`~chatledger.langgraph.LedgerSaver`
  splits it, its non-primitive channel values becoming the blobs of their versions.

Each thread becomes the rows the saver would have written, its times the
checkpoints' own (``ts``), so a re-run yields the same rows: a thread imported before
is found identical, one written to since is left alone. Checkpoints are written with
LangGraph's default serializer (``JsonPlusSerializer``); values the source's
serializer wrote (blobs, writes) stay as it wrote them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, LargeBinary, MetaData, String, Table, Text, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import validate
from ..errors import ConfigurationError
from ..kinds import LANGGRAPH_OWN_TABLES, Field, Found, Listing, Scope
from ..kinds.on_ledger import OnLedger
from ..kinds.showing import compact, cut, heading, when
from ..selection import Progress, Selection
from . import threads


def _latest(summary: threads.ThreadSummary) -> str:
    if summary.latest_checkpoint_id is None:
        return "-"
    parts = [summary.latest_checkpoint_id]
    if summary.latest_step is not None:
        parts.append(f"step {summary.latest_step}")
    if summary.latest_source is not None:
        parts.append(summary.latest_source)
    return ", ".join(parts)


class Operations(OnLedger):
    """LangGraph's threads of one database (:class:`chatledger.kinds.Operations`)."""

    async def listing(self, limit: int) -> Listing:
        """The ``limit`` live threads written to last, newest first."""
        found = [
            {
                "id": summary.thread_id,
                "checkpoints": summary.checkpoints,
                "latest_checkpoint_id": summary.latest_checkpoint_id,
                "latest": _latest(summary),
                "pending_writes": summary.pending_writes,
                "created_at": summary.created_at.isoformat(),
                "updated_at": summary.updated_at.isoformat(),
            }
            for summary in await threads.list_threads(self.ledger, limit=limit)
        ]
        fields = (
            Field("id", "thread"),
            Field("checkpoints", "checkpoints", right=True),
            Field("latest", "latest checkpoint"),
            Field("pending_writes", "pending writes", right=True),
            Field("updated_at", "last active (UTC)", when=True),
        )
        return Listing("langgraph sessions (threads), most recently written first", fields, found)

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        """The thread, then its newest ``messages`` checkpoints of every namespace."""
        summary = await threads.find_thread(self.ledger, session_id)
        if summary is None:
            return []
        shown = await threads.show_thread(self.ledger, session_id, limit=messages)
        lines = [
            f"langgraph thread {summary.thread_id}",
            f"  {'checkpoints':<16}{summary.checkpoints} in {summary.namespaces} namespace(s)",
            f"  {'latest':<16}{_latest(summary)}",
            f"  {'pending writes':<16}{summary.pending_writes}",
            f"  {'generation':<16}{summary.generation}",
            f"  {'created':<16}{when(summary.created_at)} UTC",
            f"  {'last active':<16}{when(summary.updated_at)} UTC",
            heading("checkpoints", summary.checkpoints, len(shown)),
        ]
        for checkpoint in shown:
            namespace = checkpoint.checkpoint_ns or "(root)"
            step = checkpoint.metadata.get("step")
            source = checkpoint.metadata.get("source")
            lines.append(
                f"  {checkpoint.checkpoint_id}  {namespace}  step {compact(step)}  {compact(source)}"
                f"  {when(checkpoint.created_at)} UTC"
            )
            if checkpoint.parent_checkpoint_id is not None:
                lines.append(f"    parent {checkpoint.parent_checkpoint_id}")
            if checkpoint.writes:
                lines.append(f"    pending writes: {cut(', '.join(checkpoint.writes))}")
        return [lines]

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        summary = await threads.find_thread(self.ledger, session_id)
        return [] if summary is None else [Found((summary.thread_id,), summary.checkpoints)]

    async def delete(self, found: Found) -> bool:
        return await threads.delete_thread(self.ledger, found.id)

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        return await threads.purge_threads(self.ledger, selection, size=size, progress=progress)

    @classmethod
    async def source(cls, conn: AsyncConnection, options: Mapping[str, str]) -> SaverTables:
        """LangGraph's own saver's tables on ``conn``, checked (and every thread id with
        them) before anything is read."""
        layout, task_path = await conn.run_sync(_layout)
        tables = _tables(layout, task_path)
        found = tables["checkpoints"]
        for (thread_id,) in await conn.execute(select(found.c.thread_id).distinct()):
            validate.identifier(thread_id, f"thread_id {thread_id!r}")
        return SaverTables(conn, layout, tables)


#: The tables and columns of the two layouts LangGraph's own savers write: AsyncPostgresSaver's
#: (and AIOMySQLSaver's), and AsyncSqliteSaver's.
BLOBS_LAYOUT = LANGGRAPH_OWN_TABLES
INLINE_LAYOUT: Mapping[str, frozenset[str]] = {
    "checkpoints": frozenset(
        {
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "type",
            "checkpoint",
            "metadata",
        }
    ),
    "writes": frozenset(
        {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value"}
    ),
}


def _layout(conn: Connection) -> tuple[str, bool]:
    """``blobs`` (AsyncPostgresSaver's, AIOMySQLSaver's) or ``inline`` (AsyncSqliteSaver's),
    and whether its writes have a ``task_path`` (an older saver's have none)."""
    found = inspect(conn)
    names = set(found.get_table_names())
    if "langgraph_threads" in names and "checkpoints" not in names:
        raise ConfigurationError(
            "the source is a chatledger database (langgraph_threads), not one LangGraph's own saver wrote: "
            "give the DSN of the database its saver wrote (chatledger copy moves chatledger's own)"
        )
    for name, layout in (("blobs", BLOBS_LAYOUT), ("inline", INLINE_LAYOUT)):
        if names >= set(layout) and all(
            {column["name"] for column in found.get_columns(table)} >= wanted
            for table, wanted in layout.items()
        ):
            writes = next(table for table in layout if table.endswith("writes"))
            return name, "task_path" in {column["name"] for column in found.get_columns(writes)}
    raise ConfigurationError(
        "the source has neither AsyncPostgresSaver's (or AIOMySQLSaver's) checkpoints, checkpoint_blobs and "
        "checkpoint_writes tables nor AsyncSqliteSaver's checkpoints and writes: it is not a database "
        "LangGraph's own saver wrote (run its setup() migrations first if it is an older one)"
    )


def _tables(layout: str, task_path: bool) -> dict[str, Table]:
    """The source's tables, as far as the import reads them."""
    metadata = MetaData()
    key = [Column(name, String) for name in ("thread_id", "checkpoint_ns")]
    path = [Column("task_path", String)] if task_path else []
    if layout == "blobs":
        return {
            "checkpoints": Table(
                "checkpoints",
                metadata,
                *(Column(column.name, String) for column in key),
                Column("checkpoint_id", String),
                Column("parent_checkpoint_id", String),
                Column("checkpoint", Text),
                Column("metadata", Text),
            ),
            "blobs": Table(
                "checkpoint_blobs",
                metadata,
                *(Column(column.name, String) for column in key),
                Column("channel", String),
                Column("version", String),
                Column("type", String),
                Column("blob", LargeBinary),
            ),
            "writes": Table(
                "checkpoint_writes",
                metadata,
                *(Column(column.name, String) for column in key),
                Column("checkpoint_id", String),
                Column("task_id", String),
                Column("idx", String),
                Column("channel", String),
                Column("type", String),
                Column("blob", LargeBinary),
                *path,
            ),
        }
    return {
        "checkpoints": Table(
            "checkpoints",
            metadata,
            *(Column(column.name, String) for column in key),
            Column("checkpoint_id", String),
            Column("parent_checkpoint_id", String),
            Column("type", String),
            Column("checkpoint", LargeBinary),
            Column("metadata", LargeBinary),
        ),
        "writes": Table(
            "writes",
            metadata,
            *(Column(column.name, String) for column in key),
            Column("checkpoint_id", String),
            Column("task_id", String),
            Column("idx", String),
            Column("channel", String),
            Column("type", String),
            Column("value", LargeBinary),
            *path,
        ),
    }


def _json(value: Any) -> Any:
    """A JSON column as read: decoded by the driver already (psycopg), or its text or bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8")
    return json.loads(value) if isinstance(value, str) else value


def _instant(checkpoint: Mapping[str, Any]) -> datetime | None:
    try:
        found = datetime.fromisoformat(str(checkpoint.get("ts")))
    except ValueError:
        return None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found.astimezone(UTC)


#: What a moved-in row's ``write_id`` holds: no call of a saver wrote it.
MOVED_IN = "moved-in"


class SaverTables:
    """LangGraph's own saver's tables at the source, read a thread at a time
    (:class:`chatledger.kinds.Source`)."""

    def __init__(self, conn: AsyncConnection, layout: str, tables: Mapping[str, Table]) -> None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.conn, self.layout, self.tables = conn, layout, tables
        self.serde = JsonPlusSerializer()
        #: Checkpoints whose checkpoint could not be read: skipped.
        self.skipped = 0

    async def rows(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        from .saver import _metadata_json, _primitive

        found = self.tables["checkpoints"]
        thread_ids = [
            row[0]
            for row in await self.conn.execute(
                select(found.c.thread_id).distinct().order_by(found.c.thread_id)
            )
        ]
        for thread_id in thread_ids:
            checkpoints: list[dict[str, Any]] = []
            blobs: dict[tuple[str, str, str], dict[str, Any]] = {}
            instants: dict[tuple[str, str], datetime] = {}
            for row in await self.conn.execute(
                select(found)
                .where(found.c.thread_id == thread_id)
                .order_by(found.c.checkpoint_ns, found.c.checkpoint_id)
            ):
                try:
                    if self.layout == "blobs":
                        checkpoint = dict(_json(row.checkpoint))
                        inline = checkpoint
                    else:
                        checkpoint = dict(self.serde.loads_typed((row.type, bytes(row.checkpoint))))
                        values = dict(checkpoint.get("channel_values") or {})
                        versions = checkpoint.get("channel_versions") or {}
                        for channel, value in values.items():
                            if not _primitive(value) and channel in versions:
                                kind, data = self.serde.dumps_typed(value)
                                blobs.setdefault(
                                    (row.checkpoint_ns, channel, str(versions[channel])),
                                    {"value_type": kind, "value_blob": data},
                                )
                        inline = {
                            **checkpoint,
                            "channel_values": {
                                name: value for name, value in values.items() if _primitive(value)
                            },
                        }
                    metadata = _json(row.metadata) if row.metadata is not None else {}
                    kind, data = self.serde.dumps_typed(inline)
                except (TypeError, ValueError):
                    self.skipped += 1
                    continue
                at = _instant(checkpoint) or datetime(1970, 1, 1, tzinfo=UTC)
                instants[(row.checkpoint_ns, row.checkpoint_id)] = at
                run_id = metadata.get("run_id") if isinstance(metadata, dict) else None
                checkpoints.append(
                    {
                        "thread_id": thread_id,
                        "checkpoint_ns": row.checkpoint_ns,
                        "checkpoint_id": row.checkpoint_id,
                        "parent_checkpoint_id": row.parent_checkpoint_id,
                        "checkpoint_type": kind,
                        "checkpoint_blob": data,
                        "metadata_json": _metadata_json(metadata if isinstance(metadata, dict) else {}),
                        "run_id": run_id if isinstance(run_id, str) and run_id else None,
                        "write_id": MOVED_IN,
                        "created_at": at,
                    }
                )
            if not checkpoints:
                continue
            first, last = min(instants.values()), max(instants.values())
            yield (
                "langgraph_thread",
                {
                    "id": thread_id,
                    "generation": 1,
                    "version": 1,
                    "deleted_through": None,
                    "created_at": first,
                    "updated_at": last,
                    "deleted_at": None,
                },
            )
            for checkpoint in checkpoints:
                yield "langgraph_checkpoint", checkpoint
            if self.layout == "blobs":
                table = self.tables["blobs"]
                for row in await self.conn.execute(
                    select(table)
                    .where(table.c.thread_id == thread_id)
                    .order_by(table.c.checkpoint_ns, table.c.channel, table.c.version)
                ):
                    blobs[(row.checkpoint_ns, row.channel, row.version)] = {
                        "value_type": row.type,
                        "value_blob": None if row.blob is None else bytes(row.blob),
                    }
            for (checkpoint_ns, channel, version), blob in sorted(blobs.items()):
                yield (
                    "langgraph_blob",
                    {
                        "thread_id": thread_id,
                        "checkpoint_ns": checkpoint_ns,
                        "channel": channel,
                        "version": version,
                        **blob,
                        "created_at": first,
                    },
                )
            table = self.tables["writes"]
            value = table.c["blob" if self.layout == "blobs" else "value"]
            for row in await self.conn.execute(
                select(table)
                .where(table.c.thread_id == thread_id)
                .order_by(table.c.checkpoint_ns, table.c.checkpoint_id, table.c.task_id, table.c.idx)
            ):
                data = row._mapping[value.name]
                yield (
                    "langgraph_write",
                    {
                        "thread_id": thread_id,
                        "checkpoint_ns": row.checkpoint_ns,
                        "checkpoint_id": row.checkpoint_id,
                        "task_id": row.task_id,
                        "idx": int(row.idx),
                        "task_path": row._mapping.get("task_path") or "",
                        "channel": row.channel,
                        "value_type": row.type or "",
                        "value_blob": None if data is None else bytes(data),
                        "write_id": MOVED_IN,
                        "created_at": instants.get((row.checkpoint_ns, row.checkpoint_id), last),
                    },
                )
