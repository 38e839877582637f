"""``chatledger export``, ``import`` and ``copy``: sessions out of one database, into another.

The format is JSON lines, versioned and documented in ``docs/export-format.md``:
a header, then per zett session its counter row, its checkpoints and its raw
messages followed by an end record, then the rein sessions, then an end record
with the totals. Rows are every column of chatledger's tables (``table.c``), so a
column a later revision adds travels without a change here; the format version
changes only when the meaning of the records does.

* **Exact.** Every column travels as stored: ids, sequences, versions, checkpoint
  boundaries, the JSON texts (byte for byte), token counts, and timestamps as
  RFC 3339 UTC with microseconds. Deleted sessions' tombstones (rows a later
  revision keeps so that no late writer revives an id) travel as rows too, so a
  copy keeps stale writers out of the copy as well.
* **Constant memory.** The export reads one consistent snapshot (one read
  transaction) with server-side cursors, a page of sessions at a time; the import
  reads a line at a time and inserts in batches (``executemany``).
* **Idempotent.** Each zett session is imported in a transaction of its own, and
  each rein session too. A session the target has already is compared, not
  written: identical ones are skipped, differing ones reported and left alone. An
  interrupted import, run again, imports what it had not committed, and nothing
  twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, TextIO, cast

from rich.console import Console
from rich.progress import Progress, TaskID
from sqlalchemy import Table, func, select
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import __version__, dialects, migrate
from ..dsn import display, resolve_dsn, sqlite_file
from ..engine import Ledger
from ..schema import raw_messages_table, rein_sessions_table, sessions_table, snapshots_table
from .progress import progress

#: The ``format`` of the header line.
FORMAT = "chatledger-export"
#: Bumped only when the meaning of the records changes, not when columns are added.
FORMAT_VERSION = 1
#: Sessions read per page by the export.
PAGE = 500
#: Rows fetched per round trip from a server-side cursor.
YIELD_PER = 1000
#: Rows per ``executemany`` of the import, and the most bytes of JSON one may carry.
BATCH_ROWS = 1000
BATCH_BYTES = 4 * 2**20
#: Differing or failed sessions kept in the report (all are printed as they come).
KEPT = 100

#: Record type -> the table its ``row`` belongs to.
TABLES: Mapping[str, Table] = {
    "session": sessions_table,
    "snapshot": snapshots_table,
    "message": raw_messages_table,
    "rein_session": rein_sessions_table,
}

Record = dict[str, Any]
Say = Callable[[str], None]


class FormatError(ValueError):
    """The input is not a chatledger export this version reads; the message names the line."""


# -- rows -----------------------------------------------------------------------------


class RowCodec:
    """One table's rows as JSON objects: every column by name, timestamps as RFC 3339
    UTC strings with microseconds, everything else as JSON has it.

    ``columns`` are the columns a file carries (a subset of the table's, for a file
    written before a later revision added some).
    """

    def __init__(self, table: Table, columns: Sequence[str] | None = None) -> None:
        self.table = table
        self.columns = tuple(columns if columns is not None else (column.name for column in table.c))
        self._times = tuple(name for name in self.columns if _python_type(table, name) is datetime)
        self._checks = tuple(
            (name, _python_type(table, name), bool(table.c[name].nullable)) for name in self.columns
        )
        #: Patterns of value types (one per column, in order) already found valid: whether
        #: a row's values fit depends on their types only, and rows repeat a few patterns.
        self._valid: set[tuple[type, ...]] = set()

    def encode(self, row: Mapping[Any, Any]) -> Record:
        """A database row (its ``_mapping``) as the JSON object of a record."""
        record = {name: row[name] for name in self.columns}
        for name in self._times:
            value = record[name]
            if value is not None:
                record[name] = _instant(value)
        return record

    def decode(self, values: object, where: str) -> Record:
        """A record's row as the values to bind, checked column by column.

        Raises:
            FormatError: the row is not an object of exactly the header's columns,
                or a value has the wrong type (``where`` names the line).
        """
        try:
            if not isinstance(values, dict) or len(values) != len(self.columns):
                raise KeyError
            pattern = tuple(map(type, map(values.__getitem__, self.columns)))
        except KeyError:
            raise FormatError(
                f"{where}: the row must be an object with exactly the columns {list(self.columns)}"
            ) from None
        if pattern not in self._valid:
            self._check(pattern, where)
            self._valid.add(pattern)
        for name in self._times:
            value = values[name]
            if value is not None:
                values[name] = _parse_instant(value, f"{where}: {self.table.name}.{name}")
        return values

    def _check(self, pattern: tuple[type, ...], where: str) -> None:
        for (name, kind, nullable), found in zip(self._checks, pattern, strict=True):
            if found is type(None):
                if not nullable:
                    raise FormatError(f"{where}: {self.table.name}.{name} cannot be null")
            elif found is not (str if kind is datetime else kind):
                wanted = "an RFC 3339 timestamp string" if kind is datetime else kind.__name__
                raise FormatError(f"{where}: {self.table.name}.{name} must be {wanted}, not {found.__name__}")


def _python_type(table: Table, name: str) -> type:
    type_ = table.c[name].type
    # A TypeDecorator (chatledger's Id, UTCDateTime) reports ``object``; its impl knows.
    python_type: type = getattr(type_, "impl_instance", type_).python_type
    return python_type


def _instant(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _parse_instant(value: str, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise FormatError(f"{where} is not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        raise FormatError(f"{where} has no UTC offset: {value!r}")
    return parsed


class BulkInsert:
    """``executemany`` of one table's ``INSERT`` handed straight to the driver.

    The statement is the one SQLAlchemy compiles for the dialect, and each value goes
    through its column type's own bind processor (chatledger's ``UTCDateTime``, the
    driver's conversions); what is skipped is SQLAlchemy's per-row parameter
    handling, which costs as much as the driver itself on a large import.
    """

    def __init__(self, table: Table, columns: Sequence[str], dialect: Dialect) -> None:
        compiled = table.insert().compile(dialect=dialect, column_keys=list(columns))
        self.sql = str(compiled)
        order = compiled.positiontup
        if order is None:  # pragma: no cover - every dialect chatledger serves is positional
            raise RuntimeError(f"{dialect.name} does not bind by position")
        self._order = tuple(order)
        self._processors = tuple(
            (index, processor)
            for index, name in enumerate(self._order)
            if (processor := table.c[name].type.dialect_impl(dialect).bind_processor(dialect)) is not None
        )

    async def execute(self, conn: AsyncConnection, rows: Sequence[Record]) -> None:
        """Insert ``rows`` (decoded records' rows) in one ``executemany``."""
        order, processors = self._order, self._processors
        parameters = []
        for row in rows:
            values = [row[name] for name in order]
            for index, processor in processors:
                value = values[index]
                if value is not None:
                    values[index] = processor(value)
            parameters.append(tuple(values))
        await conn.exec_driver_sql(self.sql, parameters)


# -- export ---------------------------------------------------------------------------


@dataclass
class Counts:
    """How many of each a stream holds."""

    sessions: int = 0
    messages: int = 0
    snapshots: int = 0
    rein_sessions: int = 0


async def _count(conn: AsyncConnection, ids: Sequence[str] | None) -> Counts:
    def where(column: Any) -> Any:
        return column.in_(ids) if ids is not None else True

    async def count(table: Table, column: Any) -> int:
        return int(await conn.scalar(select(func.count()).select_from(table).where(where(column))) or 0)

    return Counts(
        sessions=await count(sessions_table, sessions_table.c.id),
        messages=await count(raw_messages_table, raw_messages_table.c.session_id),
        snapshots=await count(snapshots_table, snapshots_table.c.session_id),
        rein_sessions=await count(rein_sessions_table, rein_sessions_table.c.id),
    )


async def _session_pages(conn: AsyncConnection, ids: Sequence[str] | None) -> AsyncIterator[list[Any]]:
    """The session rows in pages of :data:`PAGE`, in id order (the database's)."""
    s = sessions_table
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
    codecs: Mapping[str, RowCodec], row: Any, snapshots: Mapping[str, list[Any]]
) -> Iterator[Record]:
    """A session's first records: its counter row, then its checkpoints."""
    yield {"type": "session", "row": codecs["session"].encode(row._mapping)}
    for snapshot in snapshots.get(row.id, ()):
        yield {"type": "snapshot", "row": codecs["snapshot"].encode(snapshot._mapping)}


