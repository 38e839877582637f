"""Least privilege: a schema owner that migrates and a runtime role that only reads and writes rows.

Two roles, as the README sets them up (the statements below are the README's):

* the **owner** role owns the database and runs the migrations (DDL);
* the **runtime** role, the one services connect as, has only SELECT, INSERT,
  UPDATE and DELETE on the tables (and on MySQL/MariaDB EXECUTE, for revision 0008's
  append procedure), and no DDL; of chatledger's own version and
  compatibility tables it only reads (on PostgreSQL it is narrowed to SELECT there).

On PostgreSQL and MariaDB: the runtime role serves every call of the storage (and
the rein table's upsert), issues no DDL, cannot run DDL, and on a database the owner
has not migrated yet it fails with ``SchemaNotReady`` instead of creating anything.
Role names, passwords and the database are unique per test and dropped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from sqlalchemy import delete, inspect, select, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import AssistantMessage, UserMessage

from chatledger import ConfigurationError, DatabaseError, SchemaNotReady
from chatledger.migrate import COMPATIBILITY_TABLE, VERSION_TABLE, upgrade_database
from chatledger.schema import rein_sessions_table
from chatledger.zett import LedgerSessionStorage

from .support.appends import record_statements
from .support.backends import Server, Servers, fresh_name
from .support.facts import facts_of, logins_of
from .support.throwaway import shared_server

pytestmark = pytest.mark.one_transaction_at_a_time

#: Statements that change the schema or the grants; the runtime sends none of them.
DDL = ("CREATE", "ALTER", "DROP", "TRUNCATE", "GRANT", "REVOKE", "RENAME")


async def _execute(url: URL, *statements: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def _tables(url: URL) -> set[str]:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    finally:
        await engine.dispose()


@dataclass
class Deployment:
    """A database owned by the owner role, not migrated yet, and the runtime role."""

    backend: str
    #: The superuser / admin of the server, on the new database.
    admin: URL
    owner: URL
    runtime: URL
    runtime_password: str
    #: Statements the owner runs after the upgrade, to narrow the runtime role's grants
    #: as the README does (PostgreSQL: it only reads chatledger's bookkeeping).
    narrowing: tuple[str, ...] = ()


def _password() -> str:
    # Characters that need quoting in a URL, to check the DSN carries them and repr masks them.
    return f"rt:{uuid.uuid4().hex[:10]}@/#%"


async def _deploy_postgresql(server: Server, database: str, owner: str, runtime: str) -> Deployment:
    owner_password, runtime_password = _password(), _password()
    await server.execute(f"CREATE ROLE {owner} LOGIN PASSWORD '{owner_password}'")
    await server.execute(f"CREATE ROLE {runtime} LOGIN PASSWORD '{runtime_password}'")
    await server.execute(f"CREATE DATABASE {database} OWNER {owner}")
    admin = server.database_url(database)
    # The README's statements, in its order.
    await _execute(
        admin,
        f"ALTER SCHEMA public OWNER TO {owner}",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",
        f"GRANT CONNECT ON DATABASE {database} TO {runtime}",
        f"GRANT USAGE ON SCHEMA public TO {runtime}",
    )
    owner_url = admin.set(username=owner, password=owner_password)
    await _execute(
        owner_url,
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {runtime}",
    )
    return Deployment(
        "postgresql",
        admin,
        owner_url,
        admin.set(username=runtime, password=runtime_password),
        runtime_password,
        narrowing=(
            f"REVOKE INSERT, UPDATE, DELETE ON {VERSION_TABLE}, {COMPATIBILITY_TABLE} FROM {runtime}",
        ),
    )


async def _deploy_mysql(server: Server, database: str, owner: str, runtime: str) -> Deployment:
    owner_password, runtime_password = _password(), _password()
    await server.create_database(database)
    await server.execute(f"CREATE USER '{owner}'@'%' IDENTIFIED BY '{owner_password}'")
    await server.execute(f"CREATE USER '{runtime}'@'%' IDENTIFIED BY '{runtime_password}'")
    await server.execute(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{owner}'@'%'")
    await server.execute(
        f"GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON `{database}`.* TO '{runtime}'@'%'"
    )
    admin = server.database_url(database)
    return Deployment(
        "mysql",
        admin,
        admin.set(username=owner, password=owner_password),
        admin.set(username=runtime, password=runtime_password),
        runtime_password,
    )


#: How each server dialect is deployed: the README's statements.
DEPLOY: dict[str, Callable[[Server, str, str, str], Awaitable[Deployment]]] = {
    "postgresql": _deploy_postgresql,
    "mysql": _deploy_mysql,
}


async def _undeploy(server: Server, database: str, owner: str, runtime: str) -> None:
    await server.drop_database(database)
    for name in (runtime, owner):
        await server.execute(logins_of(server.backend).drop.format(name=name))


@pytest.fixture(params=["postgresql", "mysql"])
async def deployment(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[Deployment]:
    server = shared_server(servers, request.param)
    suffix = uuid.uuid4().hex[:10]
    database, owner, runtime = fresh_name("chatledger_priv"), f"cl_owner_{suffix}", f"cl_runtime_{suffix}"
    try:
        yield await DEPLOY[server.backend](server, database, owner, runtime)
    finally:
        await _undeploy(server, database, owner, runtime)


def _ddl(statements: list[str]) -> list[str]:
    return [statement for statement in statements if statement.lstrip().upper().startswith(DDL)]


async def test_runtime_role_never_migrates_an_unmigrated_database(deployment: Deployment) -> None:
    async with LedgerSessionStorage(deployment.runtime, auto_upgrade=False) as storage:
        sent = record_statements(storage)
        with pytest.raises(SchemaNotReady, match="upgrade"):
            await storage.load("s-1")
        assert sent, "the revision check ran no statement"
        assert not _ddl(sent)
    assert await _tables(deployment.admin) == set()

    # Migrating is the owner's job: the runtime role lacks the privilege.
    with pytest.raises(DatabaseError, match=r"(?i)denied") as refused:
        await upgrade_database(deployment.runtime)
    assert "run it with the schema owner's DSN" in str(refused.value)
    assert await _tables(deployment.admin) == set()


async def test_runtime_role_serves_every_call_once_the_owner_migrated(deployment: Deployment) -> None:
    await upgrade_database(deployment.owner)
    if deployment.narrowing:
        await _execute(deployment.owner, *deployment.narrowing)
    async with LedgerSessionStorage(deployment.runtime) as storage:
        assert deployment.runtime_password not in repr(storage)
        assert "***" in repr(storage)
        sent = record_statements(storage)

        session = f"s-{uuid.uuid4()}"
        child = f"s-{uuid.uuid4()}"
        created = await storage.create_session(session_id=session, title="least privilege", agent_name="a")
        assert created.message_count == 0
        assert await storage.append(session, "r1", UserMessage(content="one")) == 1
        assert await storage.append(session, "r1", AssistantMessage(content="two")) == 2
        assert await storage.append(session, "r2", UserMessage(content="three")) == 3
        assert await storage.append(child, "r3", UserMessage(content="child"), parent_session_id=session) == 1
        # The README's grants let it call the backend's append routine (MySQL's procedure).
        counted = storage.ledger.backend.counted_append
        assert counted is None or storage.ledger.append_message is counted
        checkpoint = await storage.snapshot(session, CompactedMessage(content="one and two"), 2, 0)
        assert checkpoint.version == 1
        view = await storage.load(session)
        assert view.snapshot is not None and view.snapshot.compacted_through_sequence == 2
        assert [record.sequence for record in view.raw_tail] == [3]
        updated = await storage.update_session(session, title="renamed", expected_version=1)
        assert updated is not None and updated.title == "renamed"
        assert {summary.session_id for summary in await storage.list_sessions(limit=10)} == {session, child}
        assert len(await storage.list_raw_messages(session)) == 3
        assert await storage.count_messages(session) == 3

        # The rein table: its upsert, read and delete, as the rein store runs them.
        now = datetime.now(UTC)
        rein_id = f"r-{uuid.uuid4()}"
        row = {"id": rein_id, "session_json": "{}", "created_at": now, "updated_at": now}
        save = storage.ledger.backend.save_rein_session

        async def save_twice(conn: AsyncConnection) -> tuple[int | None, int | None]:
            return await save(conn, row, False), await save(conn, row, False)

        assert await storage.ledger.write(save_twice) == (1, 2)

        async def read_and_delete(conn: AsyncConnection) -> int:
            version = await conn.scalar(
                select(rein_sessions_table.c.version).where(rein_sessions_table.c.id == rein_id)
            )
            await conn.execute(delete(rein_sessions_table).where(rein_sessions_table.c.id == rein_id))
            return int(version or 0)

        assert await storage.ledger.write(read_and_delete) == 2

        assert await storage.delete_session(child) is True
        assert await storage.delete_session(session) is True
        assert await storage.get_session(session) is None
        assert sent and not _ddl(sent), _ddl(sent)
        # It reads chatledger's revision and compatibility record, and writes neither.
        bookkeeping = [statement for statement in sent if VERSION_TABLE in statement]
        assert bookkeeping and all(
            statement.lstrip().upper().startswith("SELECT") for statement in bookkeeping
        )
        assert not [
            statement
            for statement in sent
            if COMPATIBILITY_TABLE in statement and not statement.lstrip().upper().startswith("SELECT")
        ]

        # And it could not have: DDL is refused to the runtime role.
        async def create_table(conn: AsyncConnection) -> None:
            await conn.execute(text("CREATE TABLE chatledger_probe (x INTEGER)"))

        # A missing privilege is a configuration error, never retried (it names the grants).
        with pytest.raises(ConfigurationError, match=r"(?i)denied"):
            await storage.ledger.write(create_table)

        async def drop_table(conn: AsyncConnection) -> None:
            await conn.execute(text("DROP TABLE raw_messages"))

        with pytest.raises(ConfigurationError, match=r"(?i)denied|must be owner"):
            await storage.ledger.write(drop_table)


async def test_runtime_role_without_select_on_the_bookkeeping_tables_is_told_the_grants(
    deployment: Deployment,
) -> None:
    # Grants given once, before an upgrade created the bookkeeping tables, leave the
    # runtime role unable to read the revision. PostgreSQL only: MySQL/MariaDB hide a
    # table the user has no privilege on, so the revision reads as absent there.
    if not facts_of(deployment.backend).lists_unreadable_tables:
        pytest.skip("MySQL/MariaDB lists no table the user cannot read")
    await upgrade_database(deployment.owner)
    user = deployment.runtime.username
    await _execute(deployment.owner, f"REVOKE ALL ON {VERSION_TABLE}, {COMPATIBILITY_TABLE} FROM {user}")
    async with LedgerSessionStorage(deployment.runtime, auto_upgrade=False) as storage:
        with pytest.raises(ConfigurationError) as raised:
            await storage.append("s-1", "r1", UserMessage(content="one"))
    assert f"GRANT SELECT ON {VERSION_TABLE}, {COMPATIBILITY_TABLE} TO {user};" in str(raised.value)
