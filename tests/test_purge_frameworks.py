"""Delete, purge and retention of the OpenAI Agents SDK's sessions (``openai``) and Google
ADK's (``adk``) on every backend: a delete then a tombstone purge removes their rows and
leaves a high-water mark; a re-create or add racing the purge never reuses a sequence or
a version; a purge keeps a session written to (even only popped) after its page was
read; retention by age; the ``sessions delete/purge`` and ``retention`` commands."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from sqlalchemy import Table, func, select, update
from sqlalchemy.engine import URL, Connection

from chatledger import kinds, marks, retention, tombstones
from chatledger.adk import LedgerSessionService
from chatledger.adk import rows as adk_rows
from chatledger.engine import Ledger
from chatledger.migrate import run_on_connection, upgrade_database
from chatledger.openai_agents import LedgerSession
from chatledger.openai_agents import items as openai_items
from chatledger.schema import (
    adk_app_states_table,
    adk_events_table,
    adk_sessions_table,
    adk_user_states_table,
    high_water_marks_table,
    openai_items_table,
    openai_sessions_table,
)
from chatledger.selection import Selection
from chatledger.testing.adk import event
from chatledger.tools import cli

from .conftest import Database
from .support.schema_helpers import fresh_database

pytestmark = pytest.mark.dialect_only


@pytest.fixture
async def url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A database of the target's backend for this test alone, at head."""
    async with fresh_database(database, tmp_path, "frameworks") as fresh:
        await upgrade_database(fresh)
        yield fresh


@pytest.fixture
async def ledger(url: URL) -> AsyncIterator[Ledger]:
    made = Ledger(url)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def service(url: URL) -> AsyncIterator[LedgerSessionService]:
    async with LedgerSessionService(url) as made:
        yield made


async def age(url: URL, table: Table, column: str, ids: list[str], days: int) -> None:
    """Sets ``column`` of the ids' rows (every app and user's, for ADK) to ``days`` days ago."""
    at = datetime.now(UTC) - timedelta(days=days)

    def work(connection: Connection) -> None:
        connection.execute(update(table).where(table.c.id.in_(ids)).values({column: at}))

    await run_on_connection(url, work)


async def count(url: URL, table: Table) -> int:
    def work(connection: Connection) -> int:
        return int(connection.scalar(select(func.count()).select_from(table)) or 0)

    return await run_on_connection(url, work)


async def sequences(url: URL, session_id: str) -> list[int]:
    """The sequences of the OpenAI session's stored items (live or popped)."""

    def work(connection: Connection) -> list[int]:
        found = connection.scalars(
            select(openai_items_table.c.sequence)
            .where(openai_items_table.c.session_id == session_id)
            .order_by(openai_items_table.c.sequence)
        )
        return list(found)

    return await run_on_connection(url, work)


async def counter(url: URL, table: Table, session_id: str, version: str) -> list[tuple[int, int]]:
    """``(last_sequence, version)`` of each counter row of the id."""

    def work(connection: Connection) -> list[tuple[int, int]]:
        found = connection.execute(
            select(table.c.last_sequence, table.c[version]).where(table.c.id == session_id)
        )
        return [(int(row[0]), int(row[1])) for row in found]

    return await run_on_connection(url, work)


def item(text: str) -> Any:
    return {"role": "user", "content": text}


def now_cutoff() -> datetime:
    return tombstones.cutoff(timedelta(0), None)


# -- OpenAI Agents ------------------------------------------------------------------------


async def test_openai_delete_then_purge_removes_the_rows_and_the_next_add_numbers_on(
    url: URL, ledger: Ledger
) -> None:
    session = LedgerSession("o", ledger=ledger)
    await session.add_items([item("one"), item("two")])
    assert await openai_items.delete_session(ledger, "o")
    assert await session.get_items() == [] and await count(url, openai_items_table) == 0
    assert not await openai_items.delete_session(ledger, "o")  # a tombstone: nothing to delete
    assert not await openai_items.delete_session(ledger, "never")
    assert await counter(url, openai_sessions_table, "o", "generation") == [(2, 2)]

    assert await tombstones.pending(ledger, kinds.OPENAI.tombstone_rows(), now_cutoff()) == 1
    assert await tombstones.purge_tombstones(ledger, kinds.OPENAI.tombstone_rows(), now_cutoff()) == 1
    assert await count(url, openai_sessions_table) == 0 and await count(url, high_water_marks_table) == 1

    await session.add_items([item("three")])  # takes the mark: numbered on, next generation
    assert await sequences(url, "o") == [3]
    assert await counter(url, openai_sessions_table, "o", "generation") == [(3, 3)]
    assert await count(url, high_water_marks_table) == 0
    assert await session.get_items() == [item("three")]


