"""An application's own Alembic on the database chatledger's tables live in: its
autogenerate, given ``chatledger.migrate.include_name`` and ``include_object`` (or
``app_hooks`` around its own filter), sees none of chatledger's tables, and its
``upgrade head`` leaves every session as it was; without the hooks it writes a drop
of each. ``chatledger check`` names the hooks when it finds the application's version
table.

The application is a real Alembic project in a temporary directory: its own
``env.py`` (Alembic's async template, with its own table and version table), run by
``alembic.command``."""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import alembic
import pytest
from alembic import command
from alembic.config import Config
from alembic.operations import ops
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection
from zett_agent.messages import UserMessage

from chatledger.app_alembic import env_passes_hooks, find_env_py
from chatledger.dsn import DSN_ENV
from chatledger.migrate import (
    VERSION_TABLE,
    app_hooks,
    app_version_tables,
    chatledger_tables,
    current_revision,
    database_revision,
    head_revision,
    include_name,
    include_object,
    upgrade_database,
)
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import catalog, dsn_of, execute, fresh_database, on_connection

pytestmark = pytest.mark.one_transaction_at_a_time

#: The application's env.py: Alembic's async template, its own table, and the hooks as
#: ``config.attributes["hooks"]`` says: "plain" (the three lines of the README),
#: "composed" (app_hooks around a filter of its own, and a version table of its own
#: name), or "none" (what an application without them runs).
APP_ENV = '''
import asyncio

from alembic import context
from sqlalchemy import Column, Integer, MetaData, String, Table
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

import chatledger.migrate

config = context.config
target_metadata = MetaData()
Table("app_orders", target_metadata, Column("id", Integer, primary_key=True), Column("note", String(200)))


def app_include_object(object, name, type_, reflected, compare_to):
    """The application's own filter: a table it keeps out of its migrations."""
    return not (type_ == "table" and name == "app_scratch")


hooks = config.attributes["hooks"]
if hooks == "plain":
    options = {
        "include_name": chatledger.migrate.include_name,
        "include_object": chatledger.migrate.include_object,
    }
elif hooks == "composed":
    options = {
        **chatledger.migrate.app_hooks(include_object=app_include_object),
        "version_table": "app_version",
    }
else:
    options = {}


def do_run_migrations(connection):
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        process_revision_directives=config.attributes.get("directives"),
        **options,
    )
    with context.begin_transaction():
        context.run_migrations()


async def main():
    # An application whose deploy runs chatledger's migrations from its own env.py.
    chatledger_upgrade = config.attributes.get("chatledger_upgrade")
    if chatledger_upgrade == "before":
        await chatledger.migrate.upgrade(config.attributes["url"])
    engine = create_async_engine(config.attributes["url"], poolclass=NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(do_run_migrations)
    await engine.dispose()
    if chatledger_upgrade == "after":
        await chatledger.migrate.upgrade(config.attributes["url"])


asyncio.run(main())
'''

#: Alembic's default (synchronous) template, as docs/deploying.md says to write it: no
#: event loop runs, so chatledger's upgrade gets one of its own before the application's
#: migrations, and the application's engine has a synchronous driver.
APP_ENV_SYNC = """
import asyncio

from alembic import context
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from sqlalchemy.pool import NullPool

import chatledger.migrate
from chatledger.migrate import include_name, include_object

config = context.config
target_metadata = MetaData()
Table("app_orders", target_metadata, Column("id", Integer, primary_key=True), Column("note", String(200)))

asyncio.run(chatledger.migrate.upgrade(config.attributes["url"]))

engine = create_engine(config.attributes["sync_url"], poolclass=NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        process_revision_directives=config.attributes.get("directives"),
        include_name=include_name,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
"""

#: The synchronous driver an application's own engine would use on each target.
SYNC_DRIVERS = {
    "sqlite+aiosqlite": "sqlite",
    "postgresql+asyncpg": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
    "mysql+aiomysql": "mysql+pymysql",
}

HEAD = head_revision()


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)


@pytest.fixture
async def shared(database: Database, tmp_path: Path, session_id: str) -> AsyncIterator[URL]:
    """A database holding chatledger's tables, a session with two raw messages and a
    table of the application's that it keeps out of its migrations."""
    async with fresh_database(database, tmp_path, "shared") as url:
        await upgrade_database(url)
        async with LedgerSessionStorage(url) as storage:
            await storage.append(session_id, "r", UserMessage(content="keep me"))
            await storage.append(session_id, "r", UserMessage(content="and me"))
        await execute(url, "CREATE TABLE app_scratch (id INTEGER PRIMARY KEY)")
        yield url


