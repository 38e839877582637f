"""``chatledger sessions``: list, show, delete and purge stored sessions: zett's, rein's,
the OpenAI Agents SDK's and Google ADK's (the last two read by
:mod:`chatledger.tools.framework_sessions`).

Everything goes through the stores' public methods (``list_sessions``,
``get_session``, ``load``, ``delete_session``, ``purge_sessions``; rein's
``alist_sessions``, ``aload_versioned``, ``adelete``, ``apurge``) and the adapters'
own guarded deletes (:func:`chatledger.openai_agents.items.delete_session` and
``purge_sessions``, :func:`chatledger.adk.rows.delete_session` and ``purge_sessions``),
so a deletion here is exactly theirs. Only the dry run and the count that ``purge`` asks with
read the tables directly, through :mod:`chatledger.selection`, which decides what the
stores' purge deletes too.

The inspecting commands never migrate: a database behind this chatledger's schema
is refused with the command that upgrades it (``SchemaNotReady``), and a SQLite
file that does not exist is not created.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import tombstones
from ..dsn import resolve_dsn, sqlite_file
from ..engine import Ledger
from ..schema import adk_sessions_table, rein_sessions_table, sessions_table
from ..selection import PURGE_BATCH, Selection, candidates, count
from .kinds import KINDS
from .progress import progress
from .words import counted

__all__ = ["KINDS"]  # one per framework (chatledger.tools.kinds)
#: Longest message text ``show`` prints before cutting it.
SHOWN_CHARACTERS = 500
#: Ids of each kind a dry run of ``purge`` lists (it counts them all).
SHOWN_IDS = 20

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(value: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (also combined: ``1d12h``) as a duration.

    Raises:
        ValueError: anything else, naming ``--older-than``.
    """
    parts = re.fullmatch(r"(?:\d+[smhdw])+", value.strip())
    if parts is None:
        raise ValueError(f"--older-than {value!r} is not a duration such as 30d, 12h, 90m, 45s or 2w")
    seconds = sum(int(number) * _UNITS[unit] for number, unit in re.findall(r"(\d+)([smhdw])", value))
    return timedelta(seconds=seconds)


def _existing(dsn: str | URL | None) -> URL:
    url = resolve_dsn(dsn)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise ValueError(f"no such file: {path}")
    return url


@dataclass
class Stores:
    """The open stores of one database; ``None`` for a kind whose extra is not installed."""

    zett: Any
    rein: Any
    #: Why a kind is missing (shown once).
    notes: list[str]

    def kinds(self, wanted: Sequence[str]) -> list[str]:
        return [kind for kind in wanted if getattr(self, kind, None) is not None]


@asynccontextmanager
async def open_stores(dsn: str | URL | None, kinds: Sequence[str] = KINDS) -> AsyncIterator[Stores]:
    """The zett storage and the rein store of a database, each only if its package is
    installed (they never migrate it)."""
    url = _existing(dsn)
    stores = Stores(None, None, [])
    try:
        if "zett" in kinds:
            try:
                from ..zett import LedgerSessionStorage
            except ImportError:
                await _missing(stores, url, "zett", "zett-agent", explicit=len(kinds) == 1)
            else:
                stores.zett = LedgerSessionStorage(url, auto_upgrade=False)
        if "rein" in kinds:
            try:
                from ..rein import LedgerSessionStore
            except ImportError:
                await _missing(stores, url, "rein", "rein-agent", explicit=len(kinds) == 1)
            else:
                stores.rein = LedgerSessionStore(url, auto_upgrade=False)
        yield stores
    finally:
        if stores.zett is not None:
            await stores.zett.close()
        if stores.rein is not None:
            await stores.rein.aclose()


