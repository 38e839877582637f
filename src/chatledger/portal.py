"""A store's private event loop for sync callers, on anyio's blocking portal.

rein's ``SessionStore`` protocol is synchronous, while the ledger is async; LangGraph's
saver serves sync graphs too. Such a store runs every call on a loop of its own
(``anyio.from_thread.start_blocking_portal``), so its pooled connections always belong
to that one loop, whatever loops or threads the callers use; forked children start
afresh.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, TypeVar, TypeVarTuple

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

__all__ = ["Portal"]

T = TypeVar("T")
Args = TypeVarTuple("Args")


class Portal:
    """The store's private event loop: an anyio blocking portal on a daemon thread,
    started on first use (``anyio.from_thread.start_blocking_portal``).

    Every connection of the store's pool is made and used on this one loop, so none
    is ever bound to a caller's loop that ends (rein's ``chat.send`` runs each turn
    in its own ``asyncio.run``).
    """

    def __init__(self, name: str, owner: str = "LedgerSessionStore") -> None:
        self._name = name
        #: What the error messages call the store.
        self._owner = owner
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
                self._tracked, partial(func, *args), contextvars.copy_context()
            )
        return future.result()

    async def acall(self, func: Callable[[*Args], Coroutine[Any, Any, T]], *args: *Args) -> T:
        """Run ``func(*args)`` on the loop and await its result without blocking the
        caller's loop. Cancelling the caller cancels the call on the loop and waits
        for it to end (its transaction rolled back)."""
        with self._lock:
            portal = self._open()
        try:
            return await portal.call_async(self._tracked, partial(func, *args), contextvars.copy_context())
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
        return RuntimeError(f"this {self._owner} is closed ({self._name})")

    async def _tracked(
        self, work: Callable[[], Coroutine[Any, Any, T]], context: contextvars.Context | None = None
    ) -> T:
        """``work()`` as a task of its own, cancelled at most once, in ``context``: the
        caller's context variables (a copy), so that its current OpenTelemetry span is
        the parent of the store's (:mod:`chatledger.telemetry`).

        anyio cancels a portal call through its cancel scope, again at every await
        inside it, while SQLAlchemy's clean-up after a cancellation (the rollback, the
        cursor, the connection) awaits the driver: in a task of its own the work sees
        one plain asyncio cancellation and cleans up, and the call waits for that.
        """
        task: asyncio.Task[T] = asyncio.get_running_loop().create_task(work(), context=context)
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
                    f"this {self._owner} was closed while the call ran, which cancelled it ({self._name})"
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
_PORTALS: weakref.WeakSet[Portal] = weakref.WeakSet()
#: In a forked child, the portals inherited from the parent: never used, never collected.
_INHERITED: list[object] = []


def _after_fork_in_child() -> None:
    for portal in list(_PORTALS):
        portal._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
