"""Google ADK's sessions as the tools handle them: :class:`Operations` of the ``adk``
kind (:data:`chatledger.kinds.ADK`), over the adapter's own reads and guarded deletes
(:mod:`.rows`), and ADK's own tables read to move in (``chatledger import --adk``).

ADK's ``DatabaseSessionService`` (schema v1) keeps ``sessions`` (session-scoped
state), ``events`` (each event as JSON in ``event_data``), ``app_states`` and
``user_states``. Each session becomes the rows :class:`~chatledger.adk.LedgerSessionService`
would have written: its events in ADK's order (``Event.timestamp``, then
``Event.id``), numbered 1..n; partial events and ``temp:`` state keys dropped, as
both services drop them on append; ADK's times (``create_time``, ``update_time``, an
event's timestamp), so a re-run yields the same rows. Then the ``app:``/``user:``
state rows. A session's scope is its app and user (``app_name``, ``user_id``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.schemas import v1
from sqlalchemy import Table, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import validate
from ..errors import ConfigurationError
from ..kinds import ADK_OWN_TABLES, Field, Found, Listing, Scope
from ..kinds.on_ledger import OnLedger
from ..kinds.showing import cut, heading, numbered, when
from ..selection import Progress, Selection
from . import rows
from .rows import Key

#: ADK's tables and the columns the import reads.
ADK_TABLES = ADK_OWN_TABLES


def describe(event: Event) -> list[str]:
    """One event as lines: its text parts, function calls (name and arguments) and
    responses, other parts by kind, and the keys of its state delta."""
    lines: list[str] = []
    for part in (event.content.parts or []) if event.content else []:
        if part.text is not None:
            lines.append(("(thought) " if part.thought else "") + cut(part.text))
        elif part.function_call is not None:
            call = part.function_call
            lines.append(f"-> {call.name}({json.dumps(call.args or {}, ensure_ascii=False)})")
        elif part.function_response is not None:
            response = part.function_response
            lines.append(
                f"<- {response.name}: {cut(json.dumps(response.response or {}, ensure_ascii=False))}"
            )
        else:
            fields = [name for name, value in part if value is not None]
            lines.append(f"({', '.join(fields) or 'empty part'})")
    delta = event.actions.state_delta if event.actions else {}
    if delta:
        lines.append(f"state delta: {', '.join(sorted(delta))}")
    return lines or ["(empty)"]


def _scoped(state: dict[str, Any], prefix: str | None) -> dict[str, Any]:
    """The keys of ADK's merged state with ``prefix`` (``None``: the session's own)."""
    if prefix is None:
        return {key: value for key, value in state.items() if not key.startswith(("app:", "user:"))}
    return {key: value for key, value in state.items() if key.startswith(prefix)}


def _where(key: Key) -> str:
    return f"of app {key.app_name!r}, user {key.user_id!r}"


class Operations(OnLedger):
    """ADK's sessions of one database (:class:`chatledger.kinds.Operations`)."""

    async def listing(self, limit: int) -> Listing:
        """The first ``limit`` sessions in key order (app, user, id): ADK's table has no
        index by activity."""

        async def work(conn: AsyncConnection) -> list[rows.Stored]:
            return await rows.list_by_key(conn, limit)

        found = [
            {
                "app_name": stored.key.app_name,
                "user_id": stored.key.user_id,
                "id": stored.key.id,
                "events": stored.events,
                "created_at": stored.created_at.isoformat(),
                "updated_at": stored.updated_at.isoformat(),
            }
            for stored in await self.ledger.read(work)
        ]
        fields = (
            Field("app_name", "app"),
            Field("user_id", "user"),
            Field("id", "id"),
            Field("events", "events", right=True),
            Field("updated_at", "last active (UTC)", when=True),
        )
        return Listing("adk sessions, by app, user and id", fields, found)

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        shown = []
        for stored in await rows.find(self.ledger, session_id, scope.get("app_name"), scope.get("user_id")):
            loaded = await rows.load(self.ledger, stored.key, messages, None)
            if loaded is None:  # deleted since it was found
                continue
            key = stored.key
            lines = [
                f"adk session {key.id} (app {key.app_name!r}, user {key.user_id!r})",
                f"  {'events':<12}{stored.events}",
                f"  {'created':<12}{when(stored.created_at)} UTC",
                f"  {'last active':<12}{when(loaded.head.updated_at)} UTC",
            ]
            state = loaded.head.state
            for label, prefix in (("state", None), ("app: state", "app:"), ("user: state", "user:")):
                part = _scoped(state, prefix)
                lines.append(f"  {label:<12}{cut(json.dumps(part, ensure_ascii=False)) if part else '-'}")
            events = [Event.model_validate_json(text) for text in loaded.events]
            total = max(stored.events, len(events))
            lines.append(heading("events", total, len(events)))
            for number, event in enumerate(events, start=total - len(events) + 1):
                lines += numbered(number, event.author or "?", describe(event))
            shown.append(lines)
        return shown

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        found = await rows.find(self.ledger, session_id, scope.get("app_name"), scope.get("user_id"))
        return [
            Found((stored.key.app_name, stored.key.user_id, stored.key.id), stored.events, _where(stored.key))
            for stored in found
        ]

    async def delete(self, found: Found) -> bool:
        return await rows.delete_session(self.ledger, Key(*found.key))

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        return await rows.purge_sessions(
            self.ledger,
            selection,
            app_name=scope.get("app_name"),
            user_id=scope.get("user_id"),
            size=size,
            progress=progress,
        )

    @classmethod
    async def source(cls, conn: AsyncConnection, options: Mapping[str, str]) -> AdkTables:
        """ADK's tables on ``conn`` (schema v1), checked."""
        await conn.run_sync(_check_tables)
        return AdkTables(conn, {name: v1.Base.metadata.tables[name] for name in ADK_TABLES})


