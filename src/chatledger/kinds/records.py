"""How a kind's rows travel in chatledger's export format (``docs/export-format.md``):
the record types of its tables and the shape they take, as data.

Four shapes serve every kind; the export (:mod:`chatledger.tools.export`) and the
import (:mod:`chatledger.tools.importer`) handle each shape once, whatever kind
declares it:

- :class:`Checkpointed`: a counter row, its checkpoints, its raw log and an end
  record (zett's sessions);
- :class:`Log`: a counter row, its entries numbered gap-free from
  ``base_sequence + 1`` to ``last_sequence``, and an end record (the OpenAI Agents
  SDK's items, ADK's events);
- :class:`Rows`: one record per row (rein's sessions, ADK's ``app:``/``user:`` state);
- :class:`Grouped`: a session row, the rows of other tables that name it (keyed by
  names of their own, in no sequence) and an end record counting each table's rows
  (LangGraph's threads: checkpoints, channel values, pending writes).

A session shape names the mark its rows must number on from (:class:`MarkRule`), so an
import never reuses what a purged tombstone kept (:mod:`chatledger.marks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, Text, and_, or_

from .. import marks

#: A record of the export: one JSON object.
Record = dict[str, Any]


@dataclass(frozen=True)
class MarkRule:
    """Which mark a session row to import must number on from: the mark store, the
    row's version column, and its base sequence column (``None``: 0)."""

    store: int
    version: str
    base: str | None = "base_sequence"

    def mark_id(self, key: tuple[Any, ...]) -> str:
        """The id the mark of the session ``key`` is kept under."""
        return marks.key_id(tuple(str(value) for value in key))

    def reached(self, row: Mapping[str, Any]) -> tuple[int, int]:
        """The row's base sequence and version (a file lacking a column: its default)."""
        base = 0 if self.base is None else int(row.get(self.base) or 0)
        return base, int(row.get(self.version, 1))


def long_texts(table: Table) -> tuple[str, ...]:
    """The columns of ``table`` that hold long texts (:data:`chatledger.types.LongText`,
    a ``TEXT``): what a row is checked against the statement limit by."""
    return tuple(column.name for column in table.c if isinstance(column.type, Text))


def _scope(words: tuple[str, ...], values: tuple[Any, ...]) -> str:
    """``app 'shop', user 'ann'``: the parts of a key named by ``words``."""
    return ", ".join(f"{word} {value!r}" for word, value in zip(words, values, strict=True))


def _matching(table: Table, columns: tuple[str, ...], key: tuple[Any, ...]) -> ColumnElement[bool]:
    return and_(*(table.c[name] == value for name, value in zip(columns, key, strict=True)))


