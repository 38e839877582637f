"""``chatledger sessions list`` and ``show`` for the OpenAI Agents SDK's sessions
(``openai``) and Google ADK's (``adk``), beside zett's and rein's
(:mod:`chatledger.tools.sessions`).

The reads are the adapters' own: :mod:`chatledger.openai_agents.items` and
:mod:`chatledger.adk.rows`, through one :class:`~chatledger.engine.Ledger` that never
migrates. A kind whose extra is not installed is left out, and said so when asked
for alone or when the database holds sessions of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from sqlalchemy import select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from ..engine import Ledger
from ..retention import installed
from ..schema import adk_sessions_table, openai_sessions_table
from .sessions import _cut, _say, _when

#: The kinds this module shows, with the distribution and the extra each needs.
EXTRAS = {"openai": ("openai-agents", "openai-agents"), "adk": ("google-adk", "adk")}


@dataclass
class Frameworks:
    """The ledger the OpenAI and ADK reads share, and which of the two are installed."""

    ledger: Ledger | None = None
    openai: bool = False
    adk: bool = False
    #: Why a kind is missing (shown once).
    notes: list[str] = field(default_factory=list)


async def _holds(ledger: Ledger, kind: str) -> bool:
    """Whether the database holds a live session of ``kind`` (one row, on the key)."""
    table = openai_sessions_table if kind == "openai" else adk_sessions_table

    async def work(conn: AsyncConnection) -> bool:
        return await conn.scalar(select(table.c.id).where(table.c.deleted_at.is_(None)).limit(1)) is not None

    result: bool = await ledger.read(work)
    return result


@asynccontextmanager
async def open_frameworks(url: URL, kinds: Sequence[str]) -> AsyncIterator[Frameworks]:
    """The ledger for the ``openai`` and ``adk`` kinds among ``kinds`` (none if neither
    is wanted), closed on the way out."""
    found = Frameworks()
    wanted = [kind for kind in EXTRAS if kind in kinds]
    if not wanted:
        yield found
        return
    found.ledger = Ledger(url, auto_upgrade=False)
    try:
        for kind in wanted:
            if installed(kind):
                setattr(found, kind, True)
            elif len(kinds) == 1 or await _holds(found.ledger, kind):
                package, extra = EXTRAS[kind]
                found.notes.append(
                    f"{package} is not installed, so {kind} sessions are left out: "
                    f"install chatledger with its [{extra}] extra"
                )
        yield found
    finally:
        await found.ledger.close()


# -- list -----------------------------------------------------------------------------


async def list_frameworks(frameworks: Frameworks, limit: int) -> dict[str, Any]:
    """``{"openai": [...], "adk": [...]}`` (the kinds installed and asked for), read in
    one transaction: the ``limit`` OpenAI sessions written to last, and the first
    ``limit`` ADK sessions in key order (app, user, id; ADK's table has no index by
    activity)."""
    ledger = frameworks.ledger
    if ledger is None or not (frameworks.openai or frameworks.adk):
        return {}
    tombstone_first = ledger.backend.order_live_by_tombstone

    async def work(conn: AsyncConnection) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if frameworks.openai:
            from ..openai_agents import items

            result["openai"] = [
                {
                    "id": summary.id,
                    "items": summary.items,
                    "popped": summary.popped,
                    "created_at": summary.created_at.isoformat(),
                    "updated_at": summary.updated_at.isoformat(),
                }
                for summary in await items.list_recent(conn, limit, tombstone_first=tombstone_first)
            ]
        if frameworks.adk:
            from ..adk import rows

            result["adk"] = [
                {
                    "app_name": stored.key.app_name,
                    "user_id": stored.key.user_id,
                    "id": stored.key.id,
                    "events": stored.events,
                    "created_at": stored.created_at.isoformat(),
                    "updated_at": stored.updated_at.isoformat(),
                }
                for stored in await rows.list_by_key(conn, limit)
            ]
        return result

    listing: dict[str, Any] = await ledger.read(work)
    return listing


def print_tables(listing: dict[str, Any], console: Console) -> None:
    """The ``openai`` and ``adk`` parts of a listing as tables."""
    if "openai" in listing:
        table = RichTable(title="openai sessions, newest activity first", title_justify="left")
        for name in ("id", "items", "popped", "last active (UTC)"):
            table.add_column(name, justify="right" if name in ("items", "popped") else "left")
        for row in listing["openai"]:
            table.add_row(
                row["id"],
                str(row["items"]),
                str(row["popped"]),
                _when(datetime.fromisoformat(row["updated_at"])),
            )
        console.print(table if listing["openai"] else "no openai sessions")
    if "adk" in listing:
        table = RichTable(title="adk sessions, by app, user and id", title_justify="left")
        for name in ("app", "user", "id", "events", "last active (UTC)"):
            table.add_column(name, justify="right" if name == "events" else "left")
        for row in listing["adk"]:
            table.add_row(
                row["app_name"],
                row["user_id"],
                row["id"],
                str(row["events"]),
                _when(datetime.fromisoformat(row["updated_at"])),
            )
        console.print(table if listing["adk"] else "no adk sessions")


# -- show -----------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _content_text(content: Any) -> list[str]:
    """A message's content (a string, or a list of parts) as lines."""
    if isinstance(content, str):
        return [_cut(content)] if content else []
    lines: list[str] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type", "") if isinstance(part, dict) else ""
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            lines.append(_cut(part["text"]))
        elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
            lines.append(f"refused: {_cut(part['refusal'])}")
        else:
            lines.append(f"({kind or 'part'})")
    return lines


