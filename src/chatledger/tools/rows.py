"""The rows of chatledger's export format: what a record's ``row`` holds, and how it
is written to and read from JSON (the format is ``docs/export-format.md``).

A row is every column of one of chatledger's tables (``table.c``) by name, so a
column a later revision adds travels without a change here; timestamps are RFC 3339
UTC strings with microseconds, everything else as JSON has it. The format version
changes only when the meaning of the records does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from ..schema import (
    adk_app_states_table,
    adk_events_table,
    adk_sessions_table,
    adk_user_states_table,
    high_water_marks_table,
    openai_items_table,
    openai_sessions_table,
    raw_messages_table,
    rein_sessions_table,
    sessions_table,
    snapshots_table,
)

#: The ``format`` of the header line.
FORMAT = "chatledger-export"
#: Bumped only when the meaning of the records changes, not when columns are added.
FORMAT_VERSION = 1
#: Record type -> the table its ``row`` belongs to.
TABLES: Mapping[str, Table] = {
    "session": sessions_table,
    "snapshot": snapshots_table,
    "message": raw_messages_table,
    "rein_session": rein_sessions_table,
}

#: The high-water marks of purged tombstones (``mark`` records): apart from
#: :data:`TABLES`, since a file written before they travelled lists no such table.
MARKS = high_water_marks_table

#: The OpenAI Agents SDK's and ADK's tables, by record type: apart from :data:`TABLES`,
#: since a file written before their records travelled lists none of them.
FRAMEWORK_TABLES: Mapping[str, Table] = {
    "openai_session": openai_sessions_table,
    "openai_item": openai_items_table,
    "adk_session": adk_sessions_table,
    "adk_event": adk_events_table,
    "adk_app_state": adk_app_states_table,
    "adk_user_state": adk_user_states_table,
}


Record = dict[str, Any]


class FormatError(ValueError):
    """The input is not a chatledger export this version reads; the message names the line."""


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


@dataclass
class Counts:
    """How many of each a stream holds."""

    sessions: int = 0
    messages: int = 0
    snapshots: int = 0
    rein_sessions: int = 0
    openai_sessions: int = 0
    openai_items: int = 0
    adk_sessions: int = 0
    adk_events: int = 0
    #: ``app:`` and ``user:`` state rows.
    adk_states: int = 0


Say = Callable[[str], None]
