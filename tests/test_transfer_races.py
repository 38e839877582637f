"""Imports and copies of overlapping sessions at once, and an import racing ordinary
appends (issue 17, fault 4).

Two imports of one file used to collide: on MariaDB the second aborted with a raw
deadlock (1213) on ``INSERT INTO agent_sessions``; on PostgreSQL both finished but
reported the sessions the other had inserted as refused ("duplicate key"). Now a
session another run committed meanwhile is compared as a re-run compares it, and a
deadlock is retried: every run ends clean, and each session is inserted once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger.migrate import upgrade_database
from chatledger.schema import raw_messages_table
from chatledger.tools.bench import Seeder
from chatledger.tools.spool import Spool
from chatledger.tools.transfer import import_file
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.fresh import fresh_database
from .test_transfer import dsn_of, export_of, fill, small_pages, source, write_file

__all__ = ["small_pages", "source"]  # fixtures, used by name

#: Bulk sessions added to the varied ones of :func:`fill`.
BULK = 24
#: Sessions of an export of the source: fill's 5 zett and 2 rein, and the bulk ones.
TOTAL = 7 + BULK


async def seed(url: URL) -> list[str]:
    """The varied sessions, and :data:`BULK` sessions of a few messages each; the bulk ids."""
    await fill(url)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        seeder = Seeder("chatledger", engine, datetime(2026, 1, 1, tzinfo=UTC))
        ids = [f"bulk-{number:03d}" for number in range(BULK)]
        for number, session_id in enumerate(ids):
            await seeder.session(session_id, 6 + number % 5, 2 if number % 3 == 0 else 0, number)
    finally:
        await engine.dispose()
    return ids


async def test_imports_of_one_file_at_once_end_clean(
    source: URL, database: Database, tmp_path: Path, small_pages: None
) -> None:
    """Imports at once, each with its own engine: two of one file (every session), and
    two of files of every other session (neighbouring ids, which share a gap in the
    target's index: MariaDB's gap locks made such inserts deadlock). Every one ends
    clean, none reports a session as failed, each session is inserted by exactly one,
    and the target equals the source."""
    bulk = await seed(source)
    files = {name: tmp_path / f"{name}.jsonl" for name in ("every", "even", "odd")}
    await write_file(source, files["every"])
    await write_file(source, files["even"], bulk[0::2])
    await write_file(source, files["odd"], bulk[1::2])
    sizes = {"every": TOTAL, "even": len(bulk[0::2]), "odd": len(bulk[1::2])}
    runs = ["every", "even", "every", "odd"]
    async with racing_target(database, tmp_path) as target:
        reports = await asyncio.gather(*(import_file(target, str(files[run])) for run in runs))
        for run, report in zip(runs, reports, strict=True):
            assert report.clean, report.problems
            assert (report.failed, report.differing) == (0, 0)
            assert report.imported + report.identical == sizes[run]
        assert sum(report.imported for report in reports) == TOTAL
        assert await export_of(target) == await export_of(source)


@contextlib.asynccontextmanager
async def racing_target(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh migrated target of the test's backend; SERIALIZABLE by default in the
    SERIALIZABLE PostgreSQL pass (``CHATLEDGER_TEST_PG_SERIALIZABLE=1``), where the
    races end in serialization failures, retried."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        if database.server is not None:
            await database.server.default_to_serializable(str(target.database))
        await upgrade_database(target)
        yield target


async def copy_processes(commands: Sequence[list[str]]) -> list[tuple[int, str]]:
    """Run ``chatledger`` commands as processes at once: their exit status and output."""

    async def one(arguments: list[str]) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "chatledger.tools.cli",
            *arguments,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={key: value for key, value in os.environ.items() if key != "CHATLEDGER_DSN"},
        )
        out, _ = await asyncio.wait_for(process.communicate(), timeout=600)
        return process.returncode or 0, out.decode()

    return await asyncio.gather(*(one(arguments) for arguments in commands))


def copied(out: str) -> tuple[int, int]:
    """(copied, already there and identical) from a copy's summary line."""
    found = re.search(r"copied ([\d,]+) sessions? .*; ([\d,]+) already there and identical", out)
    assert found is not None, out
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


