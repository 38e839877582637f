"""Retention on every backend: the policy (idle sessions deleted through the conditional
delete, tombstones purged after a horizon) as a library call and as a command, and the
tombstone purge keeping the rule that no sequence or version of an id is used twice --
against a stale writer (a second store holding a view from before the purge), against
a re-create between the purge's read and its delete, and against concurrent re-creates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rein import Message, Session
from sqlalchemy import Table, func, select, update
from sqlalchemy.engine import URL, Connection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import DowngradeRefused, SessionDeleted, SnapshotConflict, VersionConflict, marks, retention
from chatledger.migrate import downgrade_database, head_revision, run_on_connection, upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.schema import high_water_marks_table, rein_sessions_table, sessions_table
from chatledger.tools import cli

from .conftest import Database
from .support.schema_helpers import fresh_database


@pytest.fixture
async def url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A database of the target's backend for this test alone, at head."""
    async with fresh_database(database, tmp_path, "retention") as fresh:
        await upgrade_database(fresh)
        yield fresh


async def age(url: URL, table: Table, column: str, ids: list[str], days: int) -> None:
    """Sets ``column`` of the ids' rows to ``days`` days ago."""
    at = datetime.now(UTC) - timedelta(days=days)

    def work(connection: Connection) -> None:
        connection.execute(update(table).where(table.c.id.in_(ids)).values({column: at}))

    await run_on_connection(url, work)


async def rows(url: URL, table: Table) -> int:
    def work(connection: Connection) -> int:
        return int(connection.scalar(select(func.count()).select_from(table)) or 0)

    return await run_on_connection(url, work)


#: The kinds the default run covers besides zett and rein: none (the OpenAI Agents and
#: ADK kinds only when named, tests/test_purge_frameworks.py).
NONE: dict[str, int] = {}


def rein_session(text: str) -> Session:
    return Session(messages=[Message(role="user", content=text)])


async def zett_and_rein(url: URL) -> tuple[Any, LedgerSessionStore]:
    from chatledger.zett import LedgerSessionStorage

    return LedgerSessionStorage(url), LedgerSessionStore(url)


# -- the policy ---------------------------------------------------------------------------


async def test_the_policy_deletes_idle_sessions_then_purges_old_tombstones(url: URL) -> None:
    storage, store = await zett_and_rein(url)
    try:
        for session_id in ("idle", "busy"):
            await storage.append(session_id, "r", UserMessage(content="hello"))
            await store.asave(session_id, rein_session("hello"))
        await age(url, sessions_table, "updated_at", ["idle"], 40)
        await age(url, rein_sessions_table, "updated_at", ["idle"], 40)
        policy = retention.Policy(idle=timedelta(days=30), tombstones_after=timedelta(days=30))

        dry = await retention.apply(url, policy, dry_run=True)
        assert (dry.sessions, dry.tombstones) == (
            {"zett": 1, "rein": 1, **NONE},
            {"zett": 0, "rein": 0, **NONE},
        )
        assert await storage.get_session("idle") is not None  # a dry run deletes nothing

        done = await retention.apply(url, policy, batch_size=1)
        assert (done.sessions, done.kept, done.tombstones) == (
            {"zett": 1, "rein": 1, **NONE},
            {"zett": 0, "rein": 0, **NONE},
            {"zett": 0, "rein": 0, **NONE},  # deleted just now: within the horizon
        )
        assert await storage.get_session("idle") is None and await store.aload("idle") is None
        assert await storage.get_session("busy") is not None and await store.aload("busy") is not None

        await age(url, sessions_table, "deleted_at", ["idle"], 31)
        await age(url, rein_sessions_table, "updated_at", ["idle"], 31)
        tombstones_only = retention.Policy(tombstones_after=timedelta(days=30))
        assert (await retention.apply(url, tombstones_only, dry_run=True)).tombstones == {
            "zett": 1,
            "rein": 1,
            **NONE,
        }
        assert (await retention.apply(url, tombstones_only)).tombstones == {"zett": 1, "rein": 1, **NONE}
        assert await rows(url, sessions_table) == 1 and await rows(url, rein_sessions_table) == 1
        assert await rows(url, high_water_marks_table) == 2
    finally:
        await storage.close()
        await store.aclose()