def describe_openai_item(item: Any, tools: dict[str, str]) -> tuple[str, list[str]]:
    """One OpenAI Agents input item as (role or kind, lines): a message's role and text,
    a tool call by name and arguments, a function output (by the name of its call, kept
    in ``tools`` by call id), a reasoning summary; any other item as its type and JSON."""
    if not isinstance(item, dict):
        return "?", [_cut(_compact(item))]
    kind = item.get("type") or ("message" if "role" in item else "?")
    if kind == "message":
        return str(item.get("role", "?")), _content_text(item.get("content")) or ["(empty)"]
    if kind == "function_call":
        name = str(item.get("name", "?"))
        if isinstance(item.get("call_id"), str):
            tools[item["call_id"]] = name
        return "tool call", [f"-> {name}({_cut(_compact(item.get('arguments', '')))})"]
    if kind == "function_call_output":
        name = tools.get(str(item.get("call_id")), str(item.get("call_id", "?")))
        return "tool", [f"{name}: {_cut(_compact(item.get('output', '')))}"]
    if kind == "reasoning":
        summary = [part.get("text", "") for part in item.get("summary") or [] if isinstance(part, dict)]
        return "reasoning", [_cut(text) for text in summary if text] or ["(no summary)"]
    if isinstance(item.get("name"), str):  # other tool calls (MCP, custom tools)
        return str(kind), [
            f"-> {item['name']}({_cut(_compact(item.get('arguments', item.get('input', ''))))})"
        ]
    return str(kind), [_cut(_compact(item))]


def describe_adk_event(event: Any) -> list[str]:
    """One ADK ``Event`` as lines: its text parts, function calls (name and arguments) and
    responses, other parts by kind, and the keys of its state delta."""
    lines: list[str] = []
    for part in (event.content.parts or []) if event.content else []:
        if part.text is not None:
            lines.append(("(thought) " if part.thought else "") + _cut(part.text))
        elif part.function_call is not None:
            call = part.function_call
            lines.append(f"-> {call.name}({json.dumps(call.args or {}, ensure_ascii=False)})")
        elif part.function_response is not None:
            response = part.function_response
            lines.append(
                f"<- {response.name}: {_cut(json.dumps(response.response or {}, ensure_ascii=False))}"
            )
        else:
            fields = [name for name, value in part if value is not None]
            lines.append(f"({', '.join(fields) or 'empty part'})")
    delta = event.actions.state_delta if event.actions else {}
    if delta:
        lines.append(f"state delta: {', '.join(sorted(delta))}")
    return lines or ["(empty)"]


