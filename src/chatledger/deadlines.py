"""Deadlines of one attempt: how long a call's attempt may wait on a server that stopped
answering, and how an attempt is abandoned.

A server that stops answering (a black-holed network, a host frozen, a cluster stuck
in a view change) sends no error and no reset: a statement would wait on its socket
for as long as the kernel keeps the connection open. So each attempt on a server
database runs within a deadline of its own (:class:`Deadline`, of
:func:`attempt_limit` seconds, applied by
:class:`chatledger.transactions.Transactions` and by replica reads).

At the deadline a second connection asks the server whether the attempt's session is
at work (:class:`chatledger.dialects.Liveness`). One running a statement, or whose
state changed within the last half deadline, is slow, not silent, and gets another
deadline; so does one the question got no answer about within :data:`ASK_LIMIT`
seconds (a silent server, no pooled connection free, a held-up event loop); never past
the call's budget. A quiet session, or one at the budget's end, is abandoned at once:
the session is ended (its transaction rolled back and its locks released without
waiting for the server to notice the lost client) and the socket closed without a
round trip, so the statement waiting on it fails as on a lost connection and
SQLAlchemy invalidates the connection. An attempt with no socket to end yet
(connecting, waiting for a pooled connection), or still running :data:`ABORT_GRACE`
seconds later, is cancelled and its connection invalidated
(:func:`abandoned_on_cancel`). The call is then tried again within its retry budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from .dialects import Liveness
from .options import LedgerOptions

logger = logging.getLogger("chatledger")

#: Seconds beyond ``lock_timeout`` an attempt always has, however little of the budget
#: is left: its lock waits end in the server's error, before its deadline.
ATTEMPT_FLOOR = 1.0
#: Seconds an abandoned attempt whose socket was ended may take to fail on it, before
#: it is cancelled.
ABORT_GRACE = 1.0
#: Seconds the question to the server, whether an attempt's session is at work (or the
#: statement that ends it), may take; unanswered, the attempt waits on within its
#: budget.
ASK_LIMIT = 1.0
#: The share of ``retry_timeout`` one attempt may take: at least this many attempts
#: fit in the budget when each stalls.
ATTEMPTS_IN_BUDGET = 3


def attempt_limit(options: LedgerOptions, elapsed: float) -> float:
    """Seconds an attempt starting ``elapsed`` seconds into its call may stay quiet (see
    the module): ``retry_timeout`` / :data:`ATTEMPTS_IN_BUDGET`, cut to what is left of
    the budget, and never less than ``lock_timeout`` + :data:`ATTEMPT_FLOOR`."""
    floor = options.lock_timeout + ATTEMPT_FLOOR
    share = options.retry_timeout / ATTEMPTS_IN_BUDGET
    return max(floor, min(share, options.retry_timeout - elapsed))


def attempt_budget(options: LedgerOptions, elapsed: float) -> float:
    """Seconds an attempt starting ``elapsed`` seconds into its call may take at most,
    at work or not: what is left of ``retry_timeout``, never less than its
    :func:`attempt_limit`."""
    return max(attempt_limit(options, elapsed), options.retry_timeout - elapsed)


class AttemptStalled(Exception):
    """An attempt that got no answer within its deadline (:func:`attempt_limit`) and
    was abandoned, its connection closed: the failure a retry reports."""


@contextlib.asynccontextmanager
async def abandoned_on_cancel(
    conn: AsyncConnection, abort: Callable[[Any], None] | None = None
) -> AsyncIterator[None]:
    """Invalidate ``conn`` when the block is cancelled (its deadline, the caller's
    ``asyncio.timeout`` or task cancel, an anyio cancel scope), before anything else
    runs on it: a cancelled statement may leave its reply unread, and a server that
    stopped answering would keep a ROLLBACK or the pool's reset waiting for ever. With
    the backend's ``abort`` (:attr:`chatledger.dialects.Backend.abort`) its socket is
    ended first, without awaiting: the invalidation then finds it closed and waits for
    no goodbye, even under an anyio cancel scope that cancels every later await. The
    invalidated connection is never pooled again."""
    try:
        yield
    except asyncio.CancelledError as error:
        if not conn.invalidated:
            _end_socket(conn, abort)
            await conn.invalidate(error)
        raise


def _end_socket(conn: AsyncConnection, abort: Callable[[Any], None] | None) -> bool:
    """End ``conn``'s socket by ``abort``; whether it was ended."""
    if abort is None or conn.invalidated or conn.closed:
        return False
    try:
        abort(conn.sync_connection.connection.driver_connection)  # type: ignore[union-attr]
    except Exception:  # already closed, or no socket
        logger.debug("ending the socket of an abandoned attempt failed", exc_info=True)
        return False
    return True


