"""One parametrized fixture runs the whole suite on every backend.

Each test session creates a fresh database per backend (a temporary SQLite file, a
new PostgreSQL / MySQL database), migrates it with the shipped Alembic revisions,
drops it afterwards, and disposes of every engine it made.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from chatledger.migrate import upgrade_database
from chatledger.zett import LedgerSessionStorage

from .backends import BACKENDS, Server, Servers, fresh_name, required_backends, serializable_postgres


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    found = Servers()
    yield found
    found.close()


@dataclass
class Database:
    """A fresh, migrated database of one backend for this test session."""

    backend: str
    url: URL
    #: The server it lives on (``None`` for SQLite), for tests that need more databases.
    server: Server | None


def _available(servers: Servers, backend: str) -> Server | None:
    if backend == "sqlite":
        return None
    found = servers.get(backend)
    if isinstance(found, str):
        if backend in required_backends():
            pytest.fail(f"{backend} is required by CHATLEDGER_REQUIRE_BACKENDS but unavailable: {found}")
        pytest.skip(f"{backend} unavailable: {found}")
    return found


@pytest.fixture(scope="session", params=BACKENDS)
async def database(
    request: pytest.FixtureRequest, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    backend: str = request.param
    server = _available(servers, backend)
    if server is None:
        path: Path = tmp_path_factory.mktemp("sqlite") / "ledger.sqlite3"
        url = URL.create("sqlite+aiosqlite", database=str(path))
        await upgrade_database(url)
        yield Database(backend, url, None)
        return
    name = fresh_name()
    url = await server.create_database(name)
    try:
        if backend == "postgresql" and serializable_postgres():
            # Stands in for distributed SQL engines that only run SERIALIZABLE.
            await server.execute(f"ALTER DATABASE {name} SET default_transaction_isolation TO 'serializable'")
        await upgrade_database(url)
        yield Database(backend, url, server)
    finally:
        await server.drop_database(name)


@pytest.fixture
def backend(database: Database) -> str:
    return database.backend


@pytest.fixture
async def storage(database: Database) -> AsyncIterator[LedgerSessionStorage]:
    async with LedgerSessionStorage(database.url) as opened:
        yield opened


@pytest.fixture
def session_id() -> str:
    """A session id no other test uses (tests share one database per backend)."""
    return f"s-{uuid.uuid4()}"
