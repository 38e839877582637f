"""chatledger keeps its revision in a version table of its own, beside an application's
own Alembic history in ``alembic_version``.

A database where an older chatledger left its revision in ``alembic_version`` is
read from there and moved over on the next upgrade, without losing anything: only a
row naming a revision chatledger ships (in a database with chatledger's tables) is
moved, ``alembic_version`` is dropped only when that leaves it empty, and an
application's row stays where it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, insert, select, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger.migrate import (
    COMPATIBILITY_TABLE,
    LEGACY_VERSION_TABLE,
    VERSION_TABLE,
    SchemaState,
    alembic_config,
    database_state,
    head_revision,
    revisions,
    upgrade_database,
    upgrade_schema,
)
from chatledger.schema import rein_sessions_table
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import (
    BOOKKEEPING,
    SCHEMA_TABLES,
    drift,
    dsn_of,
    execute,
    fresh_database,
    on_connection,
    run_alembic,
    table_names,
)

#: What the previous chatledger shipped, the one revision it kept in alembic_version.
LEGACY = "0001"
HEAD_STATE = SchemaState(head_revision(), revisions().compatible_from[head_revision()])
#: An application's own Alembic revision id.
APP_REVISION = "ae1027a6acf"
APP_TABLE = "app_orders"


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path) as url:
        yield url


def legacy_rows(connection: Connection) -> list[str]:
    return sorted(connection.scalars(text(f"SELECT version_num FROM {LEGACY_VERSION_TABLE}")))


def app_revision(connection: Connection) -> str | None:
    """What the application's own Alembic reads (its default version table)."""
    return MigrationContext.configure(connection).get_current_revision()


async def make_legacy(url: URL) -> None:
    """A database as the previous chatledger left it: revision 0001 in alembic_version,
    and a row in a chatledger table."""
    assert await upgrade_database(url, LEGACY) == LEGACY
    now = datetime.now(UTC)

    def convert(connection: Connection) -> None:
        connection.execute(
            insert(rein_sessions_table).values(
                id="kept", version=1, session_json="{}", created_at=now, updated_at=now
            )
        )
        connection.execute(text(f"DROP TABLE {COMPATIBILITY_TABLE}"))
        connection.execute(text(f"DROP TABLE {VERSION_TABLE}"))
        # What Alembic itself wrote there, with its default version table.
        MigrationContext.configure(connection).stamp(ScriptDirectory.from_config(alembic_config()), LEGACY)

    await on_connection(url, convert)
    assert await on_connection(url, legacy_rows) == [LEGACY]


