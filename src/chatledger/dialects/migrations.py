"""What a migration needs of its backend, looked up on its connection: the one
transaction it runs in (holding the schema lock), the script of ``--sql``, and the
table locks of a downgrade that drops tables; and the errors they raise."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from .base import Failure, OfflineScript, backend, classify

# -- schema migrations ----------------------------------------------------------------


class SchemaLockTimeout(TimeoutError):
    """The schema lock was not granted in time: another process is migrating the database."""


class MigrationBusy(TimeoutError):
    """A statement of the migration, past the schema lock, waited longer than the lock
    timeout for a lock on a table (or deadlocked): another transaction holds a lock on
    chatledger's tables (an open transaction that read or wrote them)."""


def migration_busy(conn: AsyncConnection, error: DBAPIError) -> MigrationBusy | None:
    """:class:`MigrationBusy` for a lock wait past the timeout (or a deadlock) of the
    migration's work; ``None`` for any other failure, which is the work's own."""
    if classify(backend(conn.dialect.name, conn.dialect.driver), error) is Failure.TRANSIENT:
        return MigrationBusy(str(error.orig))
    return None


def offline_script(dialect_name: str) -> OfflineScript:
    """How a ``--sql`` script of the dialect opens and closes; ``ValueError`` for a
    dialect chatledger does not serve."""
    return backend(dialect_name).offline_script


def migration_transaction(
    conn: AsyncConnection, lock_timeout: float
) -> AbstractAsyncContextManager[AsyncConnection]:
    """The migration transaction of ``conn``'s dialect, holding the schema lock; see
    :data:`MigrationTransaction`. ``ValueError`` for a dialect chatledger does not serve."""
    return backend(conn.dialect.name, conn.dialect.driver).migration_transaction(conn, lock_timeout)


# -- downgrades that drop tables --------------------------------------------------------


class TablesBusy(TimeoutError):
    """The tables a downgrade drops could not be locked in time: open transactions kept
    using them past the lock timeout (or deadlocked with the downgrade)."""

    def __init__(self, tables: Sequence[str]) -> None:
        super().__init__(", ".join(tables))
        #: The tables it tried to lock.
        self.tables = tuple(tables)


def lock_tables(conn: Connection, statement: str, tables: Sequence[str]) -> None:
    try:
        conn.exec_driver_sql(statement)
    except DBAPIError as error:
        # A lock wait past the timeout, or a deadlock with a writer (which then goes on).
        if classify(backend(conn.dialect.name, conn.dialect.driver), error) is Failure.TRANSIENT:
            raise TablesBusy(tables) from error
        raise


def guard_drops(
    conn: Connection, dropped: Sequence[str], touched: Sequence[str], lock_timeout: float
) -> AbstractContextManager[None]:
    """:data:`DropGuard` of ``conn``'s dialect; ``ValueError`` for a dialect chatledger
    does not serve."""
    guard = backend(conn.dialect.name, conn.dialect.driver).drop_guard
    if not dropped:
        return nullcontext()
    return guard(conn, dropped, touched, lock_timeout)