@dataclass(frozen=True)
class Rows:
    """One record per row of ``table``: a session each (``sessions``), or rows a kind's
    sessions share (ADK's ``app:``/``user:`` state), imported each in a transaction of
    its own, compared with the target's row when it has one."""

    record: str
    table: Table
    key: tuple[str, ...]
    #: The key of the export's counts these rows add to (``rein_sessions``, ``adk_states``).
    count: str
    #: What a row is called in reports: "rein session", "ADK app: state".
    noun: str
    #: Rows that are sessions (counted as sessions, tombstones and marks apply); else
    #: state the sessions share.
    sessions: bool = True
    #: The column that tells a tombstone (``None``: its rows are never tombstones), a
    #: tombstone's being NULL with ``marked_by_null``, set otherwise.
    marker: str | None = None
    marked_by_null: bool = False
    mark: MarkRule | None = None
    #: The words a report names the key's columns by (rows that are not sessions):
    #: ``("app", "user")``.
    key_words: tuple[str, ...] = ()
    #: What a summary counts these rows as, with the kind's other such rows
    #: ("app:/user: state row"); "" for :attr:`noun`.
    counted_as: str = ""

    def key_of(self, row: Mapping[Any, Any]) -> tuple[Any, ...]:
        return tuple(row[name] for name in self.key)

    def is_row(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return _matching(self.table, self.key, key)

    def is_tombstone(self, row: Mapping[Any, Any]) -> bool:
        return self.marker is not None and (row[self.marker] is None) == self.marked_by_null

    def label(self, key: tuple[Any, ...]) -> str:
        """The row, for a report: the noun and its key."""
        if self.sessions:
            return f"{self.noun} {key[-1]!r}"
        return f"{self.noun} of {_scope(self.key_words, key)}"


@dataclass(frozen=True)
class Log:
    """A session as a counter row and its entries (``base_sequence + 1`` to
    ``last_sequence``, gap-free: an entry popped stays, retracted; a clear or delete
    erases them and moves ``base_sequence`` up to ``last_sequence``), then an end record
    counting them."""

    #: The kind's name in reports: "OpenAI Agents", "ADK".
    framework: str
    #: Record types: the counter row, one entry, the session's end.
    head: str
    entry: str
    end: str
    #: What an entry is called (the end record's count key, and in reports): "items".
    entries_name: str
    sessions: Table
    entries: Table
    #: The counter row's key columns, and the entry's columns naming its session (in
    #: the same order).
    key: tuple[str, ...]
    entry_key: tuple[str, ...]
    #: The keys of the export's counts: its sessions and its entries.
    count: str
    entries_count: str
    mark: MarkRule
    #: The column a tombstone has set.
    marker: str = "deleted_at"
    #: The words a report names the key's columns before the id by: ``("app", "user")``.
    key_words: tuple[str, ...] = ()

    def key_of(self, row: Mapping[Any, Any]) -> tuple[Any, ...]:
        """A counter row's key values."""
        return tuple(row[name] for name in self.key)

    def entry_session(self, row: Mapping[Any, Any]) -> tuple[Any, ...]:
        """The key of the session an entry belongs to."""
        return tuple(row[name] for name in self.entry_key)

    def is_session(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return _matching(self.sessions, self.key, key)

    def of_session(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return _matching(self.entries, self.entry_key, key)

    def after(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        """Counter rows after ``key`` in key order (a page's keyset condition)."""
        columns = [self.sessions.c[name] for name in self.key]
        terms = [
            and_(
                *(column == value for column, value in zip(columns[:n], key[:n], strict=True)),
                columns[n] > key[n],
            )
            for n in range(len(columns))
        ]
        return or_(*terms)

    def label(self, key: tuple[Any, ...]) -> str:
        """The session, for a report: its id (and the rest of its key: ADK's app and user)."""
        *scope, id = key
        where = f" ({_scope(self.key_words, tuple(scope))})" if scope else ""
        return f"{self.framework} session {id!r}{where}"

    def end_record(self, key: tuple[Any, ...], entries: int) -> Record:
        return {"type": self.end, **dict(zip(self.key, key, strict=True)), self.entries_name: entries}


@dataclass(frozen=True)
class Checkpointed:
    """A session as a counter row, its checkpoints and its raw log, then an end record
    counting both; the raw log's sequences may leave gaps below the counter (an
    outside writer's, or zett's own store's), and a message past the counter puts the
    row back as the input has it."""

    framework: str
    head: str
    checkpoint: str
    entry: str
    end: str
    sessions: Table
    checkpoints: Table
    entries: Table
    #: The keys of the export's counts: sessions, entries, checkpoints.
    count: str
    entries_count: str
    checkpoints_count: str
    mark: MarkRule
    marker: str = "deleted_at"


@dataclass(frozen=True)
class Part:
    """One table of a :class:`Grouped` session's rows: its record type, the table, and
    the key of the export's counts (and of the end record) that counts its rows."""

    record: str
    table: Table
    count: str


@dataclass(frozen=True)
class Grouped:
    """A session as its row and the rows of other tables that name it (by
    ``session_column``), each table's rows in its key order, in no sequence of the
    session's, then an end record counting each table's rows. A session is imported
    whole in one transaction, or, when the target holds its row, compared with it: its
    row column by column, its other rows by their counts. Reports count its first
    part's rows as its entries."""

    #: The kind's name in reports: "LangGraph".
    framework: str
    #: Record types: the session row and its end.
    head: str
    end: str
    sessions: Table
    parts: tuple[Part, ...]
    #: The key of the export's counts that counts its sessions.
    count: str
    mark: MarkRule
    #: The column of every part's table that names the session (its id).
    session_column: str = "session_id"
    #: The column a tombstone has set.
    marker: str = "deleted_at"
    #: What a session is called in reports: "thread".
    noun: str = "session"

    @property
    def key(self) -> tuple[str, ...]:
        return ("id",)

    def key_of(self, row: Mapping[Any, Any]) -> tuple[Any, ...]:
        return (row["id"],)

    def is_session(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return _matching(self.sessions, ("id",), key[-1:])

    def of_session(self, part: Part, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return _matching(part.table, (self.session_column,), key[-1:])

    def label(self, key: tuple[Any, ...]) -> str:
        return f"{self.framework} {self.noun} {key[-1]!r}"

    def end_record(self, key: tuple[Any, ...], counted: Mapping[str, int]) -> Record:
        return {"type": self.end, "id": key[-1], **{part.count: counted[part.count] for part in self.parts}}


#: Every shape a kind's records take.
Layout = Checkpointed | Log | Rows | Grouped


def record_tables(layout: Layout) -> dict[str, Table]:
    """Record type -> table, of one layout, in the order the header lists them."""
    if isinstance(layout, Checkpointed):
        return {
            layout.head: layout.sessions,
            layout.checkpoint: layout.checkpoints,
            layout.entry: layout.entries,
        }
    if isinstance(layout, Log):
        return {layout.head: layout.sessions, layout.entry: layout.entries}
    if isinstance(layout, Grouped):
        return {layout.head: layout.sessions, **{part.record: part.table for part in layout.parts}}
    return {layout.record: layout.table}


def session_counts(layout: Layout) -> tuple[str, ...]:
    """The keys of the export's counts that count sessions (the progress bar's total)."""
    if isinstance(layout, Rows):
        return (layout.count,) if layout.sessions else ()
    return (layout.count,)


def layout_counts(layout: Layout) -> tuple[str, ...]:
    """Every key of the export's counts a layout adds to, in the order they are listed."""
    if isinstance(layout, Checkpointed):
        return (layout.count, layout.entries_count, layout.checkpoints_count)
    if isinstance(layout, Log):
        return (layout.count, layout.entries_count)
    if isinstance(layout, Grouped):
        return (layout.count, *(part.count for part in layout.parts))
    return (layout.count,)