async def test_openai_delete_with_idle_before_only_deletes_an_idle_session(url: URL, ledger: Ledger) -> None:
    await LedgerSession("o", ledger=ledger).add_items([item("one")])
    week_ago = datetime.now(UTC) - timedelta(days=7)
    assert not await openai_items.delete_session(ledger, "o", idle_before=week_ago)
    await age(url, openai_sessions_table, "updated_at", ["o"], 8)
    assert await openai_items.delete_session(ledger, "o", idle_before=week_ago)
    with pytest.raises(ValueError, match="idle_before"):
        await openai_items.delete_session(ledger, "o", idle_before=datetime(2020, 1, 1))


async def test_openai_purge_keeps_a_session_popped_after_its_page_was_read(url: URL, ledger: Ledger) -> None:
    """A pop takes no sequence and starts no generation: the purge checks ``updated_at``
    as its page read it too, so even a purge by prefix alone keeps the popped session."""
    for session_id in ("p-a", "p-b", "p-c"):
        await LedgerSession(session_id, ledger=ledger).add_items([item("one"), item("two")])
    seen: list[tuple[Any, bool]] = []

    async def progress(session_id: Any, done: bool) -> None:
        seen.append((session_id, done))
        if session_id == "p-a":  # the page with p-b and p-c was read before this
            assert await LedgerSession("p-b", ledger=ledger).pop_item() == item("two")
            await LedgerSession("p-c", ledger=ledger).add_items([item("three")])

    purged = await openai_items.purge_sessions(ledger, Selection.of(prefix="p-"), progress=progress)
    assert purged == 1
    assert seen == [("p-a", True), ("p-b", False), ("p-c", False)]
    assert await LedgerSession("p-b", ledger=ledger).get_items() == [item("one")]
    assert await openai_items.count_live(ledger, "p-c") == 3


async def test_openai_adds_racing_a_tombstone_purge_never_reuse_a_sequence(url: URL, ledger: Ledger) -> None:
    """Each id had sequences 1-2 and was deleted; whether an add meets the tombstone or
    the mark the purge left, its item is sequence 3, and a later generation."""
    ids = [f"r{number}" for number in range(12)]
    for session_id in ids:
        await LedgerSession(session_id, ledger=ledger).add_items([item("1"), item("2")])
        assert await openai_items.delete_session(ledger, session_id)
    await age(url, openai_sessions_table, "deleted_at", ids, 5)
    writer = Ledger(url)
    try:

        async def add(session_id: str) -> None:
            await asyncio.sleep(0)
            await LedgerSession(session_id, ledger=writer).add_items([item("3")])

        cutoff = datetime.now(UTC) - timedelta(days=1)
        purged, *_ = await asyncio.gather(
            tombstones.purge_tombstones(ledger, kinds.OPENAI.tombstone_rows(), cutoff, size=3), *map(add, ids)
        )
    finally:
        await writer.close()
    assert 0 <= purged <= len(ids)
    for session_id in ids:
        assert await sequences(url, session_id) == [3]
        [(last, generation)] = await counter(url, openai_sessions_table, session_id, "generation")
        assert last == 3 and generation >= 2
    assert await count(url, high_water_marks_table) == 0  # every mark carried on by a new row


# -- ADK --------------------------------------------------------------------------------