class App:
    """The application's Alembic project."""

    def __init__(self, root: Path, url: URL, hooks: str, env: str = APP_ENV) -> None:
        location = root / "app_migrations"
        (location / "versions").mkdir(parents=True)
        (location / "env.py").write_text(textwrap.dedent(env), encoding="utf-8")
        template = Path(alembic.__file__).parent / "templates" / "async" / "script.py.mako"
        shutil.copy(template, location / "script.py.mako")
        self.config = Config()
        self.config.set_main_option("script_location", str(location))
        self.config.attributes.update(url=url, hooks=hooks)

    async def autogenerate(self, message: str) -> tuple[list[ops.MigrateOperation], str]:
        """``alembic revision --autogenerate``: its upgrade operations and the file written."""
        found: list[ops.MigrateOperation] = []

        def capture(context: Any, revision: Any, directives: list[ops.MigrationScript]) -> None:
            upgrade_ops = directives[0].upgrade_ops
            assert upgrade_ops is not None
            found.extend(upgrade_ops.ops)

        def autogenerate() -> str:
            script = command.revision(self.config, message, autogenerate=True)
            assert script is not None and not isinstance(script, list)
            return Path(script.path).read_text(encoding="utf-8")

        self.config.attributes["directives"] = capture
        # The env.py runs an event loop of its own: in a thread of its own.
        return found, await asyncio.to_thread(autogenerate)

    async def upgrade(self) -> None:
        await asyncio.to_thread(command.upgrade, self.config, "head")


def tables_touched(operations: list[ops.MigrateOperation]) -> set[str]:
    """The tables an autogenerate's operations create, drop or change."""
    return {str(getattr(operation, "table_name", None)) for operation in operations}


