"""``chatledger upgrade --sql`` and ``alembic upgrade head --sql``: the upgrade as a script
for the database's own client (psql, mariadb, sqlite3), rendered without a connection.

Applied by that client, the script leaves exactly the schema an online upgrade leaves
(catalogs and bookkeeping rows compared), from an empty database and from revision
0001; and it takes chatledger's schema lock, so that it stops before any change while
another migration holds it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger.dialects import SCHEMA_LOCK_KEY
from chatledger.dsn import DSN_ENV
from chatledger.migrate import head_revision, upgrade_database
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.schema_helpers import ALEMBIC, REPO_ROOT, catalog, drift, dsn_of, fresh_database, on_connection
from .support.throwaway import _which, require

pytestmark = pytest.mark.one_transaction_at_a_time

PASSWORD = "pw-Sekr1t-do-not-print"

#: The client a DBA runs the script with, per dialect (the first one found).
CLIENTS = {"postgresql": ("psql",), "mysql": ("mariadb", "mysql"), "sqlite": ("sqlite3",)}


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def online(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """An empty database to upgrade online, as the reference."""
    async with fresh_database(database, tmp_path, "online") as url:
        yield url


@pytest.fixture
async def scripted(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """An empty database to upgrade with the script."""
    async with fresh_database(database, tmp_path, "scripted") as url:
        yield url


def _sqlite_argv(client: str, url: URL, _select_database: bool) -> list[str]:
    return [client, "-bail", str(url.database)]


def _psql_argv(client: str, url: URL, _select_database: bool) -> list[str]:
    conninfo = url.set(drivername="postgresql").difference_update_query(["ssl"])
    return [client, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo.render_as_string(False)]


def _mysql_argv(client: str, url: URL, select_database: bool) -> list[str]:
    password = [f"-p{url.password}"] if url.password else []
    argv = [client, "--no-defaults", "--protocol=tcp", f"-h{url.host}", f"-P{url.port or 3306}"]
    database = [str(url.database)] if select_database else []
    return [*argv, f"-u{url.username}", *password, *database]


#: The client's command line, per dialect: the client, the URL, ``select_database``.
ARGV = {"sqlite": _sqlite_argv, "postgresql": _psql_argv, "mysql": _mysql_argv}

#: Per server dialect: a statement that takes the schema lock as an upgrade holds it
#: (so that the script must wait for it), and what the script says when it gives up.
SCHEMA_LOCKS = {
    "postgresql": (f"SELECT pg_advisory_lock({SCHEMA_LOCK_KEY})", "lock timeout"),
    "mysql": (
        "SELECT GET_LOCK(CONCAT('chatledger_schema_', MD5(DATABASE())), 0)",
        "Subquery returns more than 1 row",
    ),
}


def client_command(url: URL, *, select_database: bool = True) -> list[str]:
    """The database's own client for ``url``, reading the script from stdin
    (``select_database``: MySQL's client started on no database, when false)."""
    backend = url.get_backend_name()
    client = _which(*CLIENTS[backend])
    require(backend, None if client is not None else f"no {' or '.join(CLIENTS[backend])} client installed")
    assert client is not None
    return ARGV[backend](client, url, select_database)


async def apply_script(url: URL, script: str, *, select_database: bool = True) -> tuple[int, str]:
    """Run ``script`` with the database's own client; (exit code, its output)."""
    process = await asyncio.create_subprocess_exec(
        *client_command(url, select_database=select_database),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(script.encode()), timeout=120)
    return process.returncode or 0, output.decode(errors="replace")


async def render(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The script ``chatledger upgrade --sql ARGV`` prints (exit status 0)."""
    capsys.readouterr()
    status = await run(["upgrade", "--sql", *argv])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out


async def test_script_applied_by_the_client_makes_the_online_schema(
    online: URL, scripted: URL, capsys: pytest.CaptureFixture[str], session_id: str
) -> None:
    await upgrade_database(online)
    script = await render(capsys, "--dsn", dsn_of(scripted))
    assert "-- Running upgrade 0001 -> 0002" in script
    code, output = await apply_script(scripted, script)
    assert code == 0, output

    assert await on_connection(scripted, catalog) == await on_connection(online, catalog)
    assert await on_connection(scripted, drift) == []
    assert await run(["check", "--dsn", dsn_of(scripted)]) == 0
    async with LedgerSessionStorage(scripted) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="after the script")) == 1


async def test_script_from_a_revision_upgrades_that_database(
    online: URL, scripted: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--revision 0001:head``: for a database at 0001. On SQLite this is the table
    rebuild of revision 0002, given the table instead of reflecting it."""
    await upgrade_database(online)
    await upgrade_database(scripted, "0001")
    script = await render(capsys, "--dsn", dsn_of(scripted), "--revision", "0001:head")
    assert "Running upgrade  -> 0001" not in script and "CREATE TABLE agent_sessions" not in script
    code, output = await apply_script(scripted, script)
    assert code == 0, output
    assert await on_connection(scripted, catalog) == await on_connection(online, catalog)


async def test_alembic_sql_prints_the_same_script(scripted: URL, capsys: pytest.CaptureFixture[str]) -> None:
    """``alembic upgrade head --sql`` from the repository root: the same script on
    stdout, and no connection (the database does not even have to exist)."""
    ours = await render(capsys, "--dsn", dsn_of(scripted))
    environment = {key: value for key, value in os.environ.items() if key != DSN_ENV}
    process = await asyncio.create_subprocess_exec(
        str(ALEMBIC),
        "-x",
        f"dsn={dsn_of(scripted)}",
        "upgrade",
        "head",
        "--sql",
        cwd=REPO_ROOT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    assert out.decode() == ours


async def test_script_waits_for_the_schema_lock_and_stops_before_any_change(
    scripted: URL, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another migration holds chatledger's schema lock: the script waits up to its
    lock timeout, then the client stops with an error, and nothing was created."""
    script = await render(capsys, "--dsn", dsn_of(scripted), "--lock-timeout", "1")
    empty = await on_connection(scripted, catalog)
    if facts_of(backend).file_write_lock:
        holder = sqlite3.connect(str(scripted.database), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            code, output = await apply_script(scripted, script)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert "locked" in output
    else:
        lock, gives_up = SCHEMA_LOCKS[backend]
        engine = create_async_engine(scripted, poolclass=NullPool)
        try:
            async with engine.connect() as holder:
                assert await holder.scalar(text(lock)) in (None, "", 1)
                code, output = await apply_script(scripted, script)
        finally:
            await engine.dispose()
        assert gives_up in output
    assert code != 0, output
    assert await on_connection(scripted, catalog) == empty


@pytest.mark.requires("session_lock_timeout")
async def test_postgresql_script_keeps_the_lock_timeout_the_dba_set(
    scripted: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script bounds its wait for the schema lock, then gives the revisions' DDL the
    session's own ``lock_timeout`` back: one a DBA SET before running it bounds the wait
    behind an application's open transaction, and the script stops, changing nothing."""
    await upgrade_database(scripted, "0001")
    script = await render(capsys, "--dsn", dsn_of(scripted), "--revision", "0001:head")
    assert "TO DEFAULT" not in script
    before = await on_connection(scripted, catalog)
    engine = create_async_engine(scripted, poolclass=NullPool)
    try:
        async with engine.connect() as reader:  # a service's read, its transaction left open
            await reader.execute(text("SELECT count(*) FROM agent_sessions"))
            started = time.monotonic()
            code, output = await apply_script(scripted, f"SET lock_timeout = '1s';\n{script}")
            elapsed = time.monotonic() - started
    finally:
        await engine.dispose()
    assert code != 0 and "lock timeout" in output, output
    assert elapsed < 30
    assert await on_connection(scripted, catalog) == before


@pytest.mark.requires("get_lock")
async def test_mysql_script_stops_when_get_lock_answers_null(
    scripted: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """GET_LOCK answers NULL on an error (here: no database selected, so the lock's name
    is NULL); the script stops at that statement, as an online upgrade would."""
    script = await render(capsys, "--dsn", dsn_of(scripted))
    code, output = await apply_script(scripted, script, select_database=False)
    assert code != 0 and "Subquery returns more than 1 row" in output, output
    assert "No database selected" not in output


@pytest.mark.parametrize(
    "revision",
    ["0001\nDROP TABLE victim; --:head", "0001:head\nDROP TABLE victim; --", "0001\r:head", "nonesuch:head"],
)
async def test_sql_writes_nothing_for_a_revision_it_cannot_resolve(
    revision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """FROM and TO are resolved before the first line is written: the script never
    carries what was given, and a bad one leaves stdout empty (``alembic`` prints its
    error there, on one line)."""
    dsn = "postgresql://owner@127.0.0.1:1/chat"
    assert await run(["upgrade", "--sql", "--dsn", dsn, "--revision", revision]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Can't locate revision" in captured.err
    assert captured.err.count("\n") == 1
    environment = {key: value for key, value in os.environ.items() if key != DSN_ENV}
    process = await asyncio.create_subprocess_exec(
        str(ALEMBIC),
        *("-x", f"dsn={dsn}", "upgrade", revision, "--sql"),
        cwd=REPO_ROOT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    # The alembic command prints its error on stdout: one line, which runs as no SQL.
    assert process.returncode != 0 and out.startswith(b"FAILED: ") and out.count(b"\n") == 1, out


async def test_sql_header_names_the_revisions_alembic_resolved(capsys: pytest.CaptureFixture[str]) -> None:
    script = await render(capsys, "--dsn", "postgresql://owner@127.0.0.1:1/chat", "--revision", "0001:+1")
    assert "schema migration from 0001 to 0002 for PostgreSQL" in script
    assert "For a database at revision 0001, as chatledger_alembic_version records it." in script
    header = script[: script.index("BEGIN;")]
    assert all(line.startswith("--") for line in header.splitlines() if line)


async def test_sql_needs_no_server_and_prints_no_password(capsys: pytest.CaptureFixture[str]) -> None:
    for dsn, fragment in (
        (f"postgresql://owner:{PASSWORD}@127.0.0.1:1/chat", f"pg_advisory_xact_lock({SCHEMA_LOCK_KEY})"),
        (f"mysql://owner:{PASSWORD}@127.0.0.1:1/chat", "GET_LOCK(CONCAT('chatledger_schema_'"),
    ):
        script = await render(capsys, "--dsn", dsn)
        assert fragment in script and PASSWORD not in script
        assert f"UPDATE chatledger_alembic_version SET version_num='{head_revision()}'" in script


async def test_sql_without_a_dsn_renders_for_the_embedded_file_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = tmp_path / "xdg" / "chatledger" / "chatledger.sqlite3"
    assert await run(["upgrade", "--sql"]) == 0
    captured = capsys.readouterr()
    assert "BEGIN IMMEDIATE;" in captured.out and "for SQLite" in captured.out
    assert "using the embedded database" in captured.err and str(default) in captured.err
    assert not default.exists()


async def test_sql_refuses_a_bad_revision(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["upgrade", "--sql", "--dsn", "postgresql://h/db", "--revision", "nonesuch"]) == 2
    error = capsys.readouterr().err
    assert "nonesuch" in error and error.count("\n") == 1
