"""``chatledger import``: export records into a database, session by session.

Each session is imported in a transaction of its own, whatever its kind (and each
row of state its kind's sessions share, ADK's ``app:``/``user:`` state), by the shape
its kind's records take (:mod:`chatledger.kinds.records`). A session the target has
already is compared, not written: identical ones are skipped, differing ones reported
and left alone. An interrupted import, run again,
imports what it had not committed, and nothing twice. The input is read a line at a
time, ahead of the inserts (in a task of its own), which go in ``executemany``
batches.

Other writers may run at once (another import or copy, the applications' appends):
a session's transaction that fails for a reason a retry cures (a deadlock, a
serialization failure, a lock wait, a lost connection) runs again from the session's
rows as read, within the ledger's retry budget, as the stores' calls do; a session
another writer committed meanwhile is then compared as a re-run compares it. Each
row is checked against the target's statement limit before it is sent, as the
stores' appends are; a session with a row over it is reported, and the rest goes on.
Every database error ends as a chatledger error naming its database
(:func:`database_error`).
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
from sqlalchemy import func, select, update
from sqlalchemy.engine import URL
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from tenacity import AsyncRetrying, RetryCallState, stop_before_delay, wait_random_exponential

from .. import dialects, marks, validate
from ..dsn import display
from ..engine import Ledger
from ..errors import ChatledgerError, StorageUnavailable
from ..kinds import (
    Checkpointed,
    Grouped,
    Layout,
    Log,
    MarkRule,
    Rows,
    SessionKind,
    long_texts,
    registered,
)
from . import interrupt
from .progress import Tracker, progress
from .rows import (
    FORMAT,
    FORMAT_VERSION,
    MARKS,
    BulkInsert,
    FormatError,
    Record,
    RowCodec,
    Say,
    optional_records,
)
from .rows import tables as known_tables
from .spool import Spool

#: Rows per ``executemany`` of the import, and the most bytes of JSON one may carry.
BATCH_ROWS = 1000
BATCH_BYTES = 4 * 2**20
#: Differing or failed sessions kept in the report (all are printed as they come).
KEPT = 100
#: Bytes of a session's long texts kept in memory for a retry of its transaction;
#: beyond them, its rows go to a temporary file (:class:`.spool.Spool`).
SPOOL_BYTES = 16 * 2**20
#: Most bytes a value other than a string takes in a multi-row ``INSERT`` (a number, a
#: timestamp literal, NULL), with its quotes and comma.
VALUE_BYTES = 32
#: Duplicate keys a session may meet, each followed by a look for the session another
#: writer committed, before its rows count as refused.
MAX_CONFLICTS = 3


@dataclass
class FrameworkCounts:
    """What an import did with one framework's sessions (zett, rein, OpenAI Agents, ADK)."""

    imported: int = 0
    #: Of the sessions imported, the deleted (or cleared) ones: tombstones.
    tombstones: int = 0
    #: Entries of the sessions imported: zett's messages, OpenAI's items, ADK's events.
    entries: int = 0
    identical: int = 0
    differing: int = 0
    failed: int = 0
    #: ADK's ``app:``/``user:`` state rows imported, and found there already identical.
    states: int = 0
    states_identical: int = 0


@dataclass
class ImportReport:
    """What an import did. Sessions are those of every framework alike (``frameworks``
    has them one by one); ``messages`` and ``snapshots`` are zett's."""

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
    #: Sessions not imported: the database refused them (a conflicting row, a row over
    #: its statement limit), or they kept failing transiently for the retry budget.
    failed: int = 0
    #: The first :data:`KEPT` differing and failed sessions, with the reason.
    problems: list[str] = field(default_factory=list)
    #: High-water marks of purged tombstones written (or raised) in the target.
    marks: int = 0
    #: The input ended with its end record (``False``: truncated; what it held was imported).
    complete: bool = False
    #: Framework (its kind's label: "zett", "OpenAI Agents"...) -> its counts, in the order met.
    frameworks: dict[str, FrameworkCounts] = field(default_factory=dict)

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
    """One session being imported (a counter row with its checkpoints and raw log, a
    row that is a session, a counter row with its entries), or one row of state a
    kind's sessions share: its rows as read, and what its transaction found."""

    def __init__(self, kind: SessionKind, layout: Layout, key: tuple[Any, ...], *, tombstone: bool) -> None:
        #: Its kind, and the shape of its records.
        self.kind = kind
        self.layout = layout
        #: The key of its counter (or state) row: ``(id,)``, ADK's (app, user, id)...
        self.key = key
        self.id = key[-1]
        #: The input's row is a tombstone: the session was deleted where it comes from.
        self.tombstone = tombstone
        self.messages = 0
        self.snapshots = 0
        #: A log session's entries read, and its counter row's numbering.
        self.entries = 0
        self.base = self.last = 0
        #: A grouped session's rows read, by the count key of their part.
        self.parts: dict[str, int] = {}
        #: A checkpointed session's counter row as the input has it, and the highest
        #: message sequence inserted: above it, the counter row is put back before the COMMIT.
        self.counter: tuple[Any, Any] | None = None
        self.top = 0
        self.spool = Spool(SPOOL_BYTES)
        #: The connection was lost while its COMMIT was under way: it may be in the
        #: database, and a retry that finds it there, identical, imported it.
        self.maybe_committed = False
        self.reset()

    def reset(self) -> None:
        """Back to the start of its transaction, for a retry."""
        #: "insert" (new here), "compare" (the target has it), "committing", and when
        #: done: "imported", "identical" or "skip" (not imported: ``reason`` says why).
        self.mode = "insert"
        self.reason = ""
        self.failed = False
        self.batch: list[Record] = []
        #: The batch's long texts in characters, and the bytes it may take in one
        #: statement (a bound: see :func:`_row_bound`).
        self.batch_bytes = 0
        self.batch_bound = validate.STATEMENT_OVERHEAD

    @property
    def state(self) -> bool:
        """A row of state the kind's sessions share, not a session."""
        return isinstance(self.layout, Rows) and not self.layout.sessions

    @property
    def label(self) -> str:
        if isinstance(self.layout, Log | Rows | Grouped):
            return self.layout.label(self.key)
        return f"{self.kind.label} session {self.id!r}"

    @property
    def framework(self) -> str:
        return self.kind.label


