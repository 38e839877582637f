"""The OpenAI Agents SDK's sessions as the tools handle them: :class:`Operations` of the
``openai`` kind (:data:`chatledger.kinds.OPENAI`), over the adapter's own reads and
guarded deletes (:mod:`.items`), and the SDK's own tables read to move in
(``chatledger import --openai-sdk``).

The SDK's ``SQLAlchemySession`` and ``SQLiteSession`` keep a session table
(``session_id``) and a message table (``id``, ``session_id``, ``message_data`` as
JSON text, ``created_at``), named ``agent_sessions`` and ``agent_messages`` by
default. ``agent_sessions`` is also chatledger's own table (zett's sessions), so the
SDK's tables are read from a database of their own, and their columns are checked
first: a source whose ``agent_sessions`` has chatledger's counter columns is refused,
whatever it is called. Each session becomes the rows ``LedgerSession.add_items``
would have written: its items in the SDK's order (``created_at``, then ``id``),
numbered 1..n, at the SDK's times (the session's are its session row's
``created_at`` and ``updated_at``, the last activity a user sees; without that row,
its first and last item's), each item's id derived from the SDK's row id, so a re-run yields the same rows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Table, Text, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import validate
from ..errors import ConfigurationError
from ..kinds import Field, Found, Listing, Scope
from ..kinds.on_ledger import OnLedger
from ..kinds.showing import compact, cut, heading, numbered, when
from ..selection import Progress, Selection
from . import items as _items

#: The SDK's message columns the import reads.
MESSAGE_COLUMNS = frozenset({"id", "session_id", "message_data", "created_at"})
#: Columns of chatledger's own ``agent_sessions``: a source with them is not the SDK's.
LEDGER_COLUMNS = frozenset({"last_sequence", "base_sequence", "snapshot_version"})
#: An item's time when the SDK's ``created_at`` is unreadable and none came before it.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The namespace of the imported items' ids: each is a UUIDv5 of its session and the SDK's row id.
_ITEM_IDS = uuid.uuid5(uuid.NAMESPACE_URL, "chatledger:import:openai-sdk")


def _content_text(content: Any) -> list[str]:
    """A message's content (a string, or a list of parts) as lines."""
    if isinstance(content, str):
        return [cut(content)] if content else []
    lines: list[str] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            lines.append(cut(part["text"]))
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            lines.append(f"refused: {cut(part['refusal'])}")
        else:
            lines.append(f"({kind or 'part'})")
    return lines


def describe(item: Any, tools: dict[str, str]) -> tuple[str, list[str]]:
    """One input item as (role or kind, lines): a message's role and text, a tool call
    by name and arguments, a function output (by the name of its call, kept in
    ``tools`` by call id), a reasoning summary; any other item as its type and JSON."""
    if not isinstance(item, dict):
        return "?", [cut(compact(item))]
    kind = item.get("type") or ("message" if "role" in item else "?")
    if kind == "message":
        return str(item.get("role", "?")), _content_text(item.get("content")) or ["(empty)"]
    if kind == "function_call":
        name = str(item.get("name", "?"))
        if isinstance(item.get("call_id"), str):
            tools[item["call_id"]] = name
        return "tool call", [f"-> {name}({cut(compact(item.get('arguments', '')))})"]
    if kind == "function_call_output":
        name = tools.get(str(item.get("call_id")), str(item.get("call_id", "?")))
        return "tool", [f"{name}: {cut(compact(item.get('output', '')))}"]
    if kind == "reasoning":
        summary = [part.get("text", "") for part in item.get("summary") or [] if isinstance(part, dict)]
        return "reasoning", [cut(text) for text in summary if text] or ["(no summary)"]
    if isinstance(item.get("name"), str):  # other tool calls (MCP, custom tools)
        return str(kind), [f"-> {item['name']}({cut(compact(item.get('arguments', item.get('input', ''))))})"]
    return str(kind), [cut(compact(item))]