def _check_tables(conn: Connection) -> None:
    found = inspect(conn)
    names = set(found.get_table_names())
    if "adk_sessions" in names and "sessions" not in names:
        raise ConfigurationError(
            "the source is a chatledger database (adk_sessions), not ADK's DatabaseSessionService's: "
            "give the DSN of the database ADK wrote (chatledger copy moves chatledger's own)"
        )
    for table, wanted in ADK_TABLES.items():
        if table not in names:
            raise ConfigurationError(
                f"the source has no table {table!r}: it is not a database ADK's DatabaseSessionService wrote"
            )
        columns = {column["name"] for column in found.get_columns(table)}
        if not columns >= wanted:
            raise ConfigurationError(
                f"table {table!r} of the source lacks {sorted(wanted - columns)}: it is not ADK's "
                "DatabaseSessionService schema v1 (migrate an older one with ADK's own migration first)"
            )


def _utc(value: datetime) -> datetime:
    # ADK stores naive UTC times on SQLite and MySQL.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class AdkTables:
    """ADK's tables at the source, read a session at a time (:class:`chatledger.kinds.Source`)."""

    def __init__(self, conn: AsyncConnection, tables: Mapping[str, Table]) -> None:
        self.conn, self.tables = conn, tables
        #: Partial events: never stored, skipped.
        self.skipped = 0

    async def rows(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        sessions, events = self.tables["sessions"], self.tables["events"]
        keys = (
            await self.conn.execute(
                select(sessions).order_by(sessions.c.app_name, sessions.c.user_id, sessions.c.id)
            )
        ).all()
        for session in keys:
            found = await self.conn.execute(
                select(events.c.id, events.c.invocation_id, events.c.event_data).where(
                    events.c.app_name == session.app_name,
                    events.c.user_id == session.user_id,
                    events.c.session_id == session.id,
                )
            )
            kept: list[Event] = []
            for row in found:
                event = Event.model_validate(
                    {**(row.event_data or {}), "id": row.id, "invocation_id": row.invocation_id}
                )
                if event.partial:
                    self.skipped += 1
                    continue
                kept.append(event)
            kept.sort(key=lambda event: (event.timestamp, event.id))
            state_version = 1
            entries: list[dict[str, Any]] = []
            for sequence, event in enumerate(kept, start=1):
                delta = event.actions.state_delta if event.actions else {}
                split = _session_util.extract_json_safe_state_delta(delta or {})
                state_version += 1 if split["session"] else 0
                if delta:  # temp: keys are never stored (LedgerSessionService trims them too)
                    event.actions.state_delta = {k: v for k, v in delta.items() if not k.startswith("temp:")}
                entries.append(
                    {
                        "app_name": session.app_name,
                        "user_id": session.user_id,
                        "session_id": session.id,
                        "sequence": sequence,
                        "event_id": event.id,
                        "timestamp": event.timestamp,
                        "event_json": event.model_dump_json(exclude_none=True),
                        "created_at": datetime.fromtimestamp(event.timestamp, UTC),
                    }
                )
            yield (
                "adk_session",
                {
                    "app_name": session.app_name,
                    "user_id": session.user_id,
                    "id": session.id,
                    "last_sequence": len(entries),
                    "base_sequence": 0,
                    "state_json": validate.json_text(dict(session.state or {}), "state"),
                    "state_version": state_version,
                    "created_at": _utc(session.create_time),
                    "updated_at": _utc(session.update_time),
                    "deleted_at": None,
                },
            )
            for entry in entries:
                yield "adk_event", entry
        for record, name, key_columns in (
            ("adk_app_state", "app_states", ("app_name",)),
            ("adk_user_state", "user_states", ("app_name", "user_id")),
        ):
            table = self.tables[name]
            for row in await self.conn.execute(
                select(table).order_by(*(table.c[column] for column in key_columns))
            ):
                yield (
                    record,
                    {
                        **{column: row._mapping[column] for column in key_columns},
                        "state_json": validate.json_text(dict(row.state or {}), "state"),
                        "version": 1,
                        "updated_at": _utc(row.update_time),
                    },
                )