def _closing(row: Any, messages: int, snapshots: Mapping[str, list[Any]], total: Counts) -> Record:
    """A session's end record (and the running totals)."""
    checkpoints = len(snapshots.get(row.id, ()))
    total.sessions += 1
    total.messages += messages
    total.snapshots += checkpoints
    return {"type": "session_end", "id": row.id, "snapshots": checkpoints, "messages": messages}


async def export_records(conn: AsyncConnection, ids: Sequence[str] | None = None) -> AsyncIterator[Record]:
    """Every record of an export of the database on ``conn``, header first.

    ``conn`` must be inside one read transaction, so that the export is one
    consistent snapshot. ``ids`` limits it to those zett and rein sessions.
    Messages stream through a server-side cursor, a page of sessions at a time;
    nothing grows with the size of the database.
    """
    codecs = {kind: RowCodec(table) for kind, table in TABLES.items()}
    counts = await _count(conn, ids)
    revision = await conn.run_sync(migrate.current_revision)
    yield {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "chatledger": __version__,
        "revision": revision,
        "backend": conn.dialect.name,
        "exported_at": _instant(datetime.now(UTC)),
        "tables": {table.name: list(codecs[kind].columns) for kind, table in TABLES.items()},
        "counts": counts.__dict__,
    }
    r, v = raw_messages_table, snapshots_table
    total = Counts()
    async for page in _session_pages(conn, ids):
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
                        yield _closing(current, messages, snapshots, total)
                    current, messages = next(pending), 0
                    for record in _opening(codecs, current, snapshots):
                        yield record
                messages += 1
                yield {"type": "message", "row": codecs["message"].encode(message._mapping)}
        if current is not None:
            yield _closing(current, messages, snapshots, total)
        for row in pending:
            for record in _opening(codecs, row, snapshots):
                yield record
            yield _closing(row, 0, snapshots, total)
    rein = rein_sessions_table
    statement = select(rein).order_by(rein.c.id).execution_options(yield_per=YIELD_PER)
    if ids is not None:
        statement = statement.where(rein.c.id.in_(sorted(set(ids))))
    async for partition in (await conn.stream(statement)).partitions():
        for row in partition:
            total.rein_sessions += 1
            yield {"type": "rein_session", "row": codecs["rein_session"].encode(row._mapping)}
    yield {"type": "end", **total.__dict__}


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


