"""docs/cutover.md as written: every ``bash`` block, in order, in one shell, on a fresh
PostgreSQL database holding an application's tables, with the old stores written by
the frameworks themselves (the OpenAI SDK's ``SQLAlchemySession`` in a SQLite file,
ADK's ``DatabaseSessionService`` in a PostgreSQL database of its own, zett-agent's own
SQL store and LangGraph's ``AsyncSqliteSaver`` each in a SQLite file). The guide's role
and database names are made unique; its variables are set as its settings block lists
them. Every command succeeds, every
session is in chatledger's schema afterwards, and the application's tables are
untouched."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger.adk import LedgerSessionService
from chatledger.openai_agents import LedgerSession

from .support.backends import Server, Servers, fresh_name
from .support.facts import logins_of
from .support.throwaway import shared_server
from .support.zett_data import write_zett_sessions
from .test_adk_import import adk_writes
from .test_langgraph_moving_in import THREADS, _fill
from .test_openai_import import sdk_store
from .test_shared_database import APP_TABLES, execute, libpq, renamed

ROOT = Path(__file__).resolve().parent.parent


def guide_script() -> tuple[str, set[str]]:
    """The guide's ``bash`` blocks, joined, and the variables its settings block sets."""
    guide = (ROOT / "docs" / "cutover.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```$", guide, re.MULTILINE | re.DOTALL)
    settings = re.search(r"<!-- cutover-settings -->\n```text\n(.*?)```", guide, re.DOTALL)
    assert blocks and settings is not None
    return "\n".join(blocks), set(re.findall(r"^export (\w+)=", settings.group(1), re.MULTILINE))


async def langgraph_store(path: Path) -> str:
    """LangGraph's ``AsyncSqliteSaver`` file with :data:`THREADS` in it, and its DSN."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await _fill(saver)
    return f"sqlite:///{path}"


@pytest.fixture
async def fleet(
    servers: Servers, tmp_path: Path
) -> AsyncIterator[tuple[Server, dict[str, str], dict[str, str]]]:
    server = shared_server(servers, "postgresql")
    suffix = fresh_name("")[-8:]
    names = {
        "chatledger_owner": f"cl_owner_{suffix}",
        "chatledger_app": f"cl_app_{suffix}",
        "app": f"app_{suffix}",
    }
    adk_database = f"adk_{suffix}"
    try:
        app = await server.create_database(names["app"])
        await execute(app, *APP_TABLES)
        adk = await server.create_database(adk_database)
        owner = app.set(username=names["chatledger_owner"], password="owner-secret")
        runtime = app.set(username=names["chatledger_app"], password="app-secret")
        (tmp_path / "zett").mkdir()
        zett = URL.create("sqlite+aiosqlite", database=str(tmp_path / "zett" / "sessions.sqlite3"))
        variables = {
            "ADMIN_DSN": libpq(app),
            "OWNER_DSN": libpq(owner),
            "RUNTIME_DSN": libpq(runtime),
            "SDK_DSN": await sdk_store(tmp_path / "sdk.sqlite3", {"alpha": 3, "beta": 2}),
            "ADK_DSN": await adk_writes(adk.render_as_string(hide_password=False)),
            "ZETT_DB": str(zett.database),
            "WORK": str(tmp_path / "cutover"),
        }
        variables["ZETT_IDS"] = " ".join(await write_zett_sessions(zett))
        variables["LANGGRAPH_DSN"] = await langgraph_store(tmp_path / "langgraph.sqlite3")
        yield server, names, variables
    finally:
        for database in (names["app"], adk_database):
            await server.drop_database(database)
        for login in (names["chatledger_owner"], names["chatledger_app"]):
            await server.execute(logins_of("postgresql").drop.format(name=login))


async def test_the_cutover_guide_runs_as_written(
    fleet: tuple[Server, dict[str, str], dict[str, str]], tmp_path: Path
) -> None:
    server, names, variables = fleet
    script, settings = guide_script()
    assert settings == set(variables) - {"ZETT_IDS"}
    env = {key: value for key, value in os.environ.items() if key != "CHATLEDGER_DSN"}
    env.update(variables)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    run = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-euo", "pipefail", "-c", renamed(script, names)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    out = run.stdout
    for zett_id in variables["ZETT_IDS"].split():
        assert zett_id in out
    assert "alpha" in out and "beta" in out and "shop" in out
    assert all(thread in out for thread in THREADS)
    runtime = server.database_url(names["app"]).set(username=names["chatledger_app"], password="app-secret")
    session = LedgerSession.from_url("beta", url=runtime)
    try:
        assert len(await session.get_items()) == 2
    finally:
        await session.close()
    async with LedgerSessionService(runtime) as service:
        assert await service.get_session(app_name="shop", user_id="u1", session_id="s-1") is not None
    engine = create_async_engine(server.database_url(names["app"]), poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT version_num FROM public.alembic_version")) == "a1b2c3d4e5f6"
            assert await conn.scalar(text("SELECT count(*) FROM chatledger.raw_messages")) > 0
    finally:
        await engine.dispose()
