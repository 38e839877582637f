"""Database refusals, provoked for real, each raised as a chatledger error (issue 17,
fault 5): a read-only database (PostgreSQL ``default_transaction_read_only``, a MySQL
read-only transaction, a SQLite file opened ``mode=ro``, with ``PRAGMA query_only``, or
one this process may not write), a statement timeout met in a lock wait (retried as
the lock wait it is), a full SQLite database, and a listing filtered by more session
types than a driver takes parameters. Each leaves the data as it was."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rein.session import Session
from sqlalchemy import event, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger import migrate
from chatledger.errors import DatabaseUnwritable
from chatledger.options import MAX_LOCK_TIMEOUT
from chatledger.rein import LedgerSessionStore
from chatledger.schema import sessions_table
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import driver_facts
from .support.throwaway import migrated_database


def message(text: str = "hi") -> UserMessage:
    return UserMessage(content=text)


async def _count(url: URL, session_id: str) -> int:
    async with LedgerSessionStorage(url) as storage:
        return await storage.count_messages(session_id)


def _assert_unwritable(error: pytest.ExceptionInfo[DatabaseUnwritable], reason: str) -> None:
    assert error.value.reason == reason
    assert isinstance(error.value.__cause__, DBAPIError)
    assert error.value.code is not None and error.value.server_message
    assert "nothing was written" in str(error.value)


# -- read-only databases ------------------------------------------------------------------


@pytest.fixture
async def server_database(database: Database) -> AsyncIterator[URL]:
    """A migrated database of its own on the target's server (its settings change)."""
    if database.server is None:
        pytest.skip("a server database")
    async with migrated_database(database.server) as url:
        yield url.set(drivername=database.url.drivername)


@pytest.mark.requires("default_transaction_read_only")
async def test_postgresql_read_only_database(
    database: Database,
    server_database: URL,
    session_id: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    if driver_facts(server_database.get_driver_name()).begins_read_write:
        # SQLAlchemy resets psycopg's read_only to False after a read-only transaction,
        # so psycopg begins every later one READ WRITE, overriding the database default.
        pytest.skip("psycopg's BEGIN READ WRITE overrides default_transaction_read_only")
    async with LedgerSessionStorage(server_database) as storage:
        await storage.append(session_id, "r", message())
    elsewhere = f"{session_id}-elsewhere"
    async with LedgerSessionStorage(database.url) as storage:
        await storage.append(elsewhere, "r", message())
    export = tmp_path / "elsewhere.jsonl"
    source = database.url.render_as_string(hide_password=False)
    assert await run(["export", "--dsn", source, "--session", elsewhere, "-o", str(export)]) == 0
    assert database.server is not None
    await database.server.execute(
        f"ALTER DATABASE {server_database.database} SET default_transaction_read_only = on"
    )
    async with LedgerSessionStorage(server_database) as storage:
        with pytest.raises(DatabaseUnwritable) as raised:
            await storage.append(session_id, "r", message("refused"))
        _assert_unwritable(raised, "read-only")
        assert raised.value.code == "25006"
        with pytest.raises(DatabaseUnwritable):
            await storage.delete_session(session_id)
        assert len((await storage.load(session_id)).raw_tail) == 1  # reads go on
    # The CLI says it in one line, exit 2, no traceback.
    dsn = server_database.render_as_string(hide_password=False)
    capsys.readouterr()
    for command in (["sessions", "delete", session_id, "--yes"], ["import", str(export)]):
        assert await run([*command, "--dsn", dsn]) == 2
        err = capsys.readouterr().err
        assert "read-only" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.requires("session_read_only")
async def test_mysql_read_only_transactions(
    database: Database, server_database: URL, session_id: str
) -> None:
    async with LedgerSessionStorage(server_database) as storage:
        await storage.append(session_id, "r", message())
    read_only = {"init_command": "SET SESSION TRANSACTION READ ONLY"}
    async with LedgerSessionStorage(server_database, connect_args=read_only) as storage:
        with pytest.raises(DatabaseUnwritable) as raised:
            await storage.append(session_id, "r", message("refused"))
        _assert_unwritable(raised, "read-only")
        assert raised.value.code == 1792
        assert len((await storage.load(session_id)).raw_tail) == 1
    assert await _count(server_database, session_id) == 1


@pytest.fixture
async def sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Path]:
    """A migrated SQLite file holding one message of session "s"."""
    monkeypatch.chdir(tmp_path)  # a file: URI names no directory the ledger may create
    path = tmp_path / f"ledger-{uuid.uuid4().hex[:8]}.sqlite3"
    async with LedgerSessionStorage(f"sqlite:///{path}") as storage:
        await storage.append("s", "r", message())
    yield path


