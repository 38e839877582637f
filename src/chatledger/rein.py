"""``LedgerSessionStore``: rein-agent's ``SessionStore`` on the shared ledger.

rein-agent (``rein.store.SessionStore``) persists a whole ``rein.Session`` through
two synchronous methods, ``save(id, session)`` (overwrites) and ``load(id)``
(``None`` when missing). This store keeps each session as one row of
``rein_sessions`` (its JSON from rein's own pydantic model, a version, and UTC
timestamps) in the same database, schema and migrations as the zett storage::

    store = LedgerSessionStore("postgresql://app@db/chat")
    chat = agent.chat(session=store.load(conv_id))
    chat.send(msg)
    store.save(conv_id, chat.session)

Needs the ``rein`` extra (``pip install 'chatledger[rein]'``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from types import TracebackType
from typing import Any, NamedTuple, TypeVar, TypeVarTuple

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal
from pydantic import ValidationError
from rein.session import Session
from sqlalchemy import delete, select, update
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from . import validate
from .engine import Ledger
from .errors import VersionConflict
from .schema import rein_sessions_table as _rein

__all__ = ["LedgerSessionStore", "ReinSessionInfo", "VersionConflict", "VersionedSession"]

T = TypeVar("T")
Args = TypeVarTuple("Args")


class VersionedSession(NamedTuple):
    """A stored rein session and the version it was read at (for ``expected_version``)."""

    session: Session
    #: 1 after the first save, +1 per save since.
    version: int


@dataclass(frozen=True, slots=True)
class ReinSessionInfo:
    """One row of :meth:`LedgerSessionStore.list_sessions`; no session JSON is read."""

    id: str
    #: Saves so far: 1 after the first, +1 per save since.
    version: int
    #: When the first save inserted the row (UTC, timezone-aware).
    created_at: datetime
    #: When the last save wrote it (UTC, timezone-aware).
    updated_at: datetime


# -- the async core: module functions of the ledger, so that no coroutine keeps the store alive


def _now() -> datetime:
    return datetime.now(UTC)


def _decode(id: str, session_json: str) -> Session:
    try:
        return Session.model_validate_json(session_json)
    except ValidationError as error:
        raise ValueError(f"rein session {id!r} is stored as invalid session JSON: {error}") from None


async def _save(ledger: Ledger, id: str, session_json: str, expected: int | None) -> int:
    await ledger.check_statement_size("session", session_json)
    now = _now()
    values = {"id": id, "session_json": session_json, "created_at": now, "updated_at": now}

    async def work(conn: AsyncConnection) -> int:
        if expected is None or expected == 0:
            version = await ledger.rules.save_rein_session(conn, values, expected == 0)
            if version is not None:
                return version
        else:
            changed = await conn.execute(
                update(_rein)
                .where(_rein.c.id == id, _rein.c.version == expected)
                .values(version=_rein.c.version + 1, session_json=session_json, updated_at=now)
            )
            if changed.rowcount == 1:
                return expected + 1
        current = await conn.scalar(select(_rein.c.version).where(_rein.c.id == id))
        if current is None:
            raise VersionConflict(
                f"rein session {id!r} does not exist (it was never saved or was deleted), "
                f"not at version {expected}; reload it"
            )
        raise VersionConflict(
            f"rein session {id!r} is at version {current}, not {expected}: another writer saved it "
            "in between; reload it and apply the change again"
        )

    return await ledger.write(work)


async def _load(ledger: Ledger, id: str) -> VersionedSession | None:
    async def work(conn: AsyncConnection) -> VersionedSession | None:
        row = (
            await conn.execute(select(_rein.c.version, _rein.c.session_json).where(_rein.c.id == id))
        ).one_or_none()
        return None if row is None else VersionedSession(_decode(id, row.session_json), row.version)

    return await ledger.read(work)


async def _delete(ledger: Ledger, id: str) -> bool:
    async def work(conn: AsyncConnection) -> bool:
        return bool((await conn.execute(delete(_rein).where(_rein.c.id == id))).rowcount)

    return await ledger.write(work)


async def _contains(ledger: Ledger, id: str) -> bool:
    async def work(conn: AsyncConnection) -> bool:
        return await conn.scalar(select(_rein.c.id).where(_rein.c.id == id)) is not None

    return await ledger.read(work)


async def _list(ledger: Ledger, limit: int, offset: int) -> list[ReinSessionInfo]:
    statement = (
        select(_rein.c.id, _rein.c.version, _rein.c.created_at, _rein.c.updated_at)
        .order_by(_rein.c.updated_at.desc(), _rein.c.id.desc())
        .offset(offset)
        .limit(limit)
    )

    async def work(conn: AsyncConnection) -> list[ReinSessionInfo]:
        return [ReinSessionInfo(*row) for row in await conn.execute(statement)]

    return await ledger.read(work)


# -- the loop thread ---------------------------------------------------------------


class _Portal:
    """The store's private event loop: an anyio blocking portal on a daemon thread,
    started on first use (``anyio.from_thread.start_blocking_portal``).

    Every connection of the store's pool is made and used on this one loop, so none
    is ever bound to a caller's loop that ends (rein's ``chat.send`` runs each turn
    in its own ``asyncio.run``).
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._context: AbstractContextManager[BlockingPortal] | None = None
        self._closed = False
        #: The calls running on the loop, each its own asyncio task; used on the loop only.
        self._running: set[asyncio.Task[Any]] = set()
        #: The loop's thread once started (for tests and diagnostics).
        self.thread: threading.Thread | None = None
        _PORTALS.add(self)

    def call(self, func: Callable[[*Args], Coroutine[Any, Any, T]], *args: *Args) -> T:
        """Run ``func(*args)`` on the loop and block the calling thread for its result.

        Raises ``RuntimeError`` when the store is closed, and when called from the
        loop's own thread (it would wait for itself).
        """
        with self._lock:
            # Started under the lock, so that a concurrent stop() comes wholly before
            # (RuntimeError here) or after (the call runs, or is cancelled): never hangs.
            future: concurrent.futures.Future[T] = self._open().start_task_soon(
                self._tracked, partial(func, *args)
            )
        return future.result()

    async def acall(self, func: Callable[[*Args], Coroutine[Any, Any, T]], *args: *Args) -> T:
        """Run ``func(*args)`` on the loop and await its result without blocking the
        caller's loop. Cancelling the caller cancels the call on the loop and waits
        for it to end (its transaction rolled back)."""
        with self._lock:
            portal = self._open()
        try:
            return await portal.call_async(self._tracked, partial(func, *args))
        except RuntimeError as error:
            if self._closed:  # closed between the check above and the call
                raise self._closed_error() from error
            raise

    def stop(self, final: Callable[[], Awaitable[None]]) -> None:
        """Cancel the calls still running, run ``final()`` on the loop, then stop the
        loop and join its thread. Idempotent; later calls raise ``RuntimeError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            portal, context = self._portal, self._context
        if portal is None or context is None:
            return
        if threading.current_thread() is self.thread:
            # Garbage-collected on the loop itself, which cannot wait for itself.
            threading.Thread(target=_shut, args=(portal, context, self._drain, final), daemon=True).start()
        else:
            _shut(portal, context, self._drain, final)

    def _open(self) -> BlockingPortal:
        """The running portal, started on first use; called with the lock held."""
        if self._closed:
            raise self._closed_error()
        if self._portal is None:
            context = start_blocking_portal(name=self._name)
            portal = context.__enter__()
            self.thread = portal.call(threading.current_thread)
            self._portal, self._context = portal, context
        return self._portal

    def _closed_error(self) -> RuntimeError:
        return RuntimeError(f"this LedgerSessionStore is closed ({self._name})")

    async def _tracked(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()`` as a task of its own, cancelled at most once.

        anyio cancels a portal call through its cancel scope, again at every await
        inside it, while SQLAlchemy's clean-up after a cancellation (the rollback, the
        cursor, the connection) awaits the driver: in a task of its own the work sees
        one plain asyncio cancellation and cleans up, and the call waits for that.
        """
        task: asyncio.Task[T] = asyncio.get_running_loop().create_task(work())
        self._running.add(task)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():  # this call was cancelled: cancel the work, wait for its end
                task.cancel()
                with anyio.CancelScope(shield=True):
                    await asyncio.wait({task})
                raise
            if task.cancelled():  # by stop()
                raise RuntimeError(
                    "this LedgerSessionStore was closed while the call ran, which cancelled it "
                    f"({self._name})"
                ) from None
            return task.result()
        finally:
            self._running.discard(task)

    async def _drain(self, final: Callable[[], Awaitable[None]]) -> None:
        """On the loop: cancel the running calls, wait for them to end, then ``final()``."""
        running = set(self._running)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
        await final()

    def _after_fork_in_child(self) -> None:
        """In a forked child the loop's thread does not exist: start afresh on the next
        call. The parent's portal is kept, untouched: stopping or even collecting it
        would wait for that thread forever."""
        _INHERITED.append((self._portal, self._context))
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._portal = self._context = self.thread = None
        self._running = set()