async def test_adk_delete_then_purge_removes_the_rows_and_keeps_shared_state(
    url: URL, service: LedgerSessionService
) -> None:
    made = await service.create_session(
        app_name="shop",
        user_id="ann",
        session_id="a",
        state={"step": 1, "app:theme": "dark", "user:lang": "de"},
    )
    await service.append_event(made, event("hello", {"cart": ["tea"]}))
    await service.append_event(made, event("welcome", author="clerk"))
    stale = await service.get_session(app_name="shop", user_id="ann", session_id="a")
    assert stale is not None
    key = adk_rows.Key("shop", "ann", "a")
    assert await adk_rows.delete_session(service.ledger, key)
    assert not await adk_rows.delete_session(service.ledger, key)
    assert await count(url, adk_events_table) == 0
    [(last, version)] = await counter(url, adk_sessions_table, "a", "state_version")

    assert await tombstones.purge_tombstones(service.ledger, kinds.ADK.tombstone_rows(), now_cutoff()) == 1
    assert await count(url, adk_sessions_table) == 0 and await count(url, high_water_marks_table) == 1
    assert await count(url, adk_app_states_table) == 1 and await count(url, adk_user_states_table) == 1
    with pytest.raises(SessionNotFoundError):
        await service.append_event(stale, event("late"))

    again = await service.create_session(app_name="shop", user_id="ann", session_id="a")
    assert await counter(url, adk_sessions_table, "a", "state_version") == [(last, version + 1)]
    assert await count(url, high_water_marks_table) == 0
    assert again.state == {"app:theme": "dark", "user:lang": "de"}
    with pytest.raises(StaleSessionError):
        await service.append_event(stale, event("late"))
    await service.append_event(again, event("new"))
    assert await counter(url, adk_sessions_table, "a", "state_version") == [(last + 1, version + 1)]


async def test_adk_marks_are_per_key_and_keys_of_finds_every_app(service: LedgerSessionService) -> None:
    assert marks.adk_id("a", "b", "c") == '["a","b","c"]' != marks.adk_id("a", "b,c", "")
    for app in ("shop", "bank"):
        await service.create_session(app_name=app, user_id="ann", session_id="s")
    assert await adk_rows.keys_of(service.ledger, "s") == [
        adk_rows.Key("bank", "ann", "s"),
        adk_rows.Key("shop", "ann", "s"),
    ]


async def test_adk_purge_keeps_a_session_appended_to_after_its_page_was_read(
    url: URL, service: LedgerSessionService
) -> None:
    made = {}
    for app, session_id in (("bank", "q-a"), ("shop", "q-a"), ("shop", "q-b")):
        made[app, session_id] = await service.create_session(
            app_name=app, user_id="ann", session_id=session_id
        )
    seen: list[tuple[Any, bool]] = []

    def progress(key: Any, done: bool) -> None:
        seen.append((key, done))

    selection = Selection.of(prefix="q-")
    assert await adk_rows.purge_sessions(service.ledger, selection, app_name="shop", progress=progress) == 2
    assert seen == [(("shop", "ann", "q-a"), True), (("shop", "ann", "q-b"), True)]
    assert await adk_rows.purge_sessions(service.ledger, selection, user_id="bob") == 0
    assert await adk_rows.purge_sessions(service.ledger, selection, progress=progress) == 1
    assert seen[-1] == (("bank", "ann", "q-a"), True)

    for session_id in ("q-c", "q-d"):
        made["shop", session_id] = await service.create_session(
            app_name="shop", user_id="ann", session_id=session_id
        )
    seen.clear()

    async def meanwhile(key: Any, done: bool) -> None:
        seen.append((key, done))
        if key[2] == "q-c":
            await service.append_event(made["shop", "q-d"], event("busy"))

    assert await adk_rows.purge_sessions(service.ledger, selection, progress=meanwhile) == 1
    assert seen == [(("shop", "ann", "q-c"), True), (("shop", "ann", "q-d"), False)]
    assert await service.get_session(app_name="shop", user_id="ann", session_id="q-d") is not None


