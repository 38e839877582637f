"""``chatledger import --openai-sdk``: the OpenAI Agents SDK's own tables (written by its
``SQLAlchemySession``) into chatledger's, on every target; chatledger's own
``agent_sessions`` is never taken for the SDK's."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.engine import URL

from chatledger import ConfigurationError
from chatledger.engine import Ledger
from chatledger.openai_agents import LedgerSession
from chatledger.tools import cli
from chatledger.tools.openai_import import import_openai_sdk

from .conftest import Database


async def sdk_store(path: Path, sessions: dict[str, int]) -> str:
    """A SQLite file the SDK's SQLAlchemySession wrote: ``count`` items per session id."""
    url = f"sqlite+aiosqlite:///{path}"
    for session_id, count in sessions.items():
        session = SQLAlchemySession.from_url(session_id, url=url, create_tables=True)
        await session.add_items([{"role": "user", "content": f"{session_id} {n}"} for n in range(count)])
        await session.engine.dispose()
    return url


async def test_the_sdks_tables_are_imported_once_with_a_dry_run_first(
    database: Database, tmp_path: Path
) -> None:
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"alpha": 3, "beta": 5})
    dry = await import_openai_sdk(source, database.url, dry_run=True)
    assert (dry.imported, dry.items, dry.identical) == (2, 8, 0)
    ledger = Ledger(database.url)
    try:
        assert await LedgerSession("alpha", ledger=ledger).get_items() == []  # nothing written
        report = await import_openai_sdk(source, database.url)
        assert (report.imported, report.items, report.identical, report.differing) == (2, 8, 0, 0)
        items = await LedgerSession("beta", ledger=ledger).get_items()
        assert items == [{"role": "user", "content": f"beta {n}"} for n in range(5)]
        again = await import_openai_sdk(source, database.url)  # a re-run writes nothing
        assert (again.imported, again.identical) == (0, 2)
        await LedgerSession("alpha", ledger=ledger).add_items([{"role": "user", "content": "new"}])
        changed = await import_openai_sdk(source, database.url)
        assert (changed.imported, changed.identical, changed.differing, changed.clean) == (0, 1, 1, False)
    finally:
        await ledger.close()


async def test_chatledgers_own_agent_sessions_is_never_read_as_the_sdks(tmp_path: Path) -> None:
    target = URL.create("sqlite+aiosqlite", database=str(tmp_path / "target.sqlite3"))
    with pytest.raises(ValueError, match="is the target"):
        await import_openai_sdk(target, target)
    # A chatledger database the SDK was pointed at too: its agent_sessions is chatledger's.
    other = URL.create("sqlite+aiosqlite", database=str(tmp_path / "other.sqlite3"))
    ledger = Ledger(other)
    await ledger.ensure_ready()
    await ledger.close()
    mixed = SQLAlchemySession.from_url("x", url=other.render_as_string(), create_tables=True)
    await mixed.get_items()  # creates agent_messages beside chatledger's agent_sessions
    await mixed.engine.dispose()
    with pytest.raises(ConfigurationError, match="is chatledger's own agent_sessions"):
        await import_openai_sdk(other, target)
    with pytest.raises(ConfigurationError, match="has no table 'nope'"):
        await import_openai_sdk(other, target, messages_table="nope")


async def test_the_import_command_counts_and_dry_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"gamma": 2})
    target = f"sqlite:///{tmp_path / 'target.sqlite3'}"
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", source, "--dry-run"]) == 0
    assert "would import 1 OpenAI Agents session (2 items)" in capsys.readouterr().out
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", source]) == 0
    assert "imported 1 OpenAI Agents session (2 items)" in capsys.readouterr().out
    assert await cli.run(["import", "--dsn", target]) == 2  # neither FILE nor --openai-sdk
