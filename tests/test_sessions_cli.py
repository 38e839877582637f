"""``chatledger sessions list / show / delete / purge`` on every backend, zett and rein sessions."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rein.ir import Message, ToolCall
from rein.session import Session
from sqlalchemy import Table, update
from sqlalchemy.engine import Connection
from zett_agent.messages import UserMessage

from chatledger import SessionDeleted
from chatledger.dsn import DSN_ENV, resolve_dsn
from chatledger.migrate import run_on_connection, upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.schema import rein_sessions_table, sessions_table
from chatledger.tools import sessions as sessions_module
from chatledger.tools.cli import build_parser, run
from chatledger.tools.sessions import parse_age
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.fresh import fresh_database
from .support.zett_data import write_sessions

pytestmark = pytest.mark.dialect_only


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def filled(database: Database, tmp_path: Path) -> AsyncIterator[tuple[str, list[str]]]:
    """A fresh migrated database with five zett sessions and two rein sessions: (DSN, zett ids)."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_sessions") as url:
        await upgrade_database(url)
        async with LedgerSessionStorage(url) as storage:
            ids = await write_sessions(storage)
        async with LedgerSessionStore(url) as store:
            call = ToolCall(id="c1", name="weather", arguments={"city": "Zürich"})
            await store.asave(
                "rein-one",
                Session(
                    messages=[
                        Message(role="user", content="weather?"),
                        Message(role="assistant", tool_calls=[call]),
                    ]
                ),
            )
            await store.asave("rein-two", Session(messages=[Message(role="user", content="hi")]))
        yield url.render_as_string(hide_password=False), ids


def idle(table: Table, ids: list[str], days: int) -> Callable[[Connection], None]:
    """Makes the sessions ``ids`` last active ``days`` ago."""

    def work(connection: Connection) -> None:
        at = datetime.now(UTC) - timedelta(days=days)
        connection.execute(update(table).where(table.c.id.in_(ids)).values(updated_at=at))

    return work


