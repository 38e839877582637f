"""``chatledger export``: every session of a database as export records.

The export reads one consistent snapshot (one read transaction) with server-side
cursors, a page of sessions at a time, so memory does not grow with the database.
Deleted sessions' tombstones (rows a later revision keeps so that no late writer
revives an id) are rows like any other and travel too.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO, cast

from rich.console import Console
from sqlalchemy import Select, Table, func, select, tuple_
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import __version__, marks, migrate
from ..dsn import resolve_dsn, sqlite_file
from ..engine import Ledger
from ..kinds import Checkpointed, Grouped, Layout, Log, Rows, SessionKind, registered
from .importer import database_error
from .progress import Tracker, progress
from .rows import FORMAT, FORMAT_VERSION, MARKS, Counts, Record, RowCodec, _instant, progress_records, tables

#: Sessions read per page by the export.
PAGE = 500
#: Rows fetched per round trip from a server-side cursor.
YIELD_PER = 1000


def _in_order() -> list[tuple[SessionKind, Layout]]:
    """Every kind's layouts in the order the export writes them: the kinds whose records
    are in every file first, then (after the marks) those a file may lack, so that an
    importer from before those travelled imports everything else before it stops at the
    first of their records."""
    first = [
        (kind, layout) for kind in registered() if not kind.optional_in_export for layout in kind.records
    ]
    later = [(kind, layout) for kind in registered() if kind.optional_in_export for layout in kind.records]
    return [*first, *later]


def _sessions_of(kind: SessionKind) -> Table:
    store = kind.tombstone_rows()
    return store.table


def _shared(kind: SessionKind, layout: Rows, ids: Sequence[str] | None) -> Select[Any]:
    """The rows of state the kind's sessions share, in key order: all, or with ``ids``
    those of the scopes (ADK's apps, and users) of the kind's sessions chosen."""
    table = layout.table
    statement = select(table).order_by(*(table.c[name] for name in layout.key))
    if ids is None:
        return statement
    sessions = _sessions_of(kind)
    chosen = select(*(sessions.c[name] for name in layout.key)).where(sessions.c.id.in_(sorted(set(ids))))
    columns = [table.c[name] for name in layout.key]
    return statement.where(tuple_(*columns).in_(chosen) if len(columns) > 1 else columns[0].in_(chosen))


async def _count(conn: AsyncConnection, ids: Sequence[str] | None) -> Counts:
    def where(column: Any) -> Any:
        return column.in_(ids) if ids is not None else True

    async def rows(table: Table, column: Any) -> int:
        return int(await conn.scalar(select(func.count()).select_from(table).where(where(column))) or 0)

    counts: Counts = {}
    for kind, layout in [(owner, layout) for owner in registered() for layout in owner.records]:
        found: dict[str, int]
        if isinstance(layout, Checkpointed):
            found = {
                layout.count: await rows(layout.sessions, layout.sessions.c.id),
                layout.entries_count: await rows(layout.entries, layout.entries.c.session_id),
                layout.checkpoints_count: await rows(layout.checkpoints, layout.checkpoints.c.session_id),
            }
        elif isinstance(layout, Log):
            entries = layout.entries.c[layout.entry_key[-1]]
            found = {
                layout.count: await rows(layout.sessions, layout.sessions.c[layout.key[-1]]),
                layout.entries_count: await rows(layout.entries, entries),
            }
        elif isinstance(layout, Grouped):
            found = {layout.count: await rows(layout.sessions, layout.sessions.c.id)}
            for part in layout.parts:
                found[part.count] = await rows(part.table, part.table.c[layout.session_column])
        elif layout.sessions:
            found = {layout.count: await rows(layout.table, layout.table.c[layout.key[-1]])}
        else:
            subquery = _shared(kind, layout, ids).subquery()
            found = {layout.count: int(await conn.scalar(select(func.count()).select_from(subquery)) or 0)}
        for name, value in found.items():
            counts[name] = counts.get(name, 0) + value
    return counts


async def _log_records(
    conn: AsyncConnection, store: Log, codecs: Mapping[str, RowCodec], ids: Sequence[str] | None
) -> AsyncIterator[Record]:
    """A session block per counter row, in key order: the row, its entries in sequence
    order (a server-side cursor each), its end record."""
    s, e = store.sessions, store.entries
    order = [s.c[name] for name in store.key]
    after: tuple[Any, ...] | None = None
    while True:
        statement = select(s).order_by(*order).limit(PAGE)
        if ids is not None:
            statement = statement.where(s.c[store.key[-1]].in_(sorted(set(ids))))
        if after is not None:
            statement = statement.where(store.after(after))
        page = list(await conn.execute(statement))
        if not page:
            return
        for row in page:
            key = store.key_of(row._mapping)
            yield {"type": store.head, "row": codecs[store.head].encode(row._mapping)}
            entries = 0
            stream = await conn.stream(
                select(e)
                .where(store.of_session(key))
                .order_by(e.c.sequence)
                .execution_options(yield_per=YIELD_PER)
            )
            async for partition in stream.partitions():
                for entry in partition:
                    entries += 1
                    yield {"type": store.entry, "row": codecs[store.entry].encode(entry._mapping)}
            yield store.end_record(key, entries)
        after = store.key_of(page[-1]._mapping)


async def _grouped_records(
    conn: AsyncConnection, layout: Grouped, codecs: Mapping[str, RowCodec], ids: Sequence[str] | None
) -> AsyncIterator[Record]:
    """A session block per session row, in id order: the row, each part's rows in their
    key order (a server-side cursor each), its end record."""
    async for page in _session_pages(conn, layout.sessions, ids):
        for row in page:
            key = layout.key_of(row._mapping)
            yield {"type": layout.head, "row": codecs[layout.head].encode(row._mapping)}
            counted: dict[str, int] = {}
            for part in layout.parts:
                table = part.table
                order = [column for column in table.primary_key.columns]
                stream = await conn.stream(
                    select(table)
                    .where(layout.of_session(part, key))
                    .order_by(*order)
                    .execution_options(yield_per=YIELD_PER)
                )
                counted[part.count] = 0
                async for partition in stream.partitions():
                    for found in partition:
                        counted[part.count] += 1
                        yield {"type": part.record, "row": codecs[part.record].encode(found._mapping)}
            yield layout.end_record(key, counted)


async def _session_pages(
    conn: AsyncConnection, s: Table, ids: Sequence[str] | None
) -> AsyncIterator[list[Any]]:
    """The session rows of ``s`` in pages of :data:`PAGE`, in id order (the database's)."""
    if ids is not None:
        unique = sorted(set(ids))
        for start in range(0, len(unique), PAGE):
            chunk = unique[start : start + PAGE]
            rows = list(await conn.execute(select(s).where(s.c.id.in_(chunk)).order_by(s.c.id)))
            if rows:
                yield rows
        return
    after: str | None = None
    while True:
        statement = select(s).order_by(s.c.id).limit(PAGE)
        if after is not None:
            statement = statement.where(s.c.id > after)
        rows = list(await conn.execute(statement))
        if not rows:
            return
        yield rows
        after = rows[-1].id


def _opening(
    layout: Checkpointed, codecs: Mapping[str, RowCodec], row: Any, snapshots: Mapping[str, list[Any]]
) -> Iterator[Record]:
    """A session's first records: its counter row, then its checkpoints."""
    yield {"type": layout.head, "row": codecs[layout.head].encode(row._mapping)}
    for snapshot in snapshots.get(row.id, ()):
        yield {"type": layout.checkpoint, "row": codecs[layout.checkpoint].encode(snapshot._mapping)}


def _closing(layout: Checkpointed, row: Any, messages: int, snapshots: Mapping[str, list[Any]]) -> Record:
    """A session's end record."""
    checkpoints = len(snapshots.get(row.id, ()))
    return {"type": layout.end, "id": row.id, "snapshots": checkpoints, "messages": messages}


async def _checkpointed(
    conn: AsyncConnection, layout: Checkpointed, codecs: Mapping[str, RowCodec], ids: Sequence[str] | None
) -> AsyncIterator[Record]:
    """Each session's records: its counter row, checkpoints, raw messages and end, a
    page of sessions at a time, the messages through a server-side cursor."""
    r, v = layout.entries, layout.checkpoints
    async for page in _session_pages(conn, layout.sessions, ids):
        page_ids = [row.id for row in page]
        members = set(page_ids)
        if ids is not None:
            in_page_r, in_page_v = r.c.session_id.in_(page_ids), v.c.session_id.in_(page_ids)
        else:
            in_page_r = r.c.session_id.between(page_ids[0], page_ids[-1])
            in_page_v = v.c.session_id.between(page_ids[0], page_ids[-1])
        snapshots: dict[str, list[Any]] = {}
        for snapshot in await conn.execute(select(v).where(in_page_v).order_by(v.c.session_id, v.c.version)):
            if snapshot.session_id in members:
                snapshots.setdefault(snapshot.session_id, []).append(snapshot)
        pending = iter(page)
        current: Any = None
        messages = 0
        stream = await conn.stream(
            select(r)
            .where(in_page_r)
            .order_by(r.c.session_id, r.c.sequence)
            .execution_options(yield_per=YIELD_PER)
        )
        async for partition in stream.partitions():
            for message in partition:
                if message.session_id not in members:
                    continue  # a message without a session row (edited by hand): not part of any session
                while current is None or current.id != message.session_id:
                    if current is not None:
                        yield _closing(layout, current, messages, snapshots)
                    current, messages = next(pending), 0
                    for record in _opening(layout, codecs, current, snapshots):
                        yield record
                messages += 1
                yield {"type": layout.entry, "row": codecs[layout.entry].encode(message._mapping)}
        if current is not None:
            yield _closing(layout, current, messages, snapshots)
        for row in pending:
            for record in _opening(layout, codecs, row, snapshots):
                yield record
            yield _closing(layout, row, 0, snapshots)


async def _rows(
    conn: AsyncConnection,
    kind: SessionKind,
    layout: Rows,
    codecs: Mapping[str, RowCodec],
    ids: Sequence[str] | None,
) -> AsyncIterator[Record]:
    """One record per row, in key order."""
    if layout.sessions:
        table = layout.table
        statement = select(table).order_by(*(table.c[name] for name in layout.key))
        if ids is not None:
            statement = statement.where(table.c[layout.key[-1]].in_(sorted(set(ids))))
        async for partition in (
            await conn.stream(statement.execution_options(yield_per=YIELD_PER))
        ).partitions():
            for row in partition:
                yield {"type": layout.record, "row": codecs[layout.record].encode(row._mapping)}
        return
    for row in await conn.execute(_shared(kind, layout, ids)):
        yield {"type": layout.record, "row": codecs[layout.record].encode(row._mapping)}


def _records(
    conn: AsyncConnection,
    kind: SessionKind,
    layout: Layout,
    codecs: Mapping[str, RowCodec],
    ids: Sequence[str] | None,
) -> AsyncIterator[Record]:
    if isinstance(layout, Checkpointed):
        return _checkpointed(conn, layout, codecs, ids)
    if isinstance(layout, Log):
        return _log_records(conn, layout, codecs, ids)
    if isinstance(layout, Grouped):
        return _grouped_records(conn, layout, codecs, ids)
    return _rows(conn, kind, layout, codecs, ids)


def _tally(layout: Layout, record: Record, total: Counts) -> None:
    """Add a record to the running totals of the end record."""
    kind = record.get("type")
    if isinstance(layout, Checkpointed):
        if kind == layout.end:
            total[layout.count] += 1
            total[layout.entries_count] += record["messages"]
            total[layout.checkpoints_count] += record["snapshots"]
    elif isinstance(layout, Log):
        if kind == layout.end:
            total[layout.count] += 1
            total[layout.entries_count] += record[layout.entries_name]
    elif isinstance(layout, Grouped):
        if kind == layout.end:
            total[layout.count] += 1
            for part in layout.parts:
                total[part.count] += record[part.count]
    else:
        total[layout.count] += 1


async def export_records(conn: AsyncConnection, ids: Sequence[str] | None = None) -> AsyncIterator[Record]:
    """Every record of an export of the database on ``conn``, header first.

    ``conn`` must be inside one read transaction, so that the export is one
    consistent snapshot. ``ids`` limits it to the sessions of those ids, of every kind
    (and the state their scopes share). Entries stream through a server-side cursor,
    a page of sessions at a time; nothing grows with the size of the database.
    """
    codecs = {record: RowCodec(table) for record, table in tables().items()}
    mark_codec = RowCodec(MARKS)
    counts = await _count(conn, ids)
    revision = await conn.run_sync(migrate.current_revision)
    yield {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "chatledger": __version__,
        "revision": revision,
        "backend": conn.dialect.name,
        "exported_at": _instant(datetime.now(UTC)),
        "tables": {
            **{table.name: list(codecs[record].columns) for record, table in tables().items()},
            MARKS.name: list(mark_codec.columns),
        },
        "counts": counts,
    }
    total: Counts = dict.fromkeys(counts, 0)
    marked = False
    for kind, layout in _in_order():
        if kind.optional_in_export and not marked:
            marked = True
            async for record in _mark_records(conn, mark_codec, ids):
                yield record
        async for record in _records(conn, kind, layout, codecs, ids):
            _tally(layout, record, total)
            yield record
    if not marked:
        async for record in _mark_records(conn, mark_codec, ids):
            yield record
    yield {"type": "end", **total}


async def _mark_records(
    conn: AsyncConnection, mark_codec: RowCodec, ids: Sequence[str] | None
) -> AsyncIterator[Record]:
    """The marks of purged tombstones (of the ids asked for: by their digests), so that
    a copy numbers a purged id on as the source would, never from 1 again."""
    statement = select(MARKS).order_by(MARKS.c.store, MARKS.c.id_digest)
    if ids is not None:
        statement = statement.where(MARKS.c.id_digest.in_(sorted({marks.digest(id) for id in ids})))
    for row in await conn.execute(statement):
        yield {"type": "mark", "row": mark_codec.encode(row._mapping)}


def _dump(record: Record) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def open_source(dsn: str | URL | None) -> Ledger:
    """The ledger an export reads: never upgraded by it (an export changes nothing).

    Raises:
        ValueError: a SQLite file that does not exist.
    """
    url = resolve_dsn(dsn)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise ValueError(f"no such file: {path}")
    return Ledger(url, auto_upgrade=False)


async def export(
    dsn: str | URL | None,
    output: TextIO,
    *,
    ids: Sequence[str] | None = None,
    console: Console | None = None,
) -> Counts:
    """Write an export of the database ``dsn`` names to ``output``; return what it holds.

    Raises:
        SchemaNotReady: the database is not at this chatledger's head revision.
        ValueError: a SQLite file that does not exist.
        StorageUnavailable, ChatledgerError: a database error met reading it (see
            :func:`.importer.database_error`).
        OSError: writing ``output`` failed.
    """
    ledger = open_source(dsn)
    try:
        await ledger.ensure_ready()
        bars = progress(console) if console is not None else None
        tracker = Tracker(bars)
        entries, ends = progress_records()
        last: Record = {}
        async with ledger.engine.connect() as conn:
            conn = await conn.execution_options(**ledger.backend.snapshot_read)
            async with conn.begin():
                with bars or contextlib.nullcontext():
                    messages = 0
                    async for record in export_records(conn, ids):
                        output.write(_dump(record))
                        kind = record.get("type")
                        if kind is None:
                            tracker.start(record["counts"])
                        elif kind in entries:
                            messages += 1
                            if messages == YIELD_PER:
                                tracker.advance(messages=messages)
                                messages = 0
                        elif kind in ends:
                            tracker.advance(sessions=1, messages=messages)
                            messages = 0
                        last = record
        output.flush()
        return {key: value for key, value in last.items() if key != "type"}
    except DBAPIError as error:
        raise database_error(ledger, error) from error
    finally:
        await ledger.close()


@contextlib.contextmanager
def open_output(path: str | None) -> Iterator[TextIO]:
    """The export's destination: a file (gzip-compressed when it ends in ``.gz``), or
    stdout (``None``, ``-``).

    The file is opened (created or truncated) at the export's first write, after the
    database was reached and its schema checked: an export refused there (a wrong DSN,
    a database not migrated) leaves a file already at ``path`` as it was. One that
    fails later has truncated it, as a shell's ``>`` would.
    """
    if path is None or path == "-":
        yield sys.stdout
        return

    def opened() -> TextIO:
        if path.endswith(".gz"):
            return gzip.open(path, "wt", encoding="utf-8", newline="\n")
        return open(path, "w", encoding="utf-8", newline="\n")

    deferred = _OpenedOnWrite(opened)
    try:
        yield cast(TextIO, deferred)
    finally:
        deferred.close()


class _OpenedOnWrite(io.TextIOBase):
    """A text file opened by ``opened`` at its first write (see :func:`open_output`)."""

    def __init__(self, opened: Callable[[], TextIO]) -> None:
        super().__init__()
        self._opened = opened
        self._file: TextIO | None = None

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._file is None:
            self._file = self._opened()
        return self._file.write(text)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        super().close()  # flushes first
        if self._file is not None:
            self._file.close()