def test_a_policy_says_what_to_delete() -> None:
    with pytest.raises(ValueError, match="idle and/or tombstones_after"):
        retention.Policy()
    with pytest.raises(ValueError, match="idle must not be negative"):
        retention.Policy(idle=timedelta(days=-1))
    with pytest.raises(TypeError, match="tombstones_after must be a timedelta"):
        retention.Policy(tombstones_after=30)  # type: ignore[arg-type]


async def test_the_command_counts_deletes_and_says_so(url: URL, capsys: pytest.CaptureFixture[str]) -> None:
    storage, store = await zett_and_rein(url)
    try:
        await storage.append("old", "r", UserMessage(content="hello"))
        await store.asave("old", rein_session("hello"))
        await age(url, sessions_table, "updated_at", ["old"], 10)
        await age(url, rein_sessions_table, "updated_at", ["old"], 10)
    finally:
        await storage.close()
        await store.aclose()
    dsn = url.render_as_string(hide_password=False)

    assert await cli.run(["retention", "--dsn", dsn, "--idle", "1w", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "zett: would delete 1 idle session" in out and "rein: would delete 1 idle session" in out
    assert "dry run: nothing deleted" in out

    assert (
        await cli.run(["retention", "--dsn", dsn, "--idle", "1w", "--tombstones-after", "0s", "--json"]) == 0
    )
    said = json.loads(capsys.readouterr().out)
    assert said["dry_run"] is False
    # The cutoffs are taken when the run starts: its own deletes are not yet past them.
    assert said["sessions"] == {"zett": 1, "rein": 1, **NONE} and said["tombstones"] == {
        "zett": 0,
        "rein": 0,
        **NONE,
    }
    assert await cli.run(["retention", "--dsn", dsn, "--tombstones-after", "0s"]) == 0
    out = capsys.readouterr().out
    assert "zett: purged 1 tombstone" in out and "rein: purged 1 tombstone" in out

    assert await cli.run(["retention", "--dsn", dsn, "--idle", "soon"]) == 2
    assert "--idle 'soon' is not a duration" in capsys.readouterr().err
    assert await cli.run(["retention", "--dsn", dsn]) == 2
    assert "--idle AGE and/or --tombstones-after AGE" in capsys.readouterr().err


# -- the tombstone purge: no sequence or version used twice -------------------------------


async def test_a_stale_writer_holding_a_view_from_before_the_purge_is_refused(url: URL) -> None:
    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(url) as ours, LedgerSessionStorage(url) as stale:
        for text in ("one", "two", "three"):
            await ours.append("x", "r", UserMessage(content=text))
        view = await stale.load("x")  # the stale writer's view: 3 messages, no checkpoint
        old_fields = await stale.get_fields_version("x")
        assert [record.sequence for record in view.raw_tail] == [1, 2, 3] and old_fields is not None
        assert await ours.delete_session("x")
        await age(url, sessions_table, "deleted_at", ["x"], 2)
        assert await ours.purge_tombstones(horizon=timedelta(days=1)) == 1
        assert await rows(url, sessions_table) == 0

        with pytest.raises(SessionDeleted, match="tombstone since purged"):
            await stale.append("x", "r", UserMessage(content="late"))
        assert await stale.update_session("x", title="t", expected_version=old_fields) is None
        assert await rows(url, sessions_table) == 0  # the refused append left nothing

        created = await ours.create_session(session_id="x")
        assert created.message_count == 0
        assert await ours.append("x", "r", UserMessage(content="four")) == 4  # numbered on
        assert await stale.append("x", "r", UserMessage(content="five")) == 5
        with pytest.raises(SnapshotConflict):  # a checkpoint computed on the purged generation
            await stale.snapshot("x", CompactedMessage(content="summary"), 3, 0)
        fields = await ours.get_fields_version("x")
        assert fields is not None and fields > old_fields
        assert await rows(url, high_water_marks_table) == 0  # carried on by the new row


async def test_a_stale_rein_writer_is_refused_or_numbers_on(url: URL) -> None:
    with LedgerSessionStore(url) as ours, LedgerSessionStore(url) as stale:
        ours.save("r", rein_session("one"))
        ours.save("r", rein_session("two"))
        seen = stale.load_versioned("r")
        assert seen is not None and seen.version == 2
        assert ours.delete("r")  # version 3
        await age(url, rein_sessions_table, "updated_at", ["r"], 2)
        assert ours.purge_tombstones(horizon=timedelta(days=1)) == 1
        with pytest.raises(VersionConflict):
            stale.save("r", rein_session("late"), expected_version=seen.version)
        stale.save("r", rein_session("new"), expected_version=0)
        again = stale.load_versioned("r")
        assert again is not None and again.version == 4  # after the tombstone's 3, never 1
        ours.save("r", rein_session("newer"))
        newest = ours.load_versioned("r")
        assert newest is not None and newest.version == 5


async def test_a_tombstone_revived_between_the_read_and_its_delete_is_kept(url: URL) -> None:
    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(url) as storage:
        for session_id in ("a", "b"):
            await storage.append(session_id, "r", UserMessage(content="old"))
            await storage.delete_session(session_id)
        await age(url, sessions_table, "deleted_at", ["a", "b"], 5)
        seen: list[tuple[str, bool]] = []

        async def progress(session_id: str, purged: bool) -> None:
            seen.append((session_id, purged))
            if session_id == "a":  # the page with "b" was read before this
                await storage.create_session(session_id="b", title="again")

        assert await storage.purge_tombstones(horizon=timedelta(days=1), progress=progress) == 1
        assert seen == [("a", True), ("b", False)]
        assert (await storage.get_session("b")) is not None
        assert await storage.append("b", "r", UserMessage(content="new")) == 2


async def test_rein_tombstone_saved_again_between_the_read_and_its_delete_is_kept(url: URL) -> None:
    with LedgerSessionStore(url) as store:
        for session_id in ("a", "b"):
            store.save(session_id, rein_session("old"))
            store.delete(session_id)
        await age(url, rein_sessions_table, "updated_at", ["a", "b"], 5)

        def progress(session_id: str, purged: bool) -> None:
            if session_id == "a":
                # On the store's loop thread: a second store saves meanwhile.
                with LedgerSessionStore(url) as other:
                    other.save("b", rein_session("again"))

        assert store.purge_tombstones(horizon=timedelta(days=1), progress=progress) == 1
        saved = store.load_versioned("b")
        assert saved is not None and saved.version == 3


@pytest.mark.parametrize("create", [True, False], ids=["create_session", "append"])
async def test_concurrent_re_creates_during_a_purge_never_reuse_a_sequence(url: URL, create: bool) -> None:
    """Each id had sequences 1-2; whether a re-create meets the tombstone or its mark,
    the next message is sequence 3 (create_session), or the append is refused."""
    from chatledger.zett import LedgerSessionStorage

    ids = [f"c{number}" for number in range(12)]
    async with LedgerSessionStorage(url) as purger, LedgerSessionStorage(url) as writer:
        for session_id in ids:
            await purger.append(session_id, "r", UserMessage(content="1"))
            await purger.append(session_id, "r", UserMessage(content="2"))
            await purger.delete_session(session_id)
        await age(url, sessions_table, "deleted_at", ids, 5)

        async def recreate(session_id: str) -> int | None:
            await asyncio.sleep(0)
            if create:
                await writer.create_session(session_id=session_id)
                return await writer.append(session_id, "r", UserMessage(content="3"))
            with pytest.raises(SessionDeleted):
                await writer.append(session_id, "r", UserMessage(content="3"))
            return None

        purged, *sequences = await asyncio.gather(
            purger.purge_tombstones(horizon=timedelta(days=1), batch_size=3), *map(recreate, ids)
        )
        assert sequences == ([3] * len(ids) if create else [None] * len(ids))
        # Every id is a live row or a mark, never both.
        live, marked = await rows(url, sessions_table), await rows(url, high_water_marks_table)
        assert (live, marked) == ((len(ids), 0) if create else (0, len(ids)))
        assert purged == (len(ids) - (len(ids) - marked if create else 0) if not create else purged)
        for session_id in ids:
            if create:
                assert await writer.append(session_id, "r", UserMessage(content="4")) == 4
            else:
                await writer.create_session(session_id=session_id)
                assert await writer.append(session_id, "r", UserMessage(content="3")) == 3


async def test_an_import_below_a_mark_is_refused(url: URL, tmp_path: Path, database: Database) -> None:
    """An export taken before the delete, imported after the purge, would reuse the
    id's sequences: refused, and the mark stays."""
    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(url) as storage:
        await storage.append("x", "r", UserMessage(content="one"))
    dsn = url.render_as_string(hide_password=False)
    exported = tmp_path / "x.jsonl"
    assert await cli.run(["export", "--dsn", dsn, "--output", str(exported)]) == 0
    async with LedgerSessionStorage(url) as storage:
        await storage.delete_session("x")
        await age(url, sessions_table, "deleted_at", ["x"], 2)
        assert await storage.purge_tombstones(horizon=timedelta(days=1)) == 1
    assert await cli.run(["import", "--dsn", dsn, str(exported)]) == 1
    assert await rows(url, sessions_table) == 0 and await rows(url, high_water_marks_table) == 1


async def test_a_copy_after_a_purge_carries_the_marks(url: URL, tmp_path: Path, database: Database) -> None:
    """A database copied after a purge (moving to a shared server, say) numbers the purged
    ids on as the source would: a late append is refused, a re-create and a rein save
    number on from the marks; copying again raises nothing twice."""
    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(url) as storage, LedgerSessionStore(url) as store:
        for text in ("one", "two"):
            await storage.append("x", "r", UserMessage(content=text))
        await storage.delete_session("x")
        await store.asave("r", rein_session("one"))
        await store.adelete("r")  # version 2
        await storage.append("kept", "r", UserMessage(content="live"))
    await age(url, sessions_table, "deleted_at", ["x"], 2)
    await age(url, rein_sessions_table, "updated_at", ["r"], 2)
    assert (await retention.apply(url, retention.Policy(tombstones_after=timedelta(days=1)))).tombstones == {
        "zett": 1,
        "rein": 1,
        **NONE,
    }
    async with fresh_database(database, tmp_path, "copied") as target:
        await upgrade_database(target)
        source_dsn, target_dsn = (u.render_as_string(hide_password=False) for u in (url, target))
        for _ in range(2):
            assert await cli.run(["copy", "--from", source_dsn, "--to", target_dsn]) == 0
        assert await rows(target, high_water_marks_table) == 2
        async with LedgerSessionStorage(target) as storage, LedgerSessionStore(target) as store:
            with pytest.raises(SessionDeleted, match="tombstone since purged"):
                await storage.append("x", "r", UserMessage(content="late"))
            await storage.create_session(session_id="x")
            assert await storage.append("x", "r", UserMessage(content="three")) == 3
            await store.asave("r", rein_session("two"))
            saved = await store.aload_versioned("r")
            assert saved is not None and saved.version == 3

    exported = tmp_path / "x.jsonl"
    assert await cli.run(["export", "--dsn", source_dsn, "--session", "x", "--output", str(exported)]) == 0
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [record["row"]["id_digest"] for record in records if record.get("type") == "mark"] == [
        marks.digest("x")
    ]


def test_a_mark_keeps_no_id() -> None:
    assert marks.digest("user-42") == marks.digest("user-42") != marks.digest("user-42 ")
    assert "user" not in marks.digest("user-42") and len(marks.digest("user-42")) == 64


async def test_a_downgrade_below_0005_keeps_the_marks_unless_told(url: URL) -> None:
    """Without the marks a purged id would number from 1 again: the drop is guarded."""
    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(url) as storage:
        await storage.append("x", "r", UserMessage(content="one"))
        await storage.delete_session("x")
        assert await storage.purge_tombstones(deleted_before=datetime.now(UTC) + timedelta(seconds=1)) == 1
    with pytest.raises(DowngradeRefused, match=r"high_water_marks \(1 row\)"):
        await downgrade_database(url, "0004")
    assert await rows(url, high_water_marks_table) == 1
    await downgrade_database(url, "0004", drop_rows=True)
    assert await upgrade_database(url) == head_revision()