def _numbered(console: Console, number: int, who: str, lines: list[str]) -> None:
    _say(console, f"  {number:<6} {who:<10} {lines[0]}")
    for line in lines[1:]:
        _say(console, f"  {'':<6} {'':<10} {line}")


def _heading(console: Console, what: str, total: int, shown: int) -> None:
    heading = f"{what} ({total})"
    if shown < total:
        heading += f", the last {shown} (--messages N shows more)"
    _say(console, heading + ":")


async def show_frameworks(
    frameworks: Frameworks,
    session_id: str,
    console: Console,
    *,
    messages: int,
    app_name: str | None = None,
    user_id: str | None = None,
) -> bool:
    """Print the OpenAI session ``session_id`` and each ADK session with that id (of
    every app and user, or of ``app_name`` / ``user_id``), their last ``messages``
    items / events. Returns whether any was found."""
    ledger = frameworks.ledger
    if ledger is None:
        return False
    found = False
    if frameworks.openai:
        found |= await _show_openai(ledger, session_id, console, messages)
    if frameworks.adk:
        found |= await _show_adk(ledger, session_id, console, messages, app_name, user_id)
    return found


async def _show_openai(ledger: Ledger, session_id: str, console: Console, limit: int) -> bool:
    from ..openai_agents import items

    summary = await items.summary(ledger, session_id)
    if summary is None:
        return False
    _say(console, f"openai session {session_id}")
    _say(
        console,
        f"  {'items':<12}{summary.items}"
        + (f" ({summary.popped} popped, not shown)" if summary.popped else ""),
    )
    _say(console, f"  {'created':<12}{_when(summary.created_at)} UTC")
    _say(console, f"  {'last active':<12}{_when(summary.updated_at)} UTC")
    shown = await items.read(ledger, session_id, limit)
    _heading(console, "items", max(summary.items, len(shown)), len(shown))
    tools: dict[str, str] = {}
    first = max(summary.items, len(shown)) - len(shown) + 1
    for number, item in enumerate(shown, start=first):
        who, lines = describe_openai_item(item, tools)
        _numbered(console, number, who, lines)
    return True


def _scoped(state: dict[str, Any], prefix: str | None) -> dict[str, Any]:
    """The keys of ADK's merged state with ``prefix`` (``None``: the session's own)."""
    if prefix is None:
        return {key: value for key, value in state.items() if not key.startswith(("app:", "user:"))}
    return {key: value for key, value in state.items() if key.startswith(prefix)}


async def _show_adk(
    ledger: Ledger,
    session_id: str,
    console: Console,
    limit: int,
    app_name: str | None,
    user_id: str | None,
) -> bool:
    from google.adk.events.event import Event

    from ..adk import rows

    sessions = await rows.find(ledger, session_id, app_name, user_id)
    for stored in sessions:
        loaded = await rows.load(ledger, stored.key, limit, None)
        if loaded is None:  # deleted since it was found
            continue
        key = stored.key
        _say(console, f"adk session {key.id} (app {key.app_name!r}, user {key.user_id!r})")
        _say(console, f"  {'events':<12}{stored.events}")
        _say(console, f"  {'created':<12}{_when(stored.created_at)} UTC")
        _say(console, f"  {'last active':<12}{_when(loaded.head.updated_at)} UTC")
        state = loaded.head.state
        for label, prefix in (("state", None), ("app: state", "app:"), ("user: state", "user:")):
            scoped = _scoped(state, prefix)
            _say(console, f"  {label:<12}{_cut(json.dumps(scoped, ensure_ascii=False)) if scoped else '-'}")
        events = [Event.model_validate_json(text) for text in loaded.events]
        total = max(stored.events, len(events))
        _heading(console, "events", total, len(events))
        for number, event in enumerate(events, start=total - len(events) + 1):
            _numbered(console, number, event.author or "?", describe_adk_event(event))
    return bool(sessions)
