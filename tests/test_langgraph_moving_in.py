"""``chatledger import --langgraph``: LangGraph's own savers' tables into chatledger's, on
every target that has the source saver's backend: ``AsyncSqliteSaver`` (a SQLite file,
into every target), ``AsyncPostgresSaver`` (PostgreSQL, beside chatledger's tables in
one database too) and ``AIOMySQLSaver`` (MariaDB). A dry run writes nothing, a re-run
imports nothing twice, and ``get_state_history`` through
:class:`~chatledger.langgraph.LedgerSaver` is the source saver's, checkpoint for
checkpoint; an interrupted thread resumes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command
from sqlalchemy.engine import URL

from chatledger import ConfigurationError
from chatledger.langgraph import LedgerSaver
from chatledger.migrate import upgrade_database
from chatledger.tools import cli
from chatledger.tools.moving_in import move_in

from .conftest import Database
from .support.fresh import fresh_database
from .support.langgraph_graphs import agent, approval, config, question

pytestmark = pytest.mark.dialect_only

THREADS = ("agent-1", "agent-2", "waiting")


def _graph(saver: BaseCheckpointSaver[Any], thread_id: str) -> Any:
    return approval(saver) if thread_id == "waiting" else agent(saver)


async def _fill(saver: BaseCheckpointSaver[Any]) -> None:
    """Two agent threads (a tool call each) and one stopped at its interrupt."""
    await agent(saver).ainvoke(question(1, 2), config("agent-1"))
    await agent(saver).ainvoke(question(3, 4), config("agent-2"))
    await approval(saver).ainvoke({"request": "x"}, config("waiting"))


def _compared(states: list[Any]) -> list[Any]:
    return [
        (
            state.config["configurable"]["checkpoint_id"],
            None if state.parent_config is None else state.parent_config["configurable"]["checkpoint_id"],
            state.values,
            state.next,
            state.metadata,
            [(task.name, task.interrupts, task.result) for task in state.tasks],
        )
        for state in states
    ]


async def _history(saver: BaseCheckpointSaver[Any]) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for thread_id in THREADS:
        states = [state async for state in _graph(saver, thread_id).aget_state_history(config(thread_id))]
        found[thread_id] = _compared(states)
    return found


def _sync_fill_and_history(saver: BaseCheckpointSaver[Any]) -> dict[str, list[Any]]:
    """:func:`_fill` and :func:`_history` for a saver with the sync methods only."""
    agent(saver).invoke(question(1, 2), config("agent-1"))
    agent(saver).invoke(question(3, 4), config("agent-2"))
    approval(saver).invoke({"request": "x"}, config("waiting"))
    return {
        thread_id: _compared(list(_graph(saver, thread_id).get_state_history(config(thread_id))))
        for thread_id in THREADS
    }


async def _ledger_history(url: URL) -> dict[str, list[Any]]:
    async with LedgerSaver.from_url(url) as saver:
        return await _history(saver)


@pytest.fixture
async def target(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgm") as url:
        await upgrade_database(url)
        yield url


async def _moves_in_once(source: str | URL, target: URL, before: dict[str, list[Any]]) -> None:
    """A dry run, the import, a re-run, the history compared, a resumed thread."""
    dry = await move_in("langgraph", source, target, dry_run=True)
    assert (dry.sessions, dry.entries, dry.identical) == (3, sum(map(len, before.values())), 0)
    async with LedgerSaver.from_url(target) as saver:
        assert [item async for item in saver.alist(None)] == []  # the dry run wrote nothing
    report = await move_in("langgraph", source, target)
    assert (report.sessions, report.entries, report.differing, report.failed, report.skipped) == (
        3,
        sum(map(len, before.values())),
        0,
        0,
        0,
    )
    assert await _ledger_history(target) == before
    again = await move_in("langgraph", source, target)
    assert (again.sessions, again.identical, again.differing) == (0, 3, 0)
    dry = await move_in("langgraph", source, target, dry_run=True)
    assert (dry.sessions, dry.identical) == (0, 3)
    async with LedgerSaver.from_url(target) as saver:
        final = await approval(saver).ainvoke(Command(resume="granted"), config("waiting"))
        assert final["decision"] == "granted"
    changed = await move_in("langgraph", source, target)
    assert (changed.identical, changed.differing) == (2, 1)  # the resumed thread is left alone


async def test_async_sqlite_savers_tables_move_in(target: URL, tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "langgraph.sqlite3"
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await _fill(saver)
        before = await _history(saver)
    await _moves_in_once(f"sqlite+aiosqlite:///{path}", target, before)


def _plain(url: URL) -> str:
    """The URL as LangGraph's own savers take it (no SQLAlchemy driver)."""
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=False)


