"""The per-backend object, :class:`Backend`, its registry, and what every backend
shares: the failure taxonomy (:class:`Failure`, :func:`classify`) and the one mapping of
a database error to a chatledger error (:func:`database_error`).

Everything that differs between SQLite, PostgreSQL and MySQL/MariaDB beyond a column
type is a field or hook of one :class:`Backend`, defined in that backend's module
(:mod:`.postgresql`, :mod:`.mysql`, :mod:`.sqlite`) and looked up by SQLAlchemy's
dialect name and driver (:func:`backend`). Its fields document each difference.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, DateTime, LargeBinary, String, Table, bindparam
from sqlalchemy.engine import URL, Connection, CursorResult, Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import TypeEngine

from ..dsn import as_argument, display
from ..errors import (
    ChatledgerError,
    ConfigurationError,
    ConstraintViolation,
    DatabaseError,
    DatabaseUnwritable,
    SchemaNotReady,
    StatementTooLarge,
    StorageUnavailable,
)
from ..options import LedgerOptions

logger = logging.getLogger("chatledger")

#: Appends one raw message: allocates the next sequence of its session on the counter
#: row (creating the session on its first append) and inserts the message with it, in
#: the caller's transaction. Returns the sequence, or ``None`` (nothing written) when
#: the stored parent differs from the given one or the session is a tombstone (the
#: caller reads the row to tell which). Arguments: the connection, the session row's
#: values, the message row without ``sequence``, and the time now.
Appender = Callable[[AsyncConnection, dict[str, Any], dict[str, Any], datetime], Awaitable[int | None]]

#: Saves one rein session row (``id``, ``session_json``, ``write_id``, ``created_at``,
#: ``updated_at``) in one race-free statement and returns its new version: 1 when
#: inserted, the stored version + 1 when it overwrites a row (a live session or a
#: tombstone, whose versions the id goes on counting after). With ``only_if_absent``
#: a live session is left alone and ``None`` is returned; a tombstone counts as absent.
#: ``updated_at`` becomes the later of the stored and the given instant; ``created_at``
#: is kept, but on a tombstone, where the save starts the id anew.
ReinSaver = Callable[[AsyncConnection, dict[str, Any], bool], Awaitable[int | None]]
#: Whether the routine :attr:`Backend.counted_append` needs is there for this login to use.
RoutineCheck = Callable[[AsyncConnection], Awaitable[bool]]


#: The key of a connection's ``info`` an appender sets when its statement ended the
#: transaction on the server (committed or rolled back, nothing run after it): the
#: transaction's ``COMMIT`` then sends nothing (:func:`chatledger.dialects.configure_engine`).
TRANSACTION_ENDED = "chatledger_transaction_ended"


class RoutineRefused(Exception):
    """Raised by a :attr:`Backend.counted_append` whose routine the server refused
    (dropped, another signature, no longer the login's to call) before it ran anything:
    the call's transaction is rolled back and the append made again with
    :attr:`Backend.append_message`, which the ledger keeps from then on. ``error`` is
    the server's refusal."""

    def __init__(self, error: DBAPIError) -> None:
        super().__init__(str(error))
        self.error = error


class Failure(enum.Enum):
    """What a database error means for the transaction that met it."""

    #: Rolled back for a reason a retry can cure: a serialization failure, a deadlock,
    #: a lock wait past the lock timeout, a busy SQLite file, a stale cached statement.
    TRANSIENT = "transient"
    #: The connection was lost, or could not be opened (the server is down, starting,
    #: shutting down, or out of connection slots). Nothing was committed -- unless it
    #: happened while the COMMIT was under way, when the outcome is unknown.
    CONNECTION = "connection"
    #: The server refused this configuration: no such database, a wrong user or
    #: password, a missing privilege. Retrying cannot help.
    CONFIGURATION = "configuration"
    #: A statement or value larger than the server accepts.
    TOO_LARGE = "too large"
    #: A table or column the statement names does not exist: the database's schema
    #: is not the one the migrations create (older, hand-made, or changed by hand).
    SCHEMA = "schema"
    #: The database refuses writes: a read-only server, database, transaction or file.
    READ_ONLY = "read-only"
    #: The database is out of space: disk, tablespace or page limit full.
    FULL = "full"
    #: A constraint of the schema refused a row (a duplicate key): the DBAPI's
    #: ``IntegrityError`` class (PEP 249), whatever its code.
    CONSTRAINT = "constraint"
    #: Anything else, known or not: a code no backend lists.
    OTHER = "other"


#: Set-up statements of a new connection, given the store's options.
SessionSetup = Callable[[LedgerOptions], tuple[str, ...]]
#: Driver ``connect()`` arguments, given the store's options.
ConnectArgs = Callable[[LedgerOptions], dict[str, Any]]
#: Set-up of a connection of an engine the caller owns, on its first use by a ledger:
#: applies what keeps to the database file, checks the rest (raising ``ConfigurationError``).
ForeignCheck = Callable[[Connection], None]
#: Run at the start of every ledger transaction on a connection of an engine the caller
#: owns, right after SQLAlchemy began it and the engine's own ``begin`` listeners ran:
#: checks that the transaction is one (``ConfigurationError`` naming the fix if not)
#: and, on SQLite, emits the explicit ``BEGIN <mode>``.
ForeignBegin = Callable[[AsyncConnection], Awaitable[None]]


def _no_setup(_options: LedgerOptions) -> tuple[str, ...]:
    return ()


def _no_connect_args(_options: LedgerOptions) -> dict[str, Any]:
    return {}


def _no_pgbouncer_args() -> dict[str, Any]:
    return {}


def _no_check(_conn: Connection) -> None:
    return None


#: Adds the event listeners a ledger needs on an engine it runs its transactions on:
#: one it created, or its view of an engine the caller owns (``execution_options()``,
#: whose listeners apply to the ledger's transactions only).
EngineListeners = Callable[[AsyncEngine], None]


def no_listeners(_engine: AsyncEngine) -> None:
    """The :attr:`Backend.add_listeners` of a backend that needs none (a server driver,
    whose cancelled statement holds no lock once its connection is closed)."""
    return None


# -- the schema's collations, as the catalog has them (chatledger.drift) ----------------

#: Each column of a table by name, with its character set and collation as the
#: database has them; ``None`` for none (a non-text column) or the database's
#: default (a column that names no collation of its own).
Collations = dict[str, tuple[str | None, str | None]]
#: Reads :data:`Collations` of a table, on a connection in its transaction.
CollationReader = Callable[[Connection, str], Collations]


def _no_collations(_conn: Connection, _table: str) -> Collations:
    return {}


def _no_table_collation(_conn: Connection, _table: str) -> str | None:
    return None


def sync_connection(conn: AsyncConnection) -> Connection:
    """The synchronous ``Connection`` under ``conn``: its DBAPI connection and options
    are read from it without a round trip or a greenlet."""
    sync = conn.sync_connection
    if sync is None:  # pragma: no cover - only a closed AsyncConnection has none
        raise RuntimeError("the connection is closed")
    return sync


async def execute_call(
    conn: AsyncConnection, statement: Executable, params: Mapping[str, Any] | None = None
) -> CursorResult[Any]:
    """``conn.execute(statement, params)`` for a statement whose reply ends after its rows,
    a ``CALL`` of a procedure that returns some (MySQL sends the call's own status last).

    SQLAlchemy's async result reads what follows the rows when it closes the cursor,
    before ``execute`` returns (``_async_soft_close``; chatledger requires a SQLAlchemy
    that does), outside its error handling: a failure reported there (a Galera
    certification abort after the last row, a connection lost, a failed ``COMMIT``)
    would reach the caller as the driver's own exception. It is raised as
    :class:`sqlalchemy.exc.DBAPIError` instead, with the connection invalidated when
    the dialect calls it a disconnect, as SQLAlchemy does for the statement itself.

    :raises sqlalchemy.exc.DBAPIError: the statement's failure or its closing status'."""
    try:
        return await conn.execute(statement, params)
    except SQLAlchemyError:
        raise
    except conn.dialect.loaded_dbapi.Error as error:
        dialect = conn.dialect
        disconnect = dialect.is_disconnect(error, None, None)
        if disconnect:
            await conn.invalidate(error)
        raise DBAPIError.instance(
            str(statement),
            params,
            error,
            dialect.loaded_dbapi.Error,
            connection_invalidated=disconnect,
            dialect=dialect,
        ) from error
    except BaseException as error:
        # A cancellation while the closing status was awaited: the driver dropped its
        # socket with a reply unread, so the connection is never pooled again (as
        # SQLAlchemy does for one cancelled inside the statement).
        await conn.invalidate(error)
        raise


#: The ``chatledger_sqlite_begin`` mode of :attr:`Backend.first_write`: no ``BEGIN`` is
#: sent, the driver begins the transaction right before its first write. On an engine
#: the caller made, whose driver's own mode chatledger leaves alone, it is an explicit
#: ``BEGIN IMMEDIATE``.
BEGUN_BY_DRIVER = "driver"


AUTOCOMMIT_FIX = (
    "chatledger runs every call as one transaction, so that a refused or failed write "
    "leaves nothing behind: create the engine without autocommit (no autocommit=True in "
    "its connect_args, no isolation_level='AUTOCOMMIT'), or give the store an engine of its own"
)


async def _refuse_autocommit(conn: AsyncConnection) -> None:
    """Refuse, before the transaction's first statement, a server connection whose
    driver commits every statement on its own (aiomysql's or psycopg's
    ``autocommit=True``, ``SET autocommit = 1`` on a pooled connection): its
    "transaction" would commit statement by statement. Read from the driver's state
    (SQLAlchemy's ``detect_autocommit_setting``, no round trip), so every transaction
    is checked, on whichever pooled connection it runs."""
    dbapi_connection = sync_connection(conn).connection.dbapi_connection
    if dbapi_connection is not None and conn.dialect.detect_autocommit_setting(dbapi_connection):
        raise ConfigurationError(
            f"the engine's connection runs in autocommit mode ({conn.dialect.driver} commits every "
            f"statement on its own); {AUTOCOMMIT_FIX}"
        )


# -- the schema migrations' hooks ------------------------------------------------------

#: Opens the one transaction a migration runs in, holding the schema lock, on a connection
#: of an engine set up by :func:`configure_migration_engine`; yields the connection to run
#: it on. Arguments: the connection and the lock timeout in seconds. Raises
#: :class:`chatledger.dialects.migrations.SchemaLockTimeout` when the lock is not granted within the timeout.
MigrationTransaction = Callable[[AsyncConnection, float], AbstractAsyncContextManager[AsyncConnection]]


@dataclass(frozen=True)
class OfflineScript:
    """A migration rendered as SQL (``--sql``) for the database's own client: opened and
    closed as :attr:`Backend.migration_transaction` runs it online, the schema lock included,
    so that the script waits for (or stops at) an upgrade running meanwhile."""

    #: How to run the script (``SCRIPT``) so that it stops at the first error.
    client: str
    #: What a failure halfway leaves behind, in lines of the script's header.
    on_failure: tuple[str, ...]
    #: Statements before the first revision, given the lock timeout in seconds.
    begin: Callable[[float], tuple[str, ...]]
    #: Statements after the last revision.
    end: tuple[str, ...]


#: The placeholder of a backend without a ``--sql`` script.
NO_OFFLINE_SCRIPT = OfflineScript(client="", on_failure=(), begin=lambda _lock_timeout: (), end=())


#: Keeps every other session out of the tables a downgrade drops, for the ``with``
#: block in which it counts their rows and drops them: an append open when the lock is
#: asked for commits first (and is counted), every later one waits until the tables are
#: gone (and then fails, never acknowledged). Arguments: the migration's synchronous
#: connection, the tables it drops, every table of chatledger's it may touch meanwhile,
#: and the lock timeout in seconds. Raises
#: :class:`chatledger.dialects.migrations.TablesBusy` when not granted in time. Runs
#: inside :attr:`Backend.migration_transaction`, under the schema lock.
DropGuard = Callable[[Connection, Sequence[str], Sequence[str], float], AbstractContextManager[None]]


def _lacking(hook: str) -> Any:
    """The placeholder of a hook a backend has not provided: calling it says which."""

    def lacking(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError(f"this backend provides no {hook}")

    return lacking


#: The metadata of a field every backend must set: its default is a placeholder that
#: :meth:`Backend.lacking` reports.
_REQUIRED = {"required": True}


# -- what the tables take on disk (chatledger.stats) -------------------------------------


@dataclass(frozen=True)
class StorageSize:
    """What chatledger's tables take on disk, as the backend can tell it cheaply."""

    #: Bytes of each table with its indexes (and PostgreSQL's TOAST), by table name; a
    #: table the backend cannot size alone is left out.
    tables: dict[str, int]
    #: Bytes of all of them together (or, where only that is known, of the whole
    #: SQLite file); ``None`` when unknown.
    total: int | None
    #: Where the figures come from, for the reader: exact or an estimate.
    source: str


#: Reads :class:`StorageSize` of the named tables, on a connection in its (read)
#: transaction; never takes a lock a writer waits for.
StorageSizer = Callable[[Connection, Sequence[str]], StorageSize]


# -- read replicas (chatledger.replicas) -----------------------------------------------


@dataclass(frozen=True)
class Replication:
    """How a backend's replicas serve reads that must see this process's own writes
    (``read_dsn``, :mod:`chatledger.replicas`). A position is the backend's own text:
    a PostgreSQL WAL location (``0/3000060``), a MariaDB GTID position (``0-1-42``)."""

    #: The position a replica must have applied to hold every write committed so far
    #: on this connection of the primary, read on it right after the COMMIT; ``None``
    #: when the server keeps none (MariaDB without a binary log).
    position: Callable[[AsyncConnection], Awaitable[str | None]]
    #: Waits on a replica connection, for at most the given seconds, until the replica
    #: has applied the position: ``True`` when it has, ``False`` when not within the
    #: bound (or when the server is no replica and cannot tell).
    wait: Callable[[AsyncConnection, str, float], Awaitable[bool]]
    #: One position covering both (the later of two WAL locations; per GTID domain,
    #: the later sequence number).
    later: Callable[[str, str], str]


def _plain_equal(left: ColumnElement[Any], right: ColumnElement[Any]) -> ColumnElement[bool]:
    return left == right


@dataclass(frozen=True)
class Liveness:
    """How a second connection tells whether a connection's server session is at work,
    and ends it: the deadline of an attempt (:mod:`chatledger.deadlines`) abandons only
    an attempt whose session is quiet, never a slow statement the server is running.

    Args:
        session_id: The server's id of the driver's connection, read from the driver
            without a round trip.
        busy: SQL taking ``:id`` and ``:quiet`` (seconds): one row whose one column is
            true while that session runs a statement, or changed state less than
            ``quiet`` seconds ago; no row when the session is gone.
        end: SQL taking ``:id`` that ends that session (its transaction rolled back,
            its locks released); allowed to a login on its own sessions. A write it
            ends while committing is settled like any lost COMMIT.
    """

    session_id: Callable[[Any], int]
    busy: str
    end: str


@dataclass(frozen=True, kw_only=True)
class Backend:
    """What one backend (a dialect and one of its async drivers) needs done its own way.

    One instance per backend, defined in its module and added with :func:`register`;
    code outside this package asks it (:func:`backend`) rather than comparing dialect
    names. Fields marked required have placeholders for defaults, which
    :meth:`lacking` lists (a placeholder hook raises ``NotImplementedError`` naming
    itself): a new backend can be registered before it is complete, and the registry
    test says what it still lacks. The others default to what most backends do.
    """

    #: SQLAlchemy's dialect name (``engine.dialect.name``), the registry's key.
    name: str

    #: The append: sequence allocation on the counter row and the message insert.
    append_message: Appender = field(default=_lacking("append_message"), metadata=_REQUIRED)
    #: The append as one statement committed by itself, one round trip instead of a
    #: transaction's two or three: it moves along the counter row of a live session
    #: whose parent and given fields are the stored ones, and returns ``None``, writing
    #: nothing, for any other (which :attr:`append_message` then appends in a
    #: transaction). Run in autocommit, or (:attr:`single_append_autocommit` ``False``)
    #: as the first statement of a transaction it commits itself (MySQL's committed
    #: append procedure), marking the connection :data:`TRANSACTION_ENDED`. ``None``:
    #: the backend has none.
    single_append: Appender | None = None
    #: Whether the schema has the routine :attr:`single_append` needs and this ledger
    #: may use it, asked once per ledger at its schema check, as
    #: :attr:`append_routine_usable`. ``None``: it needs none.
    single_append_usable: RoutineCheck | None = None
    #: Whether :attr:`single_append` runs in autocommit (``False``: it commits its own
    #: transaction).
    single_append_autocommit: bool = True
    #: Of :attr:`transient_codes`, those a self-committing :attr:`single_append` meets
    #: only before its ``COMMIT`` (a deadlock, a lock wait), so it wrote nothing. Any
    #: other (a time limit, ``KILL QUERY``: the server may report them after the
    #: procedure committed) leaves the outcome unknown, settled before a retry.
    single_append_rolled_back_codes: frozenset[str | int] = frozenset()
    #: The append on a schema with the routine that serves it (SQLite: the counter
    #: trigger, which moves the counter row along with the raw log; MySQL: the append
    #: procedure), found by :attr:`append_routine_usable`: one statement where it
    #: can, else :attr:`append_message`'s. ``None``: the backend has no such routine.
    counted_append: Appender | None = None
    #: Whether the schema has the routine :attr:`counted_append` needs and this ledger
    #: may use it, asked once per ledger at its schema check. ``False`` or a refusal (no
    #: routine; on MySQL, no ``EXECUTE`` or a Galera node): the ledger keeps
    #: :attr:`append_message`.
    append_routine_usable: RoutineCheck | None = None
    #: The statements to run before and after rebuilding a table (:attr:`rebuilds_tables`)
    #: to keep the database's triggers: SQLite drops a table's triggers with it, and
    #: refuses to rename a table while a trigger names one that is missing.
    rebuild_triggers: Callable[[Connection], tuple[tuple[str, ...], tuple[str, ...]]] | None = None
    #: An OpenAI Agents add in one statement, built once from the add's counter-row
    #: ``UPDATE .. RETURNING last_sequence, generation`` (``session_id``, ``now``,
    #: ``count`` parameters): it also inserts the items (``item_ids``, ``item_jsons``:
    #: lists, in order) and returns the generation written into, a row per item; no
    #: row when the counter row is missing. ``None``: the add's own two statements.
    items_add: Callable[[Any], Any] | None = None
    #: An ``INSERT`` of rows of a table (their values bound at execution, one row or
    #: many) that meets a row holding a row's primary key by setting the ``replace``
    #: columns to the inserted values, or, with none, by leaving the stored row alone:
    #: no error, so nothing rolls back (``ON CONFLICT .. DO UPDATE`` / ``DO NOTHING``,
    #: MySQL's ``ON DUPLICATE KEY UPDATE``). For tables whose only unique key is the
    #: primary key. Built once per table and columns by its caller.
    merge_insert: Callable[[Table, Sequence[str]], Any] = field(
        default=_lacking("merge_insert"), metadata=_REQUIRED
    )
    #: The race-free upsert of one rein session row.
    save_rein_session: ReinSaver = field(default=_lacking("save_rein_session"), metadata=_REQUIRED)
    #: The greater of its arguments, in one SQL expression (NULL if any is NULL):
    #: ``GREATEST``, or SQLite's scalar, multi-argument ``max()``.
    greatest: Callable[..., ColumnElement[Any]] = field(default=_lacking("greatest"), metadata=_REQUIRED)
    #: Driver error codes of failures that roll the whole transaction back and are
    #: safe to retry: serialization failures, deadlocks, lock timeouts, busy files.
    transient_codes: frozenset[str | int] = field(default=frozenset(), metadata=_REQUIRED)
    #: Whether a listing of live sessions (``deleted_at IS NULL``) names ``deleted_at``
    #: first in its ORDER BY, so that the planner reads the page straight off the activity
    #: index ``(deleted_at, updated_at, id)`` without sorting: PostgreSQL does not take
    #: ``IS NULL`` for an equality when it matches an index's order, and needs it named;
    #: MariaDB sorts when it is named. (Checked with EXPLAIN in tests/test_explain.py.)
    order_live_by_tombstone: bool = False
    #: Driver exception class names (of the DBAPI error or the driver error under it)
    #: that are transient whatever their code.
    transient_exceptions: frozenset[str] = frozenset()
    #: (SQLSTATE, server routine) pairs that are transient: a code the server shares
    #: with failures that are not, told apart by the routine that raised it (the
    #: error's ``diag.source_function``, which does not depend on the server's language).
    transient_routines: frozenset[tuple[str, str]] = frozenset()
    #: Error codes read from the driver's message when the driver gives none (psycopg's
    #: failures to connect carry the server's message but no SQLSTATE): the first
    #: pattern found in the message names the code.
    message_codes: tuple[tuple[re.Pattern[str], str | int], ...] = ()
    #: Driver error codes that say the server cannot serve the call right now: it
    #: refused or dropped the connection, is starting up or shutting down, or has no
    #: connection slot left. Retried like a lost connection.
    unavailable_codes: frozenset[str | int] = frozenset()
    #: Of :attr:`unavailable_codes`, those that say the server ended the session while
    #: it was idle, before it read the statement the error answers: a statement that
    #: commits itself (:attr:`single_append`) failing with one was not run.
    idle_codes: frozenset[str | int] = frozenset()
    #: Whether the driver awaits to set a connection's characteristics (isolation
    #: level, read only). A cancellation while SQLAlchemy sets an engine's on connect
    #: leaves the pooled connection checked out for good, so the ledger sets them on the
    #: connection inside the block that gives it back.
    characteristics_await: bool = False
    #: Whether the driver's connection (SQLAlchemy's ``driver_connection``) already
    #: knows it is closed, so that a statement on it fails without being sent; read from
    #: the driver's state, without a round trip. ``False``: it does not tell.
    connection_closed: Callable[[Any], bool] = lambda _connection: False
    #: Ends the driver's connection's socket at once, without a round trip and without
    #: waiting (a server that stopped answering would not answer a goodbye), so that a
    #: statement waiting on it fails as on a lost connection: the deadline of an
    #: attempt (:mod:`chatledger.deadlines`). ``None``: the driver has no such call,
    #: and the attempt is cancelled instead.
    abort: Callable[[Any], None] | None = None
    #: Whether an attempt's server session is at work, and how to end it
    #: (:class:`Liveness`). ``None``: an attempt past its deadline is abandoned
    #: unasked.
    liveness: Liveness | None = None
    #: Driver exception class names (of the DBAPI error or the driver error under it)
    #: that say the same whatever their code: no server of a multi-host DSN serves the
    #: session it asks for (``target_session_attrs``), as while a cluster promotes a
    #: standby. Retried like a lost connection.
    unavailable_exceptions: frozenset[str] = frozenset()
    #: Driver error codes of a configuration the server refuses, each with the hint
    #: of what to fix; ``{database}`` and ``{user}`` name the DSN's.
    configuration_hints: dict[str | int, str] = field(default_factory=dict)
    #: Driver error codes of a statement or value larger than the server accepts.
    too_large_codes: frozenset[str | int] = frozenset()
    #: Driver error codes of a table or column that does not exist: the schema is not
    #: the one chatledger's migrations create.
    schema_codes: frozenset[str | int] = frozenset()
    #: Parts of driver messages that say the same, where the code does not (SQLite
    #: reports every such error as its generic ``SQLITE_ERROR``).
    schema_messages: tuple[str, ...] = ()
    #: Driver error codes of a database that refuses writes (read-only).
    read_only_codes: frozenset[str | int] = frozenset()
    #: Driver error codes of a database out of space.
    full_codes: frozenset[str | int] = frozenset()
    #: What to do about a read-only database, for :class:`chatledger.errors.DatabaseUnwritable`.
    read_only_hint: str = (
        "point the DSN at a writable primary (not a replica or standby), or make the database writable again"
    )
    #: What to do about a full database.
    full_hint: str = "free disk space on the database server, or raise its storage limit"
    #: How an error code is named in a message ("SQLSTATE", "error", "SQLite result code").
    code_name: str = "error"
    #: Driver error codes of a table that does not exist (any more): a migration
    #: dropped it between the listing of the tables and the read. None on SQLite,
    #: whose read transaction lists and reads from one snapshot.
    missing_table_codes: frozenset[str | int] = frozenset()
    #: Execution options of a snapshot-consistent read transaction: its isolation is
    #: stated here, never inherited from the server's default.
    snapshot_read: dict[str, Any] = field(default_factory=dict)
    #: Execution options of a read that is one ``SELECT`` (``Ledger.read(...,
    #: single_statement=True)``), a consistent snapshot by itself, so no ``BEGIN`` is
    #: sent: SQLite (sqlite3 runs it in its own implicit read transaction). ``None``:
    #: :attr:`snapshot_read`.
    single_read: dict[str, Any] | None = None
    #: Execution options of a write transaction.
    write: dict[str, Any] = field(default_factory=dict)
    #: Execution options, over :attr:`write`'s, of a write whose first statement writes
    #: (the append's counter upsert): on SQLite no ``BEGIN`` of its own, sqlite3
    #: beginning the transaction (:attr:`driver_begin`) right before that statement in
    #: the same hop. Never for a write that reads first: its reads would run outside.
    first_write: dict[str, Any] = field(default_factory=dict)
    #: Whether a pooled DBAPI connection (SQLAlchemy's adapted one) has a transaction
    #: open, read from the driver's state without a round trip: the pool's reset on
    #: return rolls back only then (:func:`chatledger.dialects.configure_engine`).
    transaction_open: Callable[[Any], bool] = field(default=_lacking("transaction_open"), metadata=_REQUIRED)
    #: Whether :attr:`transaction_open` reads the driver's state exactly (``False``: it
    #: says yes always, for a driver whose state misses a read's transaction). Exact, a
    #: connection still in a transaction after the reset's rollback is discarded.
    transaction_open_exact: bool = True
    #: Reads the isolation level a write transaction runs at (once per ledger, at its
    #: schema check); ``None``: the backend states it in :attr:`write` or has one level.
    write_isolation_query: str | None = None
    #: The level a write runs at instead of a default its locking was not designed for:
    #: {level as ``write_isolation_query`` reports it: level to use, as SQLAlchemy spells it}.
    write_isolation_instead: dict[str, str] = field(default_factory=dict)
    #: ``create_async_engine`` options of this backend.
    engine_options: dict[str, Any] = field(default_factory=dict)
    #: Driver ``connect()`` arguments from the store's options (sent with the login).
    connect_args: ConnectArgs = _no_connect_args
    #: Statements run once on every new connection, from the store's options.
    session_setup: SessionSetup = _no_setup
    #: Transactions begin with an explicit ``BEGIN <mode>`` from the ``begin`` event
    #: (on an engine the caller owns: from :attr:`foreign_begin`), the mode taken from
    #: the ``chatledger_sqlite_begin`` execution option (SQLite).
    explicit_begin: bool = False
    #: sqlite3's ``isolation_level`` of every connection of an engine chatledger made,
    #: with :attr:`explicit_begin`: the ``BEGIN`` sqlite3 sends itself before the first
    #: ``INSERT``/``UPDATE``/``DELETE`` of a transaction that began none explicitly
    #: (:attr:`first_write`); ``None``: sqlite3 never begins one.
    driver_begin: str | None = None
    #: Largest statement the server takes, in bytes, when no query says otherwise:
    #: PostgreSQL's 1 GB field limit, SQLite's default ``SQLITE_MAX_LENGTH``.
    statement_limit: int = 1_000_000_000
    #: Query reading the server's own limit (MySQL's ``max_allowed_packet``).
    statement_limit_query: str | None = None
    #: A server behind a socket, with a sized pool (a SQLite file has none).
    server: bool = True
    #: The async driver of this backend (SQLAlchemy's driver name).
    driver: str = field(default="", metadata=_REQUIRED)
    #: The chatledger extra that installs the driver (``pip install 'chatledger[...]'``).
    driver_extra: str = ""
    #: Driver ``connect()`` arguments behind PgBouncer's transaction pooling.
    pgbouncer_connect_args: Callable[[], dict[str, Any]] = _no_pgbouncer_args
    #: Set-up and checks of a connection of an engine the caller owns (``engine=``).
    check_foreign: ForeignCheck = _no_check
    #: The start of every ledger transaction on an engine the caller owns.
    foreign_begin: ForeignBegin = _refuse_autocommit
    #: The collation under which ``<`` and ``>=`` order ids by their bytes (UTF-8: by
    #: code point), named on an id prefix's range (:func:`chatledger.selection.id_prefix`):
    #: PostgreSQL's ``C`` (a language's collation sorts ``TMP-keep`` between ``tmp-``
    #: and ``tmp.``; the primary key serves the range only under ``C`` too), SQLite's
    #: ``BINARY``; ``None`` where the id type orders by bytes (MySQL's ``VARBINARY``).
    byte_order_collation: str | None = None
    #: Whether ``LIKE`` compares case and every character as it is (PostgreSQL under its
    #: deterministic collations; MySQL/MariaDB on binary ids, where it also never pads
    #: spaces). SQLite's ``LIKE`` folds ASCII case: there a prefix is checked with
    #: ``substr`` and ``=`` (:func:`chatledger.selection.id_prefix`).
    literal_like: bool = True
    #: Each column's character set and collation in a table (:data:`Collations`), for
    #: the schema drift check (:mod:`chatledger.drift`): ``information_schema`` on
    #: MySQL/MariaDB, ``pg_attribute`` on PostgreSQL, the ``CREATE TABLE`` on SQLite.
    column_collations: CollationReader = _no_collations
    #: A table's default collation, which its columns without one of their own take
    #: (MySQL/MariaDB); ``None`` where a table has none.
    table_collation: Callable[[Connection, str], str | None] = _no_table_collation
    #: The collation a schema fix names to give a column the database's default
    #: (PostgreSQL's ``"default"``); ``None``: a type without ``COLLATE`` does.
    default_collation: str | None = None
    #: ``ALTER TABLE`` cannot change a column or a constraint: a schema fix rebuilds the
    #: table, copying its rows (SQLite; Alembic's batch mode).
    rebuilds_tables: bool = False

    #: How replicas of this backend serve reads (``read_dsn``); ``None``: it has none
    #: (a SQLite file), and ``read_dsn`` is refused.
    replication: Replication | None = None

    # -- what an operator reads of it (chatledger.stats, chatledger.telemetry) --
    #: What chatledger's tables take on disk (:class:`StorageSize`, for
    #: :mod:`chatledger.stats`): PostgreSQL's ``pg_total_relation_size``, MySQL's
    #: ``information_schema.TABLES``, SQLite's ``dbstat`` (else the file's page count).
    storage_size: StorageSizer = field(default=_lacking("storage_size"), metadata=_REQUIRED)
    #: OpenTelemetry's ``db.system.name`` of the server behind a (connected) engine's
    #: dialect, one of the semantic conventions' values (``postgresql``, ``mysql``,
    #: ``mariadb``, ``sqlite``), for :mod:`chatledger.telemetry`.
    db_system: Callable[[Dialect], str] = field(default=_lacking("db_system"), metadata=_REQUIRED)

    # -- naming and DSNs (chatledger.dsn) --
    #: The backend's name in messages and script headers ("PostgreSQL", "MySQL/MariaDB").
    display_name: str = field(default="", metadata=_REQUIRED)
    #: The DSN schemes (SQLAlchemy backend names) served as this dialect; a plain one
    #: (no ``+driver``) opens the dialect's default driver.
    schemes: tuple[str, ...] = field(default=(), metadata=_REQUIRED)
    #: SQLAlchemy's other names of this backend's driver (``postgresql+psycopg_async``).
    driver_aliases: tuple[str, ...] = ()
    #: The checks and rewrites of a DSN of this backend, after its scheme and driver are
    #: settled (:func:`chatledger.dsn.resolve_dsn`): the URL to open; ``ValueError``
    #: naming what is wrong.
    resolve_dsn: Callable[[URL], URL] = field(default=_lacking("resolve_dsn"), metadata=_REQUIRED)

    # -- schema migrations (chatledger.migrate, chatledger.offline) --
    #: The transaction a migration runs in, holding the schema lock.
    migration_transaction: MigrationTransaction = field(
        default=_lacking("migration_transaction"), metadata=_REQUIRED
    )
    #: How its ``--sql`` script opens and closes.
    offline_script: OfflineScript = field(default=NO_OFFLINE_SCRIPT, metadata=_REQUIRED)
    #: How a downgrade keeps writers out of the tables it drops.
    drop_guard: DropGuard = field(default=_lacking("drop_guard"), metadata=_REQUIRED)

    # -- column types (chatledger.types) --
    #: The type of an id column of ``length`` characters, compared byte for byte.
    id_type: Callable[[int], TypeEngine[Any]] = String
    #: The type of a UTC instant with microseconds.
    instant_type: Callable[[], TypeEngine[Any]] = DateTime
    #: The type of bytes of any length the statement limit lets through.
    blob_type: Callable[[], TypeEngine[Any]] = LargeBinary
    #: Whether an instant is bound with its time zone (PostgreSQL's ``timestamptz``);
    #: else as its UTC wall time.
    binds_time_zone: bool = False

    #: Whether a store may run behind PgBouncer's transaction pooling (``pgbouncer=True``;
    #: the driver's arguments for it: :attr:`pgbouncer_connect_args`).
    pgbouncer: bool = False
    #: Whether Galera clusters may serve it: every new connection detects Galera and
    #: turns on causal reads (:func:`chatledger.dialects.mysql.configure_galera`).
    galera: bool = False
    #: The listeners a ledger adds to every engine it transacts on, its own and its view
    #: of the caller's (:func:`chatledger.dialects.adopt_engine`): aiosqlite resets a
    #: statement a cancellation interrupted before its connection closes
    #: (:func:`chatledger.dialects.sqlite.release_cancelled_statements`); the server
    #: backends add none (:func:`no_listeners`).
    add_listeners: EngineListeners = field(default=_lacking("add_listeners"), metadata=_REQUIRED)

    # -- adopting zett-agent's own tables (chatledger.tools.adopt) --
    #: Whether DDL is transactional, so that the whole adoption is one transaction.
    transactional_ddl: bool = False
    #: How the adoption changes a zett table, by the name of one of adopt's converters
    #: (``"alter-column"``, ``"modify-column"``, ``"rebuild"``).
    adoption: str = field(default="", metadata=_REQUIRED)
    #: Compares two of zett's id columns exactly, as chatledger will.
    adoption_equal: Callable[[ColumnElement[Any], ColumnElement[Any]], ColumnElement[bool]] = _plain_equal
    #: The length of a string in characters.
    char_length: Callable[[ColumnElement[Any]], ColumnElement[int]] = field(
        default=_lacking("char_length"), metadata=_REQUIRED
    )
    #: Statement run first in the adoption's transaction, to keep writers out.
    adoption_lock: str | None = None

    # -- the benchmark (chatledger.tools.bench) --
    #: The DSN driver zett-agent's own store is measured with.
    zett_driver: str = field(default="", metadata=_REQUIRED)
    #: ``CREATE DATABASE`` / ``DROP DATABASE`` templates (``{name}``); ``None`` where a
    #: database is a file.
    create_database: str | None = field(default="", metadata=_REQUIRED)
    drop_database: str | None = field(default="", metadata=_REQUIRED)
    #: Refreshes the planner statistics of the store tables.
    analyze: str = field(default="", metadata=_REQUIRED)
    #: Query of the server's name and version.
    server_version: str = field(default="", metadata=_REQUIRED)
    #: Whether the driver sends a transaction's ``BEGIN`` as a round trip of its own,
    #: before the first statement (asyncpg, psycopg); aiomysql sends none (the server
    #: begins a transaction with its first statement), aiosqlite's hops are counted.
    begin_round_trip: bool = False
    #: Counts the driver's own requests on a DBAPI connection where they can be told
    #: apart from the statements: calls the given function on each, and returns the
    #: function that stops it. aiosqlite: each hop to the connection's thread (a
    #: cursor, a statement, a fetch, a COMMIT each take one). ``None``: the round trips
    #: are the statements, the ``BEGIN`` (:attr:`begin_round_trip`), ``COMMIT`` and
    #: ``ROLLBACK``. For the benchmark (:mod:`chatledger.tools.bench.floor`).
    count_requests: Callable[[Any, Callable[[], None]], Callable[[], None]] | None = None
    #: The variant of chatledger's append measured beside its default: a label and the
    #: store options that make it.
    bench_variant: tuple[str, dict[str, Any]] = ("pre-ping", {"pool_pre_ping": True})

    #: ``column IN values`` for a list of integers of any length, without one bound
    #: parameter per value (servers and drivers cap those: asyncpg at 32,767, SQLite
    #: at 32,766): see :func:`_any_of_array` and its siblings.
    any_of: Callable[[ColumnElement[int], Sequence[int]], ColumnElement[bool]] = field(
        default=lambda column, values: column.in_(values)
    )

    def lacking(self) -> list[str]:
        """The hooks and fields a backend must provide and this one has not (still at
        their placeholders), in the order they are declared."""
        return [
            known.name
            for known in fields(self)
            if known.metadata.get("required") and getattr(self, known.name) == known.default
        ]

    def latest(self, stored: ColumnElement[datetime], now: datetime) -> ColumnElement[datetime]:
        """The later of a stored instant and ``now``, computed in the statement: what an
        ``updated_at`` is set to, so that it never moves back, whatever the writer's
        clock says or however long its retries took."""
        return self.greatest(stored, bindparam(None, now, type_=stored.type), type_=stored.type)


DATABASE_HINT = (
    'the database {database} does not exist: create it (docs/deploying.md, "Two roles: owner and runtime") '
    "or correct its name in the DSN"
)
LOGIN_HINT = "the server refused the login: check the user/password in the DSN (user {user})"


def require_database(url: URL) -> None:
    """``ValueError`` for a server DSN that names no database."""
    # Without one the server picks a database of its own (PostgreSQL's named after
    # the user; none at all on MySQL), not the one the schema was migrated in.
    if not url.database:
        backend = url.get_backend_name()
        raise ValueError(
            f"dsn names no database; add its name after the host: {backend}://USER@HOST/DATABASE"
        )


#: The registry: SQLAlchemy's dialect name -> the backends serving it, one per async
#: driver, the dialect's default driver first (what a plain ``postgresql://`` opens).
_REGISTRY: dict[str, list[Backend]] = {}


def register(*backends: Backend) -> None:
    """Add backends to the registry, in order: the first of a dialect is its default
    driver. ``ValueError`` for a (dialect, driver) registered already."""
    for added in backends:
        same = _REGISTRY.setdefault(added.name, [])
        if any(known.driver == added.driver for known in same):
            raise ValueError(f"backend {added.name}+{added.driver} is registered already")
        same.append(added)


def registered() -> tuple[Backend, ...]:
    """Every registered backend, each dialect's default driver first."""
    return tuple(known for same in _REGISTRY.values() for known in same)


def backend(dialect_name: str, driver: str | None = None) -> Backend:
    """The backend of a dialect and one of its async drivers (``None``: the dialect's
    default driver); ``ValueError`` for a backend or driver chatledger does not serve."""
    try:
        same = _REGISTRY[dialect_name]
    except KeyError:
        raise ValueError(f"dialect {dialect_name!r} is not supported") from None
    if driver is None:
        return same[0]
    for known in same:
        if known.driver == driver:
            return known
    raise ValueError(f"driver {driver!r} of {dialect_name} is not supported")


def _backend_of(dialect: str | Backend) -> Backend:
    return dialect if isinstance(dialect, Backend) else backend(dialect)


def _backend_of_url(url: URL) -> Backend:
    return backend(url.get_backend_name(), url.get_driver_name())


def error_code(error: DBAPIError, backend: Backend | None = None) -> str | int | None:
    """The driver's error code of a wrapped DBAPI error: the primary result code on
    SQLite, the server error number on MySQL (PyMySQL also sets a SQLSTATE, which is
    coarser, so the number comes first), SQLSTATE on PostgreSQL; else the code the
    message stands for by ``backend.message_codes``."""
    orig = error.orig
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        return sqlite_code & 0xFF
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    sqlstate = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "__cause__", None), "sqlstate", None)
    if sqlstate:
        return str(sqlstate)
    if isinstance(orig, Exception) and "database is locked" in str(orig):
        return 5
    if backend is not None and backend.message_codes and isinstance(orig, Exception):
        message = str(orig)
        for pattern, code in backend.message_codes:
            if pattern.search(message):
                return code
    return None