def _shut(
    portal: BlockingPortal,
    context: AbstractContextManager[BlockingPortal],
    drain: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]],
    final: Callable[[], Awaitable[None]],
) -> None:
    try:
        portal.call(drain, final)
    finally:
        context.__exit__(None, None, None)  # stops the portal and joins its thread


#: Every portal of this process, for the fork hook; weak, so that none is kept alive.
_PORTALS: weakref.WeakSet[_Portal] = weakref.WeakSet()
#: In a forked child, the portals inherited from the parent: never used, never collected.
_INHERITED: list[object] = []


def _after_fork_in_child() -> None:
    for portal in list(_PORTALS):
        portal._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the store ---------------------------------------------------------------------


class LedgerSessionStore:
    """rein-agent session store in SQLite, PostgreSQL or MySQL/MariaDB.

    Satisfies ``rein.store.SessionStore`` (``save``, ``load``;
    ``isinstance(store, rein.SessionStore)`` holds) and, like rein's
    ``MemorySessionStore``, has ``delete(id)`` and ``id in store``. Extras:
    versioned saves for sharing one session between processes
    (``save(..., expected_version=n)``, :meth:`load_versioned`) and
    :meth:`list_sessions`.

    Args:
        dsn: ``postgresql://``, ``mysql://``, ``mariadb://`` or ``sqlite:///path``;
            ``None`` reads ``CHATLEDGER_DSN``, then uses the embedded SQLite default
            (the same rules as the zett storage, :func:`chatledger.dsn.resolve_dsn`).
        **options: :class:`chatledger.options.LedgerOptions` (pool sizes, retries...).

    Raises:
        ValueError / TypeError: a bad DSN or option, at construction.

    **Threads and event loops.** rein's protocol is synchronous, so ``save``,
    ``load`` and the rest block the calling thread until the database answers.
    The store owns one private event loop on a daemon thread (anyio's blocking
    portal), started on first use: every call runs there, on the store's one
    engine and pool, so the store works from a plain script, between
    ``chat.send`` calls (each runs its own ``asyncio.run``), from several threads
    at once, and from code already inside a running event loop -- which a
    blocking call then holds up for one database round trip. Async applications
    use the twins ``asave``, ``aload``, ``aload_versioned``, ``adelete``,
    ``acontains``, ``alist_sessions`` and ``aclose``: they hand the same work to
    the store's loop and await it (``BlockingPortal.call_async``), so the
    caller's loop keeps running. (A pool cannot serve two loops -- asyncpg and
    aiomysql connections belong to the loop that opened them -- so the async twins
    do not run the queries on the caller's loop; the cost is one thread hop per
    call.) Cancelling an awaiting twin cancels the work and waits for it to end,
    its transaction rolled back.

    **Forks.** A store used before ``os.fork()`` (gunicorn ``--preload``, celery
    prefork, multiprocessing's ``fork`` start method) works in the child: the
    child starts its own loop thread and pool on its first call, and neither uses
    nor closes the parent's, which keeps working.

    A server database must be migrated first (``chatledger upgrade`` or ``alembic
    upgrade head``); the first call raises :class:`chatledger.SchemaNotReady`
    otherwise. The embedded SQLite database upgrades itself. :meth:`close` (or
    ``with``) disposes of the pool and stops the thread; a store that is never
    closed is cleaned up when it is garbage collected or at interpreter exit.
    """

    def __init__(self, dsn: str | URL | None = None, **options: Any) -> None:
        self.ledger = Ledger(dsn, **options)
        self._runner = _Portal(f"chatledger-rein-{id(self):x}")
        # Holds the ledger and the runner, never the store, so that it can run at GC.
        self._finalizer = weakref.finalize(self, self._runner.stop, self.ledger.close)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ledger.url.render_as_string(hide_password=True)!r})"

    @property
    def url(self) -> URL:
        """The async SQLAlchemy URL in use (its ``repr`` masks the password)."""
        return self.ledger.url

    # -- rein's SessionStore protocol ------------------------------------------------

    def save(self, id: str, session: Session, *, expected_version: int | None = None) -> None:
        """Store ``session`` under ``id`` in one transaction; every save bumps the version.

        Without ``expected_version`` the save overwrites whatever is stored: last
        writer wins, as rein's ``SessionStore.save`` contract says. Concurrent first
        saves of one id never fail: one inserts (version 1), the others overwrite.

        With ``expected_version`` it is a compare-and-set: ``n >= 1`` saves only if
        the stored version is still ``n`` (from :meth:`load_versioned`), ``0`` saves
        only if nothing is stored under ``id`` yet. On success the new version is
        ``expected_version + 1``.

        The session is serialized with rein's own ``Session.model_dump_json()`` when
        called, so later changes to the object are not saved.

        Raises:
            VersionConflict: (a ``ValueError``) ``expected_version`` is stale -- another
                writer saved or deleted the session in between, or (for 0) it exists.
                Nothing is written.
            ValueError: ``id`` is empty, blank, longer than 255 characters or has NUL
                (rein's ``FileSessionStore`` refuses unsafe ids with ``ValueError``
                too); ``expected_version`` is negative; the session does not
                serialize to JSON, or its JSON exceeds the database's statement
                limit (``ledger.statement_limit``, MySQL's ``max_allowed_packet``).
            TypeError: ``id`` is not a ``str``, ``session`` not a ``rein.Session``,
                ``expected_version`` not an ``int``.
        """
        self._runner.call(_save, self.ledger, *self._prepare_save(id, session, expected_version))

    def load(self, id: str) -> Session | None:
        """The session stored under ``id``, or ``None`` (rein's ``SessionStore.load``).

        Raises:
            ValueError: bad ``id`` (see :meth:`save`), or the stored JSON is not a
                valid rein session (the message names the id).
        """
        found = self.load_versioned(id)
        return None if found is None else found.session

    # -- like rein's MemorySessionStore ------------------------------------------------

    def delete(self, id: str) -> bool:
        """Delete the session stored under ``id``; a missing one is not an error.

        Returns whether a session was deleted. Raises ``ValueError`` / ``TypeError``
        for a bad ``id`` (see :meth:`save`).
        """
        return self._runner.call(_delete, self.ledger, _id(id))

    def __contains__(self, id: object) -> bool:
        """``id in store``: whether a session is stored under ``id``.

        A bad ``id`` raises ``ValueError`` / ``TypeError`` (see :meth:`save`).
        """
        return self._runner.call(_contains, self.ledger, _id(id))

    # -- versions and listing ------------------------------------------------------------

    def load_versioned(self, id: str) -> VersionedSession | None:
        """The session stored under ``id`` with its version, or ``None``.

        Pass the version to ``save(id, session, expected_version=version)`` to save
        only if nobody else saved in between. Raises as :meth:`load` does.
        """
        return self._runner.call(_load, self.ledger, _id(id))

    def list_sessions(self, limit: int = 100, offset: int = 0) -> list[ReinSessionInfo]:
        """One page of stored rein sessions, newest save first (``updated_at``, then
        id, both descending), read through the activity index without any JSON.

        Args:
            limit: page size, at least 1. offset: rows to skip, at least 0.

        Raises:
            ValueError: ``limit`` < 1 or ``offset`` < 0. TypeError: not an ``int``.
        """
        limit, offset = _page(limit, offset)
        return self._runner.call(_list, self.ledger, limit, offset)

    # -- async twins --------------------------------------------------------------------

    async def asave(self, id: str, session: Session, *, expected_version: int | None = None) -> None:
        """:meth:`save` for async code: awaits without blocking the caller's loop."""
        await self._runner.acall(_save, self.ledger, *self._prepare_save(id, session, expected_version))

    async def aload(self, id: str) -> Session | None:
        """:meth:`load` for async code."""
        found = await self.aload_versioned(id)
        return None if found is None else found.session

    async def aload_versioned(self, id: str) -> VersionedSession | None:
        """:meth:`load_versioned` for async code."""
        return await self._runner.acall(_load, self.ledger, _id(id))

    async def adelete(self, id: str) -> bool:
        """:meth:`delete` for async code."""
        return await self._runner.acall(_delete, self.ledger, _id(id))

    async def acontains(self, id: str) -> bool:
        """``id in store`` for async code."""
        return await self._runner.acall(_contains, self.ledger, _id(id))

    async def alist_sessions(self, limit: int = 100, offset: int = 0) -> list[ReinSessionInfo]:
        """:meth:`list_sessions` for async code."""
        limit, offset = _page(limit, offset)
        return await self._runner.acall(_list, self.ledger, limit, offset)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Dispose of the connection pool and stop the store's loop thread.

        Idempotent; stored sessions stay. Calls still running are cancelled; later
        calls raise ``RuntimeError``.
        """
        self._finalizer()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the caller's loop."""
        await asyncio.to_thread(self._finalizer)

    def __enter__(self) -> LedgerSessionStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> LedgerSessionStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- helpers ------------------------------------------------------------------------

    def _prepare_save(
        self, id: str, session: Session, expected_version: int | None
    ) -> tuple[str, str, int | None]:
        """Validate and serialize in the caller's thread, before anything is submitted:
        the arguments of :func:`_save` after the ledger."""
        id = _id(id)
        if not isinstance(session, Session):
            raise TypeError(f"session must be a rein.Session, not {type(session).__name__}")
        expected = None if expected_version is None else validate.version(expected_version)
        try:
            session_json = session.model_dump_json()
        except ValueError as error:  # pydantic's PydanticSerializationError
            raise ValueError(f"session cannot be serialized to JSON: {error}") from None
        return id, validate.text(session_json, "session"), expected


def _id(value: object) -> str:
    return validate.identifier(value, "id")


def _page(limit: object, offset: object) -> tuple[int, int]:
    return validate.integer(limit, "limit", minimum=1), validate.integer(offset, "offset")
