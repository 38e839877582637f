"""The schema commands in a deploy: what ``upgrade`` ran, ``downgrade`` keeping rows
unless told, the embedded default announced, a missing SQLite file named (and not
created), an empty database worded plainly."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rein import Session
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import DowngradeRefused
from chatledger.dsn import DSN_ENV, display, resolve_dsn
from chatledger.migrate import (
    database_revision,
    downgrade_database,
    head_revision,
    revisions,
    upgrade_database,
)
from chatledger.rein import LedgerSessionStore
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.schema_helpers import ALEMBIC, REPO_ROOT, catalog, dsn_of, fresh_database, on_connection

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

HEAD = head_revision()


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def empty(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """An empty, never migrated database of the test's backend."""
    async with fresh_database(database, tmp_path, "deploy") as url:
        yield url


async def test_upgrade_says_what_it_applied_and_to_which_database(
    empty: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, shown = dsn_of(empty), display(resolve_dsn(dsn_of(empty)))
    assert await run(["upgrade", "--dsn", dsn, "--revision", "0001"]) == 0
    assert capsys.readouterr().out.strip() == f"applied 0001 to {shown}: now at revision 0001"
    assert await run(["upgrade", "--dsn", dsn]) == 0
    after_0001 = ", ".join(revisions().order[1:])
    assert capsys.readouterr().out.strip() == f"applied {after_0001} to {shown}: now at head ({HEAD})"
    assert await run(["upgrade", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.strip() == f"{shown} is already at head ({HEAD}): nothing to apply"


async def test_upgrade_from_empty_lists_every_revision(
    empty: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(["upgrade", "--dsn", dsn_of(empty)]) == 0
    assert f"applied {', '.join(revisions().order)} to " in capsys.readouterr().out


async def test_current_on_an_empty_database_says_to_upgrade(
    empty: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    await on_connection(empty, lambda connection: None)  # an empty SQLite file exists
    dsn = dsn_of(empty)
    assert await run(["current", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    if not facts_of(empty.get_backend_name()).server:  # a file: its own URL, as given
        assert f"current   no chatledger schema: upgrade it with `chatledger upgrade --dsn {dsn}`" in out
    else:
        assert "current   no chatledger schema: upgrade it with the schema owner's DSN: `chatledger " in out
    assert "<none>" not in out and f"head      {HEAD}" in out and "standing  behind" in out


async def test_downgrade_keeps_tables_with_rows_unless_told(
    empty: URL, capsys: pytest.CaptureFixture[str], session_id: str
) -> None:
    dsn = dsn_of(empty)
    await upgrade_database(empty)
    async with LedgerSessionStorage(empty) as storage:
        await storage.append(session_id, "r", UserMessage(content="keep me"))
        await storage.append(session_id, "r", UserMessage(content="and me"))
    before = await on_connection(empty, catalog)

    assert await run(["downgrade", "--dsn", dsn, "base"]) == 1
    error = capsys.readouterr().err
    assert "agent_sessions (1 row)" in error and "raw_messages (2 rows)" in error
    assert "rein_sessions" not in error and "--yes" in error and "nothing was changed" in error
    assert error.count("\n") == 1
    with pytest.raises(DowngradeRefused) as refused:
        await downgrade_database(empty, f"-{len(revisions().order)}")  # relative, down to base
    assert refused.value.tables == {"raw_messages": 2, "agent_sessions": 1}
    assert await on_connection(empty, catalog) == before

    # A step that drops no table needs no --yes.
    assert await run(["downgrade", "--dsn", dsn, "0001"]) == 0
    assert await run(["downgrade", "--dsn", dsn, "base", "--yes"]) == 0
    assert "is at revision <none>" in capsys.readouterr().out
    assert await database_revision(empty) is None


async def test_downgrade_from_0004_keeps_the_rein_write_log_unless_told(
    empty: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """Revision 0004 only adds ``rein_writes``: its downgrade drops it, guarded as any
    table, and the sessions stay for code of 0003."""
    dsn = dsn_of(empty)
    await upgrade_database(empty)
    async with LedgerSessionStore(empty) as store:
        await store.asave("kept", Session(iteration=1))
    assert await run(["downgrade", "--dsn", dsn, "0003"]) == 1
    error = capsys.readouterr().err
    assert "rein_writes (1 row)" in error and "nothing was changed" in error
    assert await run(["downgrade", "--dsn", dsn, "0003", "--yes"]) == 0
    assert await database_revision(empty) == "0003"
    assert await upgrade_database(empty) == revisions().order[-1]
    async with LedgerSessionStore(empty) as store:
        found = await store.aload_versioned("kept")
        assert found is not None and found.version == 1
        await store.asave("kept", Session(iteration=2), expected_version=1)


async def test_downgrade_defaults_to_the_environment_dsn(
    empty: URL, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await upgrade_database(empty)
    monkeypatch.setenv(DSN_ENV, dsn_of(empty))
    assert await run(["downgrade", "0001"]) == 0
    assert "using the embedded database" not in capsys.readouterr().err
    assert await database_revision(empty) == "0001"


@pytest.mark.parametrize("command", [["check"], ["current"], ["downgrade", "base"]])
async def test_a_missing_sqlite_file_is_named_and_not_created(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "ledger.sqlite3"
    assert await run([*command, "--dsn", f"sqlite:///{missing}"]) == 2
    error = capsys.readouterr().err
    assert error == f"chatledger {command[0]}: no such file: {missing}\n"
    assert not missing.exists() and not missing.parent.exists()


@pytest.mark.parametrize("command", [["check"], ["current"], ["downgrade", "base"], ["upgrade"]])
async def test_schema_commands_say_they_use_the_embedded_file(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = tmp_path / "xdg" / "chatledger" / "chatledger.sqlite3"
    status = await run(command)
    error = capsys.readouterr().err
    notice = f"chatledger {command[0]}: no --dsn given and ${DSN_ENV} is not set: using the embedded database"
    assert error.startswith(f"{notice}, the SQLite file {default}\n")
    if command == ["upgrade"]:
        assert status == 0 and default.exists()
    else:
        assert status == 2 and f"no such file: {default}" in error and not default.exists()


async def test_alembic_without_a_dsn_says_it_uses_the_embedded_file(tmp_path: Path) -> None:
    default = tmp_path / "xdg" / "chatledger" / "chatledger.sqlite3"
    environment = {key: value for key, value in os.environ.items() if key != DSN_ENV}
    process = await asyncio.create_subprocess_exec(
        str(ALEMBIC),
        "upgrade",
        "head",
        cwd=REPO_ROOT,
        env={**environment, "XDG_DATA_HOME": str(tmp_path / "xdg")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    assert f"using the embedded database, the SQLite file {default}" in err.decode()
    assert await database_revision(URL.create("sqlite+aiosqlite", database=str(default))) == HEAD
