"""``chatledger sessions``: list, show, delete and purge stored sessions, of every kind
of session registered (:mod:`chatledger.kinds`).

Everything goes through each kind's operations (:class:`chatledger.kinds.Operations`,
the module ``kind`` of its adapter), which call the stores' and adapters' own public
reads and guarded deletes, so a deletion here is exactly theirs. Only the dry run and
the count that ``purge`` asks with read the tables directly, through
:mod:`chatledger.selection` and the kind's tombstones (which rows are live), which
decide what the kinds' purges delete too.

A kind whose framework is not installed is left out, and said so when it was asked
for alone or when the database holds sessions of it (a zett-only user is not told
about rein). The inspecting commands never migrate: a database behind this
chatledger's schema is refused with the command that upgrades it (``SchemaNotReady``),
and a SQLite file that does not exist is not created.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text
from sqlalchemy import ColumnElement, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from ..dsn import resolve_dsn, sqlite_file
from ..engine import Ledger
from ..kinds import Found, Operations, Scope, SessionKind, chosen, missing_note, operations
from ..kinds.showing import when
from ..selection import PURGE_BATCH, Selection, candidates, count
from .progress import progress
from .words import counted

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


def _live(kind: SessionKind, scope: Scope) -> ColumnElement[bool]:
    """The kind's sessions, not tombstones (which keep stale writers out, and only
    retention's tombstone purge removes), of ``scope`` only."""
    store = kind.tombstone_rows()
    live = store.live
    for column, value in scope.items():
        live = live & (store.table.c[column] == value)
    return live