class Deadline:
    """The deadline of one attempt (see the module): ``async with`` it around the
    attempt, and tell it the attempt's connection once checked out (:attr:`conn`).

    Args:
        limit: Seconds the attempt may stay quiet (``None``: no deadline).
        abort: The backend's :attr:`chatledger.dialects.Backend.abort`.
        liveness: The backend's :attr:`chatledger.dialects.Backend.liveness`
            (``None``: an attempt past its deadline is abandoned unasked).
        budget: Seconds the attempt may take at most, at work or not (``None``: ``limit``).
    """

    def __init__(
        self,
        limit: float | None,
        abort: Callable[[Any], None] | None,
        liveness: Liveness | None = None,
        budget: float | None = None,
    ) -> None:
        self.limit = limit
        self._abort = abort
        self._liveness = liveness
        self._budget = limit if budget is None or limit is None else max(budget, limit)
        self._end = 0.0
        #: The attempt's connection, once it has one.
        self.conn: AsyncConnection | None = None
        #: The deadline passed: whatever the attempt raises now, it was abandoned.
        self.passed = False
        self._timeout = asyncio.timeout(None)
        self._timer: asyncio.TimerHandle | None = None
        self._asking: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Deadline:
        await self._timeout.__aenter__()
        if self.limit is not None and self._budget is not None:
            loop = asyncio.get_running_loop()
            self._end = loop.time() + self._budget
            self._timer = loop.call_later(self.limit, self._expire)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        asking, self._asking = self._asking, None
        if asking is not None and not asking.done():
            if not self.passed:  # the attempt ended first: nothing to ask or end
                asking.cancel()
            # Else it ends the abandoned attempt's session, within its own time limit,
            # even if this task is cancelled meanwhile.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(asking)
        await self._timeout.__aexit__(kind, error, traceback)

    def _expire(self) -> None:
        """Ask the server whether the attempt's session is at work (see the module); with
        nothing to ask about, abandon the attempt; with its budget spent, end its
        session and abandon it."""
        conn = self.conn
        loop = asyncio.get_running_loop()
        if self._liveness is None or conn is None or conn.invalidated or conn.closed:
            self._abandon()
            return
        spent = self._end - loop.time() <= 0
        self._asking = loop.create_task(self._ask(conn, self._liveness, spent))

    async def _ask(self, conn: AsyncConnection, liveness: Liveness, spent: bool) -> None:
        """Abandon the attempt when its budget is ``spent`` or the server reports its
        session quiet or gone, ending the session (when the server answers); else give
        the attempt another deadline within its budget."""
        assert self.limit is not None
        try:
            session = liveness.session_id(conn.sync_connection.connection.driver_connection)  # type: ignore[union-attr]
        except Exception:  # no driver connection or socket left
            self._abandon()
            return
        busy: bool | None = None  # unknown: no answer
        ended = False
        try:
            async with (
                asyncio.timeout(ASK_LIMIT),
                conn.engine.connect() as other,
                abandoned_on_cancel(other, self._abort),
            ):
                # Quiet: no statement running, and no change for half a deadline (a
                # statement that reached the server just after the attempt began is
                # not taken for progress).
                values = {"id": session, "quiet": self.limit / 2}
                found = True
                if not spent:
                    row = (await other.execute(text(liveness.busy), values)).first()
                    found = row is not None  # else the session is gone: nothing to end
                    busy = found and bool(row[0])  # type: ignore[index]
                if found and not busy:
                    await other.execute(text(liveness.end), values)
                    ended = True
                await other.rollback()
        except Exception:  # no answer in time (a silent server, no pooled connection free)
            logger.debug("asking whether an attempt's session is at work failed", exc_info=True)
        loop = asyncio.get_running_loop()
        again = min(self.limit, self._end - loop.time())
        if busy is not False and again > 0:  # at work, or no answer: wait on
            logger.debug("an attempt past its deadline waits %.3g s more (at work: %s)", again, busy)
            self._timer = loop.call_later(again, self._expire)
            return
        self._abandon()
        if not ended and busy is not False:
            # The budget's end found the session at work or unasked: end it now that
            # the abandoned attempt has given its pooled connection back.
            await self._end_session(conn, liveness, session)

    async def _end_session(self, conn: AsyncConnection, liveness: Liveness, session: int) -> None:
        try:
            async with (
                asyncio.timeout(ASK_LIMIT),
                conn.engine.connect() as other,
                abandoned_on_cancel(other, self._abort),
            ):
                await other.execute(text(liveness.end), {"id": session})
                await other.rollback()
        except Exception:
            logger.debug("ending an abandoned attempt's session failed", exc_info=True)

    def _abandon(self) -> None:
        """End the connection's socket, so that the statement waiting on it fails as on a
        lost connection and SQLAlchemy invalidates the connection; cancel the attempt
        when there is no socket to end (connecting, waiting for the pool) or the driver
        cannot, and as a backstop :data:`ABORT_GRACE` seconds later."""
        self.passed = True
        now = asyncio.get_running_loop().time()
        conn = self.conn
        if conn is not None and _end_socket(conn, self._abort):
            self._timeout.reschedule(now + ABORT_GRACE)
        else:
            self._timeout.reschedule(now)