class _Tracker:
    """Advances the progress bars from the records going by."""

    def __init__(self, bars: Progress | None) -> None:
        self.bars = bars
        self.sessions: TaskID | None = None
        self.messages: TaskID | None = None

    def start(self, counts: Mapping[str, Any]) -> None:
        if self.bars is None:
            return
        self.sessions = self.bars.add_task(
            "sessions", total=int(counts.get("sessions", 0)) + int(counts.get("rein_sessions", 0))
        )
        self.messages = self.bars.add_task("messages", total=int(counts.get("messages", 0)))

    def advance(self, sessions: int = 0, messages: int = 0) -> None:
        if self.bars is None or self.sessions is None or self.messages is None:
            return
        if sessions:
            self.bars.advance(self.sessions, sessions)
        if messages:
            self.bars.advance(self.messages, messages)


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
    """
    ledger = open_source(dsn)
    try:
        await ledger.ensure_ready()
        bars = progress(console) if console is not None else None
        tracker = _Tracker(bars)
        last: Record = {}
        async with ledger.engine.connect() as conn:
            conn = await conn.execution_options(**ledger.rules.snapshot_read)
            async with conn.begin():
                with bars or contextlib.nullcontext():
                    messages = 0
                    async for record in export_records(conn, ids):
                        output.write(_dump(record))
                        kind = record.get("type")
                        if kind is None:
                            tracker.start(record["counts"])
                        elif kind == "message":
                            messages += 1
                            if messages == YIELD_PER:
                                tracker.advance(messages=messages)
                                messages = 0
                        elif kind in ("session_end", "rein_session"):
                            tracker.advance(sessions=1, messages=messages)
                            messages = 0
                        last = record
        output.flush()
        return Counts(**{key: value for key, value in last.items() if key != "type"})
    finally:
        await ledger.close()


# -- import ---------------------------------------------------------------------------


@dataclass
class ImportReport:
    """What an import did. Sessions are zett and rein sessions alike."""

    target: str
    imported: int = 0
    messages: int = 0
    snapshots: int = 0
    #: Sessions the target had already, identical: skipped.
    identical: int = 0
    #: Sessions the target has with other content: reported, left alone.
    differing: int = 0
    #: Sessions the database refused (a conflicting row, a row too large for it).
    failed: int = 0
    #: The first :data:`KEPT` differing and failed sessions, with the reason.
    problems: list[str] = field(default_factory=list)
    #: The input ended with its end record (``False``: truncated; what it held was imported).
    complete: bool = False

    @property
    def clean(self) -> bool:
        """Everything is in the target as the input has it."""
        return self.complete and not self.differing and not self.failed


class _Skip(Exception):
    """The current session is not imported (it differs, or the database refused it)."""

    def __init__(self, reason: str, *, failed: bool = False) -> None:
        super().__init__(reason)
        self.failed = failed


def _first_difference(
    file_row: Mapping[str, Any], stored: Mapping[Any, Any], columns: Iterable[str]
) -> str | None:
    for name in columns:
        if file_row[name] != stored[name]:
            return f"{name} ({_short(file_row[name])} in the input, {_short(stored[name])} in the database)"
    return None


def _short(value: object) -> str:
    text = repr(value.isoformat() if isinstance(value, datetime) else value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Session:
    """One zett session being imported: its transaction and what was seen."""

    def __init__(self, session_id: str, mode: str) -> None:
        self.id = session_id
        #: "insert" (new here), "compare" (the target has it), "skip" (not imported).
        self.mode = mode
        self.reason = ""
        self.failed = False
        self.messages = 0
        self.snapshots = 0
        self.batch: list[Record] = []
        self.batch_bytes = 0


class Importer:
    """Reads export records into the database of ``ledger``, session by session."""

    def __init__(self, ledger: Ledger, *, say: Say | None = None, bars: Progress | None = None) -> None:
        self.ledger = ledger
        self.say: Say = say or (lambda _line: None)
        self.tracker = _Tracker(bars)
        self.report = ImportReport(target=display(ledger.url))
        self.codecs: dict[str, RowCodec] = {}
        self._bulk: BulkInsert | None = None

    async def run(self, records: AsyncIterator[Record]) -> ImportReport:
        """Import every record; return the report.

        Raises:
            FormatError: the input is not an export this chatledger reads, or a line
                is malformed (sessions committed before it stay: run again after
                fixing it, they are skipped as identical).
            SchemaNotReady: the target is not at this chatledger's head revision.
        """
        await self.ledger.ensure_ready()
        number = 0
        session: _Session | None = None
        async with self.ledger.engine.connect() as conn:
            conn = await conn.execution_options(**self.ledger.rules.locked_write)
            try:
                async for record in records:
                    number += 1
                    where = f"line {number}"
                    if number == 1:
                        self._header(record, where)
                        continue
                    if not isinstance(record, dict):
                        raise FormatError(f"{where}: not a JSON object")
                    kind = record.get("type")
                    if kind == "session":
                        if session is not None:
                            raise FormatError(f"{where}: session {session.id!r} has no session_end record")
                        session = await self._open(
                            conn, self.codecs["session"].decode(record.get("row"), where)
                        )
                    elif kind in ("snapshot", "message"):
                        if session is None:
                            raise FormatError(f"{where}: a {kind} record outside a session")
                        row = self.codecs[kind].decode(record.get("row"), where)
                        if row["session_id"] != session.id:
                            raise FormatError(
                                f"{where}: a {kind} of session {row['session_id']!r} inside {session.id!r}"
                            )
                        await self._row(conn, session, kind, row)
                    elif kind == "session_end":
                        if session is None or record.get("id") != session.id:
                            raise FormatError(f"{where}: a session_end without its session")
                        await self._close(conn, session, record, where)
                        session = None
                    elif kind == "rein_session":
                        if session is not None:
                            raise FormatError(f"{where}: session {session.id!r} has no session_end record")
                        await self._rein(conn, self.codecs["rein_session"].decode(record.get("row"), where))
                    elif kind == "end":
                        if session is not None:
                            raise FormatError(f"{where}: session {session.id!r} has no session_end record")
                        self.report.complete = True
                        break
                    else:
                        raise FormatError(f"{where}: unknown record type {kind!r}")
                if number == 0:
                    raise FormatError("the input is empty")
            finally:
                if conn.in_transaction():
                    await conn.rollback()
        if session is not None:
            self._problem(
                f"zett session {session.id!r}: the input ends inside it (truncated?); not imported",
                failed=True,
            )
        return self.report

    # -- the header --------------------------------------------------------------

    def _header(self, header: object, where: str) -> None:
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise FormatError(f"{where}: not a chatledger export (its first line must be the header)")
        version = header.get("version")
        if version != FORMAT_VERSION:
            raise FormatError(
                f"export format version {version!r}; this chatledger reads version {FORMAT_VERSION}: "
                "use the chatledger that wrote it, or a newer one"
            )
        tables = header.get("tables")
        if not isinstance(tables, dict):
            raise FormatError(f"{where}: the header lists no tables")
        for kind, table in TABLES.items():
            columns = tables.get(table.name)
            if not isinstance(columns, list) or not all(isinstance(name, str) for name in columns):
                raise FormatError(f"{where}: the header lists no columns for {table.name}")
            unknown = [name for name in columns if name not in table.c]
            if unknown:
                raise FormatError(
                    f"the input has columns this database's schema lacks ({table.name}: "
                    f"{', '.join(unknown)}): it comes from a newer chatledger; upgrade chatledger and "
                    "this database first"
                )
            lacking = [
                column.name
                for column in table.c
                if column.name not in columns and not column.nullable and column.server_default is None
            ]
            if lacking:
                raise FormatError(
                    f"{where}: {table.name} rows lack the required columns {', '.join(lacking)}"
                )
            self.codecs[kind] = RowCodec(table, columns)
        counts = header.get("counts")
        self.tracker.start(counts if isinstance(counts, dict) else {})

    # -- zett sessions -----------------------------------------------------------

    async def _open(self, conn: AsyncConnection, row: Record) -> _Session:
        s = sessions_table
        await conn.begin()
        stored = (await conn.execute(select(s).where(s.c.id == row["id"]).with_for_update())).one_or_none()
        if stored is None:
            session = _Session(row["id"], "insert")
            try:
                await conn.execute(s.insert(), row)
            except (IntegrityError, DBAPIError) as error:
                await self._refused(conn, session, error)
            return session
        session = _Session(row["id"], "compare")
        difference = _first_difference(row, stored._mapping, self.codecs["session"].columns)
        if difference is not None:
            await conn.rollback()
            session.mode, session.reason = "skip", f"its session row differs in {difference}"
        return session

    async def _refused(self, conn: AsyncConnection, session: _Session, error: Exception) -> None:
        if not isinstance(error, IntegrityError) and not (
            isinstance(error, DBAPIError) and dialects.is_too_large(self.ledger.dialect, error)
        ):
            raise error
        await conn.rollback()
        session.mode, session.failed = "skip", True
        cause = getattr(error, "orig", None) or error
        session.reason = f"the database refused it: {' '.join(str(cause).split())[:300]}"

    async def _row(self, conn: AsyncConnection, session: _Session, kind: str, row: Record) -> None:
        if kind == "snapshot":
            session.snapshots += 1
        else:
            session.messages += 1
        if session.mode == "skip":
            if kind == "message":
                self.tracker.advance(messages=1)
            return
        if kind == "snapshot":
            await self._flush(conn, session)
            if session.mode == "insert":
                try:
                    await conn.execute(snapshots_table.insert(), row)
                except (IntegrityError, DBAPIError) as error:
                    await self._refused(conn, session, error)
            else:
                await self._compare_snapshot(conn, session, row)
            return
        session.batch.append(row)
        # The long texts, roughly: enough to keep one statement well within a server's limit.
        session.batch_bytes += len(row["message_json"]) + len(row["content"])
        if len(session.batch) >= BATCH_ROWS or session.batch_bytes >= BATCH_BYTES:
            await self._flush(conn, session)

    def _messages_insert(self, conn: AsyncConnection) -> BulkInsert:
        if self._bulk is None:
            self._bulk = BulkInsert(raw_messages_table, self.codecs["message"].columns, conn.dialect)
        return self._bulk

    async def _flush(self, conn: AsyncConnection, session: _Session) -> None:
        batch, session.batch, session.batch_bytes = session.batch, [], 0
        if not batch:
            return
        self.tracker.advance(messages=len(batch))
        if session.mode == "insert":
            try:
                await self._messages_insert(conn).execute(conn, batch)
            except (IntegrityError, DBAPIError) as error:
                await self._refused(conn, session, error)
        elif session.mode == "compare":
            r = raw_messages_table
            stored = {
                row.sequence: row._mapping
                for row in await conn.execute(
                    select(r).where(
                        r.c.session_id == session.id,
                        r.c.sequence >= batch[0]["sequence"],
                        r.c.sequence <= batch[-1]["sequence"],
                    )
                )
            }
            for row in batch:
                found = stored.get(row["sequence"])
                if found is None:
                    await self._differs(conn, session, f"the database lacks its message {row['sequence']}")
                    return
                difference = _first_difference(row, found, self.codecs["message"].columns)
                if difference is not None:
                    await self._differs(conn, session, f"message {row['sequence']} differs in {difference}")
                    return

    async def _compare_snapshot(self, conn: AsyncConnection, session: _Session, row: Record) -> None:
        v = snapshots_table
        stored = (
            await conn.execute(select(v).where(v.c.session_id == session.id, v.c.version == row["version"]))
        ).one_or_none()
        if stored is None:
            await self._differs(conn, session, f"the database lacks its checkpoint version {row['version']}")
            return
        difference = _first_difference(row, stored._mapping, self.codecs["snapshot"].columns)
        if difference is not None:
            await self._differs(conn, session, f"checkpoint version {row['version']} differs in {difference}")

    async def _differs(self, conn: AsyncConnection, session: _Session, reason: str) -> None:
        await conn.rollback()
        session.mode, session.reason = "skip", reason

    async def _close(self, conn: AsyncConnection, session: _Session, end: Record, where: str) -> None:
        await self._flush(conn, session)
        if end.get("messages") != session.messages or end.get("snapshots") != session.snapshots:
            if conn.in_transaction():
                await conn.rollback()
            raise FormatError(
                f"{where}: session {session.id!r} ends with {end.get('messages')} messages and "
                f"{end.get('snapshots')} checkpoints, but {session.messages} and {session.snapshots} "
                "came before"
            )
        self.tracker.advance(sessions=1)
        if session.mode == "insert":
            await conn.commit()
            self.report.imported += 1
            self.report.messages += session.messages
            self.report.snapshots += session.snapshots
            return
        if session.mode == "compare":
            r, v = raw_messages_table, snapshots_table
            messages = await conn.scalar(
                select(func.count()).select_from(r).where(r.c.session_id == session.id)
            )
            snapshots = await conn.scalar(
                select(func.count()).select_from(v).where(v.c.session_id == session.id)
            )
            await conn.rollback()
            if (messages, snapshots) == (session.messages, session.snapshots):
                self.report.identical += 1
                return
            session.reason = (
                f"the database has {messages} messages and {snapshots} checkpoints, "
                f"the input {session.messages} and {session.snapshots}"
            )
        if conn.in_transaction():
            await conn.rollback()
        self._problem(f"zett session {session.id!r}: {session.reason}; left as it is", failed=session.failed)

    def _problem(self, line: str, *, failed: bool) -> None:
        if failed:
            self.report.failed += 1
        else:
            self.report.differing += 1
        if len(self.report.problems) < KEPT:
            self.report.problems.append(line)
        self.say(line)

    # -- rein sessions -------------------------------------------------------------

    async def _rein(self, conn: AsyncConnection, row: Record) -> None:
        rein = rein_sessions_table
        self.tracker.advance(sessions=1)
        await conn.begin()
        stored = (
            await conn.execute(select(rein).where(rein.c.id == row["id"]).with_for_update())
        ).one_or_none()
        if stored is not None:
            await conn.rollback()
            difference = _first_difference(row, stored._mapping, self.codecs["rein_session"].columns)
            if difference is None:
                self.report.identical += 1
            else:
                self._problem(
                    f"rein session {row['id']!r}: differs in {difference}; left as it is", failed=False
                )
            return
        try:
            await conn.execute(rein.insert(), row)
        except (IntegrityError, DBAPIError) as error:
            session = _Session(row["id"], "insert")
            await self._refused(conn, session, error)
            self._problem(f"rein session {row['id']!r}: {session.reason}", failed=True)
            return
        await conn.commit()
        self.report.imported += 1


# -- input files ----------------------------------------------------------------------


def read_records(stream: IO[bytes]) -> Iterator[Record]:
    """The records of an export, one JSON line at a time (gzip-compressed input too).

    Raises:
        FormatError: a line is not JSON (names the line).
    """
    head = stream.peek(2)[:2] if isinstance(stream, io.BufferedReader) else b""
    binary = cast(IO[bytes], gzip.GzipFile(fileobj=stream)) if head == b"\x1f\x8b" else stream
    lines = io.TextIOWrapper(binary, encoding="utf-8", newline="\n")
    number = 0
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue  # a blank line (an editor's last newline) carries nothing
            try:
                yield json.loads(line)
            except ValueError as error:
                raise FormatError(f"line {number}: not JSON: {error}") from None
    except UnicodeDecodeError:
        raise FormatError(f"line {number + 1}: not UTF-8 text") from None
    finally:
        lines.detach()  # the caller closes the stream (standard input must stay open)


async def _async(records: Iterable[Record]) -> AsyncIterator[Record]:
    for record in records:
        yield record


@dataclass(frozen=True)
class _Failed:
    error: BaseException


#: Records per chunk handed from the reading task to the import.
CHUNK = 500


async def prefetched(records: AsyncIterator[Record], chunks: int = 2) -> AsyncIterator[Record]:
    """``records``, read ahead in a task of their own, up to ``chunks`` chunks of
    :data:`CHUNK`: while the import waits for the database to insert a batch, the
    next records are read and parsed (for a copy: fetched from the source). Memory
    stays bounded."""
    queue: asyncio.Queue[list[Record] | _Failed | None] = asyncio.Queue(maxsize=chunks)

    async def produce() -> None:
        try:
            chunk: list[Record] = []
            async for record in records:
                chunk.append(record)
                if len(chunk) == CHUNK:
                    await queue.put(chunk)
                    chunk = []
            await queue.put(chunk)
            await queue.put(None)
        except Exception as error:
            await queue.put(_Failed(error))

    task = asyncio.create_task(produce())
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, _Failed):
                raise item.error
            for record in item:
                yield record
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def open_output(path: str | None) -> TextIO:
    """The export's destination: a file (gzip-compressed when it ends in ``.gz``), or stdout."""
    if path is None or path == "-":
        return sys.stdout
    if path.endswith(".gz"):
        return gzip.open(path, "wt", encoding="utf-8", newline="\n")
    return open(path, "w", encoding="utf-8", newline="\n")


