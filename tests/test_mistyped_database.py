"""A mistyped database name, given by a MariaDB/MySQL user who is not root.

The server refuses such a user a database that does not exist as it refuses one the
user may not use (ER_DBACCESS_DENIED_ERROR, 1044, not ER_BAD_DB_ERROR), so that it
tells nobody which databases exist. The hint says first what is likelier, and what a
GRANT would not cure -- the name may be wrong, or the database not visible to the user
-- and gives the GRANT only as the second possibility; even the database's owner,
who has every privilege on the right name, would otherwise be told to grant itself
one on the wrong name.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import URL

from chatledger import ConfigurationError
from chatledger.zett import LedgerSessionStorage

from .support.backends import Servers
from .support.throwaway import migrated_database, shared_server

pytestmark = pytest.mark.one_transaction_at_a_time


@pytest.fixture
async def owner(servers: Servers) -> AsyncIterator[URL]:
    """A migrated database and a user who is not root with every privilege on it."""
    server = shared_server(servers, "mysql")
    name, password = f"cl_own_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex[:8]}"
    async with migrated_database(server) as url:
        await server.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
        try:
            await server.execute(f"GRANT ALL PRIVILEGES ON `{url.database}`.* TO '{name}'@'%'")
            yield url.set(username=name, password=password)
        finally:
            await server.execute(f"DROP USER IF EXISTS '{name}'@'%'")


async def test_a_mistyped_database_says_it_may_not_exist_before_naming_a_grant(owner: URL) -> None:
    async with LedgerSessionStorage(owner) as storage:  # the right name serves
        assert await storage.count_messages("s-1") == 0
    mistyped = owner.set(database=f"{owner.database}x")
    async with LedgerSessionStorage(mistyped) as storage:
        with pytest.raises(ConfigurationError) as caught:
            await storage.load("s-1")
    message = str(caught.value)
    assert (
        f"the database {mistyped.database} does not exist, or is not visible to the user {owner.username}"
        in (message)
    )
    assert "check the database name in the DSN" in message
    # The GRANT comes second, after "if the name is right".
    assert message.index("does not exist") < message.index("if the name is right") < message.index("GRANT")
    assert "Access denied" in message  # the server's own words (1044), not "Unknown database"
