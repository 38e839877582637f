"""The test targets are the servers they claim to be, with the settings they claim."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from chatledger import dialects
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import TARGETS
from .support.capabilities import CAPABILITIES, missing


async def test_the_database_runs_on_its_targets_server(database: Database) -> None:
    target = TARGETS[database.target]
    assert database.backend == target.dialect
    if target.major is not None:
        assert database.version.startswith(f"{target.major}.")


async def test_the_store_talks_through_its_targets_driver(
    database: Database, storage: LedgerSessionStorage
) -> None:
    target = TARGETS[database.target]
    assert storage.ledger.engine.dialect.driver == (target.driver or dialects.backend(target.dialect).driver)


@pytest.mark.requires("snapshot_isolation_default")
async def test_mariadb_11_8_runs_with_snapshot_isolation_on(storage: LedgerSessionStorage) -> None:
    """The suite's MariaDB 11.8 keeps the server default: a locking read of a row changed
    after the snapshot fails with error 1020 there, and chatledger must cope."""
    value = await storage.ledger.read(lambda conn: conn.scalar(text("SELECT @@innodb_snapshot_isolation")))
    assert int(value) == 1


def test_an_unknown_capability_is_a_mistake_not_a_skip() -> None:
    with pytest.raises(KeyError, match="unknown capability 'no_such_thing'"):
        missing(["no_such_thing"], TARGETS["sqlite"], "")
    assert set(CAPABILITIES) >= {"lock_wait_timeout", "max_allowed_packet", "serializable_default"}
