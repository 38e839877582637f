"""Rolling deploys: the expand/contract rule, read from the database.

"This chatledger" is the one under test, at the shipped head. A newer chatledger is
simulated by a test-only script directory with two more revisions after the shipped
head: 9001, an *expand* revision (a nullable column; it keeps the head's
``compatible_from``), and 9002, a *contract* revision (it names itself). The newer
chatledger migrates the database; this one must keep running on 9001 and refuse 9002,
with ``chatledger check`` saying the same.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import SchemaNotReady
from chatledger.migrate import (
    SchemaState,
    Standing,
    database_state,
    downgrade_database,
    head_revision,
    revisions,
    standing,
    upgrade_database,
)
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import dsn_of, execute, fresh_database, revision_file, script_directory

HEAD = head_revision()
HEAD_COMPATIBLE_FROM = revisions().compatible_from[HEAD]

EXPAND = revision_file(
    "9001",
    'op.add_column("agent_sessions", sa.Column("note", sa.String(200), nullable=True))',
    'op.drop_column("agent_sessions", "note")',
    compatible_from=HEAD_COMPATIBLE_FROM,
)
CONTRACT = revision_file(
    "9002",
    'op.create_table("contract_probe", sa.Column("id", sa.Integer(), primary_key=True))',
    'op.drop_table("contract_probe")',
    compatible_from="9002",
    down_revision="9001",
)


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path) as url:
        yield url


@pytest.fixture
def newer(tmp_path: Path) -> Path:
    """A newer chatledger's revisions."""
    return script_directory(tmp_path, {"9001_expand.py": EXPAND, "9002_contract.py": CONTRACT})


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (SchemaState(None, None), Standing.BEHIND),
        (SchemaState("9001", HEAD_COMPATIBLE_FROM), Standing.BEHIND),
        (SchemaState("9002", "9002"), Standing.AT_HEAD),
        (SchemaState("9002", None), Standing.AT_HEAD),
        (SchemaState("9003", HEAD_COMPATIBLE_FROM), Standing.AHEAD_COMPATIBLE),
        (SchemaState("9003", "9001"), Standing.AHEAD_COMPATIBLE),
        (SchemaState("9003", "9003"), Standing.AHEAD_INCOMPATIBLE),
        (SchemaState("9003", None), Standing.AHEAD_INCOMPATIBLE),
        (SchemaState("9003", "abc"), Standing.AHEAD_INCOMPATIBLE),
    ],
)
def test_standing(newer: Path, state: SchemaState, expected: Standing) -> None:
    """Seen by a chatledger whose head is 9002."""
    assert standing(state, newer) is expected


async def use_store(url: URL, **options: bool) -> None:
    """Write and read back through a store of this chatledger."""
    async with LedgerSessionStorage(url, **options) as storage:
        assert await storage.append("s-rolling", "r", UserMessage(content="hi")) >= 1
        assert (await storage.load("s-rolling")).raw_tail


async def test_expand_revision_keeps_this_chatledger_running(
    fresh_url: URL, newer: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await upgrade_database(fresh_url, "9001", script_location=newer) == "9001"
    assert await database_state(fresh_url) == SchemaState("9001", HEAD_COMPATIBLE_FROM)

    caplog.set_level(logging.INFO, logger="chatledger")
    for options in ({"auto_upgrade": False}, {"auto_upgrade": True}):
        caplog.clear()
        await use_store(fresh_url, **options)
        said = [record for record in caplog.records if "compatible with it" in record.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.INFO  # once per store, not per call
        assert "9001" in said[0].getMessage() and HEAD in said[0].getMessage()
    assert await database_state(fresh_url) == SchemaState("9001", HEAD_COMPATIBLE_FROM)  # left alone

    dsn = dsn_of(fresh_url)
    assert await run(["check", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "9001" in out and "compatible" in out
    assert await run(["current", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "current   9001" in out and "standing  ahead, compatible" in out
    # Nothing for this chatledger to upgrade; it says where the database is.
    assert await run(["upgrade", "--dsn", dsn]) == 0
    assert "is at revision 9001" in capsys.readouterr().out


async def test_contract_revision_stops_this_chatledger(
    fresh_url: URL, newer: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await upgrade_database(fresh_url, script_location=newer) == "9002"
    assert await database_state(fresh_url) == SchemaState("9002", "9002")

    for options in ({"auto_upgrade": False}, {"auto_upgrade": True}):
        with pytest.raises(SchemaNotReady) as raised:
            await use_store(fresh_url, **options)
        message = str(raised.value)
        assert "9002" in message and HEAD in message and "upgrade chatledger" in message
    assert await database_state(fresh_url) == SchemaState("9002", "9002")  # auto_upgrade left it alone

    dsn = dsn_of(fresh_url)
    assert await run(["check", "--dsn", dsn]) == 3
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "upgrade chatledger" in captured.err
    assert "needs chatledger code of revision 9002 or newer" in captured.err
    assert await run(["upgrade", "--dsn", dsn]) == 2
    assert "upgrade chatledger" in capsys.readouterr().err

    # The newer chatledger goes back to the expand revision: the record follows.
    assert await downgrade_database(fresh_url, "9001", script_location=newer) == "9001"
    assert await database_state(fresh_url) == SchemaState("9001", HEAD_COMPATIBLE_FROM)
    await use_store(fresh_url, auto_upgrade=False)
    assert await run(["check", "--dsn", dsn]) == 0


async def test_record_of_another_revision_is_not_trusted(fresh_url: URL, newer: Path) -> None:
    """A compatibility row that does not name the database's revision (left by a tool
    that moved the version by hand) counts as no record."""
    await upgrade_database(fresh_url, "9001", script_location=newer)
    await execute(fresh_url, "UPDATE chatledger_alembic_version SET version_num = '9002'")
    assert await database_state(fresh_url) == SchemaState("9002", None)
    with pytest.raises(SchemaNotReady, match="does not know"):
        await use_store(fresh_url, auto_upgrade=False)
