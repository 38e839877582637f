"""The ledger core every store shares: one engine, revision check, retried transactions."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary, WeakSet, ref

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import NullPool
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_before_delay,
    wait_random_exponential,
)

from . import adoption, dialects, interactive, migrate, validate
from .dsn import as_argument, display, resolve_dsn, sqlite_file
from .errors import (
    AUTO_UPGRADE_HINT,
    ConfigurationError,
    ConstraintViolation,
    DatabaseError,
    OutcomeUnknown,
    SchemaNotReady,
    StatementTooLarge,
    StorageUnavailable,
)
from .options import LedgerOptions

logger = logging.getLogger("chatledger")

T = TypeVar("T")
Work = Callable[[AsyncConnection], Awaitable[T]]
#: Looks a write up by its id: its result when it was committed, else ``None``.
Settle = Callable[[AsyncConnection], Awaitable[T | None]]


class Ledger:
    """One database: its engine and pool, its schema check, and its transactions.

    Args:
        dsn: See :func:`chatledger.dsn.resolve_dsn`.
        engine: An ``AsyncEngine`` the caller made and owns, instead of ``dsn``: the
            ledger uses it and its pool, and neither disposes of it on :meth:`close`
            nor replaces its pool when the event loop changes (in a forked child it
            does, as for its own: see **Forks**), so a pooled one serves the ledger on
            one event loop only (see **One event loop at a time**). What the ledger
            sets up on its own engines and how a given one is used instead:
            :func:`chatledger.dialects.adopt_engine`. The options that set up an
            engine (pool sizes, ``connect_args``, ``lock_timeout``, ``pgbouncer``...)
            are refused with it.
        **options: See :class:`chatledger.options.LedgerOptions`.

    Raises:
        ValueError / TypeError: a bad DSN, option or engine, or both ``dsn`` and
            ``engine``.

    A given engine is refused on use with ``ConfigurationError`` naming the fix when
    its connections are set up otherwise than the ledger needs (in autocommit; on
    MySQL, another character set or isolation), or when a pooled one is used from a
    second event loop.

    The engine is created here, but nothing connects until the first call, so a
    ledger can be built before an event loop runs.

    **One event loop at a time.** asyncpg and aiomysql connections belong to the
    event loop that opened them, so the pool serves one loop: the first call binds
    the ledger to its loop, and a call from another loop (the next ``asyncio.run``,
    a worker's new loop) replaces the pool first (:meth:`_bind_loop`), logging it
    at DEBUG. The old loop's idle connections are left unclosed -- they cannot be
    closed from another loop -- for the garbage collector (aiomysql's finalizer
    then prints "Event loop is closed" when that loop has ended; it is harmless).
    Two loops running in two threads at once are not supported: the
    pool is then replaced back and forth, opening new connections on every switch,
    and a call that races a switch can check out a connection of the other loop
    and fail with the driver's ``RuntimeError``. Give each such thread its own
    storage.

    A caller's engine (``engine=``) is not the ledger's to replace: a call from
    another loop than its first raises ``ConfigurationError`` before it checks out a
    connection, unless the engine's pool is a ``NullPool`` (no connection outlives
    its call, so any loop is served). SQLAlchemy's asyncio documentation ("Using
    multiple asyncio event loops") gives the same rule for every driver: besides
    asyncpg's and aiomysql's connections, the pool's own wait queue belongs to the
    loop that first waited on it.

    **Forks.** In a child process (``os.fork``, gunicorn ``--preload``, celery
    prefork, multiprocessing's ``fork`` start method), the ledger starts over with
    a new, empty pool, as SQLAlchemy's "Using Connection Pools with Multiprocessing
    or os.fork()" prescribes (``engine.dispose(close=False)``); the parent's
    connections are neither used nor closed by the child.
    """

    #: The database's URL (:func:`chatledger.dsn.display` masks its password).
    url: URL
    #: SQLAlchemy's dialect name: "postgresql", "mysql" or "sqlite".
    dialect: str
    #: The rules of the dialect and driver.
    rules: dialects.DialectRules
    engine: AsyncEngine

    def __init__(
        self, dsn: str | URL | None = None, *, engine: AsyncEngine | None = None, **options: Any
    ) -> None:
        self.options = LedgerOptions(**interactive.options(options))  # CLI budget: interactive.py
        #: Whether the engine is the caller's (``engine=``): used, never disposed.
        self.foreign = engine is not None
        if engine is not None:
            self._adopt(dsn, engine)
        else:
            self.url = resolve_dsn(dsn)
            self.dialect = self.url.get_backend_name()
            self.rules = dialects.rules(self.dialect, self.url.get_driver_name())
            self.engine = self._create_engine()
        #: The engine with the execution options of a write and of a snapshot-consistent
        #: read set once (``Engine.execution_options``: a copy sharing the pool and its
        #: events), so that a transaction does not set them per call.
        self._writer = self.engine.execution_options(**self.rules.write)
        self._reader = self.engine.execution_options(**self.rules.snapshot_read)
        self.auto_upgrade = (
            self.options.auto_upgrade if self.options.auto_upgrade is not None else not self.rules.server
        )
        self._ready = False
        self._closed = False
        self._ready_locks: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = WeakKeyDictionary()
        #: The event loop the pool's connections belong to (see :meth:`_bind_loop`).
        self._loop: ref[asyncio.AbstractEventLoop] | None = None
        _LEDGERS.add(self)
        #: Transient failures retried since this ledger was built (for the stress command).
        self.retries = 0
        #: When a failed attempt is tried again: a random exponential backoff, and no
        #: attempt after ``retry_timeout`` seconds from the start of the call.
        self._retry_policy = AsyncRetrying(
            stop=stop_before_delay(self.options.retry_timeout),
            wait=wait_random_exponential(
                multiplier=self.options.retry_backoff, max=self.options.retry_backoff_max
            ),
            retry=retry_if_exception_type(_Retry),
        )
        #: Largest statement the server accepts, in bytes; read from the server (MySQL's
        #: ``max_allowed_packet``) by :meth:`ensure_ready`.
        self.statement_limit = self.rules.statement_limit

    def _create_engine(self) -> AsyncEngine:
        """The ledger's own engine and pool, set up by the dialect's rules."""
        path = sqlite_file(self.url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        ours = self.rules.connect_args(self.options)
        # The caller's own settings win over ours, one by one: the DSN's, then connect_args.
        from_dsn = {name: value for name, value in self.url.query.items() if name in ours}
        connect_args = dialects.merge_connect_args(ours, from_dsn, self.options.connect_args)
        engine_options: dict[str, Any] = {
            **self.rules.engine_options,
            "echo": self.options.echo,
            "connect_args": connect_args,
            "pool_pre_ping": self.options.pool_pre_ping and self.rules.server,
        }
        if self.options.pgbouncer:
            if self.dialect != "postgresql":
                raise ValueError("pgbouncer=True applies to PostgreSQL DSNs only")
            engine_options["poolclass"] = NullPool
            engine_options["connect_args"].update(self.rules.pgbouncer_connect_args())
        elif self.rules.server:
            engine_options.update(
                pool_size=self.options.pool_size,
                max_overflow=self.options.max_overflow,
                pool_timeout=self.options.pool_timeout,
                pool_recycle=self.options.pool_recycle,
            )
        engine = dialects.create_engine(self.url, **engine_options)
        dialects.configure_engine(engine, self.options)
        dialects.release_cancelled_statements(engine)
        dialects.configure_galera(engine)
        return engine

    def _adopt(self, dsn: str | URL | None, engine: AsyncEngine) -> None:
        """Use the caller's engine (see :func:`chatledger.dialects.adopt_engine`)."""
        if dsn is not None:
            raise ValueError("pass dsn or engine, not both: the engine names its database")
        given = sorted(self.options.model_fields_set & _ENGINE_OPTIONS)
        if given:
            raise ValueError(
                f"{', '.join(given)} set up the engine chatledger creates; with engine= "
                "set them on your engine"
            )
        self.engine, self.rules = dialects.adopt_engine(engine)
        # Checked as a DSN would be (a server database named, MySQL's charset); used for
        # display and by auto_upgrade, which migrates on a connection of its own.
        self.url = resolve_dsn(engine.url)
        self.dialect = engine.dialect.name

    def __repr__(self) -> str:
        return f"Ledger({display(self.url)!r})"

    async def close(self) -> None:
        """Dispose of the engine and every pooled connection; later calls raise ``RuntimeError``.

        Called from another event loop than the pool's, it drops the pool without
        closing its connections, which only their own loop could close.
        """
        self._closed = True
        if self.foreign:
            return  # the caller's engine, which the caller disposes of
        await self.engine.dispose(close=self._loop is None or self._loop() is asyncio.get_running_loop())

    async def _bind_loop(self) -> None:
        """Bind the pool to the running event loop, replacing it when the loop changed.

        The previous loop's connections are dropped unclosed (``dispose(close=False)``):
        asyncpg's and aiomysql's cannot be used or closed from another loop, and
        calls still running on the previous loop keep theirs to the end. Runs
        without awaiting anything, so that no other task sees a half-replaced pool.

        Raises:
            ConfigurationError: the loop changed and the engine is the caller's, with
                a pool that keeps connections (not a ``NullPool``); nothing was
                checked out, and the ledger stays bound to its first loop.
        """
        loop = asyncio.get_running_loop()
        bound = self._loop
        if bound is not None and bound() is loop:
            return
        if bound is not None and self.foreign and not isinstance(self.engine.pool, NullPool):
            raise ConfigurationError(
                f"{self!r} runs on the caller's engine, which it first used on another event loop; "
                f"the engine's pool ({type(self.engine.pool).__name__}) keeps connections that belong "
                "to that loop, and chatledger does not replace the pool of an engine it does not "
                "own. Use one engine, and one store, per event loop, or create the engine with "
                "poolclass=NullPool"
            )
        self._loop = ref(loop)
        if bound is not None and not self.foreign:
            logger.debug(
                "%r: the event loop changed; replacing the connection pool, "
                "the previous loop's connections are left unclosed",
                self,
            )
            self.engine.sync_engine.dispose(close=False)

    def _after_fork_in_child(self) -> None:
        """In a forked child: a new, empty pool, without closing the parent's connections."""
        # Kept referenced for the child's lifetime: collecting them would close the
        # inherited sockets and SQLite handles, which belong to the parent.
        _INHERITED_POOLS.append(self.engine.sync_engine.pool)
        self.engine.sync_engine.dispose(close=False)
        self._loop = None
        self._ready_locks = WeakKeyDictionary()

    async def ensure_ready(self) -> None:
        """Check the schema revision once; upgrade it first when ``auto_upgrade``.

        Goes on when the database is at this chatledger's head, or at a newer revision
        whose recorded ``compatible_from`` this chatledger ships (an expand revision of
        a rolling deploy; logged once at INFO). See :func:`chatledger.migrate.standing`.
        ``auto_upgrade`` upgrades a database that is behind under the schema lock
        (:func:`chatledger.migrate.upgrade_schema`): of many processes starting at
        once, one upgrades, the others wait for it and go on.

        A database holding zett-agent's own tables and no chatledger revision is never
        upgraded, ``auto_upgrade`` or not: it needs ``chatledger adopt``, which the
        ``SchemaNotReady`` message names (``auto_upgrade``: the upgrade refuses it under
        the schema lock, before any change).

        Raises:
            SchemaNotReady: the database is behind (and not ``auto_upgrade``), or at a
                newer revision this chatledger cannot run on, or the schema lock was
                not granted within :data:`chatledger.migrate.LOCK_TIMEOUT`; the message
                names both revisions and what to do (for zett-agent's tables:
                ``chatledger adopt --dsn …``).
        """
        if self._ready:
            return
        async with self._ready_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock()):
            if self._ready:
                return
            if self.foreign:
                await self._run(
                    lambda conn: conn.run_sync(self.rules.check_foreign),
                    options=dialects.FOREIGN_CHECK_OPTIONS,
                    ready=False,
                )
            state, hint = await self._read_state()
            standing = migrate.standing(state)
            # A revision still in alembic_version moves to chatledger's own table on upgrade.
            # zett-agent's own tables or a half-applied revision (hint) are refused by the
            # upgrade under the schema lock, before any DDL: read without the lock, another
            # process's upgrade half done on MySQL (its DDL commits statement by statement)
            # looks like the latter.
            if self.auto_upgrade and (standing is migrate.Standing.BEHIND or state.legacy):
                connect_args = dict(self.options.connect_args)
                if self.options.pgbouncer:
                    connect_args.update(self.rules.pgbouncer_connect_args())
                try:
                    state = await migrate.upgrade_schema(self.url, connect_args=connect_args)
                except (DatabaseError, StorageUnavailable, SQLAlchemyError, OSError) as error:
                    cause = getattr(error, "orig", None) or error
                    if standing is migrate.Standing.BEHIND:
                        raise SchemaNotReady(
                            f"auto_upgrade of database {display(self.url)} from revision "
                            f"{state.revision or '<none>'} to {migrate.head_revision()} failed: {cause}; "
                            "upgrade it as the schema owner "
                            f"(`chatledger upgrade --dsn {as_argument(self.url)}`)"
                        ) from error
                    # Usable as it is; only the bookkeeping stays where it was.
                    logger.warning("could not move the revision of %s: %s", display(self.url), cause)
                standing = migrate.standing(state)
            if standing is migrate.Standing.AHEAD_COMPATIBLE:
                logger.info("%s", migrate.describe(self.url, state))
            elif standing is not migrate.Standing.AT_HEAD:
                # zett-agent's tables: adopt them; auto_upgrade would be refused.
                extra = AUTO_UPGRADE_HINT if standing is migrate.Standing.BEHIND and hint is None else ""
                raise SchemaNotReady(migrate.describe(self.url, state, remedy=hint) + extra)
            query = self.rules.statement_limit_query
            if query is not None:
                limit = await self._run(lambda conn: conn.scalar(text(query)), ready=False)
                self.statement_limit = int(limit)
            self._ready = True

    async def _read_state(self) -> tuple[migrate.SchemaState, str | None]:
        """The schema state, and for a database without a chatledger revision the advice
        to adopt zett-agent's tables it may hold (:func:`chatledger.adoption.state_and_hint`).
        Read once more when a table vanished between the listing of the tables and the
        read: an upgrade moving the revision to chatledger's own table dropped
        ``alembic_version`` meanwhile."""
        for attempt in range(2):
            try:
                return await self._run(lambda conn: conn.run_sync(adoption.state_and_hint), ready=False)
            except SchemaNotReady as error:
                missing = error.__cause__
                if not isinstance(missing, DBAPIError) or not dialects.missing_table(self.rules, missing):
                    raise
                if attempt:
                    raise SchemaNotReady(
                        f"the revision of database {display(self.url)} could not be read: a table "
                        "vanished while it was read, twice (a migration under way?); try again once "
                        f"the upgrade is done. The server said: {missing.orig}"
                    ) from missing
        raise AssertionError("unreachable")

    async def check_statement_size(self, field: str, *texts: str) -> None:
        """Refuse a row whose long text values the server would not take in one statement.

        Raises:
            ValueError: the row exceeds :attr:`statement_limit` (read from the server on
                first use); names ``field``, the size and the limit. Nothing is written.
        """
        await self.ensure_ready()
        validate.check_statement_size(texts, self.statement_limit, field)

    async def write(
        self, work: Work[T], *, settle: Settle[T] | None = None, write_id: str | None = None
    ) -> T:
        """Run ``work`` in one write transaction, retried whole on a transient failure.

        Retried (within ``retry_timeout`` seconds, see
        :class:`chatledger.options.LedgerOptions`): deadlocks, serialization failures,
        lock waits past ``lock_timeout`` or ended by the server's statement time limit
        (PostgreSQL ``statement_timeout``, MariaDB ``max_statement_time``), busy SQLite
        files, and connections lost or refused before the COMMIT was sent -- all of
        which left nothing committed.

        ``settle`` makes the write exactly-once across an ambiguous failure (the
        connection lost while the COMMIT was under way): it looks the write up by the
        id it carries (``write_id``), fixed before the first attempt, in its own read
        transaction, and returns the write's result when it was committed, ``None``
        when not. After an ambiguous failure every later attempt settles first, and a
        failure of ``work`` (a duplicate key, a version conflict) settles again before
        it is raised: the server may still have been finishing the first COMMIT while
        the first settle read, and the write's primary key decides that race.

        Raises:
            OutcomeUnknown: the COMMIT was ambiguous and either no ``settle`` was
                given, or the database stayed unreachable for the rest of the budget;
                carries ``write_id``.
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
        return await self._run(work, write=True, settle=settle, write_id=write_id)

    async def read(self, work: Work[T]) -> T:
        """Run ``work`` in one snapshot-consistent read transaction (its isolation
        stated per backend in :data:`chatledger.dialects.RULES`), retried whole like a
        write; a read has no ambiguous outcome."""
        return await self._run(work, write=False)

    async def _run(
        self,
        work: Work[T],
        *,
        write: bool = False,
        options: dict[str, Any] | None = None,
        ready: bool = True,
        settle: Settle[T] | None = None,
        write_id: str | None = None,
    ) -> T:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        await self._bind_loop()
        if ready and not self._ready:
            await self.ensure_ready()
        # The error of a COMMIT whose outcome is unknown, once one happened.
        ambiguous: BaseException | None = None
        # tenacity's state of this call, made on its first failure: a call that succeeds
        # at once pays nothing for the retry machinery.
        state: RetryCallState | None = None
        started = time.monotonic()
        while True:
            try:
                if ambiguous is not None and settle is not None:
                    found = await self._settle(settle)
                    if found is not None:
                        return found
                try:
                    return await self._attempt(work, write=write, options=options)
                except _Retry as retry:
                    if retry.ambiguous:
                        ambiguous = retry.cause
                        if settle is None:
                            raise self._unknown(retry.cause, write_id, settled=False) from retry.cause
                    raise
                except (StorageUnavailable, ConfigurationError, SchemaNotReady):
                    raise
                except Exception:
                    # The work failed: a repeat of a write that was committed (by an
                    # earlier call, or by this one's ambiguous COMMIT that the server
                    # finished late) fails on the write's own key. Settle decides.
                    if settle is not None:
                        found = await self._settle(settle)
                        if found is not None:
                            return found
                    raise
            except _Retry as retry:
                if state is None:
                    state = RetryCallState(self._retry_policy, None, (), {})
                    state.start_time = started
                state.set_exception((type(retry), retry, retry.__traceback__))
                state.upcoming_sleep = self._retry_policy.wait(state)
                if self._retry_policy.stop(state):
                    if ambiguous is not None:
                        raise self._unknown(retry.cause, write_id, settled=True) from retry.cause
                    raise StorageUnavailable(
                        f"{display(self.url)} could not complete the call within the retry budget "
                        f"(retry_timeout={self.options.retry_timeout:g} s, {state.attempt_number} "
                        "attempts); nothing from this call was committed. Last failure "
                        f"({retry.describe()}): {retry.detail}"
                    ) from retry.cause
                self._count_retry(state)
                await asyncio.sleep(state.upcoming_sleep)
                state.prepare_for_next_attempt()
            except (StorageUnavailable, ConfigurationError, SchemaNotReady, DatabaseError) as error:
                # After a COMMIT whose outcome is unknown, no error may say that nothing
                # was committed: one that ends the call before a settle found the write
                # (no pooled connection free for it, a refusal of the database) leaves
                # the first COMMIT's outcome unknown still. The work's own refusal of a
                # write that settle did not find (a conflict) is the answer, and passes.
                if ambiguous is None or isinstance(error, OutcomeUnknown | ConstraintViolation):
                    raise
                raise self._unknown(error, write_id, settled=settle is not None, ended=True) from error

    async def _settle(self, settle: Settle[T]) -> T | None:
        return await self._attempt(settle, write=False)

    def _unknown(
        self, cause: BaseException, write_id: str | None, *, settled: bool, ended: bool = False
    ) -> OutcomeUnknown:
        """``ended``: ``cause`` is the error that ended the call after the lost COMMIT,
        not the loss of the database for the rest of the budget."""
        if ended:
            how = f"and the call then ended before the write could be looked up ({_detail(cause)}). " + (
                "Repeat the identical call once the database answers: the write carries the "
                f"id {write_id!r}, so a repeat of one that was committed returns its result "
                "and writes nothing"
                if settled
                else "Read the data back once the database answers to see whether it was "
                "applied before repeating it"
            )
            return OutcomeUnknown(
                f"the connection to {display(self.url)} was lost while the database committed this "
                f"write, so whether it was applied is unknown, {how}",
                write_id=write_id,
            )
        if settled:
            how = (
                f"and {display(self.url)} stayed unreachable for the rest of the retry budget "
                f"(retry_timeout={self.options.retry_timeout:g} s), so it could not be looked up. "
                "Repeat the identical call once the database answers: the write carries the id "
                f"{write_id!r}, so a repeat of one that was committed returns its result and "
                "writes nothing"
            )
        else:
            how = (
                "and this write cannot be looked up by an id. Read the data back once the "
                "database answers to see whether it was applied before repeating it"
            )
        return OutcomeUnknown(
            f"the connection to {display(self.url)} was lost while the database committed this "
            f"write, so whether it was applied is unknown, {how}. Lost with: {_detail(cause)}",
            write_id=write_id,
        )

    async def _attempt(self, work: Work[T], *, write: bool, options: dict[str, Any] | None = None) -> T:
        """One transaction, a write (:attr:`DialectRules.write`) or a snapshot-consistent
        read (:attr:`DialectRules.snapshot_read`), or one with ``options`` instead. A
        failure a retry can cure raises :class:`_Retry`; every other SQLAlchemy error
        its chatledger error (``StatementTooLarge``, ``SchemaNotReady`` here; the rest
        by :func:`chatledger.dialects.database_error`); ``work``'s own errors pass."""
        committing = committed = False
        try:
            engine = self._writer if write else self._reader
            if options is not None:  # a call of its own kind (once per ledger): a copy for it
                engine = self.engine.execution_options(**options)
            async with engine.connect() as conn:
                async with conn.begin():
                    if self.foreign:  # after the engine's own begin listeners
                        await self.rules.foreign_begin(conn)
                    result = await work(conn)
                    committing = True  # leaving this block sends the COMMIT
                committed = True
        except DBAPIError as error:
            if committed:  # only returning the connection to the pool failed
                return result
            failure = dialects.classify(self.rules, error)
            if failure is dialects.Failure.TOO_LARGE:
                raise StatementTooLarge(
                    f"the database refused the statement as too large (statement_limit "
                    f"{self.statement_limit} bytes); nothing was written: {error.orig}",
                    code=dialects.error_code(error, self.rules),
                    server_message=str(error.orig),
                ) from error
            if failure is dialects.Failure.SCHEMA:
                # The revision check passed, yet a table or column is missing: check again
                # on the next call (the database may have been downgraded or replaced).
                self._ready = False
                dsn = as_argument(self.url)
                raise SchemaNotReady(
                    f"database {display(self.url)} lacks a table or column this chatledger uses, "
                    f"so its schema is not the one revision {migrate.head_revision()} creates (an "
                    "older or hand-made schema, or one changed by hand); nothing was written. Run "
                    f"`chatledger check --dsn {dsn}` to see where it stands, then `chatledger upgrade "
                    f"--dsn {dsn}` as the schema owner (a database zett-agent's own store wrote: "
                    f"`chatledger adopt --dsn {dsn}`). The server said: {error.orig}"
                ) from error
            if failure is dialects.Failure.TRANSIENT:
                # Even out of the COMMIT: the server rolled the transaction back.
                raise _Retry(error, dialects.error_code(error)) from error
            if failure is dialects.Failure.CONNECTION:
                raise _Retry(error, dialects.error_code(error), ambiguous=write and committing) from error
            # Every other code, listed or not, becomes a chatledger error. A write's own
            # key clash becomes ConstraintViolation, which Ledger._run settles before it
            # is raised, as it settled the IntegrityError before.
            raise dialects.database_error(self.rules, error, self.url) from error
        except PoolTimeout as error:
            within = (
                f"the engine's pool_timeout ({self.engine.pool.status()})"
                if self.foreign
                else f"{self.options.pool_timeout} s (pool_size={self.options.pool_size}, "
                f"max_overflow={self.options.max_overflow})"
            )
            raise StorageUnavailable(
                f"no connection to {display(self.url)} became free within {within}"
            ) from error
        except SQLAlchemyError as error:  # SQLAlchemy's own, with no driver error under it
            if committed:
                return result
            raise dialects.database_error(self.rules, error, self.url) from error
        except OSError as error:  # the socket under the driver: refused, reset, timed out
            if committed:
                return result
            raise _Retry(error, None, ambiguous=write and committing) from error
        return result

    def _count_retry(self, state: RetryCallState) -> None:
        self.retries += 1
        failure = state.outcome.exception() if state.outcome is not None else None
        interactive.retrying(self.url, failure, self.options.retry_timeout)  # the CLI's notice
        logger.debug(
            "retrying after %s (attempt %d, next in %.3f s)",
            failure.describe() if isinstance(failure, _Retry) else failure,
            state.attempt_number,
            state.upcoming_sleep,
        )