class Operations(OnLedger):
    """The OpenAI Agents SDK's sessions of one database (:class:`chatledger.kinds.Operations`)."""

    async def listing(self, limit: int) -> Listing:
        """The ``limit`` sessions written to last (a cleared one nothing was added to since
        is left out: the SDK sees it empty)."""
        tombstone_first = self.ledger.backend.order_live_by_tombstone

        async def work(conn: AsyncConnection) -> list[_items.Summary]:
            return await _items.list_recent(conn, limit, tombstone_first=tombstone_first)

        rows = [
            {
                "id": summary.id,
                "items": summary.items,
                "popped": summary.popped,
                "created_at": summary.created_at.isoformat(),
                "updated_at": summary.updated_at.isoformat(),
            }
            for summary in await self.ledger.read(work)
        ]
        fields = (
            Field("id", "id"),
            Field("items", "items", right=True),
            Field("popped", "popped", right=True),
            Field("updated_at", "last active (UTC)", when=True),
        )
        return Listing("openai sessions, newest activity first", fields, rows)

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        summary = await _items.summary(self.ledger, session_id)
        if summary is None:
            return []
        popped = f" ({summary.popped} popped, not shown)" if summary.popped else ""
        lines = [
            f"openai session {session_id}",
            f"  {'items':<12}{summary.items}{popped}",
            f"  {'created':<12}{when(summary.created_at)} UTC",
            f"  {'last active':<12}{when(summary.updated_at)} UTC",
        ]
        shown = await _items.read(self.ledger, session_id, messages)
        total = max(summary.items, len(shown))
        lines.append(heading("items", total, len(shown)))
        tools: dict[str, str] = {}
        for number, item in enumerate(shown, start=total - len(shown) + 1):
            who, text = describe(item, tools)
            lines += numbered(number, who, text)
        return [lines]

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        held = await _items.summary(self.ledger, session_id)
        return [] if held is None else [Found((session_id,), held.items)]

    async def delete(self, found: Found) -> bool:
        return await _items.delete_session(self.ledger, found.id)

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        return await _items.purge_sessions(self.ledger, selection, size=size, progress=progress)

    @classmethod
    async def source(cls, conn: AsyncConnection, options: Mapping[str, str]) -> SdkTables:
        """The SDK's tables on ``conn``, checked, and their session ids (each checked as
        ``LedgerSession`` checks one, before anything is written)."""
        sessions = options.get("sessions_table", "agent_sessions")
        messages = options.get("messages_table", "agent_messages")
        await conn.run_sync(_check_tables, sessions, messages)
        table = Table(
            messages,
            MetaData(),
            Column("id", Integer),
            Column("session_id", Text),
            Column("message_data", Text),
            Column("created_at", Text),
        )
        ids = [
            validate.identifier(str(session_id), "session_id")
            for session_id in await conn.scalars(
                select(table.c.session_id).distinct().order_by(table.c.session_id)
            )
        ]
        found = SdkTables(conn, table, ids)
        if await conn.run_sync(_session_columns, sessions) >= {"session_id", "created_at", "updated_at"}:
            rows = Table(
                sessions,
                MetaData(),
                Column("session_id", Text),
                Column("created_at", Text),
                Column("updated_at", Text),
            )
            for row in await conn.execute(select(rows.c.session_id, rows.c.created_at, rows.c.updated_at)):
                found.session_times[str(row.session_id)] = (row.created_at, row.updated_at)
        return found


def _session_columns(conn: Connection, sessions: str) -> set[str]:
    """The columns of the SDK's session table; none when the source has no such table."""
    found = inspect(conn)
    if sessions not in found.get_table_names():
        return set()
    return {column["name"] for column in found.get_columns(sessions)}


def _check_tables(conn: Connection, sessions: str, messages: str) -> None:
    found = inspect(conn)
    names = set(found.get_table_names())
    if messages not in names:
        raise ConfigurationError(
            f"the source has no table {messages!r}: name the OpenAI SDK's message table "
            "(SQLAlchemySession's messages_table, SQLiteSession's messages_table)"
        )
    columns = {column["name"] for column in found.get_columns(messages)}
    if not columns >= MESSAGE_COLUMNS:
        raise ConfigurationError(
            f"table {messages!r} of the source lacks {sorted(MESSAGE_COLUMNS - columns)}: it is not "
            "the OpenAI SDK's message table"
        )
    if sessions in names:
        session_columns = {column["name"] for column in found.get_columns(sessions)}
        if session_columns & LEDGER_COLUMNS or "session_id" not in session_columns:
            raise ConfigurationError(
                f"table {sessions!r} of the source is chatledger's own {sessions} (zett's sessions), not "
                "the OpenAI SDK's: give the DSN of the database the SDK wrote"
            )


def _instant(value: object, fallback: datetime) -> datetime:
    """A ``created_at`` of the SDK's as UTC: a ``datetime`` (naive ones are UTC, as
    ``CURRENT_TIMESTAMP`` writes them), or SQLite's text; else ``fallback``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return fallback
    if not isinstance(value, datetime):
        return fallback
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SdkTables:
    """The SDK's message table at the source, read a session at a time
    (:class:`chatledger.kinds.Source`)."""

    def __init__(self, conn: AsyncConnection, messages: Table, ids: list[str]) -> None:
        self.conn, self.messages, self.ids = conn, messages, ids
        #: Rows whose ``message_data`` is not JSON (the SDK skips them too), or not an
        #: item chatledger stores (a JSON object).
        self.skipped = 0
        #: The SDK's own ``created_at`` and ``updated_at`` of each session (its session
        #: table's), where it has them: the times a user sees, kept as they are.
        self.session_times: dict[str, tuple[object, object]] = {}

    async def rows(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        messages = self.messages
        for session_id in self.ids:
            found = await self.conn.execute(
                select(messages.c.id, messages.c.message_data, messages.c.created_at)
                .where(messages.c.session_id == session_id)
                .order_by(messages.c.created_at, messages.c.id)
            )
            entries: list[dict[str, Any]] = []
            at = first = latest = _EPOCH
            for row in found:
                try:
                    text = _items.encode(json.loads(row.message_data), "message_data")
                except (TypeError, ValueError):
                    self.skipped += 1
                    continue
                at = _instant(row.created_at, at)
                first, latest = (at, at) if not entries else (first, max(latest, at))
                entries.append(
                    {
                        "session_id": session_id,
                        "sequence": len(entries) + 1,
                        "item_id": str(uuid.uuid5(_ITEM_IDS, f"{session_id}\x00{row.id}")),
                        "item_json": text,
                        "created_at": at,
                        "retracted_at": None,
                    }
                )
            if not entries:
                continue  # nothing chatledger would store (add_items of no items writes nothing)
            # The SDK touches its session's updated_at on every add, also one whose item was
            # popped later: its last activity, and the order of a list of sessions.
            created, updated = self.session_times.get(session_id, (None, None))
            first, latest = _instant(created, first), _instant(updated, latest)
            yield (
                "openai_session",
                {
                    "id": session_id,
                    "last_sequence": len(entries),
                    "generation": 1,
                    "base_sequence": 0,
                    "created_at": first,
                    "updated_at": latest,
                    "deleted_at": None,
                },
            )
            for entry in entries:
                yield "openai_item", entry