async def test_adk_creates_racing_a_tombstone_purge_never_reuse_a_sequence(
    url: URL, service: LedgerSessionService
) -> None:
    ids = [f"c{number}" for number in range(12)]
    for session_id in ids:
        made = await service.create_session(app_name="app", user_id="u", session_id=session_id)
        await service.append_event(made, event("1"))
        await service.append_event(made, event("2"))
        await service.delete_session(app_name="app", user_id="u", session_id=session_id)
    await age(url, adk_sessions_table, "deleted_at", ids, 5)
    before = {
        session_id: await counter(url, adk_sessions_table, session_id, "state_version") for session_id in ids
    }
    async with LedgerSessionService(url) as writer:

        async def create(session_id: str) -> None:
            await asyncio.sleep(0)
            made = await writer.create_session(app_name="app", user_id="u", session_id=session_id)
            await writer.append_event(made, event("3"))

        cutoff = datetime.now(UTC) - timedelta(days=1)
        await asyncio.gather(
            tombstones.purge_tombstones(service.ledger, kinds.ADK.tombstone_rows(), cutoff, size=3),
            *map(create, ids),
        )
    for session_id in ids:
        [(last, version)] = before[session_id]
        assert last == 3  # two events and the delete
        assert await counter(url, adk_sessions_table, session_id, "state_version") == [(4, version + 1)]
    assert await count(url, high_water_marks_table) == 0


# -- retention ----------------------------------------------------------------------------


async def test_retention_by_age_for_openai_and_adk(
    url: URL, ledger: Ledger, service: LedgerSessionService
) -> None:
    for session_id in ("idle", "busy"):
        await LedgerSession(session_id, ledger=ledger).add_items([item("hello")])
        await service.create_session(app_name="app", user_id="u", session_id=session_id)
    await age(url, openai_sessions_table, "updated_at", ["idle"], 40)
    await age(url, adk_sessions_table, "updated_at", ["idle"], 40)
    policy = retention.Policy(idle=timedelta(days=30), tombstones_after=timedelta(days=30))
    kinds = ("openai", "adk")

    dry = await retention.apply(url, policy, dry_run=True, kinds=kinds)
    assert (dry.sessions, dry.tombstones) == ({"openai": 1, "adk": 1}, {"openai": 0, "adk": 0})
    assert await count(url, openai_items_table) == 2

    done = await retention.apply(url, policy, kinds=kinds, batch_size=1)
    assert (done.sessions, done.kept, done.tombstones) == (
        {"openai": 1, "adk": 1},
        {"openai": 0, "adk": 0},
        {"openai": 0, "adk": 0},  # deleted just now: within the horizon
    )
    assert await openai_items.summary(ledger, "idle") is None
    assert await openai_items.summary(ledger, "busy") is not None
    assert await service.get_session(app_name="app", user_id="u", session_id="idle") is None
    assert await service.get_session(app_name="app", user_id="u", session_id="busy") is not None

    await age(url, openai_sessions_table, "deleted_at", ["idle"], 31)
    await age(url, adk_sessions_table, "deleted_at", ["idle"], 31)
    later = retention.Policy(tombstones_after=timedelta(days=30))
    assert (await retention.apply(url, later, dry_run=True, kinds=kinds)).tombstones == {
        "openai": 1,
        "adk": 1,
    }
    assert (await retention.apply(url, later, kinds=kinds)).tombstones == {"openai": 1, "adk": 1}
    assert await count(url, openai_sessions_table) == 1 and await count(url, adk_sessions_table) == 1
    assert await count(url, high_water_marks_table) == 2
    with pytest.raises(ValueError, match="batch_size"):
        await retention.apply(url, later, kinds=kinds, batch_size=0)
    with pytest.raises(ValueError, match="kinds must name"):
        await retention.apply(url, later, kinds=("openai", "crew"))


# -- the commands ---------------------------------------------------------------------------


