"""LangGraph threads through the session-kind registry (:data:`chatledger.kinds.LANGGRAPH`),
on every target: ``sessions list/show/delete/purge``, ``retention`` (idle threads and
tombstone GC, a purged tombstone's mark refusing a stale write), ``stats``, and
``export``/``import``/``copy`` with ``get_state_history`` the same before and after,
re-runs all identical, a tombstone carried as one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command
from sqlalchemy.engine import URL

from chatledger import SessionDeleted
from chatledger.dsn import DSN_ENV
from chatledger.langgraph import LedgerSaver
from chatledger.migrate import upgrade_database
from chatledger.stats import read_stats
from chatledger.tools.cli import run
from chatledger.tools.transfer import copy, export, import_file

from .conftest import Database
from .support.fresh import fresh_database
from .support.langgraph_graphs import agent, approval, config, question


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def dsn_of(url: URL) -> str:
    return url.render_as_string(hide_password=False)


async def fill(url: URL) -> None:
    """Thread ``done`` (the agent, 5 checkpoints), ``waiting`` (stopped at its
    interrupt, its pending write) and ``gone`` (deleted: a tombstone)."""
    async with LedgerSaver.from_url(url) as saver:
        await agent(saver).ainvoke(question(1, 2), config("done"))
        await approval(saver).ainvoke({"request": "x"}, config("waiting"))
        await agent(saver).ainvoke(question(3, 4), config("gone"))
        await saver.adelete_thread("gone")


async def history(url: URL, thread_id: str) -> list[Any]:
    """The thread's ``get_state_history`` as comparable tuples."""
    async with LedgerSaver.from_url(url) as saver:
        graph = agent(saver) if thread_id != "waiting" else approval(saver)
        return [
            (
                state.config["configurable"]["checkpoint_id"],
                state.values,
                state.next,
                state.metadata,
                state.tasks,
            )
            async for state in graph.aget_state_history(config(thread_id))
        ]


@pytest.fixture
async def source(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgs") as url:
        await upgrade_database(url)
        await fill(url)
        yield url


@pytest.fixture
async def target(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgt") as url:
        await upgrade_database(url)
        yield url


async def test_sessions_list_show_and_delete_a_thread(
    source: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = dsn_of(source)
    assert await run(["sessions", "list", "--dsn", dsn, "--json", "--kind", "langgraph"]) == 0
    listed = {row["id"]: row for row in json.loads(capsys.readouterr().out)["langgraph"]}
    assert set(listed) == {"done", "waiting"}  # the tombstone is not listed
    assert listed["done"]["checkpoints"] == 5 and listed["done"]["pending_writes"] == 0
    assert listed["waiting"]["pending_writes"] == 1 and "loop" in listed["waiting"]["latest"]
    assert await run(["sessions", "list", "--dsn", dsn, "--kind", "langgraph"]) == 0
    out = capsys.readouterr().out
    assert "langgraph sessions" in out and "latest checkpoint" in out and "pending writes" in out

    assert await run(["sessions", "show", "waiting", "--dsn", dsn, "--kind", "langgraph"]) == 0
    out = capsys.readouterr().out
    assert "langgraph thread waiting" in out and "pending writes: __interrupt__" in out
    assert "checkpoints (3):" in out and "step 1" in out
    assert await run(["sessions", "show", "gone", "--dsn", dsn, "--kind", "langgraph"]) == 1
    capsys.readouterr()

    assert await run(["sessions", "delete", "done", "--dsn", dsn, "--kind", "langgraph", "--yes"]) == 0
    capsys.readouterr()
    async with LedgerSaver.from_url(source) as saver:
        assert await saver.aget_tuple(config("done")) is None
    assert await run(["sessions", "list", "--dsn", dsn, "--json", "--kind", "langgraph"]) == 0
    assert [row["id"] for row in json.loads(capsys.readouterr().out)["langgraph"]] == ["waiting"]


async def test_retention_purges_idle_threads_then_their_tombstones(
    source: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = dsn_of(source)
    async with LedgerSaver.from_url(source) as saver:
        stale = await saver.aget_tuple(config("waiting"))
    assert stale is not None
    idle = ["retention", "--dsn", dsn, "--idle", "0s", "--kind", "langgraph", "--json"]
    assert await run([*idle, "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == {"langgraph": 2}
    assert await run(idle) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == {"langgraph": 2}
    stats = await read_stats(source)
    assert stats.framework("langgraph").counts == {
        "sessions": 0,
        "deleted": 3,
        "checkpoints": 0,
        "blobs": 0,
        "writes": 0,
    }

    gc = ["retention", "--dsn", dsn, "--tombstones-after", "0s", "--kind", "langgraph", "--json"]
    assert await run(gc) == 0
    assert json.loads(capsys.readouterr().out)["tombstones"] == {"langgraph": 3}
    assert (await read_stats(source)).framework("langgraph").counts["deleted"] == 0

    # The marks stand in for the tombstones: a stale write of a run from before is
    # refused, a new run on the id starts a generation after them.
    async with LedgerSaver.from_url(source) as saver:
        with pytest.raises(SessionDeleted):
            await saver.aput_writes(stale.config, [("x", 1)], "task-1")
        final = await approval(saver).ainvoke({"request": "again"}, config("waiting"))
        assert "__interrupt__" in final
        assert await saver.aget_tuple(config("waiting")) is not None
        await approval(saver).ainvoke(Command(resume="ok"), config("waiting"))


async def test_export_import_and_copy_keep_every_thread_and_its_history(
    source: URL, target: URL, database: Database, tmp_path: Path
) -> None:
    before = {thread: await history(source, thread) for thread in ("done", "waiting")}
    assert all(before.values())
    path = tmp_path / "threads.jsonl"
    with path.open("w") as output:
        counts = await export(source, output)
    assert counts["langgraph_threads"] == 3 and counts["langgraph_checkpoints"] == 8

    report = await import_file(target, path)
    assert (report.imported, report.identical, report.failed, report.differing) == (3, 0, 0, 0)
    assert report.tombstones == 1
    assert {thread: await history(target, thread) for thread in before} == before
    again = await import_file(target, path)
    assert (again.imported, again.identical, again.failed, again.differing) == (0, 3, 0, 0)

    async with LedgerSaver.from_url(target) as saver:
        assert await saver.aget_tuple(config("gone")) is None  # a tombstone stays one
        final = await approval(saver).ainvoke(Command(resume="yes"), config("waiting"))
        assert final["decision"] == "yes"
    changed = await import_file(target, path)
    assert changed.differing == 1 and changed.identical == 2  # the resumed thread is left alone

    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgc") as copied:
        await upgrade_database(copied)
        done = await copy(source, copied)
        assert (done.imported, done.failed, done.differing) == (3, 0, 0)
        assert {thread: await history(copied, thread) for thread in before} == before
        assert await run(["export", "--dsn", dsn_of(copied), "-o", str(tmp_path / "copied.jsonl")]) == 0