async def add_application(url: URL, revision: str = APP_REVISION, *, version_table: bool = True) -> None:
    """An application's own table, and its own Alembic revision in alembic_version."""
    statements = [f"CREATE TABLE {APP_TABLE} (id INTEGER PRIMARY KEY)", f"INSERT INTO {APP_TABLE} VALUES (7)"]
    if version_table:
        statements.append(
            f"CREATE TABLE {LEGACY_VERSION_TABLE} (version_num VARCHAR(32) NOT NULL, "
            "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        )
    statements.append(f"INSERT INTO {LEGACY_VERSION_TABLE} (version_num) VALUES ('{revision}')")
    await execute(url, *statements)


async def assert_kept(url: URL) -> None:
    def kept(connection: Connection) -> int:
        return int(connection.scalar(select(func.count()).select_from(rein_sessions_table)) or 0)

    assert await on_connection(url, kept) == 1
    assert await on_connection(url, drift) == []


async def test_legacy_revision_is_read_and_moved_by_chatledger_upgrade(
    fresh_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_legacy(fresh_url)
    assert await database_state(fresh_url) == SchemaState(LEGACY, "0001", legacy=True)
    dsn = dsn_of(fresh_url)
    assert await run(["current", "--dsn", dsn]) == 0
    assert f"current   {LEGACY} (in alembic_version)" in capsys.readouterr().out
    if head_revision() == LEGACY:  # usable as it is: nothing about the schema changed
        assert await run(["check", "--dsn", dsn]) == 0
        assert "recorded in alembic_version; `chatledger upgrade` moves it" in capsys.readouterr().out

    assert await run(["upgrade", "--dsn", dsn]) == 0
    assert await database_state(fresh_url) == HEAD_STATE
    assert await on_connection(fresh_url, table_names) == SCHEMA_TABLES | BOOKKEEPING  # alembic_version gone
    await assert_kept(fresh_url)
    assert await run(["check", "--dsn", dsn]) == 0


async def test_legacy_revision_moves_on_auto_upgrade_and_the_application_row_stays(fresh_url: URL) -> None:
    await make_legacy(fresh_url)
    await add_application(fresh_url, version_table=False)  # both rows in one alembic_version
    assert await on_connection(fresh_url, legacy_rows) == sorted([LEGACY, APP_REVISION])
    assert (await database_state(fresh_url)).legacy

    async with LedgerSessionStorage(fresh_url, auto_upgrade=True) as storage:
        assert await storage.append("s-1", "r", UserMessage(content="after the move")) == 1

    assert await database_state(fresh_url) == HEAD_STATE
    assert await on_connection(fresh_url, legacy_rows) == [APP_REVISION]
    assert await on_connection(fresh_url, table_names) == SCHEMA_TABLES | BOOKKEEPING | {
        LEGACY_VERSION_TABLE,
        APP_TABLE,
    }
    await assert_kept(fresh_url)


async def test_application_alembic_history_coexists(
    fresh_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """An application migrating the same database with its own Alembic: chatledger sees
    no revision of its own there, upgrades beside it (the ``alembic`` command line and
    ``chatledger``), and leaves the application's history and tables alone."""
    await add_application(fresh_url)
    dsn = dsn_of(fresh_url)
    assert await database_state(fresh_url) == SchemaState(None, None)
    assert await run(["check", "--dsn", dsn]) == 1
    assert "at revision <none>" in capsys.readouterr().err

    code, output = await run_alembic(fresh_url, "upgrade", "head")
    assert code == 0, output
    # The application's tables and alembic_version are not drift for chatledger.
    code, output = await run_alembic(fresh_url, "check")
    assert code == 0 and "No new upgrade operations detected" in output, output
    assert await run(["check", "--dsn", dsn]) == 0
    assert await run(["upgrade", "--dsn", dsn]) == 0
    assert await database_state(fresh_url) == HEAD_STATE
    assert await on_connection(fresh_url, app_revision) == APP_REVISION

    assert await run(["downgrade", "--dsn", dsn, "base"]) == 0
    assert await on_connection(fresh_url, table_names) == {VERSION_TABLE, LEGACY_VERSION_TABLE, APP_TABLE}
    assert await on_connection(fresh_url, app_revision) == APP_REVISION
    assert await on_connection(fresh_url, lambda conn: conn.scalar(text(f"SELECT id FROM {APP_TABLE}"))) == 7


async def test_application_revision_named_like_chatledgers_is_not_taken(fresh_url: URL) -> None:
    """An application whose own revision ids look like chatledger's ("0001") in a
    database without chatledger's tables: that row is the application's."""
    await add_application(fresh_url, revision=LEGACY)
    assert await database_state(fresh_url) == SchemaState(None, None)
    assert await upgrade_database(fresh_url) == head_revision()
    assert await on_connection(fresh_url, legacy_rows) == [LEGACY]
    assert await database_state(fresh_url) == HEAD_STATE


async def test_move_cut_short_leaves_an_empty_version_table_that_counts_as_absent(
    fresh_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a move killed (or refused with a lock wait) after its CREATE TABLE leaves on
    # MySQL/MariaDB, where that DDL commits on its own: the new table empty, the
    # revision still in alembic_version.
    await make_legacy(fresh_url)
    await execute(fresh_url, f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL)")
    assert await database_state(fresh_url) == SchemaState(LEGACY, "0001", legacy=True)

    assert await run(["upgrade", "--dsn", dsn_of(fresh_url)]) == 0, capsys.readouterr()
    assert await database_state(fresh_url) == HEAD_STATE
    assert await on_connection(fresh_url, table_names) == SCHEMA_TABLES | BOOKKEEPING
    await assert_kept(fresh_url)


@pytest.mark.requires("catalog_read_after_lock_wait")
async def test_revision_check_racing_the_move_reads_again(database: Database, fresh_url: URL) -> None:
    # PostgreSQL: a process starting while an upgrade moves the revision lists
    # alembic_version, then waits on the upgrade's lock on it; once the upgrade
    # commits, the table it was about to read is gone. The check reads again.
    await make_legacy(fresh_url)
    engine = create_async_engine(fresh_url, poolclass=NullPool)

    async def waiting() -> int:
        async with engine.connect() as conn:
            query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = :db"
            return int(await conn.scalar(text(query), {"db": fresh_url.database}) or 0)

    async def until_waiting(count: int) -> None:
        async with asyncio.timeout(60):
            # Polls the server's view of its sessions: nothing in this process to wait on.
            while True:
                if await waiting() >= count:
                    return
                await asyncio.sleep(0.05)

    try:
        async with engine.connect() as blocker:
            await blocker.begin()
            await blocker.execute(text("SELECT count(*) FROM agent_sessions"))  # holds 0002's ALTER
            upgrade = asyncio.create_task(upgrade_schema(fresh_url, lock_timeout=60))
            await until_waiting(1)  # alembic_version dropped, waiting at the ALTER
            async with LedgerSessionStorage(fresh_url, auto_upgrade=False) as storage:
                call = asyncio.create_task(storage.append("s-1", "r1", UserMessage(content="hi")))
                await until_waiting(2)  # the check waits on alembic_version
                await blocker.rollback()
                assert await upgrade == HEAD_STATE
                assert await call == 1
    finally:
        await engine.dispose()
