"""``chatledger export``, ``import`` and ``copy`` between every pair of backends.

Exactness is checked by exporting the target again: the same records as the
source's export (every column of every row), so ids, sequences, microsecond
timestamps, checkpoint versions and boundaries, JSON texts, usage and rein sessions
all travel unchanged.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rein.ir import Message, ToolCall, Usage
from rein.session import Session
from sqlalchemy import func, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.schema import raw_messages_table, sessions_table
from chatledger.tools import export as exporting
from chatledger.tools import importer
from chatledger.tools.bench import Seeder
from chatledger.tools.cli import run
from chatledger.tools.transfer import FormatError, copy, export, import_file
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import BACKENDS, Servers
from .support.facts import facts_of
from .support.fresh import fresh_database
from .support.zett_data import read_back, write_sessions

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

REIN_IDS = ["rein-one", "rein-two"]


def dsn_of(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture
async def source(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh migrated database of the test's backend."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_src") as url:
        await upgrade_database(url)
        yield url


@pytest.fixture(params=BACKENDS)
async def target(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh migrated database of each backend, as the destination."""
    backend: str = request.param
    server = None
    if facts_of(backend).server:
        found = servers.get(backend)
        if isinstance(found, str):
            pytest.skip(f"{backend} unavailable: {found}")
        server = found
    async with fresh_database(server, tmp_path, prefix="chatledger_dst") as url:
        await upgrade_database(url)
        yield url


async def fill(url: URL) -> list[str]:
    """zett sessions (checkpoints, tool calls, usage, timings...) and rein sessions."""
    async with LedgerSessionStorage(url) as storage:
        ids = await write_sessions(storage)
    async with LedgerSessionStore(url) as store:
        await store.asave(
            REIN_IDS[0],
            Session(
                messages=[
                    Message(role="system", content="be brief"),
                    Message(role="user", content="weather in Zürich? 🌦"),
                    Message(
                        role="assistant",
                        tool_calls=[ToolCall(id="c1", name="weather", arguments={"city": "Zürich"})],
                    ),
                    Message(role="tool", tool_call_id="c1", content="12 °C"),
                ],
                usage=Usage(input_tokens=120, output_tokens=7, cost_usd=0.0012),
                iteration=1,
            ),
        )
        await store.asave(REIN_IDS[1], Session(messages=[Message(role="user", content="hi")]))
        await store.asave(REIN_IDS[1], Session(messages=[Message(role="user", content="hi again")]))
    return ids


async def export_of(url: URL, ids: list[str] | None = None) -> dict[str, Any]:
    """An export, parsed: the header without its per-run fields, and the records of
    each session (order-free across sessions: each backend orders ids its own way)."""
    output = io.StringIO()
    await export(url, output, ids=ids)
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    header = {key: value for key, value in lines[0].items() if key not in ("exported_at", "backend")}
    sessions: dict[str, list[Any]] = {}
    current: list[Any] = []
    rein: dict[str, Any] = {}
    for record in lines[1:-1]:
        if record["type"] == "rein_session":
            rein[record["row"]["id"]] = record
            continue
        current.append(record)
        if record["type"] == "session_end":
            sessions[record["id"]] = current
            current = []
    assert not current and lines[-1]["type"] == "end"
    return {"header": header, "sessions": sessions, "rein": rein, "end": lines[-1]}


