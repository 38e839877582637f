"""The pool's reset on return rolls back only an open transaction, and never pools a
connection mid-transaction: one whose driver has a transaction open (a statement sent
behind SQLAlchemy's back, a task cancelled in the middle of its work) is rolled back
before it is pooled, so the next checkout starts clean and no lock stays held."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.util import await_

from chatledger.engine import Ledger

from .conftest import Database


async def _probe_table(ledger: Ledger, name: str) -> None:
    async with ledger.engine.begin() as conn:
        await conn.execute(text(f"CREATE TABLE {name} (id INTEGER)"))


async def _count(ledger: Ledger, name: str) -> int:
    return int(await ledger.read(lambda conn: conn.scalar(text(f"SELECT count(*) FROM {name}"))))


async def _pooled_open(ledger: Ledger, conn: AsyncConnection) -> bool:
    raw = await conn.get_raw_connection()
    return ledger.backend.transaction_open(raw.dbapi_connection)


#: Whether the backend's ``transaction_open`` reads the driver's state exactly; MySQL's
#: says always (a read's transaction is not in the reply's flag), so its probe is not
#: asked, and the rows and the later write tell instead.
EXACT_PROBE = {"postgresql": True, "sqlite": True, "mysql": False}


def test_the_probe_says_whether_it_is_exact(database: Database) -> None:
    ledger = Ledger(database.url)
    assert ledger.backend.transaction_open_exact is EXACT_PROBE[database.backend]


async def test_a_connection_returned_mid_transaction_is_rolled_back(database: Database) -> None:
    ledger = Ledger(database.url)
    try:
        await ledger.ensure_ready()
        await _probe_table(ledger, "reset_mid")

        def behind_sqlalchemy(sync: Connection) -> None:
            # On the DBAPI connection: SQLAlchemy's Connection knows of no transaction,
            # so only the pool's reset on return can end it.
            cursor: Any = sync.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            cursor.execute("INSERT INTO reset_mid (id) VALUES (1)")
            cursor.close()

        async with ledger.engine.connect() as conn:
            await conn.run_sync(behind_sqlalchemy)
            assert await _pooled_open(ledger, conn)
        async with ledger.engine.connect() as conn:
            assert not await _pooled_open(ledger, conn) or not EXACT_PROBE[database.backend]
        assert await _count(ledger, "reset_mid") == 0  # rolled back, and no write lock left held
        await ledger.write(lambda conn: conn.execute(text("INSERT INTO reset_mid (id) VALUES (2)")))
        assert await _count(ledger, "reset_mid") == 1
    finally:
        await ledger.close()


async def test_a_cancelled_write_leaves_no_transaction_in_the_pool(database: Database) -> None:
    ledger = Ledger(database.url)
    try:
        await ledger.ensure_ready()
        await _probe_table(ledger, "reset_cancelled")
        inserted = asyncio.Event()

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(text("INSERT INTO reset_cancelled (id) VALUES (1)"))
            inserted.set()
            await asyncio.Event().wait()  # cancelled here, mid-transaction

        task = asyncio.create_task(ledger.write(work))
        await asyncio.wait_for(inserted.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        async with ledger.engine.connect() as conn:
            assert not await _pooled_open(ledger, conn) or not EXACT_PROBE[database.backend]
        assert await _count(ledger, "reset_cancelled") == 0
        await ledger.write(lambda conn: conn.execute(text("INSERT INTO reset_cancelled (id) VALUES (2)")))
        assert await _count(ledger, "reset_cancelled") == 1
    finally:
        await ledger.close()


def _counting_rollbacks(ledger: Ledger) -> tuple[list[object], Any]:
    """Count the dialect's rollbacks (as the pool's reset and SQLAlchemy's Connection
    send them); returns the list and a function restoring the dialect's own."""
    rollbacks: list[object] = []
    dialect = ledger.engine.sync_engine.dialect
    do_rollback = dialect.do_rollback

    def counted(dbapi_connection: Any) -> None:
        rollbacks.append(dbapi_connection)
        do_rollback(dbapi_connection)

    def restore() -> None:
        dialect.do_rollback = do_rollback  # type: ignore[method-assign]

    dialect.do_rollback = counted  # type: ignore[method-assign]
    return rollbacks, restore


async def test_a_committed_transaction_costs_no_rollback(database: Database) -> None:
    """A connection returned after its COMMIT has no transaction open: the pool sends
    nothing, on MySQL too, where the driver's state misses a read's transaction but the
    ledger's transactions mark a connection whose COMMIT succeeded."""
    ledger = Ledger(database.url)
    try:
        await ledger.ensure_ready()
        await _probe_table(ledger, "reset_committed")
        rollbacks, restore = _counting_rollbacks(ledger)
        try:
            for number in range(3):
                await ledger.write(
                    lambda conn, n=number: conn.execute(text(f"INSERT INTO reset_committed VALUES ({n})"))
                )
                assert await _count(ledger, "reset_committed") == number + 1
        finally:
            restore()
        assert rollbacks == []
    finally:
        await ledger.close()


async def test_a_read_left_open_is_rolled_back_once(database: Database) -> None:
    """A connection returned with SQLAlchemy's transaction open (a read outside the
    ledger's transactions) is rolled back by SQLAlchemy, and not once more by the pool."""
    ledger = Ledger(database.url)
    try:
        await ledger.ensure_ready()
        await _probe_table(ledger, "reset_read")
        rollbacks, restore = _counting_rollbacks(ledger)
        try:
            async with ledger.engine.connect() as conn:
                assert await conn.scalar(text("SELECT count(*) FROM reset_read")) == 0
        finally:
            restore()
        assert len(rollbacks) == 1
    finally:
        await ledger.close()


async def test_a_transaction_begun_on_the_driver_itself_is_not_pooled(database: Database) -> None:
    """A transaction neither SQLAlchemy nor its driver adapter began (a ``BEGIN`` sent on
    the driver's own connection: asyncpg's adapter rolls back only the transaction it
    holds) is not pooled either: rolled back, or the connection discarded."""
    ledger = Ledger(database.url)
    try:
        await ledger.ensure_ready()
        await _probe_table(ledger, "reset_driver")

        def on_the_driver(sync: Connection) -> None:
            raw: Any = sync.connection.dbapi_connection
            for statement in ("BEGIN", "INSERT INTO reset_driver (id) VALUES (1)"):
                if hasattr(raw.driver_connection, "is_in_transaction"):  # asyncpg
                    await_(raw.driver_connection.execute(statement))
                else:
                    cursor = raw.cursor()
                    cursor.execute(statement)
                    cursor.close()

        async with ledger.engine.connect() as conn:
            await conn.run_sync(on_the_driver)
        async with ledger.engine.connect() as conn:
            assert not await _pooled_open(ledger, conn) or not EXACT_PROBE[database.backend]
        assert await _count(ledger, "reset_driver") == 0
        await ledger.write(lambda conn: conn.execute(text("INSERT INTO reset_driver (id) VALUES (2)")))
        assert await _count(ledger, "reset_driver") == 1
    finally:
        await ledger.close()
