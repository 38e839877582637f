"""A revision that fails halfway leaves the database exactly as it was, on the backends
with transactional DDL (SQLite, PostgreSQL), whichever command ran it: ``chatledger
upgrade``, ``auto_upgrade`` or ``alembic upgrade``; and the next upgrade succeeds.

On MySQL/MariaDB every DDL statement commits by itself: the test there pins down what
the README says happens instead.

The failing revision lives in a test-only script directory (the shipped ``env.py``
and revisions, plus a 9001 that creates a table, adds a column and an index, inserts
a row, and then runs a broken statement while a ``FAIL`` file lies beside it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from chatledger import DatabaseError, SchemaNotReady
from chatledger import revisions as revisions_module
from chatledger.engine import Ledger
from chatledger.migrate import SchemaState, database_state, head_revision, revisions, upgrade_database

from .conftest import Database
from .support.schema_helpers import (
    BOOKKEEPING,
    SCHEMA_TABLES,
    alembic_ini,
    fingerprint,
    fresh_database,
    on_connection,
    revision_file,
    run_alembic,
    script_directory,
    table_names,
)

#: After the shipped head: changes the schema, then fails halfway while a FAIL file lies beside it.
FAILS_HALFWAY = revision_file(
    "9001",
    """
    op.create_table("half_done", sa.Column("id", sa.Integer(), primary_key=True))
    op.add_column("agent_sessions", sa.Column("note", sa.String(200), nullable=True))
    op.create_index("ix_raw_messages_tool_name", "raw_messages", ["tool_name"])
    op.execute("INSERT INTO half_done (id) VALUES (1)")
    if Path(__file__).with_name("FAIL").exists():
        op.execute("SELECT no_such_column FROM half_done")
    """,
    """
    op.drop_index("ix_raw_messages_tool_name", table_name="raw_messages")
    op.drop_column("agent_sessions", "note")
    op.drop_table("half_done")
    """,
    compatible_from="9001",
)

#: The state of a database at the shipped head.
SHIPPED_HEAD = SchemaState(head_revision(), revisions().compatible_from[head_revision()])
ENTRY_POINTS = ("chatledger upgrade", "auto_upgrade", "alembic upgrade")


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path) as url:
        yield url


@pytest.fixture
def location(tmp_path: Path) -> Path:
    """The test-only script directory, set to fail."""
    location = script_directory(tmp_path, {"9001_fails_halfway.py": FAILS_HALFWAY})
    (location / "versions" / "FAIL").touch()
    return location


async def upgrade_via(
    entry: str, url: URL, location: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> bool:
    """Upgrade to the scripts' head through ``entry``; whether it succeeded."""
    if entry == "chatledger upgrade":
        try:
            await upgrade_database(url, script_location=location)
        except DatabaseError as error:
            assert isinstance(error.__cause__, DBAPIError)
            return False
        return True
    if entry == "alembic upgrade":
        code, output = await run_alembic(url, "upgrade", "head", config=alembic_ini(tmp_path, location))
        assert code == 0 or "no_such_column" in output, output
        return code == 0
    # auto_upgrade: a ledger whose chatledger ships these scripts.
    with monkeypatch.context() as patch:
        patch.setattr(revisions_module, "script_location", lambda: location)
        ledger = Ledger(url, auto_upgrade=True)
        try:
            await ledger.ensure_ready()
        except SchemaNotReady as error:
            assert "auto_upgrade" in str(error) and "no_such_column" in str(error)
            return False
        finally:
            await ledger.close()
        return True


def fixed(location: Path) -> None:
    (location / "versions" / "FAIL").unlink()


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.requires("transactional_ddl")
async def test_failed_revision_leaves_database_as_it_was(
    entry: str,
    database: Database,
    fresh_url: URL,
    location: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await upgrade_database(fresh_url, head_revision(), script_location=location) == head_revision()
    before = await on_connection(fresh_url, fingerprint)
    assert set(before) == SCHEMA_TABLES | BOOKKEEPING

    assert not await upgrade_via(entry, fresh_url, location, tmp_path, monkeypatch)
    assert await on_connection(fresh_url, fingerprint) == before

    fixed(location)
    assert await upgrade_via(entry, fresh_url, location, tmp_path, monkeypatch)
    assert await database_state(fresh_url, location) == SchemaState("9001", "9001")
    assert "half_done" in await on_connection(fresh_url, table_names)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.requires("transactional_ddl")
async def test_failed_first_upgrade_leaves_database_empty(
    entry: str,
    database: Database,
    fresh_url: URL,
    location: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From nothing, the shipped revisions and the failing one run in one transaction: nothing stays,
    not even the version table."""
    assert not await upgrade_via(entry, fresh_url, location, tmp_path, monkeypatch)
    assert await on_connection(fresh_url, table_names) == set()

    fixed(location)
    assert await upgrade_via(entry, fresh_url, location, tmp_path, monkeypatch)
    assert await database_state(fresh_url, location) == SchemaState("9001", "9001")


@pytest.mark.requires("ddl_commits_each_statement")
async def test_mysql_failed_revision_is_not_undone(
    database: Database, fresh_url: URL, location: Path
) -> None:
    """What the README says about MySQL/MariaDB: the statements before the failure stay,
    the version row stays at the last revision that completed (with its compatibility
    record), the schema lock is released, and the next upgrade stops at the first
    statement already applied until someone repairs the database by hand."""
    await upgrade_database(fresh_url, head_revision(), script_location=location)

    with pytest.raises(DatabaseError, match="no_such_column"):
        await upgrade_database(fresh_url, script_location=location, lock_timeout=30)
    assert await database_state(fresh_url, location) == SHIPPED_HEAD
    assert "half_done" in await on_connection(fresh_url, table_names)

    fixed(location)
    with pytest.raises(DatabaseError, match="1050"):  # ER_TABLE_EXISTS_ERROR: half_done
        await upgrade_database(fresh_url, script_location=location, lock_timeout=30)
    assert await database_state(fresh_url, location) == SHIPPED_HEAD
