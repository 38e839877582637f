"""What each class of server error becomes, provoked for real.

* A prepared statement cached on a pooled PostgreSQL connection goes stale when an
  online migration changes a column's type (asyncpg's ``InvalidCachedStatementError``,
  SQLSTATE 0A000): the transaction was rolled back, the call is retried and succeeds.
* Configuration mistakes -- a missing database, an unknown role, a wrong password, a
  missing privilege -- raise ``ConfigurationError`` with what to fix, at once (never
  retried), on PostgreSQL and MariaDB. Roles are created per test and dropped after;
  the wrong password on PostgreSQL needs password authentication, so that one runs on
  a throwaway server (this machine's shared server trusts local logins).
* MariaDB's snapshot isolation error 1020 ("Record has changed since it was read") is
  transient: provoked on MariaDB 10.11 with ``innodb_snapshot_isolation=ON`` (the
  default from 11.8), retried; on the MariaDB 11.8 target, contended appends and
  snapshots stay consistent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import event, select, text, update
from sqlalchemy.engine import URL, ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import ToolMessage, UserMessage

from chatledger import ConfigurationError, SnapshotConflict
from chatledger.dialects import Failure, classify
from chatledger.engine import Ledger
from chatledger.errors import DatabaseError
from chatledger.schema import sessions_table
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import Server, Servers
from .support.facts import logins_of
from .support.throwaway import (
    ThrowawayPostgres,
    ledger_state,
    migrated_database,
    require,
    shared_server,
)

#: Seconds within which a configuration error must be raised: far below the retry
#: budget (20 s), so it cannot have been retried.
PROMPT = 8.0


async def _admin(url: URL, *statements: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(scope="module", params=["postgresql", "postgresql+psycopg", "mysql"])
async def migrated(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[tuple[Server, URL]]:
    """A migrated database, through the dialect's default driver or the one named."""
    backend, _, driver = request.param.partition("+")
    server = shared_server(servers, backend)
    async with migrated_database(server) as url:
        yield server, url.set(drivername=request.param) if driver else url


# -- a stale cached statement after an online migration ---------------------------------


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_stale_cached_statement_after_an_online_migration_is_retried(
    servers: Servers, session_id: str, driver: str
) -> None:
    async with (
        migrated_database(shared_server(servers, "postgresql")) as url,
        # No load cache: the second load must run the tail query again.
        LedgerSessionStorage(
            url.set(drivername=f"postgresql+{driver}"), pool_size=1, max_overflow=0, load_cache_messages=0
        ) as storage,
    ):
        await storage.append(session_id, "r", ToolMessage(tool_call_id="c1", name="search", content="found"))
        # Prepares and caches the tail query: asyncpg on its first run, psycopg on its fifth.
        for _ in range(6):
            assert len((await storage.load(session_id)).raw_tail) == 1
        # An online migration from another connection changes the result type of a
        # column the tail query reads.
        await _admin(url, "ALTER TABLE raw_messages ALTER COLUMN request_id TYPE varchar(300)")
        view = await storage.load(session_id)  # the same pooled connection, its statement stale
        assert [record.message.content for record in view.raw_tail] == ["found"]
        assert storage.ledger.retries == 1


async def test_psycopg_tells_a_stale_statement_by_the_server_routine(
    servers: Servers, session_id: str
) -> None:
    """SQLSTATE 0A000 (feature_not_supported) is transient only when the server's
    routine that revalidates cached plans raised it: read from the error's fields, not
    its message, which a server set to another language words otherwise."""
    failures: list[DBAPIError] = []
    async with (
        migrated_database(shared_server(servers, "postgresql")) as url,
        LedgerSessionStorage(
            url.set(drivername="postgresql+psycopg"), pool_size=1, max_overflow=0, load_cache_messages=0
        ) as storage,
    ):
        engine = storage.ledger.engine.sync_engine

        @event.listens_for(engine, "handle_error")
        def _keep(context: ExceptionContext) -> None:
            if isinstance(context.sqlalchemy_exception, DBAPIError):
                failures.append(context.sqlalchemy_exception)

        await storage.append(session_id, "r", ToolMessage(tool_call_id="c1", name="search", content="found"))
        for _ in range(6):  # psycopg prepares the tail query on its fifth run
            await storage.load(session_id)
        await _admin(url, "ALTER TABLE raw_messages ALTER COLUMN request_id TYPE varchar(301)")
        assert len((await storage.load(session_id)).raw_tail) == 1
        assert storage.ledger.retries == 1
        [stale] = failures
        assert (stale.orig.sqlstate, stale.orig.diag.source_function) == ("0A000", "RevalidateCachedQuery")  # type: ignore[union-attr]
        # The same error worded in another language is still transient.
        stale.orig.args = ("el plan en caché no debe cambiar el tipo de resultado",)  # type: ignore[union-attr]
        assert classify(storage.ledger.backend, stale) is Failure.TRANSIENT
        # Another feature_not_supported is the statement's own failure, never retried:
        # a DatabaseError carrying the SQLSTATE, the driver's error as its cause.
        with pytest.raises(DatabaseError) as other:
            await storage.ledger.read(
                lambda conn: conn.exec_driver_sql("SELECT count(*) FROM agent_sessions FOR UPDATE")
            )
        assert other.value.code == "0A000"
        assert isinstance(other.value.__cause__, DBAPIError)
        assert classify(storage.ledger.backend, other.value.__cause__) is Failure.OTHER
        assert storage.ledger.retries == 1