@pytest.mark.requires("langgraph_postgres_saver")
async def test_async_postgres_savers_tables_move_in(database: Database, target: URL, tmp_path: Path) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgpg") as source:
        opened: AbstractAsyncContextManager[AsyncPostgresSaver] = AsyncPostgresSaver.from_conn_string(
            _plain(source)
        )
        async with opened as saver:
            await saver.setup()
            await _fill(saver)
            before = await _history(saver)
        await _moves_in_once(source, target, before)


@pytest.mark.requires("langgraph_postgres_saver")
async def test_async_postgres_savers_tables_beside_chatledgers_move_in(
    database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """AsyncPostgresSaver's tables in the application's database, beside chatledger's:
    ``check`` notices them, and the import reads them from that same database."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgbe") as url:
        async with AsyncPostgresSaver.from_conn_string(_plain(url)) as saver:
            await saver.setup()
            await _fill(saver)
            before = await _history(saver)
        await upgrade_database(url)
        assert await cli.run(["check", "--dsn", url.render_as_string(hide_password=False)]) in (0, 1)
        assert "AsyncPostgresSaver" in capsys.readouterr().out
        report = await move_in("langgraph", url, url)
        assert (report.sessions, report.differing, report.failed) == (3, 0, 0)
        assert await _ledger_history(url) == before


@pytest.mark.requires("langgraph_mysql_saver")
async def test_langgraph_checkpoint_mysqls_tables_move_in(
    database: Database, target: URL, tmp_path: Path
) -> None:
    """langgraph-checkpoint-mysql's tables, as its savers write them. Its AIOMySQLSaver
    fails on any bytes value with the aiomysql pip resolves beside it (aiomysql's
    ``escape_bytes_prefixed``), so they are written by its PyMySQLSaver: the same
    tables, by the same base class."""
    from langgraph.checkpoint.mysql.pymysql import PyMySQLSaver

    async with fresh_database(database.server, tmp_path, prefix="chatledger_lgmy") as source:

        def fill() -> dict[str, list[Any]]:
            with PyMySQLSaver.from_conn_string(_plain(source)) as saver:
                saver.setup()
                return _sync_fill_and_history(saver)

        before = await asyncio.to_thread(fill)
        await _moves_in_once(source, target, before)


async def test_a_chatledger_database_or_one_without_a_savers_tables_is_refused(
    target: URL, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="chatledger database"):
        await move_in("langgraph", target, f"sqlite+aiosqlite:///{tmp_path / 'other.sqlite3'}")
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    with pytest.raises(ConfigurationError, match="not a database LangGraph's own saver wrote"):
        await move_in("langgraph", f"sqlite+aiosqlite:///{empty}", target)


async def test_the_import_command_moves_in_and_dry_runs(
    target: URL, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = tmp_path / "langgraph.sqlite3"
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await _fill(saver)
    dsn = target.render_as_string(hide_password=False)
    source = f"sqlite:///{path}"
    assert await cli.run(["import", "--dsn", dsn, "--langgraph", source, "--dry-run"]) == 0
    assert "3" in capsys.readouterr().out
    assert await cli.run(["import", "--dsn", dsn, "--langgraph", source]) == 0
    out = capsys.readouterr().out
    assert "imported 3 LangGraph sessions" in out