def chatledger_rows(connection: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every chatledger table, sorted."""
    present = set(inspect(connection).get_table_names())
    return {
        name: sorted(tuple(row) for row in connection.execute(text(f"SELECT * FROM {name}")))
        for name in sorted(chatledger_tables() & present)
    }


def chatledger_catalog(connection: Connection) -> dict[str, Any]:
    return {name: entry for name, entry in catalog(connection).items() if name in chatledger_tables()}


async def test_without_the_hooks_the_apps_autogenerate_drops_every_chatledger_table(
    shared: URL, tmp_path: Path
) -> None:
    operations, source = await App(tmp_path, shared, "none").autogenerate("orders")
    dropped = {op.table_name for op in operations if isinstance(op, ops.DropTableOp)}
    assert dropped == chatledger_tables() | {"app_scratch"}
    for name in chatledger_tables():
        assert f"op.drop_table('{name}')" in source


@pytest.mark.parametrize("hooks", ["plain", "composed"])
async def test_the_apps_autogenerate_with_the_hooks_leaves_chatledger_alone(
    shared: URL, tmp_path: Path, hooks: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (await on_connection(shared, chatledger_rows), await on_connection(shared, chatledger_catalog))
    assert before[0]["raw_messages"] and before[0]["agent_sessions"]
    app = App(tmp_path, shared, hooks)

    operations, source = await app.autogenerate("orders")
    # Plain hooks: the application's scratch table is its own business (no filter of its
    # own, so its autogenerate drops it); composed: its own filter keeps it out too.
    assert tables_touched(operations) == (
        {"app_orders"} if hooks == "composed" else {"app_orders", "app_scratch"}
    )
    assert not any(name in source for name in chatledger_tables())
    if hooks == "plain":  # the application removes what it does not want, as its developers would
        source = source.replace("op.drop_table('app_scratch')", "")
        (revision,) = (tmp_path / "app_migrations" / "versions").glob("*.py")
        revision.write_text(source)
    await app.upgrade()

    after = (await on_connection(shared, chatledger_rows), await on_connection(shared, chatledger_catalog))
    assert after == before
    assert await database_revision(shared) == HEAD
    again, _ = await app.autogenerate("nothing")
    assert tables_touched(again) <= {"app_scratch"}
    assert not tables_touched(again) & chatledger_tables()

    # chatledger check sees the application's version table and names the hooks.
    app_version = "app_version" if hooks == "composed" else "alembic_version"
    assert await run(["check", "--dsn", dsn_of(shared)]) == 0
    out = capsys.readouterr().out
    assert f"is at head ({HEAD}). Beside it, {app_version} is an application's own Alembic" in out
    assert "include_name=chatledger.migrate.include_name" in out and VERSION_TABLE not in out
    assert "--app-alembic PATH reads it" in out
    # Told where the application's env.py is, check reads it: it passes the hooks, so
    # no reminder.
    assert (
        await run(["check", "--dsn", dsn_of(shared), "--app-alembic", str(tmp_path / "app_migrations")]) == 0
    )
    out = capsys.readouterr().out
    assert f"is at head ({HEAD})" in out and "include_name" not in out
    # One that lacks them is named.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "env.py").write_text("from alembic import context\n\ncontext.configure()\n", encoding="utf-8")
    (bare / "alembic.ini").write_text("[alembic]\nscript_location = %(here)s\n", encoding="utf-8")
    assert await run(["check", "--dsn", dsn_of(shared), "--app-alembic", str(bare / "alembic.ini")]) == 0
    out = capsys.readouterr().out
    assert f"env.py ({bare / 'env.py'}) lacks chatledger's hooks" in out.replace("\n", "")


@pytest.mark.parametrize(
    ("source", "passes"),
    [
        ("from chatledger.migrate import include_name, include_object", True),
        ("import chatledger.migrate\nx = chatledger.migrate.app_hooks()", True),
        ("from chatledger import migrate\nx = (migrate.include_name, migrate.include_object)", True),
        ("from chatledger.migrate import include_name", False),
        ("include_name = include_object = None", False),
        ("this is not python", False),
    ],
)
def test_check_reads_an_env_py_for_the_hooks(tmp_path: Path, source: str, passes: bool) -> None:
    (tmp_path / "env.py").write_text(source, encoding="utf-8")
    found = find_env_py(tmp_path)
    assert found == tmp_path / "env.py"
    assert env_passes_hooks(found) is passes
    assert find_env_py(tmp_path / "nowhere") is None


async def test_check_names_no_hook_without_an_apps_version_table(
    shared: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(["check", "--dsn", dsn_of(shared)]) == 0
    assert "include_name" not in capsys.readouterr().out


def test_the_hooks_cover_every_table_of_the_schema_metadata() -> None:
    from chatledger.schema import metadata

    assert chatledger_tables() == {*metadata.tables, VERSION_TABLE, "chatledger_compatibility"}
    for name in chatledger_tables():
        assert not include_name(name, "table", {"schema_name": None})
        assert not include_name(f"ix_{name}_x", "index", {"table_name": name, "schema_name": None})
        assert not include_object(metadata.tables.get(name), name, "table", True, None)  # type: ignore[arg-type]
    for table in metadata.tables.values():
        for index in table.indexes:
            assert not include_object(index, index.name, "index", False, None)
        for column in table.columns:
            assert not include_object(column, column.name, "column", False, None)
    assert include_name("app_orders", "table", {"schema_name": None})
    assert include_name("public", "schema", {})


def test_app_hooks_refuse_what_is_not_callable() -> None:
    with pytest.raises(TypeError, match="include_object must be a callable"):
        app_hooks(include_object="app_scratch")  # type: ignore[arg-type]


async def test_app_version_tables_are_alembics_layout_but_not_chatledgers(shared: URL) -> None:
    create = "CREATE TABLE {} (version_num VARCHAR(32) NOT NULL)"
    # Where an older chatledger kept its revision (its own table records none yet):
    # chatledger's, not an application's.
    revision = await on_connection(shared, current_revision)
    await execute(
        shared,
        create.format("alembic_version"),
        f"INSERT INTO alembic_version VALUES ('{revision}')",
        f"DELETE FROM {VERSION_TABLE}",
    )
    assert await on_connection(shared, app_version_tables) == []
    # Beside a revision chatledger's own table records, alembic_version is the
    # application's, whatever it holds (and its rows are never read).
    await execute(shared, f"INSERT INTO {VERSION_TABLE} VALUES ('{revision}')")
    assert await on_connection(shared, app_version_tables) == ["alembic_version"]
    await execute(
        shared,
        "INSERT INTO alembic_version VALUES ('3f2a9c1b7e4d')",
        create.format("billing_version"),
        "CREATE TABLE notes (version_num VARCHAR(32) NOT NULL, body VARCHAR(20))",
    )
    assert await on_connection(shared, app_version_tables) == ["alembic_version", "billing_version"]


def test_the_hooks_match_chatledgers_tables_in_the_default_schema_only() -> None:
    from sqlalchemy import Column, Integer, MetaData, Table

    for name in chatledger_tables() | {"alembic_version"}:
        assert not include_name(name, "table", {"schema_name": None})
        assert include_name(name, "table", {"schema_name": "app"})
        assert include_name("ix_x", "index", {"table_name": name, "schema_name": "app"})
        elsewhere = Table(name, MetaData(), Column("id", Integer, primary_key=True), schema="app")
        assert include_object(elsewhere, name, "table", True, None)
        assert include_object(elsewhere.c.id, "id", "column", True, None)
        here = Table(name, MetaData(), Column("id", Integer, primary_key=True))
        assert not include_object(here, name, "table", True, None)
        assert not include_object(here.c.id, "id", "column", True, None)


@pytest.mark.requires("schemas")
async def test_an_apps_table_named_like_chatledgers_in_its_own_schema_is_its_own(
    shared: URL, backend: str
) -> None:
    """F6 (a): ``include_schemas=True`` on PostgreSQL: the application's
    ``app.raw_messages`` is created, chatledger's ``raw_messages`` left alone."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import Column, Integer, MetaData, String, Table

    await execute(shared, "CREATE SCHEMA app")
    target = MetaData()
    Table("app_orders", target, Column("id", Integer, primary_key=True))
    Table("app_scratch", target, Column("id", Integer, primary_key=True))  # the fixture's
    Table(
        "raw_messages",
        target,
        Column("id", Integer, primary_key=True),
        Column("body", String(10)),
        schema="app",
    )

    def diff(connection: Connection) -> list[Any]:
        options = {"include_schemas": True, "target_metadata": target, **app_hooks()}
        return list(compare_metadata(MigrationContext.configure(connection, opts=options), target))

    found = await on_connection(shared, diff)
    assert sorted((entry[0], entry[1].fullname) for entry in found) == [
        ("add_table", "app.raw_messages"),
        ("add_table", "app_orders"),
    ]


async def test_a_legacy_alembic_version_is_left_alone_by_an_app_with_its_own_version_table(
    shared: URL, tmp_path: Path
) -> None:
    """F6 (b): chatledger's revision still in ``alembic_version`` (an older layout), and
    the application's Alembic with a ``version_table`` of its own: its autogenerate
    proposes no drop of ``alembic_version``."""
    await execute(
        shared,
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)",
        f"INSERT INTO alembic_version SELECT version_num FROM {VERSION_TABLE}",
        f"DROP TABLE {VERSION_TABLE}",
    )
    assert await database_revision(shared) == HEAD
    operations, source = await App(tmp_path, shared, "composed").autogenerate("orders")
    assert tables_touched(operations) == {"app_orders"}
    assert "alembic_version" not in source


