"""The OpenAI Agents SDK's and ADK's sessions in the export format: a counter row and
its raw log, and ADK's shared ``app:``/``user:`` state rows.

Both frameworks keep a session as one counter row (``last_sequence`` and
``base_sequence``, a tombstone's ``deleted_at``) and its entries numbered gap-free
from ``base_sequence + 1`` to ``last_sequence`` (an OpenAI item popped stays, retracted;
a clear or delete erases them and moves ``base_sequence`` up to ``last_sequence``). A
:class:`LogStore` names the tables, key columns and record types of one of them, so
the export and the import treat the two alike and check that numbering as the
adapters keep it (:mod:`chatledger.openai_agents.items`, :mod:`chatledger.adk.rows`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, or_

from ..schema import (
    adk_app_states_table,
    adk_events_table,
    adk_sessions_table,
    adk_user_states_table,
    openai_items_table,
    openai_sessions_table,
)
from .rows import Record


@dataclass(frozen=True)
class LogStore:
    """One framework's sessions: a counter row per session and its entries."""

    #: The framework's name in reports: "OpenAI Agents", "ADK".
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

    def key_of(self, row: Mapping[Any, Any]) -> tuple[Any, ...]:
        """A counter row's key values."""
        return tuple(row[name] for name in self.key)

    def entry_session(self, row: Mapping[Any, Any]) -> tuple[Any, ...]:
        """The key of the session an entry belongs to."""
        return tuple(row[name] for name in self.entry_key)

    def is_session(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return and_(*(self.sessions.c[name] == value for name, value in zip(self.key, key, strict=True)))

    def of_session(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return and_(*(self.entries.c[name] == value for name, value in zip(self.entry_key, key, strict=True)))

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
        """The session, for a report: its id (and ADK's app and user)."""
        *scope, id = key
        where = f" (app {scope[0]!r}, user {scope[1]!r})" if scope else ""
        return f"{self.framework} session {id!r}{where}"

    def end_record(self, key: tuple[Any, ...], entries: int) -> Record:
        return {"type": self.end, **dict(zip(self.key, key, strict=True)), self.entries_name: entries}


OPENAI = LogStore(
    framework="OpenAI Agents",
    head="openai_session",
    entry="openai_item",
    end="openai_session_end",
    entries_name="items",
    sessions=openai_sessions_table,
    entries=openai_items_table,
    key=("id",),
    entry_key=("session_id",),
)

ADK = LogStore(
    framework="ADK",
    head="adk_session",
    entry="adk_event",
    end="adk_session_end",
    entries_name="events",
    sessions=adk_sessions_table,
    entries=adk_events_table,
    key=("app_name", "user_id", "id"),
    entry_key=("app_name", "user_id", "session_id"),
)

#: The stores by each of their record types.
LOG_STORES: Mapping[str, LogStore] = {
    kind: store for store in (OPENAI, ADK) for kind in (store.head, store.entry, store.end)
}


@dataclass(frozen=True)
class StateTable:
    """ADK's shared state of one scope: ``app:`` (by app) or ``user:`` (by app and user)."""

    record: str
    table: Table
    key: tuple[str, ...]
    #: In reports: "app: state", "user: state".
    name: str

    def is_row(self, key: tuple[Any, ...]) -> ColumnElement[bool]:
        return and_(*(self.table.c[name] == value for name, value in zip(self.key, key, strict=True)))

    def label(self, key: tuple[Any, ...]) -> str:
        scope = f"app {key[0]!r}" + (f", user {key[1]!r}" if len(key) > 1 else "")
        return f"ADK {self.name} of {scope}"


STATES: Mapping[str, StateTable] = {
    "adk_app_state": StateTable("adk_app_state", adk_app_states_table, ("app_name",), "app: state"),
    "adk_user_state": StateTable(
        "adk_user_state", adk_user_states_table, ("app_name", "user_id"), "user: state"
    ),
}