async def test_list(filled: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    dsn, ids = filled
    assert await run(["sessions", "list", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "zett sessions, newest activity first" in out and "rein sessions, newest save first" in out
    assert all(session_id in out for session_id in ids) and "rein-one" in out

    assert await run(["sessions", "list", "--dsn", dsn, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {row["id"]: row["message_count"] for row in listing["zett"]} == dict(
        zip(ids, [7, 12, 1, 0, 1], strict=True)
    )
    assert [row["id"] for row in listing["rein"]] == ["rein-two", "rein-one"]  # newest save first
    assert listing["rein"][0]["version"] == 1

    assert await run(["sessions", "list", "--dsn", dsn, "--json", "--limit", "2", "--kind", "zett"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert len(listing["zett"]) == 2 and "rein" not in listing


async def test_show(filled: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    dsn, ids = filled
    assert await run(["sessions", "show", ids[0], "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert f"zett session {ids[0]}" in out and "title       Alpha ✓" in out
    assert "checkpoint version 2, summarizing messages 1-6" in out
    assert "Weather talk: rain today, sun tomorrow." in out
    assert "raw messages after the checkpoint (1):" in out and "#7" in out and "Sunny." in out
    assert "[tokens in 300, out 2]" in out

    assert await run(["sessions", "show", ids[1], "--dsn", dsn, "--messages", "3"]) == 0
    out = capsys.readouterr().out
    assert "raw messages (12), the last 3" in out and "#12" in out and "#9 " not in out

    assert await run(["sessions", "show", "rein-one", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "rein session rein-one (version 1)" in out and '-> weather({"city": "Zürich"})' in out

    assert await run(["sessions", "show", "nobody", "--dsn", dsn]) == 1
    assert "no session 'nobody'" in capsys.readouterr().out


async def test_delete_asks_first(
    filled: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, ids = filled
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert await run(["sessions", "delete", ids[4], "--dsn", dsn]) == 1
    out = capsys.readouterr().out
    assert f"delete zett session {ids[4]!r} (1 message) with all its history? [y/N]" in out
    assert "nothing deleted" in out

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # end of input declines too
    assert await run(["sessions", "delete", ids[4], "--dsn", dsn]) == 1

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert await run(["sessions", "delete", ids[4], "--dsn", dsn]) == 0
    assert f"deleted zett session {ids[4]!r}" in capsys.readouterr().out
    assert await run(["sessions", "delete", "rein-two", "--dsn", dsn, "--yes"]) == 0
    assert await run(["sessions", "delete", ids[4], "--dsn", dsn, "--yes"]) == 1
    assert "no session" in capsys.readouterr().out

    async with LedgerSessionStorage(dsn) as storage:
        assert await storage.get_session(ids[4]) is None and await storage.count_messages(ids[4]) == 0
        assert await storage.get_session(ids[3]) is not None
    async with LedgerSessionStore(dsn) as store:
        assert not await store.acontains("rein-two") and await store.acontains("rein-one")


async def test_delete_of_a_session_deleted_by_another_during_the_question_says_so(
    filled: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store's delete decides, not what was read for the question."""
    dsn, ids = filled

    def meanwhile(console: object, question: str) -> bool:
        async def other() -> None:
            async with LedgerSessionStorage(dsn) as storage:
                assert await storage.delete_session(ids[3])

        worker = threading.Thread(target=lambda: asyncio.run(other()))
        worker.start()
        worker.join()
        return True

    monkeypatch.setattr(sessions_module, "confirm", meanwhile)
    assert await run(["sessions", "delete", ids[3], "--dsn", dsn]) == 1
    out = capsys.readouterr().out
    assert f"zett session {ids[3]!r}" in out and "deleted meanwhile by another" in out


async def test_purge(
    filled: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, ids = filled
    monkeypatch.setattr(sessions_module, "PURGE_BATCH", 2)  # several batches
    await run_on_connection(resolve_dsn(dsn), idle(sessions_table, ids[:3], 40))
    await run_on_connection(resolve_dsn(dsn), idle(rein_sessions_table, ["rein-one"], 40))

    # A dry run counts, and lists the ids it would delete.
    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "30d", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "would delete 3 zett sessions and 1 rein session last active before" in out
        and "nothing deleted" in out
    )
    listed = [line.split() for line in out.splitlines() if line.startswith("  ")]
    assert sorted(listed) == sorted([["zett", session_id] for session_id in ids[:3]] + [["rein", "rein-one"]])
    monkeypatch.setattr(sessions_module, "SHOWN_IDS", 2)  # then how many more
    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "30d", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "  ... and 1 more zett session\n" in out
        and len([ln for ln in out.splitlines() if "  zett  " in ln]) == 2
    )

    # Declined (an answer, or no input at all): nothing deleted, exit 1 as for delete.
    monkeypatch.setattr("sys.stdin", io.StringIO("no\n"))
    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "30d"]) == 1
    assert "nothing deleted" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "30d"]) == 1
    assert "nothing deleted" in capsys.readouterr().out

    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "4w2d", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "deleted 3 zett sessions and 1 rein session" in out
    async with LedgerSessionStorage(dsn) as storage:
        assert {summary.session_id for summary in await storage.list_sessions()} == set(ids[3:])
        # Purged ids stay reserved (tombstones): an append is refused, create_session starts anew.
        with pytest.raises(SessionDeleted):
            await storage.append(ids[0], "r", UserMessage(content="late"))
        await storage.create_session(session_id=ids[0])
        assert await storage.append(ids[0], "r", UserMessage(content="anew")) == 8
    async with LedgerSessionStore(dsn) as store:
        assert [info.id for info in await store.alist_sessions()] == ["rein-two"]

    assert await run(["sessions", "purge", "--dsn", dsn, "--prefix", "rein-", "--yes", "--kind", "rein"]) == 0
    assert "deleted 1 rein session whose id starts with 'rein-'" in capsys.readouterr().out
    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "30d", "--yes"]) == 0
    assert "no sessions last active before" in capsys.readouterr().out


def test_purge_help_says_purged_ids_stay_reserved(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sessions", "purge", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Purged ids stay reserved" in text and "SessionDeleted" in text
    assert "create_session(session_id=...) starts it anew" in text and "exit 1 if not confirmed" in text


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["purge", "--older-than", "thirty days"], "not a duration"),
        (["purge"], "--older-than DURATION and/or --prefix PREFIX"),
        (["list", "--limit", "0"], "--limit must be at least 1"),
    ],
)
async def test_usage_errors(
    filled: tuple[str, list[str]], argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _ = filled
    assert await run(["sessions", *argv, "--dsn", dsn]) == 2
    error = capsys.readouterr().err
    assert fragment in error and error.count("\n") == 1
    assert error.startswith(f"chatledger sessions {argv[0]}: ")  # the action, not just "sessions"


async def test_a_missing_sqlite_file_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing-here.sqlite3"
    assert await run(["sessions", "list", "--dsn", f"sqlite:///{missing}"]) == 2
    assert "no such file" in capsys.readouterr().err and not missing.exists()


def test_parse_age() -> None:
    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("1d12h") == timedelta(hours=36)
    assert parse_age("90m") == timedelta(minutes=90)
    for bad in ("", "30", "d", "-1d", "1y", "1.5h"):
        with pytest.raises(ValueError, match="--older-than"):
            parse_age(bad)


async def test_demo_and_stress_say_what_they_left_and_how_to_remove_it(
    database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_left") as url:
        await upgrade_database(url)
        dsn = url.render_as_string(hide_password=False)
        assert await run(["demo", "--dsn", dsn]) == 0
        out = capsys.readouterr().out
        shown = next(line for line in out.splitlines() if "chatledger sessions show" in line).split()
        assert shown[:3] == ["chatledger", "sessions", "show"] and shown[3].startswith("demo-")
        assert f"  chatledger sessions delete {shown[3]} --dsn" in out
        assert await run(["sessions", "show", shown[3], "--dsn", dsn]) == 0
        assert "checkpoint version 1" in capsys.readouterr().out

        assert await run(["stress", "--dsn", dsn, "--processes", "2", "--appends", "3"]) == 0
        out = capsys.readouterr().out
        line = next(line for line in out.splitlines() if "left in" in line)
        assert line.startswith("3 sessions stress-")
        command = line.split("remove them with: ")[1].split()
        assert command[:4] == ["chatledger", "sessions", "purge", "--prefix"]
        assert await run([*command[1:5], "--dsn", dsn, "--yes"]) == 0
        assert "deleted 3 zett sessions whose id starts with 'stress-" in capsys.readouterr().out


async def test_a_kind_whose_package_is_missing_is_mentioned_only_when_it_matters(
    filled: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, ids = filled
    monkeypatch.setitem(sys.modules, "chatledger.rein", None)  # as if rein-agent were not installed
    assert await run(["sessions", "list", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "rein-agent is not installed, so rein sessions are left out" in out  # the database has some
    assert ids[0] in out and "rein sessions, newest" not in out

    async with LedgerSessionStore(dsn) as store:  # the real one, imported before
        for rein_id in ("rein-one", "rein-two"):
            assert await store.adelete(rein_id)
    assert await run(["sessions", "list", "--dsn", dsn]) == 0
    assert "rein-agent is not installed" not in capsys.readouterr().out  # a zett-only database
    assert await run(["sessions", "list", "--dsn", dsn, "--kind", "rein"]) == 0
    assert "rein-agent is not installed" in capsys.readouterr().out  # asked for rein alone


async def test_purge_matches_the_prefix_literally_and_byte_for_byte(
    filled: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 17: ``--prefix tmp-`` deleted ``TMP-keep`` and ``Tmp-x`` too on SQLite."""
    dsn, ids = filled
    names = ["tmp-1", "TMP-keep", "Tmp-x", "tmp_2", "tmp%", "tmp-%"]
    async with LedgerSessionStorage(dsn) as storage:
        for name in names:
            await storage.create_session(session_id=name)
    async with LedgerSessionStore(dsn) as store:
        for name in names:
            await store.asave(name, Session(messages=[Message(role="user", content=name)]))

    assert await run(["sessions", "purge", "--dsn", dsn, "--prefix", "tmp-", "--dry-run"]) == 0
    listed = sorted(line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("  "))
    assert listed == ["tmp-%", "tmp-%", "tmp-1", "tmp-1"]
    assert await run(["sessions", "purge", "--dsn", dsn, "--prefix", "tmp-", "--yes"]) == 0
    assert (
        "deleted 2 zett sessions and 2 rein sessions whose id starts with 'tmp-'" in capsys.readouterr().out
    )
    assert await run(["sessions", "purge", "--dsn", dsn, "--prefix", "tmp%", "--yes"]) == 0
    assert "deleted 1 zett session and 1 rein session" in capsys.readouterr().out

    async with LedgerSessionStorage(dsn) as storage:
        left = {summary.session_id for summary in await storage.list_sessions()}
        assert left == {*ids, "TMP-keep", "Tmp-x", "tmp_2"}
    async with LedgerSessionStore(dsn) as store:
        assert {info.id for info in await store.alist_sessions()} == {
            "rein-one",
            "rein-two",
            "TMP-keep",
            "Tmp-x",
            "tmp_2",
        }


def in_thread(work: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Runs ``work()`` to its end on an event loop of its own in another thread: a
    write by another process, made while the purge waits."""
    failure: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(work())
        except BaseException as error:  # reported below
            failure.append(error)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    assert not failure, failure


async def test_purge_keeps_sessions_written_to_after_their_batch_was_read(
    filled: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 17: purge read a batch of idle ids, then deleted each by id, so a session
    written to in between was deleted with its new message. Here the write comes when
    the progress bar advances after the first deletion of each kind."""
    dsn, _ = filled
    zett_ids = [f"race-{name}" for name in "abc"]
    rein_ids = [f"rein-race-{name}" for name in "abc"]
    async with LedgerSessionStorage(dsn) as storage:
        for session_id in zett_ids:
            await storage.append(session_id, "r", UserMessage(content="old"))
    async with LedgerSessionStore(dsn) as store:
        for session_id in rein_ids:
            await store.asave(session_id, Session(messages=[Message(role="user", content="old")]))
    for table, ids in ((sessions_table, zett_ids), (rein_sessions_table, rein_ids)):
        for days, session_id in zip((42, 41, 40), ids, strict=True):  # activity order: a, b, c
            await run_on_connection(resolve_dsn(dsn), idle(table, [session_id], days))

    async def append() -> None:
        async with LedgerSessionStorage(dsn) as writer:
            await writer.append(zett_ids[1], "r", UserMessage(content="new"))

    async def save() -> None:
        async with LedgerSessionStore(dsn) as writer:
            await writer.asave(rein_ids[1], Session(messages=[Message(role="user", content="new")]))

    real = sessions_module.progress

    @contextmanager
    def writing_progress(console: Any) -> Iterator[Any]:
        with real(console) as bars:
            writes: dict[Any, Callable[[], Coroutine[Any, Any, object]]] = {}
            add_task = bars.add_task

            def add(description: str, **options: Any) -> Any:
                task = add_task(description, **options)
                writes[task] = append if description.startswith("zett") else save
                return task

            def advance(task: Any, *args: Any) -> None:
                write = writes.pop(task, None)
                if write is not None:  # the first advance of the kind: after its first delete
                    in_thread(write)
                bars.__class__.advance(bars, task, *args)

            monkeypatch.setattr(bars, "add_task", add)
            monkeypatch.setattr(bars, "advance", advance)
            yield bars

    monkeypatch.setattr(sessions_module, "progress", writing_progress)
    assert await run(["sessions", "purge", "--dsn", dsn, "--older-than", "30d", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "deleted 2 zett sessions and 2 rein sessions" in out
    assert "kept 2 sessions written to (or deleted) meanwhile" in out

    async with LedgerSessionStorage(dsn) as storage:
        view = await storage.load(zett_ids[1])
        assert [record.message.content for record in view.raw_tail] == ["old", "new"]
        assert (
            await storage.get_session(zett_ids[0]) is None and await storage.get_session(zett_ids[2]) is None
        )
    async with LedgerSessionStore(dsn) as store:
        kept = await store.aload_versioned(rein_ids[1])
        assert kept is not None and kept.session.messages[0].content == "new"
        assert not await store.acontains(rein_ids[0]) and not await store.acontains(rein_ids[2])