#: Options that set up the engine a ledger creates, refused with ``engine=``.
_ENGINE_OPTIONS = frozenset(
    {
        "pool_size",
        "max_overflow",
        "pool_timeout",
        "pool_recycle",
        "pool_pre_ping",
        "echo",
        "connect_args",
        "lock_timeout",
        "pgbouncer",
        "sqlite_synchronous",
    }
)
#: Every ledger of this process, for the fork hook below; weak, so that none is kept alive.
_LEDGERS: WeakSet[Ledger] = WeakSet()
#: In a forked child, the pools inherited from the parent: never used, never closed.
_INHERITED_POOLS: list[Any] = []


def _after_fork_in_child() -> None:
    for ledger in list(_LEDGERS):
        ledger._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Retry(Exception):
    """An attempt failed in a way that left nothing committed (``ambiguous``: unless the
    failure came out of the COMMIT), so the call may run again."""

    def __init__(self, cause: BaseException, code: str | int | None, *, ambiguous: bool = False) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.code = code
        self.ambiguous = ambiguous

    @property
    def detail(self) -> str:
        return _detail(self.cause)

    def describe(self) -> str:
        return f"code {self.code}" if self.code is not None else type(self.cause).__name__


def _detail(error: BaseException) -> str:
    """The driver's message of a wrapped DBAPI error, else the error itself."""
    orig = getattr(error, "orig", None)
    return str(orig if orig is not None else error) or type(error).__name__