def _class_names(error: BaseException | None) -> set[str]:
    """The class names of ``error`` and of the errors it was raised from (the
    driver's own error under SQLAlchemy's adapted DBAPI one)."""
    names: set[str] = set()
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        names.update(kind.__name__ for kind in type(error).__mro__)
        error = error.__cause__
    return names


def _server_routine(orig: BaseException | None) -> str | None:
    """The server routine that raised a PostgreSQL error (the error field "R"), as
    psycopg reports it (``diag.source_function``)."""
    routine = getattr(getattr(orig, "diag", None), "source_function", None)
    return routine if isinstance(routine, str) else None


def classify(dialect: str | Backend, error: DBAPIError) -> Failure:
    """What ``error`` means: see :class:`Failure`. The codes are the backend's of the
    dialect (a name: its default driver's) or of the backend given."""
    backend = _backend_of(dialect)
    code = error_code(error, backend)
    if code in backend.too_large_codes:
        return Failure.TOO_LARGE
    if code in backend.configuration_hints:
        return Failure.CONFIGURATION
    if code in backend.schema_codes or any(part in str(error.orig) for part in backend.schema_messages):
        return Failure.SCHEMA
    if (
        code in backend.transient_codes
        or backend.transient_exceptions & _class_names(error.orig)
        or (backend.transient_routines and (code, _server_routine(error.orig)) in backend.transient_routines)
    ):
        return Failure.TRANSIENT
    if (
        error.connection_invalidated
        or isinstance(error.orig, OSError)
        or code in backend.unavailable_codes
        or backend.unavailable_exceptions & _class_names(error.orig)
    ):
        return Failure.CONNECTION
    if code in backend.read_only_codes:
        return Failure.READ_ONLY
    if code in backend.full_codes:
        return Failure.FULL
    if isinstance(error, IntegrityError):
        return Failure.CONSTRAINT
    return Failure.OTHER


