"""``chatledger.stats.read_stats`` and ``chatledger stats`` on every target, on a fresh
database holding known sessions: counts from the counter rows (live, deleted, a
session created again after a delete), checkpoints, rein sessions and their write
log, bytes per table from the backend, the largest sessions; the command's tables and
JSON; and what it refuses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rein.ir import Message
from rein.session import Session
from sqlalchemy.engine import URL
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import SchemaNotReady
from chatledger.dsn import DSN_ENV
from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.stats import SessionSize, read_stats
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.fresh import fresh_database

pytestmark = pytest.mark.one_transaction_at_a_time

#: chatledger's own tables: every kind's, the high-water marks and the version tables.
TABLES = {
    "agent_sessions",
    "raw_messages",
    "session_snapshots",
    "rein_sessions",
    "rein_writes",
    "high_water_marks",
    "openai_sessions",
    "openai_items",
    "adk_sessions",
    "adk_events",
    "adk_app_states",
    "adk_user_states",
    "langgraph_threads",
    "langgraph_checkpoints",
    "langgraph_blobs",
    "langgraph_writes",
    "chatledger_alembic_version",
    "chatledger_compatibility",
}


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


async def _append(storage: LedgerSessionStorage, session_id: str, count: int) -> None:
    for index in range(count):
        await storage.append(session_id, "r", UserMessage(content=f"{session_id} {index}"))


@pytest.fixture
async def filled(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh migrated database: zett sessions big (5 messages, 2 checkpoints), mid (2),
    gone (3, deleted), again (2, deleted, created again with 1); rein one (saved twice),
    two (saved, deleted)."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_stats") as url:
        await upgrade_database(url)
        async with LedgerSessionStorage(url) as storage:
            await _append(storage, "big", 5)
            await storage.snapshot("big", CompactedMessage(content="first two"), 2, 0)
            await storage.snapshot("big", CompactedMessage(content="first four"), 4, 1)
            await _append(storage, "mid", 2)
            await _append(storage, "gone", 3)
            assert await storage.delete_session("gone")
            await _append(storage, "again", 2)
            assert await storage.delete_session("again")
            await storage.create_session(session_id="again")
            await _append(storage, "again", 1)
        async with LedgerSessionStore(url) as store:
            session = Session(messages=[Message(role="user", content="hello")])
            await store.asave("one", session)
            await store.asave("one", session)
            await store.asave("two", session)
            assert await store.adelete("two")
        yield url


def _system(database: Database) -> str:
    return facts_of(database.backend).db_system(database.version)


async def test_read_stats_counts_sizes_and_largest(filled: URL, database: Database) -> None:
    stats = await read_stats(filled)
    assert stats.system == _system(database)
    assert [found.name for found in stats.frameworks] == ["zett", "rein", "openai", "adk", "langgraph"]
    zett = stats.framework("zett")
    assert zett.counts == {"sessions": 3, "deleted": 1, "raw_messages": 8, "checkpoints": 2}
    assert zett.largest == [SessionSize("big", 5), SessionSize("mid", 2), SessionSize("again", 1)]
    assert zett.tables == ["agent_sessions", "raw_messages", "session_snapshots"]
    rein = stats.framework("rein")
    assert rein.counts == {"sessions": 1, "deleted": 1, "write_log": 3}
    assert rein.largest == []
    assert stats.size.source
    if stats.size.tables:  # every backend here but a SQLite built without dbstat
        assert set(stats.size.tables) == TABLES
        assert f"chatledger's {len(TABLES)} tables" in stats.total_covers
        assert all(size > 0 for size in stats.size.tables.values())
        assert stats.size.total == sum(stats.size.tables.values())
    else:
        assert not facts_of(database.backend).server and stats.size.total and stats.size.total > 0
        assert "the whole database file" in stats.total_covers
    assert 0 <= stats.seconds < 60
    assert "password" not in stats.database

    top = await read_stats(filled, largest=1, kinds=["zett"])
    assert [found.name for found in top.frameworks] == ["zett"]
    assert top.framework("zett").largest == [SessionSize("big", 5)]
    assert (await read_stats(filled, largest=0)).framework("zett").largest == []
    with pytest.raises(KeyError):
        top.framework("rein")


async def test_read_stats_of_an_empty_database(database: Database, tmp_path: Path) -> None:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_stats") as url:
        await upgrade_database(url)
        stats = await read_stats(url)
    empty = {"sessions": 0, "deleted": 0, "raw_messages": 0, "checkpoints": 0}
    assert stats.framework("zett").counts == empty
    assert stats.framework("rein").counts == {"sessions": 0, "deleted": 0, "write_log": 0}
    assert stats.framework("zett").largest == []


async def test_read_stats_refuses_bad_input_and_an_unmigrated_database(
    database: Database, tmp_path: Path
) -> None:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_stats") as url:
        with pytest.raises(ValueError, match="largest"):
            await read_stats(url, largest=-1)
        with pytest.raises(TypeError, match="largest"):
            await read_stats(url, largest="3")  # type: ignore[arg-type]
        with pytest.raises(SchemaNotReady, match="chatledger upgrade"):
            await read_stats(url)


async def test_the_command_prints_tables(filled: URL, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = filled.render_as_string(hide_password=False)
    assert await run(["stats", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "sessions and rows" in out and "bytes per table" in out and "largest zett sessions" in out
    for line in ("raw messages", "checkpoints", "write log", "raw_messages", "rein_writes", "total", "big"):
        assert line in out, line
    assert await run(["stats", "--dsn", dsn, "--largest", "0"]) == 0
    assert "largest zett sessions" not in capsys.readouterr().out


async def test_the_command_prints_json(filled: URL, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = filled.render_as_string(hide_password=False)
    assert await run(["stats", "--dsn", dsn, "--json", "--largest", "2"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["frameworks"]["zett"]["counts"] == {
        "sessions": 3,
        "deleted": 1,
        "raw_messages": 8,
        "checkpoints": 2,
    }
    assert document["frameworks"]["zett"]["largest"] == [
        {"id": "big", "messages": 5},
        {"id": "mid", "messages": 2},
    ]
    assert document["frameworks"]["rein"]["counts"] == {"sessions": 1, "deleted": 1, "write_log": 3}
    assert set(document["size"]) == {"tables", "total", "source", "total_covers"}
    assert document["system"] and document["database"] and document["seconds"] >= 0


async def test_the_command_refuses_a_missing_file_and_a_negative_largest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.sqlite3"
    assert await run(["stats", "--dsn", f"sqlite:///{missing}"]) == 2
    assert f"no such file: {missing}" in capsys.readouterr().err
    assert not missing.exists()
    assert await run(["stats", "--dsn", f"sqlite:///{missing}", "--largest", "-1"]) == 2
