"""``chatledger import``: export records into a database, session by session.

Each zett session is imported in a transaction of its own, and each rein session
too. A session the target has already is compared, not written: identical ones are
skipped, differing ones reported and left alone. An interrupted import, run again,
imports what it had not committed, and nothing twice. The input is read a line at a
time, ahead of the inserts (in a task of its own), which go in ``executemany``
batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import sys
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, cast

from rich.console import Console
from rich.progress import Progress
from sqlalchemy import func, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import dialects
from ..dsn import display
from ..engine import Ledger
from ..schema import raw_messages_table, rein_sessions_table, sessions_table, snapshots_table
from .progress import Tracker, progress
from .rows import FORMAT, FORMAT_VERSION, TABLES, BulkInsert, FormatError, Record, RowCodec, Say

#: Rows per ``executemany`` of the import, and the most bytes of JSON one may carry.
BATCH_ROWS = 1000
BATCH_BYTES = 4 * 2**20
#: Differing or failed sessions kept in the report (all are printed as they come).
KEPT = 100


@dataclass
class ImportReport:
    """What an import did. Sessions are zett and rein sessions alike."""

    target: str
    imported: int = 0
    #: Of the sessions imported, the deleted ones: tombstones (a counter row without
    #: content; a rein row without JSON), imported so that no late writer revives the id.
    tombstones: int = 0
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


def _tombstone_difference(input_deleted: bool, stored_deleted: bool) -> str | None:
    """The difference of a session deleted on one side only (a tombstone), in words:
    a deleted session is not one that differs in its columns."""
    if stored_deleted and not input_deleted:
        return "deleted in the target database (a tombstone)"
    if input_deleted and not stored_deleted:
        return "deleted in the input (a tombstone), a live session in the target database"
    return None


class _Session:
    """One zett session being imported: its transaction and what was seen."""

    def __init__(self, session_id: str, mode: str, *, tombstone: bool = False) -> None:
        self.id = session_id
        #: The input's row is a tombstone: the session was deleted where it comes from.
        self.tombstone = tombstone
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
        self.tracker = Tracker(bars)
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
            conn = await conn.execution_options(**self.ledger.rules.write)
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
        tombstone = row.get("deleted_at") is not None
        if stored is None:
            session = _Session(row["id"], "insert", tombstone=tombstone)
            try:
                await conn.execute(s.insert(), row)
            except (IntegrityError, DBAPIError) as error:
                await self._refused(conn, session, error)
            return session
        session = _Session(row["id"], "compare", tombstone=tombstone)
        deleted = _tombstone_difference(tombstone, stored.deleted_at is not None)
        difference = _first_difference(row, stored._mapping, self.codecs["session"].columns)
        if deleted is not None or difference is not None:
            await conn.rollback()
            session.mode = "skip"
            session.reason = deleted or f"its session row differs in {difference}"
        return session

    async def _refused(self, conn: AsyncConnection, session: _Session, error: Exception) -> None:
        if not isinstance(error, IntegrityError) and not (
            isinstance(error, DBAPIError)
            and dialects.classify(self.ledger.rules, error) is dialects.Failure.TOO_LARGE
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
            self.report.tombstones += session.tombstone
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
        tombstone = row.get("session_json") is None
        if stored is not None:
            await conn.rollback()
            deleted = _tombstone_difference(tombstone, stored.session_json is None)
            difference = _first_difference(row, stored._mapping, self.codecs["rein_session"].columns)
            if deleted is None and difference is None:
                self.report.identical += 1
            else:
                reason = deleted or f"differs in {difference}"
                self._problem(f"rein session {row['id']!r}: {reason}; left as it is", failed=False)
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
        self.report.tombstones += tombstone


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