async def test_sqlite_opened_read_only(sqlite_file: Path) -> None:
    async with LedgerSessionStorage(f"sqlite:///file:{sqlite_file}?mode=ro&uri=true") as storage:
        assert len((await storage.load("s")).raw_tail) == 1
        with pytest.raises(DatabaseUnwritable) as raised:
            await storage.append("s", "r", message("refused"))
        _assert_unwritable(raised, "read-only")
        assert raised.value.code == 8  # SQLITE_READONLY
    assert await _count(URL.create("sqlite+aiosqlite", database=str(sqlite_file)), "s") == 1


async def test_sqlite_query_only(sqlite_file: Path) -> None:
    async with LedgerSessionStorage(f"sqlite:///{sqlite_file}") as storage:

        @event.listens_for(storage.ledger.engine.sync_engine, "connect")
        def _query_only(dbapi_connection: Any, _record: Any) -> None:
            _pragma(dbapi_connection, "PRAGMA query_only = ON")

        await storage.ledger.engine.dispose()
        with pytest.raises(DatabaseUnwritable) as raised:
            await storage.append("s", "r", message("refused"))
        _assert_unwritable(raised, "read-only")
        assert len((await storage.load("s")).raw_tail) == 1
    assert await _count(URL.create("sqlite+aiosqlite", database=str(sqlite_file)), "s") == 1


def _pragma(dbapi_connection: Any, statement: str) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def _chattr(flag: str, *paths: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True).returncode == 0


async def test_sqlite_file_this_process_may_not_write(sqlite_file: Path) -> None:
    """The user's case: a WAL database in a directory the process may not write, with
    no -wal / -shm beside it: SQLite cannot even read it. The tests run as root, whom
    no permission bit stops, so the file and its directory are made immutable."""
    directory = sqlite_file.parent
    assert not os.path.exists(f"{sqlite_file}-wal")  # noqa: ASYNC240 - one stat
    if not _chattr("+i", sqlite_file, directory):
        pytest.skip("chattr +i is not available here (needs CAP_LINUX_IMMUTABLE and a file system with it)")
    try:
        async with LedgerSessionStorage(f"sqlite:///{sqlite_file}") as storage:
            with pytest.raises(DatabaseUnwritable) as raised:
                await storage.load("s")
            _assert_unwritable(raised, "read-only")
            assert "write access to the file and its directory" in str(raised.value)
            with pytest.raises(DatabaseUnwritable):
                await storage.append("s", "r", message("refused"))
    finally:
        _chattr("-i", sqlite_file, directory)
    assert await _count(URL.create("sqlite+aiosqlite", database=str(sqlite_file)), "s") == 1


# -- a full database ------------------------------------------------------------------------


async def test_sqlite_database_or_disk_is_full(sqlite_file: Path) -> None:
    async with LedgerSessionStorage(f"sqlite:///{sqlite_file}") as storage:
        pages = int(await storage.ledger.read(lambda conn: conn.scalar(text("PRAGMA page_count"))))

        @event.listens_for(storage.ledger.engine.sync_engine, "connect")
        def _no_room(dbapi_connection: Any, _record: Any) -> None:
            _pragma(dbapi_connection, f"PRAGMA max_page_count = {pages}")

        await storage.ledger.engine.dispose()
        with pytest.raises(DatabaseUnwritable) as raised:
            await storage.append("s", "r", message("x" * 200_000))
        _assert_unwritable(raised, "full")
        assert raised.value.code == 13  # SQLITE_FULL
        assert "max_page_count" in str(raised.value)
        view = await storage.load("s")
        assert [record.sequence for record in view.raw_tail] == [1]
    async with LedgerSessionStorage(f"sqlite:///{sqlite_file}") as storage:
        assert await storage.append("s", "r", message("x" * 200_000)) == 2


# -- a statement timeout in a lock wait -----------------------------------------------------


