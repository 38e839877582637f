"""A ledger's connections: the engine it creates or the caller's it adopts, the event
loop its pool serves, and a new pool in a forked child.

**One event loop at a time.** asyncpg and aiomysql connections, and the pool's own
wait queue, belong to the event loop that opened them (SQLAlchemy's "Using multiple
asyncio event loops"), so the pool serves one loop: the first call binds the ledger to
its loop, and a call from another loop (the next ``asyncio.run``, a worker's new loop)
replaces the pool first (:meth:`Connections.bind_loop`, logged at DEBUG). The old
loop's idle connections, which no other loop can close, are left to the garbage
collector (aiomysql's finalizer then prints a harmless "Event loop is closed"). Two
loops running in two threads at once are not supported: the pool would be replaced
back and forth, and a call racing a switch can check out the other loop's connection
and fail with the driver's ``RuntimeError``. Give each such thread its own storage.

A caller's engine (``engine=``) is not the ledger's to replace: a call from another
loop than its first raises ``ConfigurationError`` before it checks out a connection,
unless the engine's pool is a ``NullPool`` (no connection outlives its call).

**Forks.** In a child process (``os.fork``, gunicorn ``--preload``, celery
prefork, multiprocessing's ``fork`` start method), the ledger starts over with
a new, empty pool, as SQLAlchemy's "Using Connection Pools with Multiprocessing
or os.fork()" prescribes (``engine.dispose(close=False)``); the parent's
connections are neither used nor closed by the child.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary, WeakSet, ref

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from . import dialects
from .dsn import display, resolve_dsn, sqlite_file
from .errors import ConfigurationError
from .options import LedgerOptions

logger = logging.getLogger("chatledger")


@dataclass(frozen=True)
class Replica:
    """One read replica of a ledger: its URL, backend (of its driver), engine and the
    engine's snapshot-read copy."""

    url: URL
    backend: dialects.Backend
    engine: AsyncEngine
    reader: AsyncEngine