def missing_table(dialect: str | Backend, error: DBAPIError) -> bool:
    """Whether ``error`` is of a table that does not exist (any more)."""
    backend = _backend_of(dialect)
    return error_code(error, backend) in backend.missing_table_codes


def configuration_hint(dialect: str | Backend, error: DBAPIError, url: URL) -> str:
    """What to fix for a :attr:`Failure.CONFIGURATION` error, naming the DSN's database
    and user."""
    backend = _backend_of(dialect)
    template = backend.configuration_hints.get(error_code(error, backend) or "", "check the DSN")
    return template.format(database=url.database or "?", user=url.username or "?")


def configuration_error(dialect: str | Backend, error: DBAPIError, url: URL) -> ConfigurationError:
    """The one wording of a :attr:`Failure.CONFIGURATION` error, from the stores and the
    schema commands alike: the database (password masked), what to fix
    (:func:`configuration_hint`), and the server's own words."""
    return ConfigurationError(
        f"{display(url)}: {configuration_hint(dialect, error, url)}. The server said: {error.orig}"
    )


def _server_words(error: BaseException) -> str:
    """The driver's (the server's) own message of ``error``, on one line, without
    SQLAlchemy's statement and help link."""
    orig = getattr(error, "orig", None)
    words = str(orig if orig is not None else error) or type(orig or error).__name__
    if orig is None:  # SQLAlchemy's own message: its first line, without the help link
        words = words.split("\n")[0]
    return " ".join(words.split())


