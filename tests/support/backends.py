"""Where the test databases come from: the test targets, one per database server.

A target is one server the conformance suite runs on, named as its tests are
(``test_x[postgresql-17]``): its dialect first, so ``-k postgresql`` selects every
PostgreSQL server, then which server. The ``backend`` fixture stays the dialect
name ("sqlite", "postgresql", "mysql").

- ``sqlite``: a temporary file, always.
- ``postgresql-dsn`` / ``mysql-dsn``: the server of ``CHATLEDGER_TEST_POSTGRES_DSN``
  / ``CHATLEDGER_TEST_MYSQL_DSN`` (a server DSN whose user may create databases),
  for users with their own servers. CI points them at this machine's PostgreSQL 15
  and MariaDB 10.11.
- ``postgresql-psycopg``: the server of ``CHATLEDGER_TEST_POSTGRES_DSN`` again,
  through psycopg 3 (``postgresql+psycopg://``) instead of asyncpg; only where
  psycopg is installed (the ``dev`` extra has it).
- ``postgresql-17`` / ``mysql-mariadb-11.8``: containers started through
  testcontainers from the image of ``docker/build-images.sh``.
- ``mysql-8.4``: the official MySQL image, only when ``CHATLEDGER_TEST_MYSQL8_IMAGE``
  names it (an engine that can pull from Docker Hub): no MySQL server can be had
  without one.

``CHATLEDGER_TEST_CONTAINERS=0`` leaves the container targets out. A target that
cannot run is skipped, with one reason per target, unless
``CHATLEDGER_REQUIRE_BACKENDS`` names it (a target, or a dialect: every target of
it); then the run fails, once, naming the reason.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import uuid
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger.dsn import display, resolve_dsn

from . import containers

T = TypeVar("T")

DIALECTS = ("sqlite", "postgresql", "mysql")
DSN_VARIABLES = {"postgresql": "CHATLEDGER_TEST_POSTGRES_DSN", "mysql": "CHATLEDGER_TEST_MYSQL_DSN"}
#: Seconds a DSN server may take to answer the availability probe.
PROBE_TIMEOUT = 10


@dataclass(frozen=True)
class Target:
    """One server of the matrix: a test id, its dialect, and where it comes from."""

    name: str
    dialect: str
    #: The DSN variable naming the server, for a server of the user's own.
    variable: str | None = None
    #: The container spec (``tests.support.containers.SPECS``) of a containerised server.
    container: str | None = None
    #: The server's major version, checked once it answers (containers only: a DSN
    #: server is whatever the user has).
    major: str | None = None
    #: The async driver, when not the dialect's default (``chatledger.dsn.ASYNC_DRIVERS``).
    driver: str | None = None

    @property
    def varies(self) -> bool:
        """Whether the target is a variant of its dialect's home target (another driver
        or another server version): modules marked ``dialect_only`` leave it out."""
        return self.driver is not None or self.container is not None

    @property
    def source(self) -> str:
        if self.variable:
            return f"${self.variable}" + (f" through {self.driver}" if self.driver else "")
        if self.container:
            return f"container {containers.SPECS[self.container].image}"
        return "a temporary file"


ALL_TARGETS: tuple[Target, ...] = (
    Target("sqlite", "sqlite"),
    Target("postgresql-dsn", "postgresql", variable=DSN_VARIABLES["postgresql"]),
    Target("postgresql-psycopg", "postgresql", variable=DSN_VARIABLES["postgresql"], driver="psycopg"),
    Target("postgresql-17", "postgresql", container="postgresql-17", major="17"),
    Target("mysql-dsn", "mysql", variable=DSN_VARIABLES["mysql"]),
    Target("mysql-mariadb-11.8", "mysql", container="mysql-mariadb-11.8", major="11.8"),
    Target("mysql-8.4", "mysql", container="mysql-8.4", major="8.4"),
)


def _enabled(target: Target) -> bool:
    if target.name == "mysql-8.4":
        return bool(os.environ.get("CHATLEDGER_TEST_MYSQL8_IMAGE"))
    if target.driver is not None:
        return importlib.util.find_spec(target.driver) is not None
    return True


#: The targets of this run (test ids of the ``database`` fixture), by name.
TARGETS: dict[str, Target] = {target.name: target for target in ALL_TARGETS if _enabled(target)}
#: Kept for modules that iterate dialects.
BACKENDS = DIALECTS


def required_backends() -> set[str]:
    """The names of ``CHATLEDGER_REQUIRE_BACKENDS``: dialects and target names."""
    names = {
        name.strip() for name in os.environ.get("CHATLEDGER_REQUIRE_BACKENDS", "").split(",") if name.strip()
    }
    unknown = names - set(DIALECTS) - {target.name for target in ALL_TARGETS}
    if unknown:
        raise ValueError(f"CHATLEDGER_REQUIRE_BACKENDS names unknown backends: {sorted(unknown)}")
    return names


def is_required(target: Target) -> bool:
    names = required_backends()
    return target.name in names or target.dialect in names


def serializable_postgres() -> bool:
    """``CHATLEDGER_TEST_PG_SERIALIZABLE=1``: the PostgreSQL test database defaults to
    SERIALIZABLE, as CockroachDB and YugabyteDB do."""
    return os.environ.get("CHATLEDGER_TEST_PG_SERIALIZABLE", "") not in ("", "0")


def containers_disabled() -> bool:
    return os.environ.get("CHATLEDGER_TEST_CONTAINERS", "") == "0"


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a loop of its own thread, from a pytest hook
    (the test session's event loop is left alone)."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


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

    async def default_to_serializable(self, name: str) -> None:
        """In the SERIALIZABLE PostgreSQL pass (:func:`serializable_postgres`), make the
        database ``name`` SERIALIZABLE by default: it stands in for distributed SQL
        engines that only run SERIALIZABLE. Elsewhere nothing."""
        if self.backend == "postgresql" and serializable_postgres():
            await self.execute(f"ALTER DATABASE {name} SET default_transaction_isolation TO 'serializable'")

    async def default_to_repeatable_read(self, name: str) -> None:
        """On PostgreSQL, make the database ``name`` REPEATABLE READ by default (one
        snapshot per transaction, which a write taken before another's COMMIT keeps);
        elsewhere nothing."""
        if self.backend == "postgresql":
            await self.execute(
                f"ALTER DATABASE {name} SET default_transaction_isolation TO 'repeatable read'"
            )

    async def version(self) -> str:
        """The server's version string, e.g. ``17.6 (Debian 17.6-1)`` or ``11.8.3-MariaDB-1``."""
        engine = create_async_engine(self.admin_url, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                query = "SHOW server_version" if self.backend == "postgresql" else "SELECT VERSION()"
                return str(await asyncio.wait_for(conn.scalar(text(query)), PROBE_TIMEOUT))
        finally:
            await engine.dispose()

    async def _admin(self, sql: str) -> None:
        engine = create_async_engine(self.admin_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(sql))
        finally:
            await engine.dispose()


def fresh_name(prefix: str = "chatledger_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Found:
    """A target's server and its version, or the reason it cannot run (``server`` None)."""

    server: Server | None
    version: str = ""
    reason: str = ""


class Servers:
    """Resolves each target once per test process (xdist worker): the DSN variable's
    server, or a started container; and removes the containers at the end."""

    def __init__(self) -> None:
        self._found: dict[str, Found] = {}
        self._running: list[containers.RunningServer] = []

    def resolve(self, target: Target) -> Found:
        """The target's server (started on first use), or why it cannot run."""
        if target.name not in self._found:
            self._found[target.name] = self._resolve(target)
        return self._found[target.name]

    def get(self, backend: str) -> Server | str:
        """The server of a dialect (its DSN target, else its container target), or the
        reason there is none: for tests that need this machine's server of a dialect."""
        reasons = []
        for target in TARGETS.values():
            if target.dialect == backend and target.dialect != "sqlite":
                found = self.resolve(target)
                if found.server is not None:
                    return found.server
                reasons.append(f"{target.name}: {found.reason}")
        return "; ".join(reasons) or f"no {backend} target"

    def _resolve(self, target: Target) -> Found:
        if target.dialect == "sqlite":
            return Found(None, "SQLite (aiosqlite)")
        if target.variable:
            dsn = os.environ.get(target.variable)
            if not dsn:
                return Found(None, reason=f"{target.variable} is not set")
        else:
            assert target.container is not None
            if containers_disabled():
                return Found(None, reason="containers are turned off (CHATLEDGER_TEST_CONTAINERS=0)")
            problem = containers.docker_problem()
            spec = containers.SPECS[target.container]
            problem = problem or containers.image_problem(spec)
            if problem:
                return Found(None, reason=problem)
            running = containers.RunningServer(target.name, spec)
            try:
                running.start()
            except Exception as error:
                return Found(None, reason=f"the container did not start: {type(error).__name__}: {error}")
            self._running.append(running)
            dsn = running.dsn
        url = make_url(dsn)
        if target.driver is not None:
            url = url.set(drivername=f"{target.dialect}+{target.driver}")
        server = Server(target.dialect, resolve_dsn(url))
        try:
            version = run_sync(server.version())
        except Exception as error:
            return Found(None, reason=f"{display(server.admin_url)} does not answer: {error}")
        if target.major and not version.startswith(f"{target.major}."):
            return Found(None, reason=f"expected server version {target.major}, found {version}")
        return Found(server, version)

    def close(self) -> None:
        while self._running:
            self._running.pop().stop()