async def _missing(stores: Stores, url: URL, kind: str, package: str, *, explicit: bool) -> None:
    """Note a kind whose package is not installed, when asked for it alone or when the
    database holds sessions of that kind (a zett-only user is not told about rein)."""
    table = sessions_table if kind == "zett" else rein_sessions_table
    if not explicit:
        ledger = Ledger(url, auto_upgrade=False)
        try:

            async def work(conn: AsyncConnection) -> bool:
                return await conn.scalar(select(table.c.id).where(_chosen(kind).live).limit(1)) is not None

            explicit = await ledger.read(work)
        finally:
            await ledger.close()
    if explicit:
        stores.notes.append(
            f"{package} is not installed, so {kind} sessions are left out: install chatledger with its "
            f"[{kind}] extra"
        )


def _when(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


# -- list -----------------------------------------------------------------------------


async def list_sessions(dsn: str | URL | None, *, limit: int, kinds: Sequence[str] = KINDS) -> dict[str, Any]:
    """The newest ``limit`` sessions of each kind, as JSON-ready data:
    ``{"zett": [...], "rein": [...], "openai": [...], "adk": [...], "notes": [...]}``
    (ADK's in key order: see :func:`chatledger.tools.framework_sessions.list_frameworks`)."""
    from .framework_sessions import list_frameworks, open_frameworks

    if limit < 1:
        raise ValueError("--limit must be at least 1")
    result: dict[str, Any] = {}
    async with open_stores(dsn, kinds) as stores, open_frameworks(_existing(dsn), kinds) as frameworks:
        if stores.zett is not None:
            result["zett"] = [
                {
                    "id": summary.session_id,
                    "parent_session_id": summary.parent_session_id,
                    "session_type": summary.session_type,
                    "title": summary.title,
                    "agent_name": summary.agent_name,
                    "message_count": summary.message_count,
                    "created_at": summary.created_at.isoformat(),
                    "updated_at": summary.updated_at.isoformat(),
                }
                for summary in await stores.zett.list_sessions(limit=limit)
            ]
        if stores.rein is not None:
            result["rein"] = [
                {
                    "id": info.id,
                    "version": info.version,
                    "created_at": info.created_at.isoformat(),
                    "updated_at": info.updated_at.isoformat(),
                }
                for info in await stores.rein.alist_sessions(limit=limit)
            ]
        result.update(await list_frameworks(frameworks, limit))
        result["notes"] = stores.notes + frameworks.notes
    return result


def print_list(listing: dict[str, Any], console: Console, *, as_json: bool) -> None:
    """The listing as tables (newest activity first), or as one JSON document."""
    if as_json:
        _say(
            console,
            json.dumps({key: value for key, value in listing.items() if key != "notes"}, ensure_ascii=False),
        )
        return
    for note in listing.get("notes", []):
        _say(console, note)
    if "zett" in listing:
        table = RichTable(title="zett sessions, newest activity first", title_justify="left")
        for name in ("id", "type", "title", "agent", "messages", "last active (UTC)"):
            table.add_column(name, justify="right" if name in ("type", "messages") else "left")
        for row in listing["zett"]:
            table.add_row(
                row["id"],
                str(row["session_type"]),
                row["title"] or "",
                row["agent_name"] or "",
                str(row["message_count"]),
                _when(datetime.fromisoformat(row["updated_at"])),
            )
        console.print(table if listing["zett"] else "no zett sessions")
    if "rein" in listing:
        table = RichTable(title="rein sessions, newest save first", title_justify="left")
        for name in ("id", "version", "last saved (UTC)"):
            table.add_column(name, justify="right" if name == "version" else "left")
        for row in listing["rein"]:
            table.add_row(row["id"], str(row["version"]), _when(datetime.fromisoformat(row["updated_at"])))
        console.print(table if listing["rein"] else "no rein sessions")
    from .framework_sessions import print_tables

    print_tables(listing, console)


# -- show -----------------------------------------------------------------------------


def _cut(text: str) -> str:
    text = text.replace("\r", "")
    return (
        text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + f"... ({len(text)} characters)"
    )


def describe_zett_message(message: Any) -> str:
    """One zett message in a line or a few: its text, tool calls, a tool's name."""
    from zett_agent.messages import AssistantMessage, ToolMessage

    if isinstance(message, AssistantMessage):
        parts = [_cut(message.content)] if message.content else []
        parts += [
            f"-> {call.name}({json.dumps(call.arguments, ensure_ascii=False)})" for call in message.tool_calls
        ]
        return "\n".join(parts) or "(empty)"
    if isinstance(message, ToolMessage):
        status = "" if message.success else " (failed)"
        return f"{message.name}{status}: {_cut(message.text)}"
    text = getattr(message, "text", None)
    return _cut(text if isinstance(text, str) else str(getattr(message, "content", "")))


async def show(
    dsn: str | URL | None,
    session_id: str,
    console: Console,
    *,
    messages: int,
    kinds: Sequence[str] = KINDS,
    app_name: str | None = None,
    user_id: str | None = None,
) -> bool:
    """Print every session with the id ``session_id`` readably, one per kind (ADK: one
    per app and user that has it, or only ``app_name``'s / ``user_id``'s): a zett
    session's fields, checkpoint and tail (its last ``messages`` raw messages after the
    checkpoint), a rein session's state and messages, an OpenAI session's live items,
    an ADK session's state and events. Returns whether any session has that id."""
    from .framework_sessions import open_frameworks, show_frameworks

    if messages < 0:
        raise ValueError("--messages must not be negative")
    found = False
    async with open_stores(dsn, kinds) as stores, open_frameworks(_existing(dsn), kinds) as frameworks:
        for note in stores.notes + frameworks.notes:
            _say(console, note)
        if stores.zett is not None:
            summary = await stores.zett.get_session(session_id)
            if summary is not None:
                found = True
                await _show_zett(stores.zett, summary, console, messages)
        if stores.rein is not None:
            versioned = await stores.rein.aload_versioned(session_id)
            if versioned is not None:
                found = True
                _show_rein(session_id, versioned, console, messages)
        found |= await show_frameworks(
            frameworks, session_id, console, messages=messages, app_name=app_name, user_id=user_id
        )
    if not found:
        _say(console, f"no session {session_id!r}")
    return found


async def _show_zett(storage: Any, summary: Any, console: Console, limit: int) -> None:
    view = await storage.load(summary.session_id)
    _say(console, f"zett session {summary.session_id}")
    fields = (
        ("parent", summary.parent_session_id or "-"),
        ("type", summary.session_type),
        ("title", summary.title or "-"),
        ("agent", summary.agent_name or "-"),
        ("messages", summary.message_count),
        ("created", f"{_when(summary.created_at)} UTC"),
        ("last active", f"{_when(summary.updated_at)} UTC"),
    )
    for name, value in fields:
        _say(console, f"  {name:<12}{value}")
    boundary = 0
    if view.snapshot is not None:
        snapshot = view.snapshot
        boundary = snapshot.compacted_through_sequence
        _say(
            console,
            f"checkpoint version {snapshot.version}, summarizing messages 1-{boundary} "
            f"(made {_when(snapshot.created_at)} UTC):",
        )
        for line in describe_zett_message(snapshot.compacted_message).splitlines() or [""]:
            _say(console, f"  {line}")
    else:
        _say(console, "no checkpoint")
    tail = view.raw_tail
    shown = tail[-limit:] if limit else []
    heading = (
        f"raw messages after the checkpoint ({len(tail)})" if boundary else f"raw messages ({len(tail)})"
    )
    if len(shown) < len(tail):
        heading += f", the last {len(shown)} (--messages N shows more)"
    _say(console, heading + ":")
    for record in shown:
        role = str(record.message.role)
        usage = ""
        if record.input_tokens is not None:
            usage = f"  [tokens in {record.input_tokens}, out {record.output_tokens}]"
        lines = describe_zett_message(record.message).splitlines() or [""]
        _say(console, f"  #{record.sequence:<5} {role:<10} {lines[0]}{usage}")
        for line in lines[1:]:
            _say(console, f"  {'':<6} {'':<10} {line}")


def _show_rein(session_id: str, versioned: Any, console: Console, limit: int) -> None:
    session = versioned.session
    _say(console, f"rein session {session_id} (version {versioned.version})")
    usage = session.usage
    _say(console, f"  {'stage':<12}{getattr(session.stage, 'value', session.stage)}")
    _say(
        console,
        f"  {'done':<12}{session.done}" + (f" ({session.stop_reason})" if session.stop_reason else ""),
    )
    _say(console, f"  {'iterations':<12}{session.iteration}")
    _say(console, f"  {'tokens':<12}in {usage.input_tokens}, out {usage.output_tokens}")
    shown = session.messages[-limit:] if limit else []
    heading = f"messages ({len(session.messages)})"
    if len(shown) < len(session.messages):
        heading += f", the last {len(shown)} (--messages N shows more)"
    _say(console, heading + ":")
    first = len(session.messages) - len(shown) + 1
    for number, message in enumerate(shown, start=first):
        lines = [_cut(message.content)] if message.content else []
        lines += [
            f"-> {call.name}({json.dumps(call.arguments, ensure_ascii=False)})"
            for call in message.tool_calls or ()
        ]
        lines = lines or ["(empty)"]
        _say(console, f"  {number:<6} {message.role:<10} {lines[0]}")
        for line in lines[1:]:
            _say(console, f"  {'':<6} {'':<10} {line}")


# -- delete ---------------------------------------------------------------------------


def confirm(console: Console, question: str) -> bool:
    """Ask on the console; only ``y`` or ``yes`` agrees (end of input declines)."""
    try:
        answer = console.input(Text(f"{question} [y/N] "))  # Text: no markup in the brackets
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def delete(
    dsn: str | URL | None,
    session_id: str,
    console: Console,
    *,
    yes: bool,
    kinds: Sequence[str] = KINDS,
    app_name: str | None = None,
    user_id: str | None = None,
) -> int:
    """Delete a session of every kind that has this id (ADK: of every app and user that
    has it, or only ``app_name``'s / ``user_id``'s), after asking (unless ``yes``).

    Returns the exit status: 0 deleted, 1 no such session (also when it was deleted by
    another between the question and the answer) or not confirmed.
    """
    from .framework_sessions import open_frameworks

    async with open_stores(dsn, kinds) as stores, open_frameworks(_existing(dsn), kinds) as frameworks:
        for note in frameworks.notes:
            _say(console, note)
        found: list[tuple[str, Any, str]] = []
        if stores.zett is not None:
            summary = await stores.zett.get_session(session_id)
            if summary is not None:
                messages = counted(summary.message_count, "message")
                found.append(("zett", None, f"zett session {session_id!r} ({messages})"))
        if stores.rein is not None and await stores.rein.acontains(session_id):
            found.append(("rein", None, f"rein session {session_id!r}"))
        ledger = frameworks.ledger
        if ledger is not None and frameworks.openai:
            from ..openai_agents import items

            held = await items.summary(ledger, session_id)
            if held is not None:
                found.append(
                    ("openai", None, f"openai session {session_id!r} ({counted(held.items, 'item')})")
                )
        if ledger is not None and frameworks.adk:
            from ..adk import rows

            for stored in await rows.find(ledger, session_id, app_name, user_id):
                where = f"of app {stored.key.app_name!r}, user {stored.key.user_id!r}"
                events = counted(stored.events, "event")
                found.append(("adk", stored.key, f"adk session {session_id!r} {where} ({events})"))
        if not found:
            _say(console, f"no session {session_id!r}")
            return 1
        what = " and ".join(description for _, _, description in found)
        if not yes and not confirm(console, f"delete {what} with all its history?"):
            _say(console, "nothing deleted")
            return 1
        deleted = 0
        for kind, key, description in found:
            # The store's delete decides (it finds the session, or not, in its own
            # transaction): what was read for the question may be gone by the answer.
            if kind == "zett":
                done = await stores.zett.delete_session(session_id)
            elif kind == "rein":
                done = await stores.rein.adelete(session_id)
            elif kind == "openai":
                assert ledger is not None  # found through it
                done = await items.delete_session(ledger, session_id)
            else:
                assert ledger is not None
                done = await rows.delete_session(ledger, key)
            deleted += done
            _say(
                console, f"deleted {description}" if done else f"{description}: deleted meanwhile by another"
            )
    return 0 if deleted else 1


# -- purge ----------------------------------------------------------------------------


def _describe(selection: Selection) -> str:
    parts = []
    if selection.idle_before is not None:
        parts.append(f"last active before {_when(selection.idle_before)} UTC")
    if selection.prefix is not None:
        parts.append(f"whose id starts with {selection.prefix!r}")
    return " and ".join(parts)


@dataclass(frozen=True)
class _Chosen:
    """What a purge of one kind selects from: the sessions table, its live rows (ADK's
    of one app and/or user only), and the key columns its pages are read by."""

    table: Any
    live: Any
    key: tuple[str, ...]
    #: ADK's scope (``None``: every app, every user).
    app_name: str | None = None
    user_id: str | None = None


def _chosen(kind: str, app_name: str | None = None, user_id: str | None = None) -> _Chosen:
    """Rows that are sessions, not tombstones of deleted ones (which keep stale writers
    out, and only retention's tombstone purge removes): no ``deleted_at``; a rein row
    with its JSON."""
    store = tombstones.STORES[kind]
    live = store.live
    if kind == "adk":
        if app_name is not None:
            live = live & (adk_sessions_table.c.app_name == app_name)
        if user_id is not None:
            live = live & (adk_sessions_table.c.user_id == user_id)
    return _Chosen(store.table, live, store.key, app_name, user_id)


async def purge(
    dsn: str | URL | None,
    console: Console,
    *,
    older_than: timedelta | None,
    prefix: str | None,
    dry_run: bool,
    yes: bool,
    kinds: Sequence[str] = KINDS,
    app_name: str | None = None,
    user_id: str | None = None,
) -> int:
    """Delete the selected sessions of each kind, with a progress bar, after asking
    (unless ``yes``); a dry run lists the first :data:`SHOWN_IDS` ids of each kind it
    would delete (ADK's as ``app/user/id``), and counts them all. ADK's are of every
    app and user, or only ``app_name``'s / ``user_id``'s.

    The deleting is the stores' own purge (``LedgerSessionStorage.purge_sessions``,
    ``LedgerSessionStore.apurge``, the adapters' ``purge_sessions``), with the cutoff
    taken once, here: each session is deleted only if its deleting transaction still
    finds it selected and as its page read it, so one written to after it was counted
    or paged is kept (and said so). The prefix is matched literally and byte for byte
    (:func:`chatledger.selection.id_prefix`).

    Each purged id keeps its tombstone, as a deleted session's does: a zett append to
    it raises ``SessionDeleted``, ``create_session(session_id=...)`` starts it anew.

    Returns the exit status: 0 deleted (or nothing selected, or a dry run), 1 not confirmed.

    Raises:
        ValueError: neither ``older_than`` nor ``prefix`` says what to purge, or one
            of them is invalid (see :meth:`chatledger.selection.Selection.of`).
    """
    if older_than is None and not prefix:
        raise ValueError("say what to purge: --older-than DURATION and/or --prefix PREFIX")
    selection = Selection.of(older_than=older_than, prefix=prefix or None)
    chosen = {kind: _chosen(kind, app_name, user_id) for kind in kinds}
    # The selection reads through a ledger of its own: the rein store's runs on its
    # private loop thread, and a pool serves one event loop only.
    selector = Ledger(_existing(dsn), auto_upgrade=False)
    try:
        return await _purge(selector, dsn, console, selection, chosen, dry_run=dry_run, yes=yes)
    finally:
        await selector.close()


def _how_many(counts: dict[str, int], kinds: Sequence[str]) -> str:
    """``3 zett sessions and 1 rein session``: a kind with none is left out, unless all
    have none."""
    some = [kind for kind in kinds if counts[kind]] or list(kinds)
    return " and ".join(counted(counts[kind], f"{kind} session") for kind in some)


def _shown(row: Any, key: tuple[str, ...]) -> str:
    """A candidate as the dry run lists it: its id, ADK's ``app/user/id``."""
    return "/".join(str(row._mapping[name]) for name in key)


async def _list_selected(
    selector: Ledger,
    console: Console,
    selection: Selection,
    counts: dict[str, int],
    chosen: dict[str, _Chosen],
) -> None:
    """The dry run's listing: the first :data:`SHOWN_IDS` ids of each kind (oldest
    activity first with a cutoff, else in key order), then how many more."""
    for kind in counts:
        of = chosen[kind]
        async for page in candidates(selector, of.table, of.live, selection, SHOWN_IDS, key=of.key):
            for row in page:
                _say(console, f"  {kind}  {_shown(row, of.key)}")
            break
        more = counts[kind] - min(counts[kind], SHOWN_IDS)
        if more:
            _say(console, f"  ... and {counted(more, f'more {kind} session')}")


async def _purge(
    selector: Ledger,
    dsn: str | URL | None,
    console: Console,
    selection: Selection,
    chosen: dict[str, _Chosen],
    *,
    dry_run: bool,
    yes: bool,
) -> int:
    from .framework_sessions import open_frameworks

    kinds = list(chosen)
    async with open_stores(dsn, kinds) as stores, open_frameworks(_existing(dsn), kinds) as frameworks:
        for note in stores.notes + frameworks.notes:
            _say(console, note)
        present = [
            kind
            for kind in kinds
            if getattr(stores, kind, None) is not None or getattr(frameworks, kind, False)
        ]
        counts = {
            kind: await count(selector, chosen[kind].table, chosen[kind].live, selection) for kind in present
        }
        what = _how_many(counts, present)
        described = _describe(selection)
        if dry_run:
            listing = ":" if any(counts.values()) else ""
            _say(console, f"would delete {what} {described} (dry run: nothing deleted){listing}")
            await _list_selected(selector, console, selection, counts, chosen)
            return 0
        if not any(counts.values()):
            _say(console, f"no sessions {described}")
            return 0
        if not yes and not confirm(console, f"delete {what} {described}, with all their history?"):
            _say(console, "nothing deleted")
            return 1
        deleted = dict.fromkeys(present, 0)
        kept: list[Any] = []
        with progress(console) as bars:
            for kind in present:
                if not counts[kind]:
                    continue
                task = bars.add_task(f"{kind} sessions", total=counts[kind])

                # On the rein store's loop thread for rein: rich's bars take a lock.
                def advance(session_id: Any, done: bool, task: Any = task) -> None:
                    bars.advance(task)
                    if not done:
                        kept.append(session_id)

                options: dict[str, Any] = {
                    "idle_before": selection.idle_before,
                    "prefix": selection.prefix,
                    "batch_size": PURGE_BATCH,
                    "progress": advance,
                }
                if kind == "zett":
                    deleted[kind] = await stores.zett.purge_sessions(**options)
                elif kind == "rein":
                    deleted[kind] = await stores.rein.apurge(**options)
                else:
                    assert frameworks.ledger is not None  # a present framework kind has it
                    deleted[kind] = await _purge_framework(
                        kind, frameworks.ledger, selection, chosen[kind], advance
                    )
        said = f"deleted {_how_many(deleted, present)} {described}"
        if kept:
            said += f"; kept {counted(len(kept), 'session')} written to (or deleted) meanwhile"
        _say(console, said)
        return 0


async def _purge_framework(
    kind: str, ledger: Ledger, selection: Selection, chosen: _Chosen, advance: Any
) -> int:
    """The adapter's own purge of ``openai`` or ``adk`` (ADK's scoped as ``chosen`` is)."""
    if kind == "openai":
        from ..openai_agents import items

        return await items.purge_sessions(ledger, selection, progress=advance)
    from ..adk import rows

    return await rows.purge_sessions(
        ledger, selection, app_name=chosen.app_name, user_id=chosen.user_id, progress=advance
    )