def _row_bound(row: Record) -> int:
    """An upper bound of the bytes ``row`` takes in a multi-row ``INSERT``: at most 4 per
    character of a string (UTF-8, or a backslash-escaped ASCII character), and
    :data:`VALUE_BYTES` for any other value, its quotes and comma."""
    characters = sum(len(value) for value in row.values() if isinstance(value, str))
    return 4 * characters + VALUE_BYTES * len(row)


def _unclosed(session: _Session, where: str) -> FormatError:
    layout = session.layout
    end = layout.end if isinstance(layout, Checkpointed | Log | Grouped) else layout.record
    return FormatError(f"{where}: session {session.id!r} has no {end} record")


#: What each record type is: its kind, its layout, and its part in the layout.
_Role = tuple[SessionKind, Layout, str]


def _roles() -> dict[str, _Role]:
    """Record type -> (kind, layout, role): ``head``, ``checkpoint``, ``entry``, ``end``
    of a session's records, or ``row``: one record a session (or state row)."""
    found: dict[str, _Role] = {}
    for kind in registered():
        for layout in kind.records:
            if isinstance(layout, Checkpointed):
                parts = {
                    layout.head: "head",
                    layout.checkpoint: "checkpoint",
                    layout.entry: "entry",
                    layout.end: "end",
                }
            elif isinstance(layout, Log):
                parts = {layout.head: "head", layout.entry: "entry", layout.end: "end"}
            elif isinstance(layout, Grouped):
                parts = {layout.head: "head", layout.end: "end"}
                parts.update({part.record: "part" for part in layout.parts})
            else:
                parts = {layout.record: "row"}
            found.update({record: (kind, layout, role) for record, role in parts.items()})
    return found


def _said(error: BaseException) -> str:
    """The driver's message of a database error, on one line."""
    cause = getattr(error, "orig", None) or error
    return " ".join(str(cause).split())[:300] or type(cause).__name__


def database_error(ledger: Ledger, error: DBAPIError | OSError) -> ChatledgerError:
    """The chatledger error of a database error that the import (or export) does not
    handle itself, naming the database of ``ledger``: the library's one total mapping
    (:func:`chatledger.dialects.database_error`), and a socket error as a lost
    connection. The caller raises it ``from`` the error."""
    if isinstance(error, OSError):
        return StorageUnavailable(
            f"the connection to {display(ledger.url)} was lost or refused: {_said(error)}"
        )
    return dialects.database_error(ledger.backend, error, ledger.url)