async def write_file(url: URL, path: Path, ids: list[str] | None = None) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as output:  # type: ignore[operator]
        await export(url, output, ids=ids)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages, cursor fetches and insert batches of a few rows, so that every boundary
    (a session split across fetches and batches) is crossed."""
    monkeypatch.setattr(exporting, "PAGE", 2)
    monkeypatch.setattr(exporting, "YIELD_PER", 3)
    monkeypatch.setattr(importer, "BATCH_ROWS", 4)
    monkeypatch.setattr(importer, "CHUNK", 5)


@pytest.mark.usefixtures("small_pages")
async def test_export_then_import_is_exact_across_backends(source: URL, target: URL, tmp_path: Path) -> None:
    ids = await fill(source)
    original = await export_of(source)
    assert original["end"] == {
        "type": "end",
        "sessions": 5,
        "messages": 21,
        "snapshots": 3,
        "rein_sessions": 2,
        **dict.fromkeys(("openai_sessions", "openai_items", "adk_sessions", "adk_events", "adk_states"), 0),
        **dict.fromkeys(
            ("langgraph_threads", "langgraph_checkpoints", "langgraph_blobs", "langgraph_writes"), 0
        ),
    }
    assert original["header"]["tables"]["raw_messages"] == [column.name for column in raw_messages_table.c]
    path = tmp_path / "sessions.jsonl.gz"
    await write_file(source, path)

    report = await import_file(target, str(path))
    assert report.clean and (report.imported, report.messages, report.snapshots) == (7, 21, 3)
    assert await export_of(target) == original

    async with LedgerSessionStorage(source) as a, LedgerSessionStorage(target) as b:
        assert await read_back(a, ids) == await read_back(b, ids)
        # The copy carries on: the counters and checkpoint versions came along.
        assert await b.append(ids[0], "r", UserMessage(content="next")) == 8
    async with LedgerSessionStore(source) as a, LedgerSessionStore(target) as b:
        for rein_id in REIN_IDS:
            assert await a.aload_versioned(rein_id) == await b.aload_versioned(rein_id)


async def test_copy_command_and_its_rerun(
    source: URL, target: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(source)
    assert await run(["copy", "--from", dsn_of(source), "--to", dsn_of(target)]) == 0
    out = capsys.readouterr().out
    assert "copied 7 sessions (21 messages, 3 checkpoints)" in out
    assert "sessions" in out and "messages" in out  # the progress bars' final state

    assert await run(["copy", "--from", dsn_of(source), "--to", dsn_of(target)]) == 0
    assert "copied 0 sessions" in (out := capsys.readouterr().out) and "7 already there and identical" in out
    assert await export_of(target) == await export_of(source)


async def test_differing_sessions_are_reported_and_never_overwritten(
    source: URL, database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = await fill(source)
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        assert (await import_file(target, str(path))).clean
        async with LedgerSessionStorage(target) as storage:
            await storage.append(ids[1], "r", UserMessage(content="written in the target only"))
        async with LedgerSessionStore(target) as store:
            await store.asave(
                REIN_IDS[0], Session(messages=[Message(role="user", content="overwritten there")])
            )
        changed = await export_of(target)

        report = await import_file(target, str(path))
        assert (report.imported, report.identical, report.differing, report.failed) == (0, 5, 2, 0)
        assert any(
            ids[1] in line and "session row differs in last_sequence" in line for line in report.problems
        )
        assert any(REIN_IDS[0] in line for line in report.problems)
        assert await export_of(target) == changed  # nothing overwritten

        assert await run(["import", "--dsn", dsn_of(target), str(path)]) == 1
        out = capsys.readouterr().out
        assert f"zett session {ids[1]!r}: its session row differs" in out and "left as it is" in out
        assert "2 differ from the database's and 0 were refused" in out


async def test_an_interrupted_import_is_completed_by_a_rerun(
    source: URL, database: Database, tmp_path: Path
) -> None:
    await fill(source)
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    # Cut inside the third session: after its first message.
    starts = [number for number, line in enumerate(lines) if '"type":"session"' in line]
    cut = next(n for n in range(starts[2], len(lines)) if '"type":"message"' in lines[n]) + 1
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("".join(lines[:cut]), encoding="utf-8")

    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        report = await import_file(target, str(truncated))
        assert not report.complete and not report.clean
        assert (report.imported, report.failed) == (2, 1)
        assert "truncated" in report.problems[0]

        report = await import_file(target, str(path))
        assert report.clean and (report.imported, report.identical) == (5, 2)
        assert await export_of(target) == await export_of(source)


async def test_a_killed_import_loses_and_duplicates_nothing(
    source: URL, database: Database, tmp_path: Path
) -> None:
    """SIGKILL an import process once it has committed some sessions; the rerun
    imports the rest, and the target equals the source."""
    await fill(source)
    engine = create_async_engine(source, poolclass=NullPool)
    try:
        seeder = Seeder("chatledger", engine, datetime(2026, 1, 1, tzinfo=UTC))
        for number in range(60):
            await seeder.session(f"bulk-{number:03d}", 400, 350, number)
    finally:
        await engine.dispose()
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)

    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "chatledger.tools.cli",
            "import",
            "--dsn",
            dsn_of(target),
            str(path),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env={key: value for key, value in os.environ.items() if key != "CHATLEDGER_DSN"},
        )
        engine = create_async_engine(target, poolclass=NullPool)
        try:
            for _ in range(6000):  # until some sessions are committed (10 minutes at most)
                async with engine.connect() as conn:
                    committed = await conn.scalar(select(func.count()).select_from(sessions_table))
                if committed or process.returncode is not None:
                    break
                await asyncio.sleep(0.1)
        finally:
            await engine.dispose()
        process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(process.wait(), timeout=60)
        assert process.returncode == -signal.SIGKILL

        report = await import_file(target, str(path))
        assert report.clean and report.identical >= 1 and report.imported >= 1
        assert report.identical + report.imported == 67
        assert await export_of(target) == await export_of(source)


async def test_export_of_chosen_sessions(
    source: URL, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = await fill(source)
    chosen = await export_of(source, [ids[0], REIN_IDS[1], "no-such-session"])
    assert set(chosen["sessions"]) == {ids[0]} and set(chosen["rein"]) == {REIN_IDS[1]}
    assert chosen["end"]["messages"] == 7 and chosen["header"]["counts"]["sessions"] == 1

    path = tmp_path / "one.jsonl"
    assert await run(["export", "--dsn", dsn_of(source), "--session", ids[2], "-o", str(path)]) == 0
    assert "exported 1 zett session (1 message, 1 checkpoint) and 0 rein sessions" in capsys.readouterr().out
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1 + 4 + 1  # header, session, end

    assert await run(["export", "--dsn", dsn_of(source), "--session", ids[2]]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[0])["format"] == "chatledger-export"  # data on stdout
    assert "exported 1 zett session" in captured.err  # messages on stderr


async def test_what_is_not_an_export_is_refused(source: URL, tmp_path: Path) -> None:
    ids = await fill(source)
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path, [ids[2]])
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])

    def variant(name: str, changed: list[str]) -> str:
        bad = tmp_path / name
        bad.write_text("".join(f"{line}\n" for line in changed), encoding="utf-8")
        return str(bad)

    cases = [
        (variant("empty", []), "empty"),
        (variant("not-json", [lines[0], "{oops"]), "line 2: not JSON"),
        (variant("no-header", lines[1:]), "not a chatledger export"),
        (variant("v2", [json.dumps({**header, "version": 2}), *lines[1:]]), "format version 2"),
    ]
    newer = json.loads(lines[0])
    newer["tables"]["raw_messages"].append("sentiment")
    cases.append((variant("newer", [json.dumps(newer), *lines[1:]]), "newer chatledger"))
    message = json.loads(lines[3])
    message["row"]["sequence"] = "1"
    cases.append(
        (variant("bad-value", [*lines[:3], json.dumps(message), *lines[4:]]), "line 4: raw_messages.sequence")
    )
    for bad, fragment in cases:
        with pytest.raises(FormatError, match=fragment):
            await import_file(source, bad)


@pytest.mark.skipif("deleted_at" not in sessions_table.c, reason="deleted sessions leave no tombstone yet")
async def test_tombstones_travel_so_no_stale_writer_revives_a_copy(source: URL, target: URL) -> None:
    ids = await fill(source)
    async with LedgerSessionStorage(source) as storage:
        assert await storage.delete_session(ids[1])
    async with LedgerSessionStore(source) as store:
        assert await store.adelete(REIN_IDS[1])
    report = await copy(source, target)
    assert report.clean
    assert await export_of(target) == await export_of(source)
    async with LedgerSessionStorage(target) as storage:
        assert await storage.get_session(ids[1]) is None


async def test_sessions_deleted_on_one_side_are_named_so_and_counted(
    source: URL, database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy counts the deleted sessions it carries as tombstones; a session deleted in
    the target (or only in the input) is reported as deleted, not as a row differing in
    its columns, and left as it is."""
    ids = await fill(source)
    async with LedgerSessionStorage(source) as storage:
        assert await storage.delete_session(ids[4])
    async with LedgerSessionStore(source) as store:
        assert await store.adelete(REIN_IDS[1])
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        copy_command = ["copy", "--from", dsn_of(source), "--to", dsn_of(target)]
        assert await run(copy_command) == 0
        out = capsys.readouterr().out
        assert (
            "copied 7 sessions (2 of them deleted, copied as tombstones; 20 messages, 3 checkpoints)" in out
        )

        # Deleted in the target since: the copy leaves them deleted, and says so.
        async with LedgerSessionStorage(target) as storage:
            assert await storage.delete_session(ids[0])
        async with LedgerSessionStore(target) as store:
            assert await store.adelete(REIN_IDS[0])
        changed = await export_of(target)
        assert await run(copy_command) == 1
        out = capsys.readouterr().out
        assert f"zett session {ids[0]!r}: deleted in the target database (a tombstone); left as it is" in out
        assert (
            f"rein session {REIN_IDS[0]!r}: deleted in the target database (a tombstone); left as it is"
            in out
        )
        assert "differs in" not in out and "2 differ from the database's and 0 were refused" in out
        assert await export_of(target) == changed  # never silently overwritten

        # Deleted in the input only: named the other way round.
        assert await run(["copy", "--from", dsn_of(target), "--to", dsn_of(source)]) == 1
        out = capsys.readouterr().out
        assert (
            f"zett session {ids[0]!r}: deleted in the input (a tombstone), a live session in the target "
            "database; left as it is"
        ) in out
        async with LedgerSessionStorage(source) as storage:
            assert await storage.get_session(ids[0]) is not None


async def test_a_copy_into_an_unmigrated_database_names_it_and_prints_nothing(
    source: URL, database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if database.server is None:
        pytest.skip("a SQLite target upgrades itself on first use")
    await fill(source)
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        if facts_of(database.backend).trusts_local_logins:  # any password does
            target = target.set(password="pw-Sekr1t-do-not-print")
        assert await run(["copy", "--from", dsn_of(source), "--to", dsn_of(target)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # no stray blank line from the progress display
        error = captured.err
        assert error.startswith("chatledger copy: ") and error.count("\n") == 1
        # The command with the schema owner's DSN: not this one's, its password masked.
        assert "with the schema owner's DSN: `chatledger upgrade --dsn OWNER_DSN`" in error
        assert "pw-Sekr1t" not in error and "--dsn postgresql" not in error
        assert "auto_upgrade" not in error  # a store's option: no command takes it
        assert "--dsn DSN" not in error