# -- configuration mistakes -------------------------------------------------------------


async def _refused(url: URL, match: str) -> ConfigurationError:
    async with LedgerSessionStorage(url) as storage:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ConfigurationError, match=match) as caught:
            await asyncio.wait_for(storage.load("s-1"), PROMPT)
        assert loop.time() - started < PROMPT
        assert storage.ledger.retries == 0
        assert "***" in str(caught.value) or url.password is None
        return caught.value


async def test_missing_database_is_a_configuration_error(migrated: tuple[Server, URL]) -> None:
    _, url = migrated
    missing = f"chatledger_missing_{uuid.uuid4().hex[:8]}"
    error = await _refused(url.set(database=missing), "create it")
    assert missing in str(error)


async def test_unknown_user_is_a_configuration_error(migrated: tuple[Server, URL]) -> None:
    _, url = migrated
    await _refused(url.set(username=f"nobody_{uuid.uuid4().hex[:8]}"), "check the user/password in the DSN")


async def test_wrong_password_is_a_configuration_error_on_mysql(servers: Servers) -> None:
    server = shared_server(servers, "mysql")
    user = f"cl_pw_{uuid.uuid4().hex[:8]}"
    async with migrated_database(server) as url:
        await server.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'right-{user}'")
        try:
            await server.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{url.database}`.* TO '{user}'@'%'"
            )
            await _refused(url.set(username=user, password="wrong"), "check the user/password in the DSN")
            async with LedgerSessionStorage(url.set(username=user, password=f"right-{user}")) as storage:
                assert await storage.count_messages("s-1") == 0
        finally:
            await server.execute(f"DROP USER IF EXISTS '{user}'@'%'")


class _PasswordPostgres(ThrowawayPostgres):
    """A throwaway PostgreSQL that asks every user but ``postgres`` for a password."""

    def __init__(self) -> None:
        super().__init__()
        hba = self.root / "data" / "pg_hba.conf"
        hba.write_text(
            "local all all trust\n"
            "host all postgres 127.0.0.1/32 trust\n"
            "host all all 127.0.0.1/32 scram-sha-256\n"
        )


@pytest.fixture(scope="module")
def password_postgres() -> Iterator[_PasswordPostgres]:
    require("postgresql", _PasswordPostgres.missing())
    server = _PasswordPostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_wrong_password_is_a_configuration_error_on_postgresql(
    password_postgres: _PasswordPostgres, driver: str
) -> None:
    server = password_postgres.server
    await server.execute("CREATE ROLE cl_pw LOGIN PASSWORD 'right-secret'")
    try:
        async with migrated_database(server) as admin_url:
            url = admin_url.set(drivername=f"postgresql+{driver}")
            await _admin(
                admin_url, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO cl_pw"
            )
            await _refused(url.set(username="cl_pw", password="wrong"), "check the user/password in the DSN")
            async with LedgerSessionStorage(url.set(username="cl_pw", password="right-secret")) as storage:
                assert await storage.count_messages("s-1") == 0
    finally:  # the database and its grants are gone: the role can go
        await server.execute("DROP ROLE IF EXISTS cl_pw")


@pytest.fixture
async def unprivileged(migrated: tuple[Server, URL]) -> AsyncIterator[tuple[URL, str]]:
    """A login role / user of the migrated database with no privilege on its tables
    (PostgreSQL: CONNECT and schema USAGE only; MariaDB: nothing on the database)."""
    server, url = migrated
    name, password = f"cl_np_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:8]}"
    logins = logins_of(server.backend)
    await server.execute(logins.create.format(name=name, password=password))
    try:
        yield url.set(username=name, password=password), name
    finally:
        if logins.drop_owned is not None:
            await _admin(url, logins.drop_owned.format(name=name))
        await server.execute(logins.drop.format(name=name))


async def test_missing_privilege_is_a_configuration_error_naming_the_grants(
    migrated: tuple[Server, URL], unprivileged: tuple[URL, str], session_id: str
) -> None:
    server, url = migrated
    role_url, name = unprivileged
    # No privilege on the tables (MariaDB: not even on the database).
    error = await _refused(role_url, "GRANT SELECT, INSERT, UPDATE, DELETE")
    assert name in str(error)
    # Reading granted, writing not: the append is refused the same way.
    await _admin(url, logins_of(server.backend).grant_select.format(name=name, database=url.database))
    async with LedgerSessionStorage(role_url) as storage:
        assert await storage.count_messages(session_id) == 0
        with pytest.raises(ConfigurationError, match=r"(?i)denied.*|GRANT") as caught:
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content="m")), PROMPT)
        assert "GRANT SELECT, INSERT, UPDATE, DELETE" in str(caught.value)
        assert storage.ledger.retries == 0
        assert await storage.get_session(session_id) is None


# -- MariaDB snapshot isolation (1020) --------------------------------------------------


async def _snapshot_isolation_available(url: URL) -> bool:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT @@innodb_snapshot_isolation"))
        return True
    except DBAPIError:
        return False
    finally:
        await engine.dispose()


@pytest.fixture
async def mariadb_url(servers: Servers) -> AsyncIterator[URL]:
    async with migrated_database(shared_server(servers, "mysql")) as url:
        if not await _snapshot_isolation_available(url):
            pytest.skip("this MySQL-compatible server has no innodb_snapshot_isolation (MariaDB >= 10.6.18)")
        yield url


async def test_mariadb_record_changed_1020_is_transient_and_retried(
    mariadb_url: URL, session_id: str
) -> None:
    snapshot_isolation = {"init_command": "SET SESSION innodb_snapshot_isolation = ON"}
    async with LedgerSessionStorage(mariadb_url) as storage:
        await storage.create_session(session_id=session_id, title="t0")

    async def change_title_elsewhere(title: str) -> None:
        other = create_async_engine(mariadb_url, poolclass=NullPool)
        try:
            async with other.begin() as conn:
                await conn.execute(
                    update(sessions_table).where(sessions_table.c.id == session_id).values(title=title)
                )
        finally:
            await other.dispose()

    # The classification itself, on a real 1020 from the driver.
    raw = create_async_engine(mariadb_url, poolclass=NullPool, connect_args=snapshot_isolation)
    try:
        async with raw.connect() as conn:
            await conn.scalar(select(sessions_table.c.title).where(sessions_table.c.id == session_id))
            await change_title_elsewhere("t1")
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(
                    update(sessions_table).where(sessions_table.c.id == session_id).values(title="lost")
                )
            await conn.rollback()
        assert caught.value.orig is not None and caught.value.orig.args[0] == 1020
        assert classify("mysql", caught.value) is Failure.TRANSIENT
    finally:
        await raw.dispose()

    # Through the ledger: the first attempt meets 1020, the retry succeeds.
    ledger = Ledger(mariadb_url, connect_args=snapshot_isolation)
    attempts = 0

    async def read_then_write(conn: AsyncConnection) -> str:
        nonlocal attempts
        attempts += 1
        title = await conn.scalar(select(sessions_table.c.title).where(sessions_table.c.id == session_id))
        if attempts == 1:
            await change_title_elsewhere("t2")  # after this transaction's snapshot was taken
        await conn.execute(
            update(sessions_table).where(sessions_table.c.id == session_id).values(title=f"{title}+")
        )
        return str(title)

    try:
        assert await ledger.write(read_then_write) == "t2"
        assert attempts == 2 and ledger.retries == 1
    finally:
        await ledger.close()


@pytest.mark.requires("snapshot_isolation_default")
async def test_mariadb118_contended_appends_and_snapshots_stay_consistent(database: Database) -> None:
    """MariaDB 11.8 with innodb_snapshot_isolation on, as it ships (the suite's
    mysql-mariadb-11.8 target)."""
    async with LedgerSessionStorage(database.url, pool_size=8) as storage:
        session = f"m118-{uuid.uuid4().hex[:8]}"
        writers, appends = 6, 20
        conflicts = 0

        async def writer(number: int) -> None:
            nonlocal conflicts
            for index in range(appends):
                sequence = await storage.append(session, "w", UserMessage(content=f"{number}:{index}"))
                if sequence % 10 == 0:
                    version = (await storage.load(session)).snapshot
                    try:
                        await storage.snapshot(
                            session,
                            CompactedMessage(content=f"through {sequence}"),
                            sequence,
                            version.version if version else 0,
                        )
                    except (SnapshotConflict, ValueError):
                        conflicts += 1

        await asyncio.wait_for(asyncio.gather(*(writer(n) for n in range(writers))), 120)
        state = await ledger_state(storage, session)
        assert state.consistent and state.counter == writers * appends, state
