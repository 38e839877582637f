"""An upgrade whose DDL needs a table another transaction holds (F5): every lock wait of
the migration is bounded by the upgrade's ``lock_timeout``, not only the schema lock's,
and the wait past it is a clear ``SchemaNotReady`` ("tables busy"), saying what stays
applied. Without the bound the DDL waits unbounded (MariaDB's ``lock_wait_timeout`` is a
day; PostgreSQL's ``lock_timeout`` 0, none) while every writer queues behind it.

The other transaction is the application's own, on the same event loop: an open
transaction that read chatledger's tables."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger import SchemaNotReady, migrate
from chatledger.migrate import database_revision, head_revision

from .conftest import Database
from .support.schema_helpers import fresh_database

#: Longer than any bounded wait here: a guard so that an unbounded wait fails the test
#: instead of hanging it (not a timing assertion).
HANG = 120


@pytest.mark.parametrize("start", ["0001", "0002"])
async def test_an_upgrade_waiting_for_a_table_an_open_transaction_read_stops_at_the_lock_timeout(
    database: Database, tmp_path: Path, start: str
) -> None:
    async with fresh_database(database, tmp_path, "busy") as url:
        await migrate.upgrade(url, start)
        app = create_async_engine(url, poolclass=NullPool)
        try:
            async with app.connect() as reader, reader.begin():
                for name in ("agent_sessions", "raw_messages", "session_snapshots", "rein_sessions"):
                    await reader.execute(text(f"SELECT count(*) FROM {name}"))
                try:
                    done = await asyncio.wait_for(migrate.upgrade(url, lock_timeout=1), HANG)
                except SchemaNotReady as busy:
                    message = str(busy)
                    assert "tables busy: waited 1 s for a lock on chatledger's tables" in message
                    assert "End that transaction" in message
                else:  # no lock to wait for: SQLite in WAL mode (a reader blocks no writer),
                    # or revisions whose DDL leaves the tables read alone (PostgreSQL's 0003)
                    assert done.after.revision == head_revision()
                    return
            now = await database_revision(url)
            if "nothing was applied" in message:
                assert now == start
            else:
                assert f"the database is now at {now}" in message and now != start
            # Once the application's transaction has ended, the upgrade goes through.
            done = await migrate.upgrade(url, lock_timeout=1)
            assert done.after.revision == head_revision()
        finally:
            await app.dispose()