class Importer:
    """Reads export records into the database of ``ledger``, session by session.

    Each session is one transaction. One that fails for a reason a retry can cure (a
    deadlock, a serialization failure, a lock wait past ``lock_timeout``, a lost
    connection) runs again from its rows as read, within the ledger's ``retry_timeout``
    as a store's calls do; a retry that finds the session in the target (another
    import's, or this one's whose COMMIT was lost) compares it as a re-run does.
    """

    def __init__(self, ledger: Ledger, *, say: Say | None = None, bars: Progress | None = None) -> None:
        self.ledger = ledger
        self.say: Say = say or (lambda _line: None)
        self.tracker = Tracker(bars)
        self.report = ImportReport(target=display(ledger.url))
        self.codecs: dict[str, RowCodec] = {}
        #: The ``executemany`` of each kind of entry ("message", "openai_item"...).
        self._bulk: dict[str, BulkInsert] = {}
        self._conn: AsyncConnection | None = None
        #: Messages read but not yet shown on the progress bar.
        self._unshown = 0
        #: The target's statement limit in bytes (``Ledger.statement_limit``).
        self.limit = ledger.statement_limit
        #: Every record type of the registered kinds, and what it is.
        self._roles = _roles()
        #: The long texts of each record type's rows, checked against the statement limit
        #: as the stores check theirs (``Ledger.check_statement_size``).
        self._long_texts = {record: long_texts(table) for record, table in known_tables().items()}

    async def run(self, records: AsyncIterator[Record]) -> ImportReport:
        """Import every record; return the report.

        Raises:
            FormatError: the input is not an export this chatledger reads, or a line
                is malformed (sessions committed before it stay: run again after
                fixing it, they are skipped as identical).
            SchemaNotReady: the target is not at this chatledger's head revision, or
                lacks a table or column it uses.
            StorageUnavailable: the target stayed unreachable for the retry budget.
            ChatledgerError: any other database error (see :func:`database_error`).
        """
        await self.ledger.ensure_ready()
        self.limit = self.ledger.statement_limit
        number = 0
        session: _Session | None = None
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
                role = self._roles.get(kind) if isinstance(kind, str) else None
                if role is None:
                    pass  # the core's records, or an unknown type: below
                elif isinstance(role[1], Checkpointed):
                    session = await self._checkpointed_record(
                        session, role[0], role[1], role[2], record, where
                    )
                    continue
                elif isinstance(role[1], Log):
                    session = await self._log_record(session, role[0], role[1], str(kind), record, where)
                    continue
                elif isinstance(role[1], Grouped):
                    session = await self._grouped_record(session, role[0], role[1], str(kind), record, where)
                    continue
                else:
                    if session is not None:
                        raise _unclosed(session, where)
                    layout = role[1]
                    assert isinstance(layout, Rows)
                    row = self._codec(layout.record, where).decode(record.get("row"), where)
                    item = _Session(role[0], layout, layout.key_of(row), tombstone=layout.is_tombstone(row))
                    await self._step(item, layout.record, row)
                    self._finish(item)
                    continue
                if kind == "mark":
                    if session is not None:
                        raise _unclosed(session, where)
                    if "mark" not in self.codecs:
                        raise FormatError(f"{where}: a mark record, but the header lists no {MARKS.name}")
                    await self._mark(self.codecs["mark"].decode(record.get("row"), where))
                elif kind == "end":
                    if session is not None:
                        raise _unclosed(session, where)
                    self.report.complete = True
                    break
                else:
                    raise FormatError(f"{where}: unknown record type {kind!r}")
            if number == 0:
                raise FormatError("the input is empty")
        finally:
            if session is not None:
                session.spool.close()
            await self._disconnect()
        if session is not None:
            self._count(session).failed += 1
            self._problem(
                f"{session.label}: the input ends inside it (truncated?); not imported", failed=True
            )
        return self.report

    def _codec(self, kind: str, where: str) -> RowCodec:
        codec = self.codecs.get(kind)
        if codec is None:  # a kind's table a file lists only when it carries it
            raise FormatError(
                f"{where}: a {kind} record, but the header lists no {known_tables()[kind].name}"
            )
        return codec

    async def _checkpointed_record(
        self,
        session: _Session | None,
        kind: SessionKind,
        layout: Checkpointed,
        role: str,
        record: Record,
        where: str,
    ) -> _Session | None:
        """One record of a session with checkpoints and a raw log; the session open after it."""
        record_type = str(record.get("type"))
        if role == "head":
            if session is not None:
                raise _unclosed(session, where)
            row = self._codec(record_type, where).decode(record.get("row"), where)
            opened = _Session(kind, layout, (row["id"],), tombstone=row.get(layout.marker) is not None)
            await self._step(opened, record_type, row)
            return opened
        if role in ("checkpoint", "entry"):
            if session is None or session.layout is not layout:
                raise FormatError(f"{where}: a {record_type} record outside a session")
            row = self._codec(record_type, where).decode(record.get("row"), where)
            if row["session_id"] != session.id:
                raise FormatError(
                    f"{where}: a {record_type} of session {row['session_id']!r} inside {session.id!r}"
                )
            if role == "checkpoint":
                session.snapshots += 1
            else:
                session.messages += 1
                self._show(messages=1)
            await self._step(session, record_type, row)
            return session
        if session is None or session.layout is not layout or record.get("id") != session.id:
            raise FormatError(f"{where}: a {record_type} without its session")
        if record.get("messages") != session.messages or record.get("snapshots") != session.snapshots:
            raise FormatError(
                f"{where}: session {session.id!r} ends with {record.get('messages')} messages "
                f"and {record.get('snapshots')} checkpoints, but {session.messages} and "
                f"{session.snapshots} came before"
            )
        await self._step(session, record_type, record)
        self._finish(session)
        return None

    async def _log_record(
        self, session: _Session | None, owner: SessionKind, store: Log, kind: str, record: Record, where: str
    ) -> _Session | None:
        """One record of a log session's block (an OpenAI Agents or ADK session); the
        session open after it.

        Its entries must be numbered as the adapters number them: gap-free from the
        counter row's ``base_sequence + 1`` to its ``last_sequence`` (so an add or
        append after the import takes the next sequence, and a read finds them all).
        """
        if kind == store.head:
            if session is not None:
                raise _unclosed(session, where)
            row = self._codec(kind, where).decode(record.get("row"), where)
            key = store.key_of(row)
            opened = _Session(owner, store, key, tombstone=row.get(store.marker) is not None)
            opened.base, opened.last = row["base_sequence"], row["last_sequence"]
            await self._step(opened, kind, row)
            return opened
        if session is None or session.layout is not store:
            raise FormatError(f"{where}: a {kind} record outside its session")
        if kind == store.entry:
            row = self._codec(kind, where).decode(record.get("row"), where)
            if store.entry_session(row) != session.key:
                raise FormatError(
                    f"{where}: a {kind} of {store.label(store.entry_session(row))} inside {session.label}"
                )
            expected = session.base + session.entries + 1
            if row["sequence"] != expected or expected > session.last:
                raise FormatError(
                    f"{where}: {session.label}: {kind} sequence {row['sequence']}, but its "
                    f"{store.entries_name} must run gap-free from base_sequence + 1 ({session.base + 1}) "
                    f"to last_sequence ({session.last}), as its adapter numbers them"
                )
            session.entries += 1
            await self._step(session, kind, row)
            return session
        if tuple(record.get(name) for name in store.key) != session.key:
            raise FormatError(f"{where}: a {kind} without its session")
        count = record.get(store.entries_name)
        if count != session.entries:
            raise FormatError(
                f"{where}: {session.label} ends with {count} {store.entries_name}, but "
                f"{session.entries} came before"
            )
        if session.entries != session.last - session.base:
            raise FormatError(
                f"{where}: {session.label} has {session.entries} {store.entries_name}, but its counter "
                f"row numbers {session.last - session.base} (base_sequence {session.base} to "
                f"last_sequence {session.last})"
            )
        await self._step(session, kind, record)
        self._finish(session)
        return None

    async def _grouped_record(
        self,
        session: _Session | None,
        owner: SessionKind,
        layout: Grouped,
        kind: str,
        record: Record,
        where: str,
    ) -> _Session | None:
        """One record of a grouped session's block (a LangGraph thread); the session open
        after it."""
        if kind == layout.head:
            if session is not None:
                raise _unclosed(session, where)
            row = self._codec(kind, where).decode(record.get("row"), where)
            opened = _Session(owner, layout, layout.key_of(row), tombstone=row.get(layout.marker) is not None)
            await self._step(opened, kind, row)
            return opened
        if session is None or session.layout is not layout:
            raise FormatError(f"{where}: a {kind} record outside its session")
        part = next((part for part in layout.parts if part.record == kind), None)
        if part is not None:
            row = self._codec(kind, where).decode(record.get("row"), where)
            if row[layout.session_column] != session.id:
                other = layout.label((row[layout.session_column],))
                raise FormatError(f"{where}: a {kind} of {other} inside {session.label}")
            session.parts[part.count] = session.parts.get(part.count, 0) + 1
            if part is layout.parts[0]:
                session.entries += 1
            await self._step(session, kind, row)
            return session
        if record.get("id") != session.id:
            raise FormatError(f"{where}: a {kind} without its session")
        for part in layout.parts:
            if record.get(part.count) != session.parts.get(part.count, 0):
                raise FormatError(
                    f"{where}: {session.label} ends with {record.get(part.count)} {part.count}, but "
                    f"{session.parts.get(part.count, 0)} came before"
                )
        await self._step(session, kind, record)
        self._finish(session)
        return None

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
        listed = header.get("tables")
        if not isinstance(listed, dict):
            raise FormatError(f"{where}: the header lists no tables")
        optional = optional_records()
        for kind, table in known_tables().items():
            columns = listed.get(table.name)
            if columns is None and kind in optional:
                continue  # a file written before that kind's sessions travelled
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
        columns = listed.get(MARKS.name)
        if columns is not None:  # a file written before marks travelled lists none
            if not isinstance(columns, list) or sorted(map(str, columns)) != sorted(MARKS.c.keys()):
                wanted = list(MARKS.c.keys())
                raise FormatError(f"{where}: the header's {MARKS.name} columns must be {wanted}")
            self.codecs["mark"] = RowCodec(MARKS, columns)
        counts = header.get("counts")
        self.tracker.start(counts if isinstance(counts, dict) else {})

    async def _mark(self, row: Record) -> None:
        """Write (or raise, never lower) a purged id's high-water mark in the target, in
        a transaction of its own: the target then numbers the id on as the source would."""
        store, id_digest = int(row["store"]), str(row["id_digest"])
        last_sequence, version = int(row["last_sequence"]), int(row["version"])
        # Any store code: later frameworks add theirs (the schema's comment lists them).
        if store < 0 or len(id_digest) != 64:
            raise FormatError(f"a {MARKS.name} row of store {store} and digest {id_digest!r}")

        async def work(conn: AsyncConnection) -> bool:
            await marks.raise_digest(conn, store, id_digest, last_sequence, version, row["purged_at"])
            return True

        async def settle(conn: AsyncConnection) -> bool | None:
            # After a lost COMMIT: write it again, which raises a mark already there to
            # the same values (no lookup needed, and no OutcomeUnknown).
            return None

        await self.ledger.write(work, settle=settle)
        self.report.marks += 1

    # -- the connection ----------------------------------------------------------

    async def _connection(self) -> AsyncConnection:
        """The import's connection (one for every session), opened anew after a lost one."""
        if self._conn is None:
            # The ledger's writer: its write options, and the isolation it settled on.
            self._conn = await self.ledger.connections.writer.connect()
        return self._conn

    async def _rollback(self) -> None:
        """End the session's transaction, dropping the connection when it is broken."""
        conn = self._conn
        if conn is None:
            return
        if not conn.invalidated:
            try:
                # Also after a failed COMMIT, whose transaction is no longer "in" one but
                # still needs its rollback before the next begin.
                await conn.rollback()
                return
            except (DBAPIError, OSError):
                pass  # the connection is gone: a new one for the next attempt
        await self._disconnect()

    async def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(DBAPIError, OSError):
                await conn.close()  # rolls back what is uncommitted

    # -- sessions, retried -------------------------------------------------------

    async def _step(self, session: _Session, kind: str, row: Record) -> None:
        """Apply one record of ``session`` (of type ``kind``; its end record commits),
        keeping it for a retry; a failure a retry can cure runs the session again."""
        if session.mode == "skip":
            return
        texts = self._long_texts.get(kind, ())
        session.spool.add(kind, row, sum(len(row[name] or "") for name in texts) + VALUE_BYTES)
        try:
            await self._apply(session, kind, row)
        except (DBAPIError, OSError) as error:
            await self._recover(session, error)
        if session.mode in ("skip", "imported", "identical"):
            session.spool.close()

    async def _apply(self, session: _Session, kind: str, row: Record) -> None:
        layout, role = session.layout, self._roles[kind][2]
        if isinstance(layout, Checkpointed):
            if role == "head":
                await self._open(session, layout, row)
            elif role == "checkpoint":
                await self._snapshot(session, layout, row)
            elif role == "entry":
                await self._message(session, row, kind)
            else:
                await self._close(session, layout)
        elif isinstance(layout, Log):
            if role == "head":
                await self._open_log(session, layout, row)
            elif role == "entry":
                await self._message(session, row, kind)
            else:
                await self._close_log(session, layout)
        elif isinstance(layout, Grouped):
            if role == "head":
                await self._open_log(session, layout, row)
            elif role == "part":
                await self._part(session, kind, row)
            else:
                await self._close_grouped(session, layout)
        else:
            await self._row(session, layout, row)

    async def _replay(self, session: _Session) -> None:
        session.reset()
        for kind, row in session.spool:
            await self._apply(session, kind, row)
            if session.mode == "skip":
                return

    async def _recover(self, session: _Session, error: DBAPIError | OSError) -> None:
        """After ``error`` met ``session``'s transaction: run it again from its rows
        (within the retry budget), or refuse the session, or raise.

        Raises:
            StorageUnavailable: the target stayed unreachable for the retry budget.
            SchemaNotReady, ConfigurationError, ChatledgerError: see :func:`database_error`.
        """
        options = self.ledger.options
        # The budget of a store's call (Ledger.write): random exponential backoff, and no
        # attempt after retry_timeout seconds from the first failure.
        policy = AsyncRetrying(
            stop=stop_before_delay(options.retry_timeout),
            wait=wait_random_exponential(multiplier=options.retry_backoff, max=options.retry_backoff_max),
        )
        state = RetryCallState(policy, None, (), {})
        conflicts = 0
        while True:
            lost = session.mode == "committing"
            await self._rollback()
            failure = (
                dialects.Failure.CONNECTION
                if isinstance(error, OSError)
                else dialects.classify(self.ledger.backend, error)
            )
            if failure is dialects.Failure.TOO_LARGE:
                self._refuse(session, f"the database refused it as too large: {_said(error)}")
                return
            if failure in (dialects.Failure.CONSTRAINT, dialects.Failure.OTHER) and isinstance(
                error, IntegrityError | DataError
            ):
                # A duplicate key is what an insert meets when another writer committed the
                # session meanwhile: then it is compared, as a re-run compares it. Else (or
                # again and again) the database refuses a row of it.
                conflicts += 1
                try:
                    there = (
                        isinstance(error, IntegrityError)
                        and session.mode == "insert"
                        and conflicts <= MAX_CONFLICTS
                        and await self._exists(session)
                    )
                except (DBAPIError, OSError) as other:
                    error = other
                    continue
                if not there:
                    self._refuse(session, f"the database refused it: {_said(error)}")
                    return
            elif failure in (dialects.Failure.TRANSIENT, dialects.Failure.CONNECTION):
                session.maybe_committed |= lost and failure is dialects.Failure.CONNECTION
                state.set_exception((type(error), error, error.__traceback__))
                state.upcoming_sleep = policy.wait(state)
                if policy.stop(state):
                    if failure is dialects.Failure.CONNECTION:
                        raise StorageUnavailable(
                            f"{display(self.ledger.url)} could not be reached within the retry budget "
                            f"(retry_timeout={options.retry_timeout:g} s); {session.label} and those "
                            "after it are not imported (run the import again: it skips what it "
                            "finds there, identical). Last failure: "
                            f"{_said(error)}"
                        ) from error
                    self._refuse(
                        session,
                        f"not imported within the retry budget (retry_timeout={options.retry_timeout:g} s, "
                        f"{state.attempt_number} attempts; run the import again): {_said(error)}",
                    )
                    return
                self.ledger.retries += 1
                await asyncio.sleep(state.upcoming_sleep)
                state.prepare_for_next_attempt()
            else:
                raise database_error(self.ledger, error) from error
            try:
                await self._replay(session)
                return
            except (DBAPIError, OSError) as again:
                error = again

    async def _exists(self, session: _Session) -> bool:
        """Whether the target has the session now (another writer committed it)."""
        layout = session.layout
        if isinstance(layout, Log | Grouped):
            exists = select(layout.sessions.c[layout.key[-1]]).where(layout.is_session(session.key))
        elif isinstance(layout, Rows):
            exists = select(layout.table.c[layout.key[-1]]).where(layout.is_row(session.key))
        else:
            exists = select(layout.sessions.c.id).where(layout.sessions.c.id == session.id)
        conn = await self._connection()
        try:
            found = await conn.scalar(exists)
        finally:
            await self._rollback()
        return found is not None

    def _refuse(self, session: _Session, reason: str) -> None:
        """Not imported: ``reason`` says why (after a rollback)."""
        session.mode, session.failed, session.reason = "skip", True, reason

    async def _differs(self, session: _Session, reason: str) -> None:
        await self._rollback()
        session.mode, session.reason = "skip", reason

    def _oversize(self, kind: str, row: Record) -> str | None:
        """Why the row (of record type ``kind``) is too large for the target, checked as
        the stores check their rows (``Ledger.check_statement_size``), before it is sent;
        else ``None``."""
        texts = tuple(row[name] or "" for name in self._long_texts[kind])
        try:
            validate.check_statement_size(texts, self.limit, kind)
        except ValueError:
            owner, layout, role = self._roles[kind]
            if role == "entry":
                noun = layout.entries_name[:-1] if isinstance(layout, Log) else kind
                what = f"its {noun} {row['sequence']}"
            elif role == "checkpoint":
                what = f"its checkpoint version {row['version']}"
            elif isinstance(layout, Rows) and layout.sessions:
                what = f"its {owner.name} row"
            else:
                what = f"its {kind} row"
            return (
                f"{what} needs up to {validate.statement_size(*texts):,} bytes in one statement, more "
                f"than the database's statement limit of {self.limit:,} bytes (statement_limit; MySQL's "
                "max_allowed_packet)"
            )
        return None

    # -- sessions with checkpoints and a raw log (zett's) -----------------------------

    async def _open(self, session: _Session, layout: Checkpointed, row: Record) -> None:
        s = layout.sessions
        conn = await self._connection()
        await conn.begin()
        stored = (await conn.execute(select(s).where(s.c.id == row["id"]).with_for_update())).one_or_none()
        if stored is None:
            below = await _below_mark(conn, layout.mark, session.key, row)
            if below is not None:
                await self._rollback()
                self._refuse(session, below)
                return
            session.mode = "insert"
            session.counter, session.top = (row["last_sequence"], row["updated_at"]), 0
            await conn.execute(s.insert(), row)
            return
        session.mode = "compare"
        deleted = _tombstone_difference(session.tombstone, stored._mapping[layout.marker] is not None)
        difference = _first_difference(row, stored._mapping, self.codecs[layout.head].columns)
        if deleted is not None or difference is not None:
            await self._differs(session, deleted or f"its session row differs in {difference}")

    async def _snapshot(self, session: _Session, layout: Checkpointed, row: Record) -> None:
        await self._flush(session)
        if session.mode == "compare":
            await self._compare_snapshot(session, layout, row)
            return
        if session.mode != "insert":
            return
        too_large = self._oversize(layout.checkpoint, row)
        if too_large is not None:
            await self._rollback()
            self._refuse(session, too_large)
            return
        await (await self._connection()).execute(layout.checkpoints.insert(), row)

    async def _message(self, session: _Session, row: Record, kind: str) -> None:
        """A raw-log entry (a zett message, an OpenAI item, an ADK event), batched."""
        bound = 0
        if session.mode == "insert":
            too_large = self._oversize(kind, row)
            if too_large is not None:
                await self._rollback()
                self._refuse(session, too_large)
                return
            # A batch goes in one statement on MySQL (aiomysql writes a multi-row INSERT):
            # it must stay within the statement limit as a single row does.
            bound = _row_bound(row)
            if session.batch and session.batch_bound + bound > self.limit:
                await self._flush(session)
        if isinstance(session.layout, Checkpointed):
            session.top = max(session.top, int(row["sequence"]))
        session.batch.append(row)
        session.batch_bound += bound
        # The long texts, roughly: enough to keep one statement well within a server's limit.
        session.batch_bytes += sum(len(row[name] or "") for name in self._long_texts[kind])
        if len(session.batch) >= BATCH_ROWS or session.batch_bytes >= BATCH_BYTES:
            await self._flush(session)

    def _bulk_insert(self, conn: AsyncConnection, kind: str) -> BulkInsert:
        bulk = self._bulk.get(kind)
        if bulk is None:
            table = known_tables()[kind]
            bulk = self._bulk[kind] = BulkInsert(table, self.codecs[kind].columns, conn.dialect)
        return bulk

    async def _flush(self, session: _Session) -> None:
        batch, session.batch = session.batch, []
        session.batch_bytes, session.batch_bound = 0, validate.STATEMENT_OVERHEAD
        if not batch:
            return
        conn = await self._connection()
        layout = session.layout
        if isinstance(layout, Log):
            kind, noun = layout.entry, layout.entries_name[:-1]
            table, of_session = layout.entries, layout.of_session(session.key)
        else:
            assert isinstance(layout, Checkpointed)  # only sessions with entries batch
            kind = noun = layout.entry
            table, of_session = layout.entries, layout.entries.c.session_id == session.id
        if session.mode == "insert":
            await self._bulk_insert(conn, kind).execute(conn, batch)
        elif session.mode == "compare":
            stored = {
                row.sequence: row._mapping
                for row in await conn.execute(
                    select(table).where(
                        of_session,
                        table.c.sequence >= batch[0]["sequence"],
                        table.c.sequence <= batch[-1]["sequence"],
                    )
                )
            }
            for row in batch:
                found = stored.get(row["sequence"])
                if found is None:
                    await self._differs(session, f"the database lacks its {noun} {row['sequence']}")
                    return
                difference = _first_difference(row, found, self.codecs[kind].columns)
                if difference is not None:
                    await self._differs(session, f"{noun} {row['sequence']} differs in {difference}")
                    return

    async def _compare_snapshot(self, session: _Session, layout: Checkpointed, row: Record) -> None:
        v = layout.checkpoints
        conn = await self._connection()
        stored = (
            await conn.execute(select(v).where(v.c.session_id == session.id, v.c.version == row["version"]))
        ).one_or_none()
        if stored is None:
            await self._differs(session, f"the database lacks its checkpoint version {row['version']}")
            return
        difference = _first_difference(row, stored._mapping, self.codecs[layout.checkpoint].columns)
        if difference is not None:
            await self._differs(session, f"checkpoint version {row['version']} differs in {difference}")

    async def _close(self, session: _Session, layout: Checkpointed) -> None:
        await self._flush(session)
        conn = await self._connection()
        if session.mode == "insert":
            if session.counter is not None and session.top > int(session.counter[0]):
                # Messages past the input's counter (zett's own store numbered them):
                # SQLite's counter trigger moved the row along; it is
                # imported as it was, on every backend, so a re-import finds it identical.
                last, updated = session.counter
                s = layout.sessions
                await conn.execute(
                    update(s).where(s.c.id == session.id).values(last_sequence=last, updated_at=updated)
                )
            session.mode = "committing"
            await conn.commit()
            session.mode = "imported"
        elif session.mode == "compare":
            r, v = layout.entries, layout.checkpoints
            messages = await conn.scalar(
                select(func.count()).select_from(r).where(r.c.session_id == session.id)
            )
            snapshots = await conn.scalar(
                select(func.count()).select_from(v).where(v.c.session_id == session.id)
            )
            await self._rollback()
            if (messages, snapshots) == (session.messages, session.snapshots):
                session.mode = "identical"
                return
            session.mode = "skip"
            session.reason = (
                f"the database has {messages} messages and {snapshots} checkpoints, "
                f"the input {session.messages} and {session.snapshots}"
            )

    def _count(self, session: _Session) -> FrameworkCounts:
        return self.report.frameworks.setdefault(session.framework, FrameworkCounts())

    def _finish(self, session: _Session) -> None:
        """Count a session (or ADK state row) done, and report it when it was not imported."""
        session.spool.close()
        counts = self._count(session)
        if not session.state:
            self.tracker.advance(sessions=1)
            self._show()
        if session.mode == "identical" and not session.maybe_committed:
            if session.state:
                counts.states_identical += 1
            else:
                self.report.identical += 1
                counts.identical += 1
        elif session.mode in ("imported", "identical"):
            # "identical" after a lost COMMIT: this import's own commit, found on the retry.
            if session.state:
                counts.states += 1
                return
            self.report.imported += 1
            self.report.tombstones += session.tombstone
            self.report.messages += session.messages
            self.report.snapshots += session.snapshots
            counts.imported += 1
            counts.tombstones += session.tombstone
            counts.entries += session.messages + session.entries
        else:
            ending = "not imported" if session.failed else "left as it is"
            if session.failed:
                counts.failed += 1
            else:
                counts.differing += 1
            self._problem(f"{session.label}: {session.reason}; {ending}", failed=session.failed)

    def _show(self, messages: int = 0) -> None:
        """Advance the progress bar by the messages read, a thousand at a time."""
        self._unshown += messages
        if self._unshown >= 1000 or not messages:
            self.tracker.advance(messages=self._unshown)
            self._unshown = 0

    def _problem(self, line: str, *, failed: bool) -> None:
        if failed:
            self.report.failed += 1
        else:
            self.report.differing += 1
        if len(self.report.problems) < KEPT:
            self.report.problems.append(line)
        self.say(line)

    # -- log sessions (OpenAI Agents', ADK's), and rows ----------------------------------

    async def _open_log(self, session: _Session, store: Log | Grouped, row: Record) -> None:
        """A session's counter row: inserted (the rest follows in its transaction), or
        compared with the target's, locked, as a checkpointed session's is."""
        conn = await self._connection()
        await conn.begin()
        stored = (
            await conn.execute(select(store.sessions).where(store.is_session(session.key)).with_for_update())
        ).one_or_none()
        if stored is None:
            too_large = self._oversize(store.head, row) if self._long_texts[store.head] else None
            if too_large is None:
                # A purged tombstone's mark, as for any session: the row must number on.
                too_large = await _below_mark(conn, store.mark, session.key, row)
            if too_large is not None:
                await self._rollback()
                self._refuse(session, too_large)
                return
            session.mode = "insert"
            await conn.execute(store.sessions.insert(), row)
            return
        session.mode = "compare"
        deleted = _tombstone_difference(session.tombstone, stored._mapping[store.marker] is not None)
        difference = _first_difference(row, stored._mapping, self.codecs[store.head].columns)
        if deleted is not None or difference is not None:
            await self._differs(session, deleted or f"its counter row differs in {difference}")

    async def _close_log(self, session: _Session, store: Log) -> None:
        await self._flush(session)
        conn = await self._connection()
        if session.mode == "insert":
            session.mode = "committing"
            await conn.commit()
            session.mode = "imported"
        elif session.mode == "compare":
            entries = await conn.scalar(
                select(func.count()).select_from(store.entries).where(store.of_session(session.key))
            )
            await self._rollback()
            if entries == session.entries:
                session.mode = "identical"
                return
            session.mode = "skip"
            session.reason = f"the database has {entries} {store.entries_name}, the input {session.entries}"

    async def _part(self, session: _Session, kind: str, row: Record) -> None:
        """One row of a grouped session: inserted in its transaction (compared by the
        counts at its end)."""
        if session.mode != "insert":
            return
        too_large = self._oversize(kind, row) if self._long_texts[kind] else None
        if too_large is not None:
            await self._rollback()
            self._refuse(session, too_large)
            return
        await (await self._connection()).execute(known_tables()[kind].insert(), row)

    async def _close_grouped(self, session: _Session, layout: Grouped) -> None:
        conn = await self._connection()
        if session.mode == "insert":
            session.mode = "committing"
            await conn.commit()
            session.mode = "imported"
        elif session.mode == "compare":
            found = {
                part.count: int(
                    await conn.scalar(
                        select(func.count())
                        .select_from(part.table)
                        .where(layout.of_session(part, session.key))
                    )
                    or 0
                )
                for part in layout.parts
            }
            await self._rollback()
            wanted = {part.count: session.parts.get(part.count, 0) for part in layout.parts}
            if found == wanted:
                session.mode = "identical"
                return
            session.mode = "skip"
            session.reason = (
                f"the database has {', '.join(f'{n} {name}' for name, n in found.items())}, the input "
                f"{', '.join(f'{n} {name}' for name, n in wanted.items())}"
            )

    async def _row(self, session: _Session, layout: Rows, row: Record) -> None:
        """One row, in a transaction of its own: inserted (a session's after its mark is
        checked), or compared with the target's (never merged into it)."""
        conn = await self._connection()
        await conn.begin()
        stored = (
            await conn.execute(select(layout.table).where(layout.is_row(session.key)).with_for_update())
        ).one_or_none()
        if stored is not None:
            session.mode = "compare"
            await self._rollback()
            deleted = _tombstone_difference(session.tombstone, layout.is_tombstone(stored._mapping))
            difference = _first_difference(row, stored._mapping, self.codecs[layout.record].columns)
            if deleted is None and difference is None:
                session.mode = "identical"
            else:
                session.mode, session.reason = "skip", deleted or f"differs in {difference}"
            return
        session.mode = "insert"
        too_large = None if session.tombstone else self._oversize(layout.record, row)
        if too_large is None and layout.mark is not None:
            too_large = await _below_mark(conn, layout.mark, session.key, row)
        if too_large is not None:
            await self._rollback()
            self._refuse(session, too_large)
            return
        await conn.execute(layout.table.insert(), row)
        session.mode = "committing"
        await conn.commit()
        session.mode = "imported"


