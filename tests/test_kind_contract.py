"""The kind contract (:mod:`chatledger.testing.kinds`) for every registered kind whose
framework is installed, on every target: identity, exactly once across a lost COMMIT
reply (through the TCP proxy of :mod:`tests.support.proxy`; on SQLite, which has none,
the reply is lost in process), a write overtaken by a delete, delete and purge through
the kind's operations, and moves."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import URL

from chatledger.migrate import upgrade_database
from chatledger.testing.kinds import Driver, KindContract, drivers

from .conftest import Database
from .support.fresh import fresh_database
from .support.proxy import Proxy, running_proxy

DRIVERS = {driven.kind.name: driven for driven in drivers()}


@pytest.fixture(scope="module")
async def spare(database: Database, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[URL]:
    """A second migrated database of the target, shared by the module's moves."""
    async with fresh_database(
        database.server, tmp_path_factory.mktemp("spare"), prefix="chatledger_kinds"
    ) as url:
        await upgrade_database(url)
        yield url


class TestKindContract(KindContract):
    @pytest.fixture(params=list(DRIVERS))
    def driver(self, request: pytest.FixtureRequest) -> Driver:
        return DRIVERS[request.param]

    @pytest.fixture
    def url(self, database: Database) -> URL:
        return database.url

    @pytest.fixture
    async def faults(self, database: Database) -> AsyncIterator[Proxy | None]:
        if database.server is None:
            yield None
            return
        async with running_proxy(database.url) as proxy:
            yield proxy

    @pytest.fixture
    def spare_url(self, spare: URL) -> URL:
        return spare
