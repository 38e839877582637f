"""Reads on replicas (``read_dsn``) that still see this process's own writes.

A store's ``load``, ``list`` and ``get`` read on a replica: a PostgreSQL streaming
standby or a MariaDB replica with GTIDs, the next one of ``read_dsn`` for each read.
A replica applies the primary's writes a little later, so a read there could miss a
write this process has just made. Hence:

- **After a write** of a session (an append, a checkpoint, a change of its fields, a
  delete), the ledger reads the primary's position on the write's connection right
  after its COMMIT (:attr:`chatledger.dialects.Replication.position`: PostgreSQL's WAL
  insert location, MariaDB's ``@@gtid_binlog_pos``) and remembers it for the session
  (:class:`ReadPositions`), the later of it and any position it had.
- **Before a replica read** of such a session, the replica is asked to have applied
  that position, waiting at most ``replica_wait`` seconds (PostgreSQL: polling
  ``pg_last_wal_replay_lsn()``; MariaDB: ``MASTER_GTID_WAIT``), in a transaction of
  its own; the read's snapshot is taken after it, so it holds the write. A replica
  still behind after the bound, one that fails for a reason a retry could cure
  (unreachable, a deadlock, no connection free, a table it lacks yet), or one that
  stops answering (abandoned after an attempt's deadline plus ``replica_wait``,
  :mod:`chatledger.deadlines`), leaves the read to the primary, with the primary's
  retry budget. Every other failure is its
  chatledger error, classified as on the primary.
- A ``list`` (no session) waits for the latest position this process wrote.
- Another process's write: tell this process its position (the writer's
  ``write_position(session_id)``, given to the reader's ``remember_write``) and the
  reader waits for it as for its own.

A session whose position could not be read after a write (the connection lost right
after the COMMIT) is read on the primary from then on. Positions are kept for the
last :data:`KEPT` sessions written; an older one's is folded into a floor that every
read of a session not kept waits for.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from . import dialects
from .deadlines import Deadline, abandoned_on_cancel, attempt_limit
from .dsn import display

if TYPE_CHECKING:
    from .connections import Connections, Replica
    from .transactions import Transactions, Work

logger = logging.getLogger("chatledger")

T = TypeVar("T")

#: Sessions whose write positions are kept one by one.
KEPT = 10_000

#: The failures of a replica that send its read to the primary: those a retry could cure.
_TO_PRIMARY = frozenset({dialects.Failure.TRANSIENT, dialects.Failure.CONNECTION, dialects.Failure.SCHEMA})


class ReadPositions:
    """The write positions of the sessions this process wrote (see the module).

    Args:
        later: The backend's :attr:`chatledger.dialects.Replication.later`.
    """

    def __init__(self, later: Callable[[str, str], str]) -> None:
        self._later = later
        self._sessions: OrderedDict[str, str | None] = OrderedDict()
        #: The latest position of every write: what a ``list`` waits for.
        self.latest: str | None = None
        #: The latest position of the sessions no longer kept one by one.
        self.floor: str | None = None
        #: A write's position was lost: lists go to the primary from then on (a position
        #: recorded later may have been read before that write's COMMIT).
        self.lost = False
        #: A session of lost position stopped being kept one by one: the sessions not
        #: kept go to the primary from then on.
        self.lost_evicted = False

    def _max(self, one: str | None, other: str) -> str:
        return other if one is None else self._later(one, other)

    def wrote(self, session: str, position: str | None) -> None:
        """Remember a write of ``session`` at ``position``; ``None``: its position is
        unknown, and the session is read on the primary from now on."""
        if position is None:
            self._sessions[session] = None
            self.lost = True
        else:
            self.latest = self._max(self.latest, position)
            if session not in self._sessions or self._sessions[session] is not None:
                # (Unknown stays unknown: the position lost may be the later one.)
                self._sessions[session] = self._max(self._sessions.get(session), position)
        self._sessions.move_to_end(session)
        while len(self._sessions) > KEPT:
            _, evicted = self._sessions.popitem(last=False)
            if evicted is None:
                self.lost_evicted = True
            else:
                self.floor = self._max(self.floor, evicted)

    def needed(self, session: str | None) -> tuple[bool, str | None]:
        """``(on_primary, position)``: whether a read of ``session`` (``None``: a list)
        must go to the primary, else the position a replica must have applied first
        (``None``: none)."""
        if session is None:
            return (True, None) if self.lost else (False, self.latest)
        if session in self._sessions:
            position = self._sessions[session]
            return position is None, position
        return (True, None) if self.lost_evicted else (False, self.floor)


class ReplicaReads:
    """The replica reads of one ledger: which replica, the wait, the fall back.

    Args:
        connections: The ledger's connections, with its :attr:`Connections.replicas`.
        transactions: The ledger's transactions, for the primary's reads.
    """

    def __init__(self, connections: Connections, transactions: Transactions) -> None:
        self.connections = connections
        self.transactions = transactions
        #: The replicas, in turn.
        self._next = itertools.cycle(connections.replicas)
        #: The write positions of the sessions this process wrote (kept by the
        #: transactions, which read them after each write).
        self.positions = transactions.positions
        #: Reads a replica served, and reads it left to the primary (behind past the
        #: bound, or failed): for the bench and the tests.
        self.served = 0
        self.fell_back = 0
        #: Reads that waited for a replica to apply a position, and the seconds they
        #: waited in all (the bound's cost, for the tests' figures).
        self.waits = 0
        self.waited = 0.0

    async def read(self, work: Work[T], session: str | None) -> T:
        """Run ``work`` in a snapshot-consistent read on a replica that has applied this
        process's writes of ``session`` (``None``: all of them), else on the primary."""
        if not self.connections.replicas or self.positions is None:
            return await self.transactions.read(work)
        on_primary, position = self.positions.needed(session)
        if not on_primary:
            replica = next(self._next)
            await self.transactions.prepare()
            outcome = await self._attempt(replica, work, position)
            if outcome is not None:
                self.served += 1
                return outcome[0]
        self.fell_back += 1
        return await self.transactions.read(work)

    async def _attempt(self, replica: Replica, work: Work[T], position: str | None) -> tuple[T] | None:
        """One read on ``replica``: ``(result,)``, or ``None`` when it is behind
        ``position`` after the bound, failed curably, or stopped answering: abandoned
        after an attempt's time (:func:`chatledger.deadlines.attempt_limit`) and the
        wait (logged at DEBUG)."""
        options = self.connections.options
        deadline = Deadline(
            attempt_limit(options, 0.0) + options.replica_wait,
            replica.backend.abort,
            None if options.pgbouncer else replica.backend.liveness,
        )
        try:
            async with deadline:
                return await self._read(replica, work, position, deadline)
        except Exception as error:
            failed = error
            if deadline.passed:
                pass  # it stopped answering
            elif isinstance(error, DBAPIError):
                if dialects.classify(replica.backend, error) not in _TO_PRIMARY:
                    raise dialects.database_error(replica.backend, error, replica.url) from error
            elif isinstance(error, PoolTimeout | OSError):
                pass
            elif isinstance(error, SQLAlchemyError):
                raise dialects.database_error(replica.backend, error, replica.url) from error
            else:
                raise
        logger.debug("replica %s failed (%s): read on the primary", display(replica.url), failed)
        return None

    async def _read(
        self, replica: Replica, work: Work[T], position: str | None, deadline: Deadline
    ) -> tuple[T] | None:
        """:meth:`_attempt`'s read within ``deadline``, its connection invalidated if it
        is cancelled."""
        replication = replica.backend.replication
        assert replication is not None
        bound = self.connections.options.replica_wait
        characteristics_await = replica.backend.characteristics_await
        # psycopg: set on the connection inside the block (Backend.characteristics_await).
        engine = replica.engine if characteristics_await else replica.reader
        async with engine.connect() as conn, abandoned_on_cancel(conn, replica.backend.abort):
            deadline.conn = conn
            if characteristics_await:
                await dialects.set_characteristics(conn, replica.backend.snapshot_read)
            if position is not None:
                began = time.monotonic()
                applied = await replication.wait(conn, position, bound)
                self.waits += 1
                self.waited += time.monotonic() - began
                await conn.rollback()  # the read's snapshot starts after the wait
                if not applied:
                    logger.debug(
                        "%s is behind %s after %g s: read on the primary",
                        display(replica.url),
                        position,
                        bound,
                    )
                    return None
            async with conn.begin(), abandoned_on_cancel(conn, replica.backend.abort):  # before the ROLLBACK
                return (await work(conn),)