class Connections:
    """The engine of one ledger and the event loop its pool is bound to.

    Args:
        dsn: See :func:`chatledger.dsn.resolve_dsn`; ``None`` with ``engine``.
        engine: The caller's ``AsyncEngine`` (:class:`chatledger.engine.Ledger`'s
            ``engine=``), used and never disposed; ``None``: one is created from ``dsn``.
        options: The ledger's options; those that set up an engine are refused with
            ``engine``.

    Raises:
        ValueError / TypeError: a bad DSN, option or engine, or both ``dsn`` and
            ``engine``.
    """

    #: The database's URL (:func:`chatledger.dsn.display` masks its password).
    url: URL
    #: SQLAlchemy's dialect name: "postgresql", "mysql" or "sqlite".
    dialect: str
    #: The backend of the dialect and driver.
    backend: dialects.Backend
    engine: AsyncEngine

    def __init__(self, dsn: str | URL | None, engine: AsyncEngine | None, options: LedgerOptions) -> None:
        self.options = options
        #: Whether the engine is the caller's (``engine=``): used, never disposed.
        self.foreign = engine is not None
        if engine is not None:
            self._adopt(dsn, engine)
        else:
            self.url = resolve_dsn(dsn)
            self.dialect = self.url.get_backend_name()
            self.backend = dialects.backend(self.dialect, self.url.get_driver_name())
            self.engine = self._create_engine(self.url)
        #: The read replicas (``read_dsn``), each with its own engine and pool.
        self.replicas = self._replicas() if engine is None else []
        #: The engine with the execution options of a write and of a snapshot-consistent
        #: read set once (``Engine.execution_options``: a copy sharing the pool and its
        #: events), so that a transaction does not set them per call.
        self.writer = self.engine.execution_options(**self.backend.write)
        #: The engine of a write whose first statement writes (:attr:`Backend.first_write`).
        self.first_writer = self.engine.execution_options(
            **{**self.backend.write, **self.backend.first_write}
        )
        #: The engine of a write that is one statement committed by itself
        #: (:attr:`Backend.single_append`), whose connection the write puts in
        #: autocommit; ``None``: such writes run as transactions (no such statement, the
        #: caller's engine, or a database whose default isolation level chatledger
        #: replaces, which only a transaction states).
        self.single_writer: AsyncEngine | None = (
            self.engine if self.backend.single_append is not None and not self.foreign else None
        )
        self.reader = self.engine.execution_options(**self.backend.snapshot_read)
        #: The engine of a read that is one statement (:attr:`Backend.single_read`).
        single = self.backend.single_read
        self.single_reader = self.reader if single is None else self.engine.execution_options(**single)
        #: Set by :meth:`close`: no call may start any more.
        self.closed = False
        self._loop_locks: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = WeakKeyDictionary()
        #: The event loop the pool's connections belong to (see :meth:`bind_loop`).
        self._loop: ref[asyncio.AbstractEventLoop] | None = None
        _OPEN.add(self)

    def _replicas(self) -> list[Replica]:
        """An engine per ``read_dsn``; ``ValueError`` for a backend without replicas or a
        replica of another dialect than the primary's."""
        given = self.options.read_dsn
        dsns = [given] if isinstance(given, str) else list(given or [])
        if not dsns:
            return []
        if self.backend.replication is None:
            raise ValueError(
                f"read_dsn: {self.backend.display_name} has no read replicas; leave read_dsn unset"
            )
        replicas = []
        for dsn in dsns:
            url = resolve_dsn(dsn)
            if url.get_backend_name() != self.dialect:
                raise ValueError(
                    f"read_dsn {display(url)!r} is not a {self.backend.display_name} DSN, as the primary's is"
                )
            backend = dialects.backend(self.dialect, url.get_driver_name())
            engine = self._create_engine(url)
            replicas.append(Replica(url, backend, engine, engine.execution_options(**backend.snapshot_read)))
        return replicas

    def write_at(self, isolation_level: str) -> None:
        """Run every later write transaction at ``isolation_level`` (SQLAlchemy's
        spelling), instead of the database's default (:attr:`Backend.write_isolation_instead`)."""
        options = {**self.backend.write, "isolation_level": isolation_level}
        self.writer = self.engine.execution_options(**options)
        self.first_writer = self.engine.execution_options(**{**options, **self.backend.first_write})
        self.single_writer = None

    def _create_engine(self, url: URL) -> AsyncEngine:
        """The ledger's own engine and pool for ``url`` (the primary or a replica), set up by
        the dialect's rules."""
        path = sqlite_file(url)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        backend = dialects.backend(url.get_backend_name(), url.get_driver_name())
        ours = backend.connect_args(self.options)
        # The caller's own settings win over ours, one by one: the DSN's, then connect_args.
        from_dsn = {name: value for name, value in url.query.items() if name in ours}
        connect_args = dialects.merge_connect_args(ours, from_dsn, self.options.connect_args)
        engine_options: dict[str, Any] = {
            **backend.engine_options,
            "echo": self.options.echo,
            "connect_args": connect_args,
            "pool_pre_ping": self.options.pool_pre_ping and backend.server,
            # Reset on return rolls back only an open transaction (configure_engine).
            "pool_reset_on_return": None,
        }
        if self.options.pgbouncer:
            if not backend.pgbouncer:
                raise ValueError("pgbouncer=True applies to PostgreSQL DSNs only")
            engine_options["poolclass"] = NullPool
            engine_options["connect_args"].update(backend.pgbouncer_connect_args())
        elif backend.server:
            engine_options.update(
                pool_size=self.options.pool_size,
                max_overflow=self.options.max_overflow,
                pool_timeout=self.options.pool_timeout,
                pool_recycle=self.options.pool_recycle,
            )
        engine = dialects.create_engine(url, **engine_options)
        dialects.configure_engine(engine, self.options)
        self.backend.add_listeners(engine)
        dialects.configure_galera(engine)
        return engine

    def _adopt(self, dsn: str | URL | None, engine: AsyncEngine) -> None:
        """Use the caller's engine (see :func:`chatledger.dialects.adopt_engine`)."""
        if dsn is not None:
            raise ValueError("pass dsn or engine, not both: the engine names its database")
        if self.options.read_dsn:
            raise ValueError("read_dsn needs a DSN for the primary too: pass dsn, not engine")
        given = sorted(self.options.model_fields_set & _ENGINE_OPTIONS)
        if given:
            raise ValueError(
                f"{', '.join(given)} set up the engine chatledger creates; with engine= "
                "set them on your engine"
            )
        self.engine, self.backend = dialects.adopt_engine(engine)
        # Checked as a DSN would be (a server database named, MySQL's charset); used for
        # display and by auto_upgrade, which migrates on a connection of its own.
        self.url = resolve_dsn(engine.url)
        self.dialect = engine.dialect.name

    def __repr__(self) -> str:
        # Named as the ledger they serve: their errors and logs speak of the ledger.
        return f"Ledger({display(self.url)!r})"

    async def close(self) -> None:
        """Dispose of the engine and every pooled connection (not the caller's engine).

        Called from another event loop than the pool's, it drops the pool without
        closing its connections, which only their own loop could close.
        """
        self.closed = True
        close = self._loop is None or self._loop() is asyncio.get_running_loop()
        for replica in self.replicas:
            await replica.engine.dispose(close=close)
        if self.foreign:
            return  # the caller's engine, which the caller disposes of
        await self.engine.dispose(close=close)

    async def bind_loop(self) -> None:
        """Bind the pool to the running event loop, replacing it when the loop changed.

        The previous loop's connections are dropped unclosed (``dispose(close=False)``),
        so calls still running on that loop keep theirs to the end. Awaits nothing, so
        that no other task sees a half-replaced pool.

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
            for replica in self.replicas:
                replica.engine.sync_engine.dispose(close=False)

    def loop_lock(self) -> asyncio.Lock:
        """This ledger's lock on the running event loop, for what one task at a time
        does (the schema check): an ``asyncio.Lock`` serves the loop that first waits on
        it, and one held in the parent is never released in a forked child, which
        starts with none."""
        return self._loop_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())

    def _after_fork_in_child(self) -> None:
        """In a forked child: a new, empty pool, without closing the parent's connections."""
        # Kept referenced for the child's lifetime: collecting them would close the
        # inherited sockets and SQLite handles, which belong to the parent.
        for engine in (self.engine, *(replica.engine for replica in self.replicas)):
            _INHERITED_POOLS.append(engine.sync_engine.pool)
            engine.sync_engine.dispose(close=False)
        self._loop = None
        self._loop_locks = WeakKeyDictionary()


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
#: Every ledger's connections in this process, for the fork hook below; weak, so that
#: none is kept alive.
_OPEN: WeakSet[Connections] = WeakSet()
#: In a forked child, the pools inherited from the parent: never used, never closed.
_INHERITED_POOLS: list[Any] = []


def _after_fork_in_child() -> None:
    for connections in list(_OPEN):
        connections._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
