"""Where the test databases come from, per backend.

SQLite always runs. PostgreSQL and MySQL come from ``CHATLEDGER_TEST_POSTGRES_DSN``
/ ``CHATLEDGER_TEST_MYSQL_DSN`` (a server DSN whose user may create databases);
otherwise testcontainers starts them when a Docker engine answers; otherwise their
tests are skipped with the reason -- unless ``CHATLEDGER_REQUIRE_BACKENDS`` names
them, and then the run fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger.dsn import resolve_dsn

BACKENDS = ("sqlite", "postgresql", "mysql")
DSN_VARIABLES = {"postgresql": "CHATLEDGER_TEST_POSTGRES_DSN", "mysql": "CHATLEDGER_TEST_MYSQL_DSN"}
#: Images of docker/compose.yaml, for testcontainers.
IMAGES = {"postgresql": "postgres:16", "mysql": "mysql:8.4"}


def required_backends() -> set[str]:
    names = {
        name.strip() for name in os.environ.get("CHATLEDGER_REQUIRE_BACKENDS", "").split(",") if name.strip()
    }
    unknown = names - set(BACKENDS)
    if unknown:
        raise ValueError(f"CHATLEDGER_REQUIRE_BACKENDS names unknown backends: {sorted(unknown)}")
    return names


def serializable_postgres() -> bool:
    """``CHATLEDGER_TEST_PG_SERIALIZABLE=1``: the PostgreSQL test database defaults to
    SERIALIZABLE, as CockroachDB and YugabyteDB do."""
    return os.environ.get("CHATLEDGER_TEST_PG_SERIALIZABLE", "") not in ("", "0")


def docker_answers() -> bool:
    try:
        import docker  # installed with testcontainers

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextmanager
def container_dsn(backend: str) -> Iterator[str]:
    """Start a throwaway server with testcontainers and yield its admin DSN."""
    if backend == "postgresql":
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer(
            IMAGES[backend], username="chatledger", password="chatledger", dbname="chatledger"
        ) as pg:
            yield f"postgresql://chatledger:chatledger@{pg.get_container_host_ip()}:{pg.get_exposed_port(5432)}/chatledger"
    else:
        from testcontainers.community.mysql import MySqlContainer

        with MySqlContainer(
            IMAGES[backend], username="root", password="chatledger", dbname="chatledger"
        ) as my:
            yield f"mysql://root:chatledger@{my.get_container_host_ip()}:{my.get_exposed_port(3306)}/chatledger"


@dataclass
class Server:
    """A database server the tests may create databases on."""

    backend: str
    admin_url: URL

    def database_url(self, name: str) -> URL:
        return self.admin_url.set(database=name)

    async def create_database(self, name: str) -> URL:
        await self._admin(
            f"CREATE DATABASE {name}" if self.backend == "postgresql"
            else f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        )  # fmt: skip
        return self.database_url(name)

    async def drop_database(self, name: str) -> None:
        await self._admin(
            f"DROP DATABASE IF EXISTS {name} WITH (FORCE)" if self.backend == "postgresql"
            else f"DROP DATABASE IF EXISTS {name}"
        )  # fmt: skip

    async def execute(self, sql: str) -> None:
        await self._admin(sql)

    async def _admin(self, sql: str) -> None:
        engine = create_async_engine(self.admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(sql))
        finally:
            await engine.dispose()


def fresh_name(prefix: str = "chatledger_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


class Servers:
    """Resolves each server backend once per test session (variables, then containers)."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._found: dict[str, Server | str] = {}

    def get(self, backend: str) -> Server | str:
        """The server, or the reason it is missing."""
        if backend not in self._found:
            self._found[backend] = self._find(backend)
        return self._found[backend]

    def _find(self, backend: str) -> Server | str:
        variable = DSN_VARIABLES[backend]
        dsn = os.environ.get(variable)
        if not dsn:
            if not docker_answers():
                return f"{variable} is not set and no Docker engine answers for testcontainers"
            dsn = self._stack.enter_context(container_dsn(backend))
        return Server(backend, resolve_dsn(dsn))

    def close(self) -> None:
        self._stack.close()
