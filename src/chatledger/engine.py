"""The ledger core every store shares, :class:`Ledger`: a facade over one database's
connections (:mod:`chatledger.connections`), schema check (:mod:`chatledger.readiness`),
transactions and retries (:mod:`chatledger.transactions`) and the identity that makes a
write exactly-once across a lost COMMIT (:mod:`chatledger.identity`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from . import dialects, interactive, validate
from .connections import Connections
from .identity import WriteIdentity
from .options import LedgerOptions
from .readiness import Readiness
from .replicas import ReplicaReads
from .transactions import Settle, Transactions, Work

__all__ = ["Ledger", "Settle", "Work", "WriteIdentity"]

T = TypeVar("T")


class Ledger:
    """One database: its engine and pool, its schema check, and its transactions.

    Args:
        dsn: See :func:`chatledger.dsn.resolve_dsn`.
        engine: An ``AsyncEngine`` the caller made and owns, instead of ``dsn``: never
            disposed of by :meth:`close`, its pool replaced only in a forked child, so
            a pooled one serves one event loop. How it is used:
            :func:`chatledger.dialects.adopt_engine`. Options that set up an engine
            (pool sizes, ``connect_args``, ``lock_timeout``, ``pgbouncer``...) are
            refused with it.
        **options: See :class:`chatledger.options.LedgerOptions`.

    Raises:
        ValueError / TypeError: a bad DSN, option or engine, or both ``dsn`` and
            ``engine``.

    A given engine is refused on use with ``ConfigurationError`` naming the fix when
    its connections are set up otherwise than the ledger needs (autocommit; on MySQL,
    another character set or isolation), or when a pooled one is used from a second
    event loop.

    Nothing connects until the first call, so a ledger can be built before an event
    loop runs. The pool serves one event loop at a time (the first call's; replaced
    when a call comes from another loop, never shared by loops in two threads), and a
    forked child starts with a new, empty pool: see :mod:`chatledger.connections`.
    """

    #: The database's URL (:func:`chatledger.dsn.display` masks its password).
    url: URL
    #: SQLAlchemy's dialect name: "postgresql", "mysql" or "sqlite".
    dialect: str
    #: The backend of the dialect and driver.
    backend: dialects.Backend
    engine: AsyncEngine

    def __init__(
        self, dsn: str | URL | None = None, *, engine: AsyncEngine | None = None, **options: Any
    ) -> None:
        self.options = LedgerOptions(**interactive.options(options))  # the CLI's budget: interactive.py
        self.connections = Connections(dsn, engine, self.options)
        self.readiness = Readiness(self.connections, self.options)
        self.transactions = Transactions(self.connections, self.options, self.readiness)
        self.replica_reads = ReplicaReads(self.connections, self.transactions)
        self.url, self.dialect = self.connections.url, self.connections.dialect
        self.backend, self.engine = self.connections.backend, self.connections.engine
        #: Whether the engine is the caller's (``engine=``): used, never disposed.
        self.foreign = self.connections.foreign

    @property
    def retries(self) -> int:
        """Transient failures retried since this ledger was built (for the stress command)."""
        return self.transactions.retries

    @retries.setter
    def retries(self, value: int) -> None:
        self.transactions.retries = value

    @property
    def statement_limit(self) -> int:
        """Largest statement the server accepts, in bytes; read from the server (MySQL's
        ``max_allowed_packet``) by :meth:`ensure_ready`."""
        return self.readiness.statement_limit

    @statement_limit.setter
    def statement_limit(self, value: int) -> None:
        self.readiness.statement_limit = value

    @property
    def append_message(self) -> dialects.Appender:
        """The backend's append this ledger runs on its schema (found by
        :meth:`ensure_ready`): one statement where the schema's trigger allows it."""
        return self.readiness.append_message

    @property
    def single_append(self) -> dialects.Appender | None:
        """The backend's append as one statement committed by itself
        (:attr:`chatledger.dialects.Backend.single_append`), for :meth:`write` with
        ``autocommit``; ``None`` where this ledger runs every write as a transaction
        (see :attr:`chatledger.connections.Connections.single_writer`)."""
        if self.connections.single_writer is None:
            return None
        return self.readiness.single_append

    @property
    def auto_upgrade(self) -> bool:
        """Whether :meth:`ensure_ready` upgrades a database that is behind (the
        ``auto_upgrade`` option; unset: for a database file (SQLite), not a server)."""
        return self.readiness.auto_upgrade

    @auto_upgrade.setter
    def auto_upgrade(self, value: bool) -> None:
        self.readiness.auto_upgrade = value

    def __repr__(self) -> str:
        return repr(self.connections)

    async def close(self) -> None:
        """Dispose of the engine and every pooled connection; later calls raise ``RuntimeError``.

        Called from another event loop than the pool's, it drops the pool without
        closing its connections, which only their own loop could close.
        """
        await self.connections.close()

    async def ensure_ready(self) -> None:
        """Check the schema revision once; upgrade it first when ``auto_upgrade``.

        Goes on at this chatledger's head, or at a newer revision whose recorded
        ``compatible_from`` this chatledger ships (a rolling deploy's expand revision;
        logged once at INFO): see :func:`chatledger.migrate.standing`.
        ``auto_upgrade`` upgrades under the schema lock
        (:func:`chatledger.migrate.upgrade_schema`): of many processes starting at once,
        one upgrades and the others wait for it. zett-agent's own tables without a
        chatledger revision are never upgraded: they need ``chatledger adopt``.

        Raises:
            SchemaNotReady: the database is behind (and not ``auto_upgrade``), at a
                newer revision this chatledger cannot run on, or holds zett-agent's
                tables; or the schema lock was not granted within
                :data:`chatledger.migrate.LOCK_TIMEOUT`. The message names both
                revisions and what to do.
        """
        await self.readiness.ensure_ready(self.transactions)

    async def check_statement_size(self, field: str, *texts: str) -> None:
        """Refuse a row whose long text values the server would not take in one statement.

        Raises:
            ValueError: the row exceeds :attr:`statement_limit` (read from the server on
                first use); names ``field``, the size and the limit. Nothing is written.
        """
        await self.ensure_ready()
        validate.check_statement_size(texts, self.statement_limit, field)

    async def write(
        self,
        work: Work[T],
        *,
        identity: WriteIdentity[T] | None = None,
        settle: Settle[T] | None = None,
        write_id: str | None = None,
        session: str | None = None,
        first_writes: bool = False,
        autocommit: bool = False,
    ) -> T:
        """Run ``work`` in one write transaction, retried whole on a transient failure.

        ``first_writes``: the first statement of ``work`` writes (an ``INSERT``,
        ``UPDATE`` or ``DELETE``; the append's counter upsert), so that the driver may
        begin the transaction with it, saving a round trip
        (:attr:`chatledger.dialects.Backend.first_write`: SQLite). Never for work that
        reads first: its reads would run before the transaction began.

        ``autocommit``: ``work`` is one statement that commits itself (only where
        :attr:`single_append` is set), returning ``None`` when it wrote nothing: no
        ``BEGIN`` and no ``COMMIT``. Its outcome is unknown once it is sent, so a
        connection lost under it is settled as a lost COMMIT is.

        Retried (within ``retry_timeout`` seconds, see
        :class:`chatledger.options.LedgerOptions`): deadlocks, serialization failures,
        lock waits past ``lock_timeout`` or ended by the server's statement time limit
        (PostgreSQL ``statement_timeout``, MariaDB ``max_statement_time``), busy SQLite
        files, and connections lost or refused before the COMMIT was sent -- all of
        which left nothing committed.

        ``identity`` makes the write exactly-once across an ambiguous failure (the
        connection lost while the COMMIT was under way): the write's id, fixed before
        the first attempt, its content, and the generation each attempt wrote in
        (:meth:`WriteIdentity.made`), settled in a read transaction of its own by the
        rules of :mod:`chatledger.identity`: the stored write with the same content is
        returned, with other content raises ``IdentityConflict``, erased since by a
        delete, clear or purge is returned as written. A write without such an identity
        (a pop, a clear, a purge's conditional delete) may give ``settle`` instead: it
        looks the write up in its own read transaction and returns its result when it
        was committed, ``None`` when not (``write_id`` names the write in
        ``OutcomeUnknown``). After an ambiguous failure every later attempt
        settles first, and a failure of ``work`` (a duplicate key, a version conflict)
        settles again before it is raised: the server may still have been finishing the
        first COMMIT while the first settle read, and the write's primary key decides
        that race.

        Raises:
            OutcomeUnknown: the COMMIT was ambiguous and either no ``identity`` or
                ``settle`` was given, or the database stayed unreachable for the rest
                of the budget; carries the write's id.
            IdentityConflict: (a ``ValueError``) a stored write carries the id of
                ``identity`` with other content; nothing written.
            StorageUnavailable: the budget ran out on transient failures or an
                unreachable database; nothing from this call was committed.
            ConfigurationError: the server refused the configuration (database, login,
                privilege), or a caller's engine cannot serve the call (see ``engine``
                above); never retried.
            StatementTooLarge: (a ``ValueError``) the server refused a statement as
                too large; nothing written.
            SchemaNotReady: the database is not at a revision this chatledger runs on,
                or lacks a table or column it uses (a hand-made or hand-changed
                schema); the message names ``chatledger check``. Nothing written.
            DatabaseUnwritable: the database is read-only or full; never retried,
                nothing written; the message says what to do.
            ConstraintViolation: a row of ``work`` broke a constraint, and ``settle``
                (when given) found no earlier commit of this write; nothing written.
            DatabaseError: any other refusal, whatever its code (carried as ``code``,
                with the server's message and the SQLAlchemy error as ``__cause__``);
                never retried, nothing written. No SQLAlchemy or driver error leaves
                this call (:func:`chatledger.dialects.database_error`).
        """
        return await self.transactions.write(
            work,
            identity=identity,
            settle=settle,
            write_id=write_id,
            session=session,
            first_writes=first_writes,
            autocommit=autocommit,
        )

    async def read(
        self,
        work: Work[T],
        *,
        replica: bool = False,
        session: str | None = None,
        single_statement: bool = False,
    ) -> T:
        """Run ``work`` in one snapshot-consistent read transaction (its isolation
        stated per backend in its :class:`chatledger.dialects.Backend`), retried whole like a
        write; a read has no ambiguous outcome.

        ``replica=True``: on a read replica (``read_dsn``) that has applied this
        process's writes of ``session`` (``None``: every write of this process),
        waiting at most ``replica_wait`` seconds, else on the primary
        (:mod:`chatledger.replicas`); on the primary when there are no replicas.
        Only for work that reads and writes nothing.

        ``single_statement=True``: ``work`` sends exactly one ``SELECT``, consistent by
        itself, so the backend may run it without a transaction of its own
        (:attr:`chatledger.dialects.Backend.single_read`: SQLite sends no ``BEGIN``);
        on the primary only."""
        if replica:
            return await self.replica_reads.read(work, session)
        return await self.transactions.read(work, single_statement=single_statement)

    def write_position(self, session: str) -> str | None:
        """The position a replica must have applied to hold this process's writes of
        ``session`` so far (text: a PostgreSQL WAL location, a MariaDB GTID position),
        to hand to another process's :meth:`remember_write`; ``None`` without replicas,
        or when this process wrote no such session (or lost the position of a write)."""
        positions = self.transactions.positions
        if positions is None:
            return None
        _, position = positions.needed(session)
        return position

    def remember_write(self, session: str, position: str) -> None:
        """Take a write of ``session`` made elsewhere (another process's
        :meth:`write_position`) as this process's own: its replica reads of the
        session wait for it. Without replicas, nothing to do.

        Raises:
            TypeError: ``position`` is not a string.
        """
        if not isinstance(position, str):
            raise TypeError(f"position must be a string (write_position's), not {type(position).__name__}")
        positions = self.transactions.positions
        if positions is not None:
            positions.wrote(session, position)