async def test_copies_of_overlapping_sessions_at_once_end_clean(
    source: URL, database: Database, tmp_path: Path
) -> None:
    """Three ``chatledger copy`` processes at once, of overlapping sessions (all of them;
    every other bulk session, chosen by id; the others): every one exits 0, nothing is
    refused or differs, each session is copied once."""
    bulk = await seed(source)
    halves = [bulk[0::2], bulk[1::2]]
    async with racing_target(database, tmp_path) as target:
        copy = ["copy", "--from", dsn_of(source), "--to", dsn_of(target)]
        chosen = [
            [*copy, *(argument for session_id in half for argument in ("--session", session_id))]
            for half in halves
        ]
        results = await copy_processes([copy, *chosen])
        for status, out in results:
            assert status == 0, out
            assert "differ from the database's" not in out and "refused" not in out
        counts = [copied(out) for _status, out in results]
        assert [sum(count) for count in counts] == [TOTAL, len(halves[0]), len(halves[1])]
        assert sum(copied_ for copied_, _identical in counts) == TOTAL  # each copied once
        assert await export_of(target) == await export_of(source)


async def test_an_import_racing_appends_loses_and_duplicates_nothing(
    source: URL, database: Database, tmp_path: Path, small_pages: None
) -> None:
    """An import and appends into the sessions it carries, at once. Whichever comes
    first, no acknowledged append is lost or duplicated, every log stays gap-free, and
    the import either imported the session (the appends follow its messages) or found
    it written meanwhile and reported it as differing, left as it is; none failed."""
    bulk = await seed(source)
    expected = {
        session_id: [record["row"]["content"] for record in records if record["type"] == "message"]
        for session_id, records in (await export_of(source, bulk))["sessions"].items()
    }
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)
    async with racing_target(database, tmp_path) as target:
        acknowledged: dict[str, list[tuple[int, str]]] = {session_id: [] for session_id in bulk}

        async def append() -> None:
            async with LedgerSessionStorage(target) as storage:
                # From the last session back, so that some are written before the import
                # reaches them and some after.
                for round_ in range(2):
                    for session_id in reversed(bulk):
                        text = f"racer {round_} of {session_id}"
                        sequence = await storage.append(session_id, "race", UserMessage(content=text))
                        acknowledged[session_id].append((sequence, text))

        report, _ = await asyncio.gather(import_file(target, str(path)), append())
        assert report.complete and report.failed == 0, report.problems
        assert report.imported + report.identical + report.differing == TOTAL

        engine = create_async_engine(target, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                r = raw_messages_table
                statement = select(r.c.session_id, r.c.sequence, r.c.content).order_by(r.c.sequence)
                rows = (await conn.execute(statement)).all()
        finally:
            await engine.dispose()
        stored: dict[str, list[tuple[int, str]]] = {}
        for row in rows:
            stored.setdefault(row.session_id, []).append((row.sequence, row.content))
        differing = 0
        for session_id in bulk:
            log = stored[session_id]
            assert [sequence for sequence, _ in log] == list(range(1, len(log) + 1))  # gap-free
            for sequence, text in acknowledged[session_id]:  # none lost, none moved
                assert (sequence, text) in log
            contents = [text for _, text in log]
            racers = [text for _, text in acknowledged[session_id]]
            if contents[: len(expected[session_id])] == expected[session_id]:
                assert contents == expected[session_id] + racers  # imported; the appends after it
            else:
                assert contents == racers  # appended first: the import left it as it is
                assert any(repr(session_id) in line and "left as it is" in line for line in report.problems)
                differing += 1
        assert report.differing == differing


def test_a_spool_gives_back_its_rows_in_order_from_memory_and_file() -> None:
    """What a retry replays: every row added, in order, before and after it went to a
    file and after an earlier replay."""
    spool = Spool(memory=10)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [("message", {"sequence": number, "when": when}) for number in range(6)]
    for kind, row in rows[:2]:
        spool.add(kind, row, 4)
    assert list(spool) == rows[:2]  # in memory
    for kind, row in rows[2:4]:
        spool.add(kind, row, 4)
    assert list(spool) == rows[:4]  # in the file
    for kind, row in rows[4:]:
        spool.add(kind, row, 4)
    assert list(spool) == rows and list(spool) == rows
    spool.close()
    assert list(spool) == []