async def _below_mark(conn: AsyncConnection, rule: MarkRule, key: tuple[Any, ...], row: Record) -> str | None:
    """Why a session row to insert under ``key`` would reuse what the id's high-water
    mark (its purged tombstone, :mod:`chatledger.marks`) keeps, else ``None``; the mark
    is removed in the caller's transaction (the row carries the high water on)."""
    base, version = rule.reached(row)
    mark = await marks.take(conn, rule.store, rule.mark_id(key))
    if mark is None or (base >= mark.last_sequence and version > mark.version):
        return None
    return (
        f"its id was deleted in the target database and its tombstone purged, which reached "
        f"sequence {mark.last_sequence} and version {mark.version}; the input's session would use "
        "them again"
    )


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
        # The caller closes the stream (standard input must stay open); one it closed
        # first (an import interrupted by Ctrl-C) has nothing left to detach.
        if not lines.closed:
            lines.detach()


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


def interrupted(report: ImportReport, command: str) -> str:
    """What an interrupted import or copy committed, and that running it again resumes."""
    return (
        f"{report.imported:,} sessions ({report.messages:,} messages) were committed before it; the "
        f"session in progress was rolled back, unless its COMMIT was under way. Run the same {command} "
        "again: it skips the sessions committed (as identical) and imports the rest"
    )


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
            importer = Importer(ledger, say=say, bars=bars)
            stack.enter_context(interrupt.noting(lambda: interrupted(importer.report, "import")))
            return await importer.run(records)
    finally:
        await ledger.close()