@pytest.mark.parametrize("when", ["before", "after"])
async def test_the_apps_env_py_may_run_chatledgers_upgrade(
    database: Database, tmp_path: Path, when: str
) -> None:
    """F4: ``chatledger.migrate.upgrade()`` from inside the application's env.py, before
    or after its own migrations, leaves the application's Alembic run working (its
    ``alembic.context`` and ``alembic.op``): both schemas end at their heads."""
    async with fresh_database(database, tmp_path, "inside") as url:
        app = App(tmp_path, url, "plain")
        app.config.attributes["chatledger_upgrade"] = when
        operations, _ = await app.autogenerate("orders")
        assert await database_revision(url) == HEAD
        if when == "before":  # chatledger's tables were there to compare, and hidden
            assert tables_touched(operations) == {"app_orders"}
        await app.upgrade()
        assert await database_revision(url) == HEAD

        def app_state(connection: Connection) -> tuple[bool, list[str]]:
            revisions = list(connection.scalars(text("SELECT version_num FROM alembic_version")))
            return inspect(connection).has_table("app_orders"), revisions

        has_orders, app_revisions = await on_connection(url, app_state)
        assert has_orders and len(app_revisions) == 1


async def test_a_sync_env_py_runs_chatledgers_upgrade_in_a_loop_of_its_own(
    database: Database, tmp_path: Path
) -> None:
    """docs/deploying.md: in Alembic's default template, ``asyncio.run(chatledger.migrate
    .upgrade(dsn))`` before the application's migrations; its autogenerate, with the
    hooks, then touches only its own table, and both schemas end at their heads."""
    async with fresh_database(database, tmp_path, "sync") as url:
        app = App(tmp_path, url, "plain", env=APP_ENV_SYNC)
        app.config.attributes["sync_url"] = url.set(drivername=SYNC_DRIVERS[url.drivername])
        operations, _ = await app.autogenerate("orders")
        assert await database_revision(url) == HEAD
        assert tables_touched(operations) == {"app_orders"}
        await app.upgrade()
        assert await database_revision(url) == HEAD
        assert "app_orders" in await on_connection(
            url, lambda connection: inspect(connection).get_table_names()
        )