def database_error(dialect: str | Backend, error: SQLAlchemyError, url: URL) -> ChatledgerError:
    """The chatledger error of any SQLAlchemy error ``error`` met on the database at
    ``url`` (raise it ``from error``): the one total mapping from a database's refusal
    to what the caller sees, for every path that does not retry (the importer, the
    schema commands, the CLI). :class:`chatledger.engine.Ledger` retries the transient
    ones first and then uses this mapping for the rest.

    By :func:`classify`:

    - ``TRANSIENT``, ``CONNECTION``; a pool timeout: :class:`StorageUnavailable`
      (nothing committed, unless a COMMIT was under way: try again);
    - ``CONFIGURATION``: :func:`configuration_error`;
    - ``TOO_LARGE``: :class:`StatementTooLarge` (a ``ValueError``);
    - ``SCHEMA``: :class:`SchemaNotReady`, naming ``chatledger check``;
    - ``READ_ONLY``, ``FULL``: :class:`DatabaseUnwritable`, with what to do;
    - ``CONSTRAINT``: :class:`ConstraintViolation`;
    - ``OTHER``, and SQLAlchemy's own errors without a driver error
      (``ResourceClosedError``, ``InvalidRequestError``...): :class:`DatabaseError`.

    Every :class:`DatabaseError` carries the code (SQLSTATE, MySQL error number,
    SQLite result code; ``None`` if there is none) and the driver's message.
    """
    backend = _backend_of(dialect)
    where = display(url)
    if isinstance(error, PoolTimeout):
        return StorageUnavailable(f"no connection to {where} became free: {_server_words(error)}")
    if not isinstance(error, DBAPIError):
        words = _server_words(error)
        return DatabaseError(
            f"{where}: the call failed in SQLAlchemy ({type(error).__name__}): {words}",
            server_message=words,
        )
    code = error_code(error, backend)
    words = _server_words(error)
    failure = classify(backend, error)
    said = f"{backend.code_name} {code}: {words}" if code is not None else f"{type(error).__name__}: {words}"
    if failure is Failure.CONFIGURATION:
        return configuration_error(backend, error, url)
    if failure in (Failure.TRANSIENT, Failure.CONNECTION):
        return StorageUnavailable(
            f"{where} could not complete the call (it was rolled back, or the connection was lost); "
            f"try again. The server said ({said})"
        )
    if failure is Failure.TOO_LARGE:
        return StatementTooLarge(
            f"{where} refused the statement as too large; nothing was written ({said})",
            code=code,
            server_message=words,
        )
    if failure is Failure.SCHEMA:
        return SchemaNotReady(
            f"database {where} lacks a table or column this chatledger uses (an older, hand-made "
            f"or hand-changed schema); run `chatledger check --dsn {as_argument(url)}` to see where it "
            "stands, then `chatledger upgrade` with the schema owner's DSN. The server said "
            f"({said})"
        )
    if failure in (Failure.READ_ONLY, Failure.FULL):
        reason = failure.value
        hint = backend.read_only_hint if failure is Failure.READ_ONLY else backend.full_hint
        return DatabaseUnwritable(
            f"database {where} is {reason}; nothing was written: {hint}. The server said ({said})",
            reason=reason,
            code=code,
            server_message=words,
        )
    if failure is Failure.CONSTRAINT:
        return ConstraintViolation(
            f"database {where} refused a row that breaks a constraint of the schema, which "
            f"chatledger's own writes keep (rows written outside chatledger?); nothing was "
            f"written. The server said ({said})",
            code=code,
            server_message=words,
        )
    return DatabaseError(
        f"database {where} refused the call ({said}); nothing was written", code=code, server_message=words
    )


