"""A database shared with the application (docs/deploying.md, "A database shared with
the application"): the guide's statements, run as written (names made unique), give
chatledger's roles a schema of their own in the application's database (PostgreSQL;
and the variant in the application's own schema) or a database of their own on the
application's server (MariaDB), with no grant on the application's tables. The owner's
``upgrade``, ``current`` and ``check`` succeed (``check`` exits 0) though it cannot read
the application's tables or its ``alembic_version``, and the runtime role's ``check``
too; the application's tables are untouched."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger.tools import cli

from .support.backends import Server, Servers, fresh_name
from .support.facts import logins_of
from .support.throwaway import shared_server

ROOT = Path(__file__).resolve().parent.parent
APP_TABLES = (
    "CREATE TABLE orders (id INTEGER PRIMARY KEY)",
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
    "INSERT INTO alembic_version VALUES ('a1b2c3d4e5f6')",
)


def guide_block(marker: str) -> str:
    """The statements between ``<!-- marker -->`` and ``<!-- /marker -->`` of docs/deploying.md."""
    guide = (ROOT / "docs" / "deploying.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {marker} -->\n```\w+\n(.*?)```\n<!-- /{marker} -->", guide, re.DOTALL)
    assert found is not None, marker
    return found.group(1)


def renamed(block: str, names: dict[str, str]) -> str:
    for written, unique in names.items():
        block = re.sub(rf"\b{written}\b(?!-secret)", unique, block)  # not the passwords
    return block


async def execute(url: URL, *statements: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


@dataclass
class Shared:
    """The application's database with its tables, and chatledger's two roles."""

    #: The application's own login, on its database.
    app: URL
    owner: URL
    runtime: URL
    #: The application's tables, as chatledger's roles would name them.
    app_tables: tuple[str, ...]


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def _postgresql(server: Server, names: dict[str, str], variant: str) -> Shared:
    app_role, database = names["app_role"], names["app"]
    await server.execute(f"CREATE ROLE {app_role} LOGIN PASSWORD 'app-owner-secret'")
    await server.execute(f"CREATE DATABASE {database} OWNER {app_role}")
    admin = server.database_url(database)
    await execute(admin, f"ALTER SCHEMA public OWNER TO {app_role}")
    app = admin.set(username=app_role, password="app-owner-secret")
    await execute(app, *APP_TABLES, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    if variant == "own schema":  # the guide's block, through psql as a reader runs it
        script = renamed(guide_block("shared-postgresql"), names)
        run = await asyncio.to_thread(
            subprocess.run,
            ["psql", libpq(server.admin_url), "-v", "ON_ERROR_STOP=1", "-q"],
            input=script,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr
    else:  # in the application's schema: the guide's sentence
        owner, runtime = names["chatledger_owner"], names["chatledger_app"]
        await server.execute(f"CREATE ROLE {owner} LOGIN PASSWORD 'owner-secret'")
        await server.execute(f"CREATE ROLE {runtime} LOGIN PASSWORD 'app-secret'")
        await execute(
            app,
            f"GRANT CONNECT ON DATABASE {database} TO {owner}, {runtime}",
            f"GRANT USAGE, CREATE ON SCHEMA public TO {owner}",
            f"GRANT USAGE ON SCHEMA public TO {runtime}",
        )
        await execute(
            admin.set(username=owner, password="owner-secret"),
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {runtime}",
        )
    return Shared(
        app,
        admin.set(username=names["chatledger_owner"], password="owner-secret"),
        admin.set(username=names["chatledger_app"], password="app-secret"),
        ("public.orders", "public.alembic_version"),
    )


async def _mysql(server: Server, names: dict[str, str], variant: str) -> Shared:
    app = await server.create_database(names["app"])
    await execute(app, *APP_TABLES)
    statements = [part.strip() for part in renamed(guide_block("shared-mysql"), names).split(";")]
    admin = server.admin_url
    await execute(admin, *(statement for statement in statements if statement))
    ours = server.database_url(names["chatledger"])
    return Shared(
        app,
        ours.set(username=names["chatledger_owner"], password="owner-secret"),
        ours.set(username=names["chatledger_app"], password="app-secret"),
        (f"{names['app']}.orders", f"{names['app']}.alembic_version"),
    )


#: Each server dialect's recipe (the guide's), and the variants it has.
RECIPES: dict[str, Callable[[Server, dict[str, str], str], Awaitable[Shared]]] = {
    "postgresql": _postgresql,
    "mysql": _mysql,
}
VARIANTS = {"postgresql": ("own schema", "app's schema"), "mysql": ("own database",)}


@pytest.fixture(
    params=[(backend, variant) for backend, variants in VARIANTS.items() for variant in variants],
    ids=lambda param: f"{param[0]}-{param[1].replace(' ', '-')}",
)
async def shared(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[Shared]:
    backend, variant = request.param
    server = shared_server(servers, backend)
    suffix = fresh_name("")[-8:]
    names = {
        "chatledger_owner": f"cl_owner_{suffix}",
        "chatledger_app": f"cl_app_{suffix}",
        "chatledger": f"cl_db_{suffix}",
        "app_role": f"app_owner_{suffix}",
        "app": f"app_{suffix}",
    }
    try:
        yield await RECIPES[backend](server, names, variant)
    finally:
        for database in (names["app"], names["chatledger"]):
            await server.drop_database(database)
        for login in (names["chatledger_owner"], names["chatledger_app"], names["app_role"]):
            await server.execute(logins_of(backend).drop.format(name=login))


async def test_chatledgers_owner_migrates_and_checks_without_any_grant_on_the_apps_tables(
    shared: Shared, capsys: pytest.CaptureFixture[str]
) -> None:
    for table in shared.app_tables:  # the owner may not read the application's tables
        with pytest.raises(DBAPIError, match="denied"):
            await execute(shared.owner, f"SELECT * FROM {table}")
    owner = shared.owner.render_as_string(hide_password=False)
    runtime = shared.runtime.render_as_string(hide_password=False)
    assert await cli.run(["upgrade", "--dsn", owner]) == 0
    assert await cli.run(["current", "--dsn", owner]) == 0
    assert await cli.run(["check", "--dsn", owner]) == 0
    assert await cli.run(["check", "--dsn", runtime]) == 0
    out = capsys.readouterr()
    assert "is at head" in out.out and "lacks a privilege" not in out.err
    engine = create_async_engine(shared.app, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT version_num FROM alembic_version")) == "a1b2c3d4e5f6"
    finally:
        await engine.dispose()