@dataclass
class Opened:
    """Each kind's operations on one database, by name, for the kinds whose framework
    is installed; the notes of those left out."""

    kinds: dict[str, tuple[SessionKind, Operations]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def _holds(url: URL, kind: SessionKind) -> bool:
    """Whether the database holds a live session of ``kind`` (one row, on the key)."""
    store = kind.tombstone_rows()
    ledger = Ledger(url, auto_upgrade=False)
    try:

        async def work(conn: AsyncConnection) -> bool:
            found = await conn.scalar(select(store.table.c[store.key[-1]]).where(store.live).limit(1))
            return found is not None

        result: bool = await ledger.read(work)
        return result
    finally:
        await ledger.close()


@asynccontextmanager
async def open_kinds(dsn: str | URL | None, kinds: Sequence[SessionKind]) -> AsyncIterator[Opened]:
    """The operations of each of ``kinds`` on the database (they never migrate it), closed
    on the way out; a kind whose framework is not installed is noted when it is the only
    one asked for or the database holds sessions of it."""
    url = _existing(dsn)
    opened = Opened()
    async with AsyncExitStack() as stack:
        for kind in kinds:
            try:
                made = operations(kind)
            except ImportError:
                if len(kinds) == 1 or await _holds(url, kind):
                    opened.notes.append(missing_note(kind))
                continue
            handler = await stack.enter_async_context(made(url, {"auto_upgrade": False}))
            opened.kinds[kind.name] = (kind, handler)
        yield opened


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


# -- list -----------------------------------------------------------------------------


async def list_sessions(
    dsn: str | URL | None, *, limit: int, kinds: Sequence[str] | None = None
) -> dict[str, Any]:
    """The first ``limit`` sessions of each kind its operations list first (newest
    activity first; ADK's in key order), as JSON-ready data: ``{"zett": [...], "rein":
    [...], "openai": [...], "adk": [...], "notes": [...]}``, and the listings to print
    under ``"listings"``."""
    if limit < 1:
        raise ValueError("--limit must be at least 1")
    result: dict[str, Any] = {}
    listings = []
    async with open_kinds(dsn, chosen(kinds)) as opened:
        for name, (_kind, handler) in opened.kinds.items():
            listing = await handler.listing(limit)
            result[name] = listing.rows
            listings.append((name, listing))
        result["notes"] = opened.notes
    result["listings"] = listings
    return result


def print_list(listing: dict[str, Any], console: Console, *, as_json: bool) -> None:
    """The listing as tables, or as one JSON document."""
    if as_json:
        rows = {key: value for key, value in listing.items() if key not in ("notes", "listings")}
        _say(console, json.dumps(rows, ensure_ascii=False))
        return
    for note in listing.get("notes", []):
        _say(console, note)
    for name, shown in listing.get("listings", []):
        table = RichTable(title=shown.title, title_justify="left")
        for column in shown.fields:
            table.add_column(column.heading, justify="right" if column.right else "left")
        for row in shown.rows:
            table.add_row(
                *(
                    when(datetime.fromisoformat(row[column.key]))
                    if column.when
                    else ("" if row[column.key] is None else str(row[column.key]))
                    for column in shown.fields
                )
            )
        console.print(table if shown.rows else f"no {name} sessions")


# -- show -----------------------------------------------------------------------------


async def show(
    dsn: str | URL | None,
    session_id: str,
    console: Console,
    *,
    messages: int,
    kinds: Sequence[str] | None = None,
    scope: Scope | None = None,
) -> bool:
    """Print every session with the id ``session_id`` readably, of each kind (of a kind
    with scopes, every one that has it, or only those of ``scope``): a zett session's
    fields, checkpoint and tail (its last ``messages`` raw messages after the
    checkpoint), a rein session's state and messages, an OpenAI session's live items,
    an ADK session's state and events. Returns whether any session has that id."""
    if messages < 0:
        raise ValueError("--messages must not be negative")
    found = False
    async with open_kinds(dsn, chosen(kinds)) as opened:
        for note in opened.notes:
            _say(console, note)
        for kind, handler in opened.kinds.values():
            for lines in await handler.show(session_id, messages=messages, scope=_scoped(kind, scope)):
                found = True
                for line in lines:
                    _say(console, line)
    if not found:
        _say(console, f"no session {session_id!r}")
    return found


def _scoped(kind: SessionKind, scope: Scope | None) -> Scope:
    """The part of ``scope`` the kind's sessions have (a kind without scopes: none)."""
    return {
        column: value
        for column, value in (scope or {}).items()
        if column in kind.scopes and value is not None
    }


# -- delete ---------------------------------------------------------------------------


def confirm(console: Console, question: str) -> bool:
    """Ask on the console; only ``y`` or ``yes`` agrees (end of input declines)."""
    try:
        answer = console.input(Text(f"{question} [y/N] "))  # Text: no markup in the brackets
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _described(kind: SessionKind, found: Found) -> str:
    """``zett session 'x' (3 messages)``, ``adk session 'x' of app 'a', user 'u' (2 events)``."""
    text = f"{kind.name} session {found.id!r}"
    if found.where:
        text += f" {found.where}"
    if found.entries is not None and kind.entry is not None:
        text += f" ({counted(found.entries, kind.entry)})"
    return text


async def delete(
    dsn: str | URL | None,
    session_id: str,
    console: Console,
    *,
    yes: bool,
    kinds: Sequence[str] | None = None,
    scope: Scope | None = None,
) -> int:
    """Delete a session of every kind that has this id (of a kind with scopes, every one
    that has it, or only those of ``scope``), after asking (unless ``yes``).

    Returns the exit status: 0 deleted, 1 no such session (also when it was deleted by
    another between the question and the answer) or not confirmed.
    """
    async with open_kinds(dsn, chosen(kinds)) as opened:
        for note in opened.notes:
            _say(console, note)
        found: list[tuple[Operations, Found, str]] = []
        for kind, handler in opened.kinds.values():
            for each in await handler.find(session_id, _scoped(kind, scope)):
                found.append((handler, each, _described(kind, each)))
        if not found:
            _say(console, f"no session {session_id!r}")
            return 1
        what = " and ".join(description for _, _, description in found)
        if not yes and not confirm(console, f"delete {what} with all its history?"):
            _say(console, "nothing deleted")
            return 1
        deleted = 0
        for handler, each, description in found:
            # The kind's delete decides (it finds the session, or not, in its own
            # transaction): what was read for the question may be gone by the answer.
            done = await handler.delete(each)
            deleted += done
            _say(
                console, f"deleted {description}" if done else f"{description}: deleted meanwhile by another"
            )
    return 0 if deleted else 1


# -- purge ----------------------------------------------------------------------------


def _describe(selection: Selection) -> str:
    parts = []
    if selection.idle_before is not None:
        parts.append(f"last active before {when(selection.idle_before)} UTC")
    if selection.prefix is not None:
        parts.append(f"whose id starts with {selection.prefix!r}")
    return " and ".join(parts)


def _how_many(counts: dict[str, int], kinds: Sequence[str]) -> str:
    """``3 zett sessions and 1 rein session``: a kind with none is left out, unless all
    have none."""
    some = [kind for kind in kinds if counts[kind]] or list(kinds)
    return " and ".join(counted(counts[kind], f"{kind} session") for kind in some)


async def purge(
    dsn: str | URL | None,
    console: Console,
    *,
    older_than: timedelta | None,
    prefix: str | None,
    dry_run: bool,
    yes: bool,
    kinds: Sequence[str] | None = None,
    scope: Scope | None = None,
) -> int:
    """Delete the selected sessions of each kind, with a progress bar, after asking
    (unless ``yes``); a dry run lists the first :data:`SHOWN_IDS` ids of each kind it
    would delete (a key of several columns as ``app/user/id``), and counts them all.
    A kind with scopes purges every scope's sessions, or only those of ``scope``.

    The deleting is each kind's own purge (:meth:`chatledger.kinds.Operations.purge`),
    with the cutoff taken once, here: each session is deleted only if its deleting
    transaction still finds it selected and as its page read it, so one written to
    after it was counted or paged is kept (and said so). The prefix is matched
    literally and byte for byte (:func:`chatledger.selection.id_prefix`).

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
    wanted = chosen(kinds)
    # The selection reads through a ledger of its own: the rein store's runs on its
    # private loop thread, and a pool serves one event loop only.
    selector = Ledger(_existing(dsn), auto_upgrade=False)
    try:
        async with open_kinds(dsn, wanted) as opened:
            for note in opened.notes:
                _say(console, note)
            return await _purge(selector, console, selection, opened, scope, dry_run=dry_run, yes=yes)
    finally:
        await selector.close()


async def _list_selected(
    selector: Ledger,
    console: Console,
    selection: Selection,
    counts: dict[str, int],
    opened: Opened,
    scope: Scope | None,
) -> None:
    """The dry run's listing: the first :data:`SHOWN_IDS` ids of each kind (oldest
    activity first with a cutoff, else in key order), then how many more."""
    for name in counts:
        kind = opened.kinds[name][0]
        store = kind.tombstone_rows()
        live = _live(kind, _scoped(kind, scope))
        async for page in candidates(selector, store.table, live, selection, SHOWN_IDS, key=store.key):
            for row in page:
                _say(console, f"  {name}  {'/'.join(str(row._mapping[column]) for column in store.key)}")
            break
        more = counts[name] - min(counts[name], SHOWN_IDS)
        if more:
            _say(console, f"  ... and {counted(more, f'more {name} session')}")


async def _purge(
    selector: Ledger,
    console: Console,
    selection: Selection,
    opened: Opened,
    scope: Scope | None,
    *,
    dry_run: bool,
    yes: bool,
) -> int:
    present = list(opened.kinds)
    counts = {}
    for name, (kind, _handler) in opened.kinds.items():
        store = kind.tombstone_rows()
        counts[name] = await count(selector, store.table, _live(kind, _scoped(kind, scope)), selection)
    what = _how_many(counts, present)
    described = _describe(selection)
    if dry_run:
        listing = ":" if any(counts.values()) else ""
        _say(console, f"would delete {what} {described} (dry run: nothing deleted){listing}")
        await _list_selected(selector, console, selection, counts, opened, scope)
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
        for name, (kind, handler) in opened.kinds.items():
            if not counts[name]:
                continue
            task = bars.add_task(f"{name} sessions", total=counts[name])

            # On the rein store's loop thread for rein: rich's bars take a lock.
            def advance(session_id: Any, done: bool, task: Any = task) -> None:
                bars.advance(task)
                if not done:
                    kept.append(session_id)

            deleted[name] = await handler.purge(
                selection, _scoped(kind, scope), size=PURGE_BATCH, progress=advance
            )
    said = f"deleted {_how_many(deleted, present)} {described}"
    if kept:
        said += f"; kept {counted(len(kept), 'session')} written to (or deleted) meanwhile"
    _say(console, said)
    return 0
