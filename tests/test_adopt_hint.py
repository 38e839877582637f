"""A database zett-agent's own store wrote is never migrated over: the storage (also
where it would upgrade itself), ``chatledger upgrade``, ``check`` and ``current`` and
``alembic upgrade head`` name ``chatledger adopt --dsn ...`` instead, and change nothing.

The databases are written by zett-agent's ``SQLSessionStorage`` itself, created as an
application would (see ``tests/test_adopt.py``).

Only zett's three tables without any of chatledger's own are taken for zett's: some of
chatledger's tables and no revision (what an upgrade killed halfway leaves on MySQL,
whose DDL commits statement by statement) are named a half-applied revision, with the
way out docs/deploying.md gives, since ``adopt`` refuses them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from chatledger import SchemaNotReady
from chatledger.dsn import DSN_ENV, as_argument, display, resolve_dsn
from chatledger.migrate import head_revision, upgrade_database
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.fresh import fresh_database
from .support.schema_helpers import catalog, dsn_of, execute, on_connection, run_alembic
from .support.zett_data import write_zett_sessions, zett_read_back

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def zett_db(database: Database, tmp_path: Path) -> AsyncIterator[tuple[URL, list[str]]]:
    """A database zett-agent's own store wrote, and its session ids."""
    async with fresh_database(
        database.server, tmp_path, prefix="chatledger_hint", as_an_app_would=True
    ) as url:
        yield url, await write_zett_sessions(url)


async def test_storage_names_adopt_and_never_upgrades_zett_tables(zett_db: tuple[URL, list[str]]) -> None:
    url, ids = zett_db
    schema, sessions = await on_connection(url, catalog), await zett_read_back(url, ids)
    # The defaults (SQLite upgrades itself) and an explicit auto_upgrade alike.
    for options in ({}, {"auto_upgrade": True}):
        async with LedgerSessionStorage(url, **options) as storage:
            with pytest.raises(SchemaNotReady) as raised:
                await storage.load(ids[0])
        message = str(raised.value)
        named = f"chatledger adopt --dsn {as_argument(resolve_dsn(url))}"  # the database, password masked
        assert "zett-agent's own tables" in message and named in message
        assert display(url) in message and "chatledger upgrade" not in message
    with pytest.raises(SchemaNotReady, match="chatledger adopt"):
        await upgrade_database(url)
    assert await on_connection(url, catalog) == schema
    assert await zett_read_back(url, ids) == sessions


async def test_commands_name_adopt_with_the_dsn_given(
    zett_db: tuple[URL, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = zett_db
    dsn = dsn_of(url)
    schema = await on_connection(url, catalog)

    assert await run(["check", "--dsn", dsn]) == 1
    error = capsys.readouterr().err
    assert f"chatledger adopt --dsn {dsn}" in error and error.count("\n") == 1

    assert await run(["upgrade", "--dsn", dsn]) == 2
    error = capsys.readouterr().err
    assert f"chatledger adopt --dsn {dsn}" in error and "already exists" not in error
    assert error.count("\n") == 1

    assert await run(["current", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "no chatledger schema: it holds zett-agent's own tables" in out
    assert f"chatledger adopt --dsn {dsn}" in out

    # copy reads chatledger's schema only: the way to leave the original to zett is named too.
    target = f"sqlite:///{tmp_path / 'target.sqlite3'}"
    assert await run(["copy", "--from", dsn, "--to", target]) == 2
    error = capsys.readouterr().err
    assert f"chatledger adopt --dsn {dsn}" in error and "adopt a copy of it and copy that" in error
    assert await on_connection(url, catalog) == schema

    code, output = await run_alembic(url, "upgrade", "head")
    assert code != 0 and f"chatledger adopt --dsn {as_argument(resolve_dsn(url))}" in output, output
    assert "Traceback" not in output
    assert await on_connection(url, catalog) == schema

    # Adopted, the same commands find chatledger's schema.
    assert await run(["adopt", "--dsn", dsn]) == 0
    assert await run(["check", "--dsn", dsn]) == 0
    assert await run(["upgrade", "--dsn", dsn]) == 0
    assert f"already at head ({head_revision()})" in capsys.readouterr().out


async def test_hint_names_the_environment_variable_when_that_names_the_database(
    zett_db: tuple[URL, list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DSN_ENV, dsn_of(zett_db[0]))
    assert await run(["check"]) == 1
    assert f'chatledger adopt --dsn "${DSN_ENV}"' in capsys.readouterr().err


@pytest.fixture
async def half_applied(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """What an upgrade from an empty MySQL database killed after its first CREATE TABLE
    leaves (as the review found it): an empty chatledger_alembic_version and chatledger's
    agent_sessions. Made directly, on every backend."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_half") as url:
        await upgrade_database(url, "0001")
        await execute(
            url,
            "DROP TABLE raw_messages",
            "DROP TABLE session_snapshots",
            "DROP TABLE rein_sessions",
            "DROP TABLE chatledger_compatibility",
            "DELETE FROM chatledger_alembic_version",
        )
        yield url


async def test_a_half_applied_upgrade_is_named_so_with_the_way_out(
    half_applied: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    url, dsn = half_applied, dsn_of(half_applied)
    schema = await on_connection(url, catalog)
    assert set(schema) == {"agent_sessions", "chatledger_alembic_version"}

    with pytest.raises(SchemaNotReady) as raised:
        await upgrade_database(url)
    message = str(raised.value)
    assert "some of chatledger's tables (agent_sessions, chatledger_alembic_version)" in message
    assert "a revision applied halfway" in message and 'docs/deploying.md, "Deploying: migrations"' in message
    assert "adopt" not in message
    for options in ({}, {"auto_upgrade": True}):
        async with LedgerSessionStorage(url, **options) as storage:
            with pytest.raises(SchemaNotReady, match="a revision applied halfway") as raised:
                await storage.load("s")
        assert "adopt" not in str(raised.value)

    assert await run(["check", "--dsn", dsn]) == 1
    error = capsys.readouterr().err
    assert "a revision applied halfway" in error and f"`chatledger upgrade --dsn {dsn}` again" in error
    assert "adopt" not in error and error.count("\n") == 1
    assert await run(["upgrade", "--dsn", dsn]) == 2
    error = capsys.readouterr().err
    assert "a revision applied halfway" in error and "already exists" not in error
    assert await on_connection(url, catalog) == schema

    # The way out the message gives: drop what the half-applied revision created.
    await execute(url, "DROP TABLE agent_sessions")
    assert await upgrade_database(url) == head_revision()


async def test_zett_tables_beside_one_of_chatledgers_are_not_zetts_own(
    zett_db: tuple[URL, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """An adoption stopped midway (MySQL) has created chatledger's rein_sessions: the hint
    says so, besides the half-applied revision."""
    url, _ = zett_db
    await execute(url, "CREATE TABLE rein_sessions (id VARCHAR(255) PRIMARY KEY)")
    assert await run(["check", "--dsn", dsn_of(url)]) == 1
    error = capsys.readouterr().err
    assert "(agent_sessions, raw_messages, session_snapshots, rein_sessions)" in error
    assert "a revision applied halfway" in error
    assert "if it was `chatledger adopt` that stopped midway, run it again instead" in error
    with pytest.raises(SchemaNotReady, match="applied halfway"):
        await upgrade_database(url)
