"""The shipped Alembic revisions on every backend: no drift, clean downgrade, no DDL
from the storage on a server database, self-upgrading embedded SQLite, and the
real ``alembic`` command line.

Each test gets a database of its own (``fresh_url``): a new database on the
server, dropped afterwards, or a new SQLite file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import SchemaNotReady
from chatledger.migrate import (
    VERSION_TABLE,
    database_revision,
    downgrade_database,
    head_revision,
    run_on_connection,
    upgrade_database,
)
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.schema_helpers import (
    ALEMBIC,
    BOOKKEEPING,
    SCHEMA_TABLES,
    drift,
    fresh_database,
    on_connection,
    run_alembic,
    table_names,
)


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """An empty, unmigrated database of the test's backend, dropped afterwards."""
    async with fresh_database(database, tmp_path) as url:
        yield url


async def test_upgrade_head_has_no_drift(fresh_url: URL) -> None:
    assert await database_revision(fresh_url) is None
    assert await upgrade_database(fresh_url) == head_revision()

    assert await on_connection(fresh_url, drift) == []
    assert await on_connection(fresh_url, table_names) == SCHEMA_TABLES | BOOKKEEPING


async def test_downgrade_to_base_drops_every_table_and_upgrade_again_works(
    fresh_url: URL, session_id: str
) -> None:
    await upgrade_database(fresh_url)

    assert await downgrade_database(fresh_url, "base") is None
    assert await on_connection(fresh_url, table_names) <= {VERSION_TABLE}
    assert await database_revision(fresh_url) is None
    # The comparison is not vacuous: on the empty database it wants every table back.
    wanted = {diff[1].name for diff in await on_connection(fresh_url, drift) if diff[0] == "add_table"}
    assert wanted == SCHEMA_TABLES

    assert await upgrade_database(fresh_url) == head_revision()
    assert await on_connection(fresh_url, drift) == []
    async with LedgerSessionStorage(fresh_url) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="after the round trip")) == 1
        assert [record.sequence for record in (await storage.load(session_id)).raw_tail] == [1]


async def test_unmigrated_database_is_refused_without_ddl(
    fresh_url: URL, backend: str, session_id: str
) -> None:
    # A server database is never migrated by the storage; SQLite only when told not to.
    options = {} if facts_of(backend).server else {"auto_upgrade": False}
    async with LedgerSessionStorage(fresh_url, **options) as storage:
        with pytest.raises(SchemaNotReady, match="`chatledger upgrade --dsn ") as raised:
            await storage.append(session_id, "r", UserMessage(content="never stored"))
        assert isinstance(raised.value, RuntimeError)
        assert "<none>" in str(raised.value)
        # Reads are refused the same way, and the check is repeated, not cached as passed.
        with pytest.raises(SchemaNotReady, match="`chatledger upgrade --dsn "):
            await storage.load(session_id)

    assert await on_connection(fresh_url, table_names) == set()
    assert await database_revision(fresh_url) is None


async def test_database_behind_head_is_refused(fresh_url: URL, backend: str, session_id: str) -> None:
    await upgrade_database(fresh_url)
    await downgrade_database(fresh_url, "base")
    options = {} if facts_of(backend).server else {"auto_upgrade": False}
    async with LedgerSessionStorage(fresh_url, **options) as storage:
        with pytest.raises(SchemaNotReady, match="`chatledger upgrade --dsn "):
            await storage.get_session(session_id)
    assert await on_connection(fresh_url, table_names) <= {VERSION_TABLE}


async def test_auto_upgrade_option_migrates_a_server_database_too(fresh_url: URL, session_id: str) -> None:
    async with LedgerSessionStorage(fresh_url, auto_upgrade=True) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="hi")) == 1
    assert await database_revision(fresh_url) == head_revision()
    assert await on_connection(fresh_url, drift) == []


async def test_fresh_sqlite_file_upgrades_itself(tmp_path: Path, session_id: str) -> None:
    path = tmp_path / "not" / "yet" / "there" / "ledger.sqlite3"
    async with LedgerSessionStorage(f"sqlite:///{path}") as storage:
        assert await storage.append(session_id, "r", UserMessage(content="first use")) == 1
        assert await storage.count_messages(session_id) == 1
    url = URL.create("sqlite+aiosqlite", database=str(path))
    assert path.is_file()
    assert await database_revision(url) == head_revision()
    assert await on_connection(url, drift) == []

    # Concurrent first uses of one file upgrade it once and both work.
    other = tmp_path / "shared.sqlite3"
    stores = [LedgerSessionStorage(f"sqlite:///{other}") for _ in range(3)]
    try:
        results = await asyncio.gather(
            *(
                store.append(f"{session_id}-{index}", "r", UserMessage(content="x"))
                for index, store in enumerate(stores)
            )
        )
        assert results == [1, 1, 1]
    finally:
        for store in stores:
            await store.close()


async def test_alembic_cli_upgrade_and_check(fresh_url: URL) -> None:
    assert ALEMBIC.is_file(), f"alembic console script missing at {ALEMBIC}"

    code, output = await run_alembic(fresh_url, "check")
    assert code != 0, output  # an empty database is not up to date

    code, output = await run_alembic(fresh_url, "upgrade", "head")
    assert code == 0, output
    assert await database_revision(fresh_url) == head_revision()

    code, output = await run_alembic(fresh_url, "check")
    assert code == 0, output
    assert "No new upgrade operations detected" in output

    code, output = await run_alembic(fresh_url, "current")
    assert code == 0, output
    assert head_revision() in output


async def test_database_ahead_of_this_chatledger_is_refused(fresh_url: URL, session_id: str) -> None:
    """A database a newer chatledger migrated (a rolling deploy) is refused, even where
    the storage would upgrade itself, with a message that says so."""
    await upgrade_database(fresh_url)
    await run_on_connection(
        fresh_url, lambda conn: conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    )
    async with LedgerSessionStorage(fresh_url, auto_upgrade=True) as storage:
        with pytest.raises(SchemaNotReady, match="does not know"):
            await storage.load(session_id)