@pytest.mark.requires("statement_time_limit")
async def test_statement_timeout_in_a_lock_wait_is_retried(database: Database, session_id: str) -> None:
    """The server's statement time limit ends an append waiting for a row lock before
    the lock timeout does (PostgreSQL ``statement_timeout``, 57014; MariaDB
    ``max_statement_time``, 1969): a lock wait, retried until the lock is free."""
    time_limit = driver_facts(database.url.get_driver_name()).statement_time_limit
    assert time_limit is not None  # the marker above
    limit = time_limit(0.2)
    async with LedgerSessionStorage(database.url) as storage:
        await storage.append(session_id, "r", message())
    holder = create_async_engine(database.url, poolclass=NullPool)
    try:
        async with LedgerSessionStorage(database.url, connect_args=limit, retry_timeout=30) as storage:
            async with holder.connect() as conn:
                await conn.execute(
                    select(sessions_table.c.id).where(sessions_table.c.id == session_id).with_for_update()
                )
                timed_out = asyncio.Event()

                @event.listens_for(storage.ledger.engine.sync_engine, "handle_error")
                def _failed(_context: Any) -> None:
                    timed_out.set()

                append = asyncio.create_task(storage.append(session_id, "r", message("waited")))
                waiting = asyncio.create_task(timed_out.wait())
                await asyncio.wait({append, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                await conn.rollback()  # frees the lock the append waits for
            assert await append == 2
            assert storage.ledger.retries >= 1
            assert [record.sequence for record in (await storage.load(session_id)).raw_tail] == [1, 2]
    finally:
        await holder.dispose()


# -- bounds a caller can pass ----------------------------------------------------------------


async def test_list_sessions_takes_any_number_of_session_types(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """40,000 types: past asyncpg's 32,767 parameters and SQLite's 32,766 variables."""
    await storage.create_session(session_id=session_id, session_type=39_999)
    other = f"{session_id}-other"
    await storage.create_session(session_id=other, session_type=2**31 - 1)
    listed = await storage.list_sessions(session_types=list(range(40_000)) * 2, limit=10_000)
    ids = {summary.session_id for summary in listed}
    assert session_id in ids and other not in ids
    listed = await storage.list_sessions(session_types=[2**31 - 1, *range(50_000, 90_000)], limit=10_000)
    assert other in {summary.session_id for summary in listed}
    assert session_id not in {summary.session_id for summary in listed}


async def test_pages_at_the_64_bit_edge(
    database: Database, storage: LedgerSessionStorage, session_id: str
) -> None:
    """The largest limit, offset and sequence bounds the validation lets through are
    served on every backend, not refused by the server."""
    edge = 2**63 - 1
    await storage.append(session_id, "r", message())
    assert await storage.list_sessions(offset=edge) == []
    assert len(await storage.list_sessions(limit=edge)) >= 1
    assert await storage.list_raw_messages(session_id, after_sequence=edge) == []
    records = await storage.list_raw_messages(session_id, through_sequence=edge, limit=edge)
    assert [record.sequence for record in records] == [1]
    assert await storage.list_raw_messages(session_id, offset=edge) == []
    async with LedgerSessionStore(database.url) as store:
        await store.asave(session_id, Session())
        assert await store.alist_sessions(offset=edge) == []
        assert session_id in {info.id for info in await store.alist_sessions(limit=edge)}


async def test_lock_timeout_is_bounded_by_the_smallest_server_limit(database: Database) -> None:
    """PostgreSQL refuses a ``lock_timeout`` past 2^31 - 1 ms when a connection opens;
    the option is refused before that, naming its limit, and the limit itself works."""
    with pytest.raises(ValueError, match="lock_timeout"):
        LedgerSessionStorage(database.url, lock_timeout=MAX_LOCK_TIMEOUT + 1)
    with pytest.raises(ValueError, match="lock_timeout must be a positive number of seconds up to"):
        await migrate.upgrade_database(database.url, lock_timeout=MAX_LOCK_TIMEOUT * 10)
    async with LedgerSessionStorage(database.url, lock_timeout=MAX_LOCK_TIMEOUT) as storage:
        assert (await storage.load("nobody")).raw_tail == []
    assert await migrate.upgrade_database(database.url, lock_timeout=MAX_LOCK_TIMEOUT)
