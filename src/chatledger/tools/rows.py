"""The rows of chatledger's export format: what a record's ``row`` holds, and how it
is written to and read from JSON (the format is ``docs/export-format.md``).

A row is every column of one of chatledger's tables (``table.c``) by name, so a
column a later revision adds travels without a change here; timestamps are RFC 3339
UTC strings with microseconds, everything else as JSON has it. The format version
changes only when the meaning of the records does.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from ..kinds import Checkpointed, Grouped, Log, Record, record_tables, registered, session_counts
from ..schema import high_water_marks_table

#: The ``format`` of the header line.
FORMAT = "chatledger-export"
#: Bumped only when the meaning of the records changes, not when columns are added.
FORMAT_VERSION = 1

#: The high-water marks of purged tombstones (``mark`` records): apart from the
#: kinds' tables, since a file written before they travelled lists no such table.
MARKS = high_water_marks_table


def tables() -> dict[str, Table]:
    """Record type -> the table its ``row`` belongs to, of every registered kind, in the
    order the header lists them (:attr:`chatledger.kinds.SessionKind.records`)."""
    return {
        record: table
        for kind in registered()
        for layout in kind.records
        for record, table in record_tables(layout).items()
    }


def optional_records() -> frozenset[str]:
    """The record types a file may lack the tables of: those of the kinds whose records
    travelled after the first version of the format
    (:attr:`chatledger.kinds.SessionKind.optional_in_export`)."""
    return frozenset(
        record
        for kind in registered()
        if kind.optional_in_export
        for layout in kind.records
        for record in record_tables(layout)
    )


def progress_records() -> tuple[frozenset[str], frozenset[str]]:
    """The record types the progress bars advance by: a raw message (the messages bar),
    and a session's last record (the sessions bar)."""
    layouts = [layout for kind in registered() for layout in kind.records]
    entries = frozenset(layout.entry for layout in layouts if isinstance(layout, Checkpointed))
    ends = frozenset(
        layout.end if isinstance(layout, Checkpointed | Log | Grouped) else layout.record
        for layout in layouts
        if session_counts(layout)
    )
    return entries, ends


def progress_totals(counts: Mapping[str, Any]) -> tuple[int, int]:
    """The progress bars' totals from an export's counts: its sessions of every kind (a
    file from before some kinds travelled counts none of theirs), and its raw messages."""
    layouts = [layout for kind in registered() for layout in kind.records]
    sessions = sum(int(counts.get(key, 0)) for layout in layouts for key in session_counts(layout))
    messages = sum(
        int(counts.get(layout.entries_count, 0)) for layout in layouts if isinstance(layout, Checkpointed)
    )
    return sessions, messages


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MARKS",
    "BulkInsert",
    "Counts",
    "FormatError",
    "Record",
    "RowCodec",
    "Say",
    "optional_records",
    "progress_records",
    "progress_totals",
    "tables",
]

#: How many of each a stream holds, by the keys the layouts count under
#: (``sessions``, ``messages``, ``rein_sessions``, ``openai_items``...).
Counts = dict[str, int]


class FormatError(ValueError):
    """The input is not a chatledger export this version reads; the message names the line."""


class RowCodec:
    """One table's rows as JSON objects: every column by name, timestamps as RFC 3339
    UTC strings with microseconds, bytes as standard base64 strings, everything else
    as JSON has it.

    ``columns`` are the columns a file carries (a subset of the table's, for a file
    written before a later revision added some).
    """

    def __init__(self, table: Table, columns: Sequence[str] | None = None) -> None:
        self.table = table
        self.columns = tuple(columns if columns is not None else (column.name for column in table.c))
        self._times = tuple(name for name in self.columns if _python_type(table, name) is datetime)
        self._bytes = tuple(name for name in self.columns if _python_type(table, name) is bytes)
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
        for name in self._bytes:
            value = record[name]
            if value is not None:
                record[name] = base64.b64encode(value).decode("ascii")
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
        for name in self._bytes:
            value = values[name]
            if value is not None:
                try:
                    values[name] = base64.b64decode(value, validate=True)
                except ValueError:
                    raise FormatError(f"{where}: {self.table.name}.{name} must be base64") from None
        return values

    def _check(self, pattern: tuple[type, ...], where: str) -> None:
        for (name, kind, nullable), found in zip(self._checks, pattern, strict=True):
            if found is type(None):
                if not nullable:
                    raise FormatError(f"{where}: {self.table.name}.{name} cannot be null")
            elif found is not (str if kind in (datetime, bytes) else kind):
                wanted = {datetime: "an RFC 3339 timestamp string", bytes: "a base64 string"}.get(
                    kind, kind.__name__
                )
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
        # Positional (asyncpg, aiomysql, aiosqlite), or by name (psycopg's pyformat),
        # where the insert's parameters are named after its columns.
        self._named = compiled.positiontup is None
        self._order = tuple(columns if compiled.positiontup is None else compiled.positiontup)
        self._processors = tuple(
            (index, processor)
            for index, name in enumerate(self._order)
            if (processor := table.c[name].type.dialect_impl(dialect).bind_processor(dialect)) is not None
        )

    async def execute(self, conn: AsyncConnection, rows: Sequence[Record]) -> None:
        """Insert ``rows`` (decoded records' rows) in one ``executemany``."""
        order, processors = self._order, self._processors
        parameters: list[Any] = []
        for row in rows:
            values = [row[name] for name in order]
            for index, processor in processors:
                value = values[index]
                if value is not None:
                    values[index] = processor(value)
            parameters.append(dict(zip(order, values, strict=True)) if self._named else tuple(values))
        await conn.exec_driver_sql(self.sql, parameters)


Say = Callable[[str], None]
