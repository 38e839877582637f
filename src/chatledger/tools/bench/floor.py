"""What one append costs the driver, against the naive floor: its statements, and its
round trips to the server (on aiosqlite: its hops to the connection's thread), counted
per call on the engine that sends them.

**The floor** (:class:`chatledger.tools.bench.workloads.Floor`) is a plain one-row
``INSERT`` committed per call, on chatledger's driver and engine settings (the same
durability: SQLite's ``synchronous``, the same pool and reset on return). Its cost
per call is the least a store can pay: a ``BEGIN`` where the driver sends one, the
``INSERT``, the ``COMMIT``. An append that costs no more round trips than that is
bound by the database's own work and the Python on either side of the driver.

Round trips are counted from SQLAlchemy's events where the driver cannot be watched:
each statement, each ``COMMIT`` and ``ROLLBACK`` (the pool's reset on return
included, when it finds a transaction open), and a ``BEGIN`` per transaction that
sent a statement where the driver sends its own (:attr:`Backend.begin_round_trip`).
Where it can (:attr:`Backend.count_requests`: aiosqlite), the driver's own requests
are counted instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolResetState

from ... import dialects


class RoundTrips:
    """Statements and round trips (or driver hops) sent on one engine's connections
    since :meth:`reset`: a counter to read around a call. :meth:`close` removes it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine.sync_engine
        self._backend = dialects.backend(engine.dialect.name, engine.dialect.driver)
        self.statements = 0
        #: The statements' first words (``INSERT INTO agent_sessions``...), in order.
        self.sent: list[str] = []
        self._protocol = 0  # BEGIN, COMMIT, ROLLBACK sent
        self._requests = 0  # the driver's own, where counted
        self._began = False
        self._autocommit = False
        self._stops: dict[int, Callable[[], None]] = {}
        self._listeners: list[tuple[Any, str, Callable[..., None], dict[str, Any]]] = [
            (self._engine, "before_cursor_execute", self._statement, {}),
            (self._engine, "begin", self._begin, {}),
            (self._engine, "commit", self._commit, {}),
            (self._engine, "rollback", self._end, {}),
            # Before chatledger's own reset listener, which ends the transaction.
            (self._engine, "reset", self._reset, {"insert": True}),
            (self._engine, "checkout", self._checkout, {}),
        ]
        for target, name, listener, options in self._listeners:
            event.listen(target, name, listener, **options)

    @property
    def driver_counted(self) -> bool:
        """Whether :attr:`round_trips` are the driver's own requests (aiosqlite's hops)."""
        return self._backend.count_requests is not None

    @property
    def round_trips(self) -> int:
        """Round trips to the server, or hops to the driver's thread."""
        if self.driver_counted:
            return self._requests
        return self.statements + self._protocol

    def reset(self) -> None:
        self.statements = self._protocol = self._requests = 0
        self.sent = []

    def close(self) -> None:
        for target, name, listener, _options in self._listeners:
            event.remove(target, name, listener)
        for stop in self._stops.values():
            stop()
        self._stops.clear()

    def _tick(self) -> None:
        self._requests += 1

    def _checkout(self, dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        count = self._backend.count_requests
        if count is not None and id(dbapi_connection) not in self._stops:
            self._stops[id(dbapi_connection)] = count(dbapi_connection, self._tick)

    def _statement(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.statements += 1
        self.sent.append(" ".join(statement.split()[:3]))
        if self._began:  # the driver sends its BEGIN before the transaction's first statement
            self._began = False
            self._protocol += 1

    def _begin(self, conn: Any) -> None:
        # In autocommit (a statement that commits itself) the driver sends neither.
        self._autocommit = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        self._began = self._backend.begin_round_trip and not self._autocommit

    def _commit(self, conn: Any) -> None:
        # The COMMIT of a transaction its statement ended on the server sends nothing.
        if conn.info.get(dialects.TRANSACTION_ENDED, False):
            self._began = False
        else:
            self._end(conn)

    def _end(self, _conn: Any) -> None:
        # A transaction that sent nothing ends without a round trip.
        if not self._began and not self._autocommit:
            self._protocol += 1
        self._began = False

    def _reset(self, dbapi_connection: Any, record: Any, state: PoolResetState) -> None:
        # As chatledger's reset listener decides (it runs after this one).
        if not dialects.skips_reset(self._backend, record, state) and self._backend.transaction_open(
            dbapi_connection
        ):
            self._protocol += 1
