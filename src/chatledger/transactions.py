"""A ledger's transactions: each call retried whole within its budget, every failure
classified, and a write made exactly-once across a lost COMMIT.

**Attempt.** A call runs its work in one transaction (:meth:`Transactions._attempt`):
a write with the backend's write options (:attr:`Backend.write`), a read
snapshot-consistent (:attr:`Backend.snapshot_read`). A failure is classified
once, by :func:`chatledger.dialects.classify`: a transient one (deadlock,
serialization failure, lock wait past ``lock_timeout``, busy SQLite file) and a
connection lost or refused before the COMMIT was sent left nothing committed, and
the whole call is tried again (:class:`_Retry`); every other failure becomes its
chatledger error at once (``StatementTooLarge``, ``SchemaNotReady``, the rest by
:func:`chatledger.dialects.database_error`) and is never retried. The budget is
time, not attempts: random exponential backoff, and no attempt after
``retry_timeout`` seconds from the start of the call (tenacity's policy, driven by
hand so that a call that succeeds at once pays nothing for it). When it runs out,
``StorageUnavailable``: nothing from the call was committed. A failure after the
COMMIT succeeded (returning the connection to the pool) is no failure of the call:
its result is returned.

**A bound on each attempt.** A server that stops answering sends no error, so each
attempt on a server database runs within a deadline (:mod:`chatledger.deadlines`): a
third of ``retry_timeout``, so that a stalled attempt leaves room for more; never less
than ``lock_timeout`` plus one second, so that a lock wait ends in the server's own
error first. An attempt whose server session is at work gets another deadline, up to
the budget's end; a quiet one is abandoned, its connection never pooled again, and
the call tried again as one whose connection was lost (a write whose COMMIT was under
way is settled, never sent blindly again). So a call on a silent server ends within
about ``retry_timeout + lock_timeout`` seconds.

**Ambiguous COMMIT.** A connection lost while the COMMIT was under way leaves the
outcome unknown: the server may have committed the transaction and lost only the
reply. Repeating the work blindly could write it twice; reporting a failure could
deny a write that was in fact stored. So a write carries its identity
(:class:`chatledger.identity.WriteIdentity`: an id fixed before its first attempt, its
content, the generation each attempt wrote in), whose settle decides the same way
for every kind of session (:mod:`chatledger.identity`); a write of another kind (a
pop, a clear, a purge's conditional delete) gives a ``settle`` function of its own.

**Settle.** After an ambiguous COMMIT every later attempt first runs the settle in
a read transaction of its own: the write's result when it was committed (returned,
nothing more written), ``None`` when not (the work is attempted again). A failure of
the work itself (a duplicate key, a version conflict) is settled once more before it
is raised: the server may still have been finishing the first COMMIT while the first
settle read, and the write's primary key decides that race.

**Probes and reads** are never ambiguous: a read, and a probe that reads on a
write's connection (``probe``: the schema check's isolation probe), leave nothing to
settle when their COMMIT is lost, and are retried as any transient failure is.

**OutcomeUnknown.** Raised, carrying ``write_id``, when the outcome stays unknown:
the COMMIT was ambiguous and no ``settle`` was given, or the database stayed
unreachable for the rest of the budget, or another error (no pooled connection
free, a refusal of the database) ended the call before a settle found the write.
No error that says nothing was committed is raised after an ambiguous COMMIT; the
work's own refusal of a write that settle did not find (``ConstraintViolation``)
is the answer, and passes. A repeat of the identical call settles by the same id,
so a write that was committed is returned, not written again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_before_delay,
    wait_random_exponential,
)

from . import dialects, interactive, migrate, telemetry
from .deadlines import AttemptStalled, Deadline, abandoned_on_cancel, attempt_budget, attempt_limit
from .dsn import as_argument, display
from .errors import (
    ConfigurationError,
    ConstraintViolation,
    DatabaseError,
    OutcomeUnknown,
    SchemaNotReady,
    StatementTooLarge,
    StorageUnavailable,
)
from .identity import WriteIdentity
from .options import LedgerOptions
from .replicas import ReadPositions

if TYPE_CHECKING:
    from .connections import Connections
    from .readiness import Readiness

logger = logging.getLogger("chatledger")

T = TypeVar("T")
Work = Callable[[AsyncConnection], Awaitable[T]]
#: Looks a write up by its id: its result when it was committed, else ``None``.
Settle = Callable[[AsyncConnection], Awaitable[T | None]]
#: Run on a transaction's connection after its COMMIT (the write position's read).
After = Callable[[AsyncConnection], Awaitable[None]]


class Transactions:
    """The transactions of one ledger, with its retry budget and its count of retries.

    Args:
        connections: The ledger's engine and event loop binding.
        options: The ledger's options (``retry_timeout``, ``retry_backoff``,
            ``retry_backoff_max``; the pool's, for messages).
        readiness: The ledger's schema check, run before the first call (and again
            after a call found a table or column missing).
    """

    def __init__(self, connections: Connections, options: LedgerOptions, readiness: Readiness) -> None:
        self.connections = connections
        self.options = options
        self.readiness = readiness
        self.url = connections.url
        self.backend = connections.backend
        self.engine = connections.engine
        self.foreign = connections.foreign
        #: Transient failures retried since this ledger was built (for the stress command).
        self.retries = 0
        #: The write positions of the sessions written, when replicas serve reads.
        replication = self.backend.replication
        self.positions = (
            ReadPositions(replication.later) if connections.replicas and replication is not None else None
        )
        #: When a failed attempt is tried again: a random exponential backoff, and no
        #: attempt after ``retry_timeout`` seconds from the start of the call.
        self._retry_policy = AsyncRetrying(
            stop=stop_before_delay(self.options.retry_timeout),
            wait=wait_random_exponential(
                multiplier=self.options.retry_backoff, max=self.options.retry_backoff_max
            ),
            retry=retry_if_exception_type(_Retry),
        )

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
        """See :meth:`chatledger.engine.Ledger.write`."""
        positions = self.positions
        if session is None or positions is None:
            return await self.run(
                work,
                write=True,
                identity=identity,
                settle=settle,
                write_id=write_id,
                first_writes=first_writes,
                autocommit=autocommit,
            )
        replication = self.backend.replication
        assert replication is not None
        captured: list[str | None] = []

        async def remember(conn: AsyncConnection) -> None:
            captured.append(await replication.position(conn))

        try:
            result = await self.run(
                work,
                write=True,
                identity=identity,
                settle=settle,
                write_id=write_id,
                after=remember,
                first_writes=first_writes,
                autocommit=autocommit,
            )
        except OutcomeUnknown:
            positions.wrote(session, None)  # perhaps committed, at a position unknown
            raise
        if autocommit and result is None:
            return result  # the statement that commits itself wrote nothing
        # No position when reading it failed (the connection lost right after the
        # COMMIT): the session is then read on the primary (replicas.ReadPositions).
        positions.wrote(session, captured[-1] if captured else None)
        return result

    async def read(self, work: Work[T], *, single_statement: bool = False) -> T:
        """See :meth:`chatledger.engine.Ledger.read`."""
        return await self.run(work, write=False, single_statement=single_statement)

    async def run(
        self,
        work: Work[T],
        *,
        write: bool = False,
        options: dict[str, Any] | None = None,
        ready: bool = True,
        identity: WriteIdentity[T] | None = None,
        settle: Settle[T] | None = None,
        write_id: str | None = None,
        after: After | None = None,
        first_writes: bool = False,
        single_statement: bool = False,
        autocommit: bool = False,
        probe: bool = False,
    ) -> T:
        """Run ``work`` as :meth:`write` or :meth:`read` do; ``options``: execution options
        of its own instead of a write's or a read's; ``ready=False``: without the schema
        check first (the check's own reads); ``identity``: the write's identity, whose
        settle (:meth:`WriteIdentity.settle`) and id serve as ``settle`` and
        ``write_id``; ``probe``: ``work`` reads on a write's connection (the write
        options, the writer's isolation) and writes nothing, so a lost COMMIT leaves
        nothing to settle and it is retried as a read is; ``after``: run on the connection of the
        transaction that succeeded (the work's or a settle's that found the write),
        after its COMMIT; its failure is ignored; ``first_writes``: a write whose first
        statement writes (:attr:`chatledger.dialects.Backend.first_write`);
        ``single_statement``: a read that is one statement (:attr:`Backend.single_read`);
        ``autocommit``: a write that is one statement committed by itself
        (:attr:`Connections.single_writer`, which must be set), whose every lost
        connection leaves its outcome unknown, as a lost COMMIT does; its ``None``
        says it wrote nothing (``after`` is not run)."""
        await self.prepare(ready=ready)
        if identity is not None:
            settle, write_id = identity.settle, identity.id
        # The error of a COMMIT whose outcome is unknown, once one happened.
        ambiguous: BaseException | None = None
        # tenacity's state of this call, made on its first failure: a call that succeeds
        # at once pays nothing for the retry machinery.
        state: RetryCallState | None = None
        started = time.monotonic()
        while True:
            try:
                if ambiguous is not None and settle is not None:
                    found = await self._settle(settle, after, self._limit(started))
                    if found is not None:
                        return found
                if identity is not None:
                    identity.attempting()
                try:
                    return await self._attempt(
                        work,
                        limit=self._limit(started),
                        write=write,
                        options=options,
                        after=after,
                        first_writes=first_writes,
                        single_statement=single_statement,
                        autocommit=autocommit,
                        probe=probe,
                    )
                except _Retry as retry:
                    if retry.ambiguous:
                        ambiguous = retry.cause
                        if identity is not None:
                            identity.lost()
                        if settle is None:
                            raise self._unknown(retry.cause, write_id, settled=False) from retry.cause
                    raise
                except (StorageUnavailable, ConfigurationError, SchemaNotReady):
                    raise
                except dialects.RoutineRefused as refused:
                    # The routine ran nothing: the ledger keeps its statements from now
                    # on and this call runs again at once (once per ledger, outside the
                    # retry budget); a self-committing statement returns None, so its
                    # caller's transaction makes the append.
                    self.readiness.refuse_routine(refused.error)
                    if autocommit:
                        return None  # type: ignore[return-value]
                    continue
                except Exception:
                    # The work failed: a repeat of a write that was committed (by an
                    # earlier call, or by this one's ambiguous COMMIT that the server
                    # finished late) fails on the write's own key. Settle decides.
                    if settle is not None:
                        found = await self._settle(settle, after, self._limit(started))
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

    async def prepare(self, *, ready: bool = True) -> None:
        """What comes before a call's first transaction: the ledger open, bound to the
        running event loop, and its schema checked (``ready``)."""
        if self.connections.closed:
            raise RuntimeError(f"{self.connections!r} is closed")
        await self.connections.bind_loop()
        if ready and not self.readiness.ready:
            await self.readiness.ensure_ready(self)

    def _limit(self, started: float) -> tuple[float, float] | None:
        """The deadline of an attempt starting now in a call started at ``started``, and
        the most it may take at work (:func:`attempt_limit`, :func:`attempt_budget`);
        ``None`` for SQLite, whose file answers or is busy."""
        if not self.backend.server:
            return None
        elapsed = time.monotonic() - started
        return attempt_limit(self.options, elapsed), attempt_budget(self.options, elapsed)

    async def _settle(
        self, settle: Settle[T], after: After | None, limit: tuple[float, float] | None
    ) -> T | None:
        found = await self._attempt(settle, limit=limit, write=False, after=after)
        telemetry.settle(self.connections, found is not None)  # a settle and its answer
        return found

    def _unknown(
        self, cause: BaseException, write_id: str | None, *, settled: bool, ended: bool = False
    ) -> OutcomeUnknown:
        """``ended``: ``cause`` is the error that ended the call after the lost COMMIT,
        not the loss of the database for the rest of the budget."""
        telemetry.unknown(self.connections)  # every OutcomeUnknown is made here
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

    async def _attempt(
        self,
        work: Work[T],
        *,
        limit: tuple[float, float] | None,
        write: bool,
        options: dict[str, Any] | None = None,
        after: After | None = None,
        first_writes: bool = False,
        single_statement: bool = False,
        autocommit: bool = False,
        probe: bool = False,
    ) -> T:
        """One transaction, a write (:attr:`Backend.write`) or a snapshot-consistent
        read (:attr:`Backend.snapshot_read`), or one with ``options`` instead (``probe``:
        a write's transaction whose work writes nothing, never ambiguous), abandoned
        after ``limit`` seconds (``None``: never). A failure a retry can cure, and an
        attempt abandoned, raise :class:`_Retry`; every other SQLAlchemy error its
        chatledger error (``StatementTooLarge``, ``SchemaNotReady`` here; the rest by
        :func:`chatledger.dialects.database_error`); ``work``'s own errors pass."""
        # What the attempt reached: a connection, the COMMIT sent, the COMMIT answered.
        progress = _Progress()
        # Behind PgBouncer the driver's session id is PgBouncer's, not the server's.
        liveness = None if self.options.pgbouncer else self.backend.liveness
        quiet, budget = limit or (None, None)
        deadline = Deadline(quiet, self.backend.abort, liveness, budget=budget)
        began = time.monotonic()
        try:
            async with deadline:
                return await self._transaction(
                    work,
                    progress,
                    deadline,
                    write=write,
                    options=options,
                    after=after,
                    first_writes=first_writes,
                    single_statement=single_statement,
                    autocommit=autocommit,
                    probe=probe,
                )
        except Exception as error:
            if not deadline.passed:
                raise  # the attempt's own failure
            if progress.committed:  # only what follows the COMMIT stalled: the call is done
                return progress.result  # type: ignore[return-value]
            reached = (
                f"waiting for the database's answer on {display(self.url)}"
                if deadline.conn is not None
                else f"connecting to {display(self.url)} or waiting for a free pooled connection"
            )
            waited = time.monotonic() - began
            stalled = AttemptStalled(
                f"the attempt was abandoned after {waited:.3g} s {reached}, and its connection closed"
            )
            stalled.__cause__ = error  # where it waited, for the traceback
            ambiguous = write and progress.committing and not probe
            raise _Retry(stalled, None, ambiguous=ambiguous) from error

    async def _transaction(
        self,
        work: Work[T],
        progress: _Progress,
        deadline: Deadline,
        *,
        write: bool,
        options: dict[str, Any] | None,
        after: After | None,
        first_writes: bool,
        single_statement: bool,
        autocommit: bool,
        probe: bool,
    ) -> T:
        """The attempt of :meth:`_attempt` within its ``deadline``, telling ``progress``
        how far it got and ``deadline`` its connection."""
        committing = committed = False
        try:
            if write:
                engine = self.connections.first_writer if first_writes else self.connections.writer
            else:
                engine = self.connections.single_reader if single_statement else self.connections.reader
            if options is not None:  # a call of its own kind (once per ledger): a copy for it
                engine = self.engine.execution_options(**options)
            # Set on the connection inside the block where the driver awaits to set them
            # (Backend.characteristics_await), not while connecting.
            characteristics = None
            if self.backend.characteristics_await and not self.foreign and engine is not self.engine:
                characteristics, engine = engine.get_execution_options(), self.engine
            if autocommit:
                single = self.connections.single_writer
                assert single is not None, "autocommit needs Connections.single_writer"
                async with single.connect() as conn, abandoned_on_cancel(conn, self.backend.abort):
                    deadline.conn = conn
                    if self.backend.single_append_autocommit:
                        # Set here, not as the engine's option (applied while connecting): a
                        # cancellation while the driver sets it (psycopg awaits) still gives
                        # the connection back, and the pool resets it.
                        await dialects.set_characteristics(conn, {"isolation_level": "AUTOCOMMIT"})
                    # The statement commits itself: once sent, its outcome is the COMMIT's
                    # (unless the driver knows its connection closed: then it sends nothing).
                    raw = await conn.get_raw_connection()
                    committing = progress.committing = not self.backend.connection_closed(
                        raw.driver_connection
                    )
                    result = await work(conn)
                    committed = True
                    progress.done(result)
                    if not self.backend.single_append_autocommit:
                        # It ended its own transaction (dialects.TRANSACTION_ENDED): this
                        # COMMIT sends nothing, and the pool's reset need not roll back.
                        await conn.commit()
                        conn.info[dialects.COMMITTED] = True
                    if after is not None and result is not None:
                        await after(conn)
                return result
            async with engine.connect() as conn, abandoned_on_cancel(conn, self.backend.abort):
                deadline.conn = conn
                if characteristics:
                    await dialects.set_characteristics(conn, characteristics)
                async with conn.begin():
                    async with abandoned_on_cancel(conn, self.backend.abort):  # before the ROLLBACK
                        if self.foreign:  # after the engine's own begin listeners
                            await self.backend.foreign_begin(conn)
                        result = await work(conn)
                    committing = progress.committing = True  # leaving this block sends the COMMIT
                committed = True
                progress.done(result)
                if after is not None and (write or result is not None):
                    await after(conn)  # its failure: returned as committed, below
                elif not self.foreign:
                    conn.info[dialects.COMMITTED] = True  # the pool's reset need not roll back
        except DBAPIError as error:
            if committed:  # only returning the connection to the pool failed
                return result
            failure = dialects.classify(self.backend, error)
            if failure is dialects.Failure.TOO_LARGE:
                raise StatementTooLarge(
                    f"the database refused the statement as too large (statement_limit "
                    f"{self.readiness.statement_limit} bytes); nothing was written: {error.orig}",
                    code=dialects.error_code(error, self.backend),
                    server_message=str(error.orig),
                ) from error
            if failure is dialects.Failure.SCHEMA:
                # The revision check passed, yet a table or column is missing: check again
                # on the next call (the database may have been downgraded or replaced).
                self.readiness.ready = False
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
                # Even out of the COMMIT: the server rolled the transaction back. But a
                # statement that commits its own transaction may be interrupted once it
                # has committed (a time limit, KILL QUERY): unknown, as a lost COMMIT.
                ambiguous = (
                    autocommit
                    and committing
                    and not self.backend.single_append_autocommit
                    and dialects.error_code(error, self.backend)
                    not in self.backend.single_append_rolled_back_codes
                )
                raise _Retry(error, dialects.error_code(error), ambiguous=ambiguous) from error
            if failure is dialects.Failure.CONNECTION:
                code = dialects.error_code(error)
                # A statement that commits itself, answered by the end of the idle session
                # it was sent on, never ran.
                idle = autocommit and dialects.error_code(error, self.backend) in self.backend.idle_codes
                lost = write and committing and not idle and not probe
                raise _Retry(error, code, ambiguous=lost) from error
            # Every other code, listed or not, becomes a chatledger error. A write's own
            # key clash becomes ConstraintViolation, which Transactions.run settles before
            # raising it.
            raise dialects.database_error(self.backend, error, self.url) from error
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
            raise dialects.database_error(self.backend, error, self.url) from error
        except OSError as error:  # the socket under the driver: refused, reset, timed out
            if committed:
                return result
            raise _Retry(error, None, ambiguous=write and committing and not probe) from error
        return result

    def _count_retry(self, state: RetryCallState) -> None:
        self.retries += 1
        failure = state.outcome.exception() if state.outcome is not None else None
        code = failure.code if isinstance(failure, _Retry) else None
        telemetry.retry(self.connections, code, state.attempt_number, state.upcoming_sleep)
        interactive.retrying(self.connections.url, failure, self.options.retry_timeout)  # the CLI's notice
        logger.debug(
            "retrying after %s (attempt %d, next in %.3f s)",
            failure.describe() if isinstance(failure, _Retry) else failure,
            state.attempt_number,
            state.upcoming_sleep,
        )


class _Progress:
    """How far one attempt got, for the deadline that abandons it (:meth:`Transactions._attempt`)."""

    __slots__ = ("committed", "committing", "result")

    def __init__(self) -> None:
        self.committing = False
        self.committed = False
        self.result: object = None

    def done(self, result: object) -> None:
        """The COMMIT was answered: ``result`` is the call's."""
        self.committed = True
        self.result = result


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