async def import_file(
    dsn: str | URL | None, path: str, *, console: Console | None = None, say: Say | None = None
) -> ImportReport:
    """Import the export at ``path`` (``-``: standard input) into the database ``dsn`` names."""
    ledger = Ledger(dsn)
    bars = progress(console) if console is not None else None
    try:
        with contextlib.ExitStack() as stack:
            # A blocking open is fine: the command reads this one file, nothing else runs meanwhile.
            stream = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))  # noqa: ASYNC230
            stack.enter_context(bars or contextlib.nullcontext())
            records = prefetched(_async(read_records(stream)))
            return await Importer(ledger, say=say, bars=bars).run(records)
    finally:
        await ledger.close()


async def copy(
    source: str | URL | None,
    target: str | URL | None,
    *,
    ids: Sequence[str] | None = None,
    console: Console | None = None,
    say: Say | None = None,
) -> ImportReport:
    """Copy the sessions of one database into another, directly: the export's records
    feed the import, one consistent snapshot of the source, constant memory."""
    reader = open_source(source)
    writer = Ledger(target)
    if reader.url == writer.url:
        raise ValueError("--from and --to name the same database")
    bars = progress(console) if console is not None else None
    try:
        await reader.ensure_ready()
        async with reader.engine.connect() as conn:
            conn = await conn.execution_options(**reader.rules.snapshot_read)
            async with conn.begin():
                with bars or contextlib.nullcontext():
                    records = prefetched(export_records(conn, ids))
                    return await Importer(writer, say=say, bars=bars).run(records)
    finally:
        await reader.close()
        await writer.close()