async def test_the_commands_delete_and_purge_openai_and_adk_sessions(
    url: URL, ledger: Ledger, service: LedgerSessionService, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = url.render_as_string(hide_password=False)
    await LedgerSession("x", ledger=ledger).add_items([item("hello"), item("again")])
    for app in ("shop", "bank"):
        await service.create_session(app_name=app, user_id="ann", session_id="x")

    assert await cli.run(["sessions", "delete", "x", "--dsn", dsn, "--kind", "openai", "--yes"]) == 0
    assert "deleted openai session 'x' (2 items)" in capsys.readouterr().out
    assert await cli.run(["sessions", "delete", "x", "--dsn", dsn, "--kind", "openai", "--yes"]) == 1
    assert "no session 'x'" in capsys.readouterr().out

    argv = ["sessions", "delete", "x", "--dsn", dsn, "--kind", "adk", "--app", "shop", "--yes"]
    assert await cli.run(argv) == 0
    assert "deleted adk session 'x' of app 'shop', user 'ann'" in capsys.readouterr().out
    assert await service.get_session(app_name="bank", user_id="ann", session_id="x") is not None
    assert await cli.run(["sessions", "delete", "x", "--dsn", dsn, "--app", "shop"]) == 2
    assert "--app and --user are for --kind adk" in capsys.readouterr().err
    assert await cli.run(["sessions", "delete", "x", "--dsn", dsn, "--kind", "adk", "--user", " "]) == 2
    assert "--user cannot be empty or blank" in capsys.readouterr().err
    assert await cli.run(["sessions", "show", "x", "--dsn", dsn, "--kind", "openai", "--app", "shop"]) == 2
    assert "--app and --user are for --kind adk" in capsys.readouterr().err

    for session_id in ("old-1", "old-2"):
        await LedgerSession(session_id, ledger=ledger).add_items([item("hello")])
        await service.create_session(app_name="shop", user_id="ann", session_id=session_id)
    await age(url, openai_sessions_table, "updated_at", ["old-1", "old-2"], 10)
    await age(url, adk_sessions_table, "updated_at", ["old-1", "old-2", "x"], 10)

    purge = ["sessions", "purge", "--dsn", dsn, "--older-than", "1w"]
    assert await cli.run([*purge, "--kind", "openai", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would delete 2 openai sessions" in out and "openai  old-1" in out
    assert await cli.run([*purge, "--kind", "adk", "--user", "ann", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would delete 3 adk sessions" in out and "adk  bank/ann/x" in out
    assert await cli.run([*purge, "--kind", "adk", "--app", "shop", "--yes"]) == 0
    assert "deleted 2 adk sessions" in capsys.readouterr().out
    assert await service.get_session(app_name="bank", user_id="ann", session_id="x") is not None
    assert await cli.run([*purge, "--kind", "openai", "--prefix", "old-", "--yes"]) == 0
    assert "deleted 2 openai sessions" in capsys.readouterr().out
    assert await count(url, openai_items_table) == 0

    retain = ["retention", "--dsn", dsn, "--tombstones-after", "0s"]
    assert await cli.run([*retain, "--kind", "openai", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["tombstones"] == {"openai": 3}
    assert await cli.run([*retain, "--kind", "adk", "--idle", "1w"]) == 0
    out = capsys.readouterr().out
    assert "adk: deleted 1 idle session, purged 3 tombstones" in out
    # The cutoffs are taken when the run starts: the idle session it deleted is a tombstone.
    assert await count(url, adk_sessions_table) == 1 and await count(url, openai_sessions_table) == 0
    assert await count(url, high_water_marks_table) == 6


async def test_an_import_below_an_openai_or_adk_mark_is_refused(
    url: URL, ledger: Ledger, service: LedgerSessionService, tmp_path: Path
) -> None:
    """An export taken before the delete, imported after the purge, would reuse the
    sessions' sequences: refused, and the marks stay."""
    await LedgerSession("x", ledger=ledger).add_items([item("one")])
    await service.create_session(app_name="app", user_id="u", session_id="x")
    dsn = url.render_as_string(hide_password=False)
    exported = tmp_path / "x.jsonl"
    assert await cli.run(["export", "--dsn", dsn, "--output", str(exported)]) == 0
    assert await openai_items.delete_session(ledger, "x")
    assert await adk_rows.delete_session(ledger, adk_rows.Key("app", "u", "x"))
    assert await tombstones.purge_tombstones(ledger, kinds.OPENAI.tombstone_rows(), now_cutoff()) == 1
    assert await tombstones.purge_tombstones(ledger, kinds.ADK.tombstone_rows(), now_cutoff()) == 1
    assert await cli.run(["import", "--dsn", dsn, str(exported)]) == 1
    assert await count(url, openai_sessions_table) == 0 and await count(url, adk_sessions_table) == 0
    assert await count(url, high_water_marks_table) == 2
