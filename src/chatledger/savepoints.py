"""An INSERT that may meet a row another writer created first: in a savepoint, so the
duplicate key leaves the caller's transaction usable (PostgreSQL aborts a transaction
on any error otherwise)."""

from __future__ import annotations

import contextlib

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert


async def insert_unless_present(conn: AsyncConnection, statement: Insert) -> bool:
    """Run ``statement`` in a savepoint: ``True`` if it inserted, ``False`` if its key
    was taken (the savepoint rolled back, the transaction goes on).

    Raises the statement's own error when it ended the whole transaction: InnoDB rolls a
    transaction back on a deadlock (1213), dropping its savepoints, so the ROLLBACK TO
    SAVEPOINT that follows fails (1305) and would hide the deadlock; raised as it is,
    the ledger classifies it (transient) and runs the transaction again. A duplicate
    key whose savepoint cannot be rolled back (the connection lost) is raised as the
    rollback's error, marked a connection failure.
    """
    try:
        async with conn.begin_nested():
            await conn.execute(statement)
        return True
    except IntegrityError:
        return False
    except DBAPIError as error:
        # The chain: the failed ROLLBACK TO SAVEPOINT, its driver error, then the
        # statement's own error (wrapped by SQLAlchemy) that ended the transaction.
        first = error.__context__
        while first is not None and not isinstance(first, DBAPIError):
            first = first.__context__
        if first is None:
            raise  # the statement's own error, its savepoint rolled back
        if isinstance(first, IntegrityError):
            # The duplicate key's savepoint could not be rolled back: the connection
            # went away meanwhile (a connection failure: the transaction runs again).
            error.connection_invalidated = True
            with contextlib.suppress(Exception):
                await conn.invalidate()
            raise
        raise first from error