@contextmanager
def database_errors(url: URL, *, statements: bool = True) -> Iterator[None]:
    """Raise every SQLAlchemy error of the block as :func:`database_error` maps it, from
    the error (for calls that run no retry loop: the schema commands).

    ``statements=False`` (a schema change: a migration, an adoption): a statement
    refused for a missing privilege, table or column is a :class:`DatabaseError`, the
    change's own failure, rather than a :class:`ConfigurationError` naming the runtime
    role's grants or a :class:`SchemaNotReady` naming ``chatledger upgrade``, which
    would not cure it; refusals of the connection itself stay configuration.
    """
    try:
        yield
    except SQLAlchemyError as error:
        backend = _backend_of_url(url)
        if (
            not statements
            and isinstance(error, DBAPIError)
            and error.statement is not None
            and classify(backend, error) in (Failure.CONFIGURATION, Failure.SCHEMA)
        ):
            code = error_code(error, backend)
            words = _server_words(error)
            # Most often the runtime role's DSN given to an upgrade: name who runs it.
            owner = (
                "; the role may not change the schema: run it with the schema owner's DSN "
                '(docs/deploying.md, "Two roles: owner and runtime")'
                if classify(backend, error) is Failure.CONFIGURATION
                else ""
            )
            raise DatabaseError(
                f"database {display(url)} refused a statement of the schema change "
                f"({backend.code_name} {code}: {words}){owner}",
                code=code,
                server_message=words,
            ) from error
        raise database_error(backend, error, url) from error


@contextmanager
def configuration_refusals(url: URL, *, statements: bool = True) -> Iterator[None]:
    """Raise a configuration the server refuses inside the block (no such database, a
    refused login, a missing privilege) as :func:`configuration_error` does; other
    errors pass unchanged.

    ``statements=False`` takes only refusals of the connection itself (raised before any
    statement ran): a migration's statement refused for a privilege is the migration's
    own failure, which the runtime role's grants would not cure.
    """
    try:
        yield
    except DBAPIError as error:
        backend = _backend_of_url(url)
        if (statements or error.statement is None) and classify(backend, error) is Failure.CONFIGURATION:
            raise configuration_error(backend, error, url) from error
        raise
