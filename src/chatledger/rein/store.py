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
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, NamedTuple

from pydantic import ValidationError
from rein.session import Session
from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import clock, marks, telemetry, tombstones, validate
from ..dsn import display
from ..engine import Ledger
from ..errors import VersionConflict
from ..identity import Found, WriteIdentity
from ..ids import new_uuid7
from ..kinds import REIN
from ..portal import Portal
from ..schema import rein_sessions_table as _rein
from ..schema import rein_writes_table as _writes
from ..selection import PURGE_BATCH, Progress, Selection, purge

__all__ = [
    "WRITE_LOG_RETENTION",
    "LedgerSessionStore",
    "ReinSessionInfo",
    "VersionConflict",
    "VersionedSession",
]

#: How long a save's entry in the write log (``rein_writes``) is kept at least: a save
#: whose COMMIT answer was lost settles -- is found, not applied again -- when it is
#: looked up within this time of its commit, however many saves and deletes of the id
#: came in between. That covers the store's own retries (``retry_timeout``, 20 s by
#: default) many times over, and a caller's lookup by ``OutcomeUnknown.write_id`` after
#: an outage of up to a day.
WRITE_LOG_RETENTION = timedelta(days=1)

#: A save prunes its session's entries older than :data:`WRITE_LOG_RETENTION` when the
#: version it makes is ``0`` or ``1`` modulo this (at least once per this many
#: versions: of two consecutive versions one is a save, since a delete needs a live
#: session): one ``DELETE`` per that many saves, rather than per save.
WRITE_LOG_PRUNE_EVERY = 16


class VersionedSession(NamedTuple):
    """A stored rein session and the version it was read at (for ``expected_version``)."""

    session: Session
    #: 1 after the id's first save, +1 per save and per delete since (never reset).
    version: int


@dataclass(frozen=True, slots=True)
class ReinSessionInfo:
    """One row of :meth:`LedgerSessionStore.list_sessions`; no session JSON is read."""

    id: str
    #: 1 after the id's first save, +1 per save and per delete since (never reset).
    version: int
    #: When the session's first save wrote it (the first since a delete; UTC, timezone-aware).
    created_at: datetime
    #: When the last save wrote it (UTC, timezone-aware); never moves back.
    updated_at: datetime


# -- the async core: module functions of the ledger, so that no coroutine keeps the store alive


#: A row that holds a session; NULL ``session_json`` is the tombstone of a deleted one.
_live = _rein.c.session_json.is_not(None)


def _decode(id: str, session_json: str) -> Session:
    try:
        return Session.model_validate_json(session_json)
    except ValidationError as error:
        raise ValueError(f"rein session {id!r} is stored as invalid session JSON: {error}") from None


def _save_identity(write_id: str) -> WriteIdentity[int]:
    """A save's identity (:mod:`chatledger.identity`), looked up by its write id in the
    write log: the version it made (what the save returns, plain or compare-and-set).
    Later saves and deletes of the id leave its entry alone, for at least
    :data:`WRITE_LOG_RETENTION`, so a save is never overtaken (no generation); the
    log keeps no content, and needs none: the write id is the call's own, minted
    before its first attempt, and names no other save."""

    async def find(conn: AsyncConnection) -> Found[int] | None:
        version = await conn.scalar(select(_writes.c.version).where(_writes.c.write_id == write_id))
        return None if version is None else Found(int(version), None)

    return WriteIdentity(write_id, None, find=find, generation=None, names="rein write id", of="a save")


async def _log_write(conn: AsyncConnection, id: str, write_id: str, version: int, now: datetime) -> int:
    """Record the save in the write log, in the save's transaction (on the session row's
    lock, which the save holds), and now and then prune the session's old entries.
    The log's primary key makes a repeat of a save committed late fail here, which
    ``Ledger.write`` then settles."""
    await conn.execute(
        insert(_writes).values(write_id=write_id, session_id=id, version=version, created_at=now)
    )
    if version % WRITE_LOG_PRUNE_EVERY < 2:
        await conn.execute(
            delete(_writes).where(
                _writes.c.session_id == id, _writes.c.created_at < now - WRITE_LOG_RETENTION
            )
        )
    return version


async def _save(ledger: Ledger, id: str, session_json: str, expected: int | None) -> int:
    await ledger.check_statement_size("session", session_json)
    # Fixed before the first attempt: a retry after a commit that was not acknowledged
    # finds this save's entry in the write log, whatever saved the id since (settle).
    write_id = new_uuid7()
    latest = ledger.backend.latest

    async def work(conn: AsyncConnection) -> int:
        now = clock.utc_now()
        if expected is None or expected == 0:
            values = {
                "id": id,
                "session_json": session_json,
                "write_id": write_id,
                "created_at": now,
                "updated_at": now,
            }
            version = await ledger.backend.save_rein_session(conn, values, expected == 0)
            if version == 1:
                # A new row: an id whose tombstone was purged numbers on from its mark.
                mark = await marks.take(conn, marks.REIN, id)
                if mark is not None:
                    version = int(mark.version) + 1
                    await conn.execute(update(_rein).where(_rein.c.id == id).values(version=version))
            if version is not None:
                return await _log_write(conn, id, write_id, version, now)
        else:
            changed = await conn.execute(
                update(_rein)
                .where(_rein.c.id == id, _rein.c.version == expected, _live)
                .values(
                    version=_rein.c.version + 1,
                    session_json=session_json,
                    write_id=write_id,
                    updated_at=latest(_rein.c.updated_at, now),
                )
            )
            if changed.rowcount == 1:
                return await _log_write(conn, id, write_id, expected + 1, now)
        current = (
            await conn.execute(select(_rein.c.version, _live.label("live")).where(_rein.c.id == id))
        ).one_or_none()
        if current is None or not current.live:
            raise VersionConflict(
                f"rein session {id!r} does not exist (it was never saved or was deleted), "
                f"not at version {expected}; reload it"
            )
        raise VersionConflict(
            f"rein session {id!r} is at version {current.version}, not {expected}: another writer saved "
            "it in between; reload it and apply the change again"
        )

    with telemetry.operation(ledger, "rein", "save", id) as span:
        version = await ledger.write(work, identity=_save_identity(write_id), session=id)
        span.set("chatledger.version", version)
        return version


async def _load(ledger: Ledger, id: str) -> VersionedSession | None:
    async def work(conn: AsyncConnection) -> VersionedSession | None:
        row = (
            await conn.execute(select(_rein.c.version, _rein.c.session_json).where(_rein.c.id == id, _live))
        ).one_or_none()
        return None if row is None else VersionedSession(_decode(id, row.session_json), row.version)

    with telemetry.operation(ledger, "rein", "load", id) as span:
        found = await ledger.read(work, replica=True, session=id)
        if found is not None:
            span.set("chatledger.version", found.version)
        return found


async def _delete(
    ledger: Ledger, id: str, selection: Selection, seen: Mapping[str, Any] | None = None
) -> bool:
    """The one delete: tombstones the session if it is live and still in ``selection``
    (and, for a purge, still at the version ``seen`` when its page was read), decided
    by the ``UPDATE``'s WHERE, in the deleting transaction."""
    latest = ledger.backend.latest
    selected = selection.where(_rein, ledger.backend)
    selected += [_rein.c[name] == value for name, value in (seen or {}).items()]

    async def work(conn: AsyncConnection) -> bool:
        # A tombstone, not a missing row: the id's versions go on counting after it, so
        # a version read before the delete never matches a later session under the id.
        tombstoned = await conn.execute(
            update(_rein)
            .where(_rein.c.id == id, _live, *selected)
            .values(
                version=_rein.c.version + 1,
                session_json=None,
                write_id=None,
                updated_at=latest(_rein.c.updated_at, clock.utc_now()),
            )
        )
        return bool(tombstoned.rowcount)

    async def settle(conn: AsyncConnection) -> bool | None:
        # A purge's delete whose COMMIT's answer was lost (``seen``: the version its page
        # read): still live and selected, it was not committed (try again); the tombstone
        # one version on, it was; anything else was saved meanwhile: kept.
        assert seen is not None
        if await conn.scalar(select(_rein.c.id).where(_rein.c.id == id, _live, *selected)) is not None:
            return None
        ours = await conn.scalar(
            select(_rein.c.id).where(
                _rein.c.id == id, _rein.c.session_json.is_(None), _rein.c.version == seen["version"] + 1
            )
        )
        return ours is not None

    with telemetry.operation(ledger, "rein", "delete", id) as span:
        # Only a purge's delete is looked up after a lost COMMIT: a plain delete retried
        # after a save of the id would delete the new session (OutcomeUnknown).
        deleted = await ledger.write(work, session=id, settle=None if seen is None else settle)
        span.set("chatledger.deleted", deleted)
        return deleted


async def _purge(ledger: Ledger, selection: Selection, size: int, progress: Progress | None) -> int:
    async def delete_one(id: str, seen: Mapping[str, Any]) -> bool:
        return await _delete(ledger, id, selection, seen)

    # Every save and delete moves the version.
    return await purge(
        ledger, _rein, _live, selection, delete_one, versions=("version",), size=size, progress=progress
    )


async def _purge_tombstones(ledger: Ledger, cutoff: datetime, size: int, progress: Progress | None) -> int:
    return await tombstones.purge_tombstones(
        ledger, REIN.tombstone_rows(), cutoff, size=size, progress=progress
    )


async def _contains(ledger: Ledger, id: str) -> bool:
    async def work(conn: AsyncConnection) -> bool:
        return await conn.scalar(select(_rein.c.id).where(_rein.c.id == id, _live)) is not None

    return await ledger.read(work, replica=True, session=id)


async def _list(ledger: Ledger, limit: int, offset: int) -> list[ReinSessionInfo]:
    statement = (
        select(_rein.c.id, _rein.c.version, _rein.c.created_at, _rein.c.updated_at)
        .where(_live)
        .order_by(_rein.c.updated_at.desc(), _rein.c.id.desc())
        .offset(offset)
        .limit(limit)
    )

    async def work(conn: AsyncConnection) -> list[ReinSessionInfo]:
        return [ReinSessionInfo(*row) for row in await conn.execute(statement)]

    with telemetry.operation(ledger, "rein", "list") as span:
        found = await ledger.read(work, replica=True)
        span.set("db.response.returned_rows", len(found))
        return found


# -- the store ---------------------------------------------------------------------


class LedgerSessionStore:
    """rein-agent session store in SQLite, PostgreSQL or MySQL/MariaDB.

    Satisfies ``rein.store.SessionStore`` (``save``, ``load``;
    ``isinstance(store, rein.SessionStore)`` holds) and, like rein's
    ``MemorySessionStore``, has ``delete(id)`` and ``id in store``. Extras:
    versioned saves for sharing one session between processes
    (``save(..., expected_version=n)``, :meth:`load_versioned`),
    :meth:`list_sessions`, and :meth:`purge` (and ``delete(id, idle_before=...)``).

    Args:
        dsn: ``postgresql://``, ``mysql://``, ``mariadb://`` or ``sqlite:///path``;
            ``None`` reads ``CHATLEDGER_DSN``, then uses the embedded SQLite default
            (the same rules as the zett storage, :func:`chatledger.dsn.resolve_dsn`).
        engine: instead of ``dsn``, an ``AsyncEngine`` of your own to use (and go on
            owning: ``close`` leaves it open); see :class:`chatledger.engine.Ledger`.
            The store's calls run on its own loop (below): give it an engine no other
            loop uses, or one with ``poolclass=NullPool``.
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
    ``acontains``, ``alist_sessions``, ``apurge`` and ``aclose``: they hand the same work to
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
        self._runner = Portal(f"chatledger-rein-{id(self):x}")
        # Holds the ledger and the runner, never the store, so that it can run at GC.
        self._finalizer = weakref.finalize(self, self._runner.stop, self.ledger.close)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({display(self.ledger.url)!r})"

    @property
    def url(self) -> URL:
        """The async SQLAlchemy URL in use (its ``repr`` masks the password)."""
        return self.ledger.url

    def write_position(self, session_id: str) -> str | None:
        """Where this store's writes of ``session_id`` stand on the primary, when read
        replicas serve its reads (``read_dsn``): the text another process's store hands
        to :meth:`remember_write`, so that its replica reads wait for these writes too.
        ``None`` without replicas or writes of that rein session
        (:meth:`chatledger.engine.Ledger.write_position`)."""
        return self.ledger.write_position(session_id)

    def remember_write(self, session_id: str, position: str) -> None:
        """Let replica reads of ``session_id`` wait for a write made elsewhere, given by
        the writer's :meth:`write_position`; without replicas, nothing to do.

        Raises:
            TypeError: ``position`` is not a string.
        """
        self.ledger.remember_write(session_id, position)

    # -- rein's SessionStore protocol ------------------------------------------------

    def save(self, id: str, session: Session, *, expected_version: int | None = None) -> None:
        """Store ``session`` under ``id`` in one transaction; every save bumps the version.

        Without ``expected_version`` the save overwrites whatever is stored: last
        writer wins, as rein's ``SessionStore.save`` contract says. Concurrent first
        saves of one id never fail: one inserts (version 1), the others overwrite.

        With ``expected_version`` it is a compare-and-set: ``n >= 1`` saves only if
        the stored version is still ``n`` (from :meth:`load_versioned`) and the new
        version is ``n + 1``; ``0`` saves only if no session is stored under ``id``
        (never saved, or deleted) and the new version is the next version of the id.

        A version, once used for an id, is never valid again for it: :meth:`delete`
        bumps the version and a later save goes on from there, so a version read
        before a delete never matches the session saved after it.

        The session is serialized with rein's own ``Session.model_dump_json()`` when
        called, so later changes to the object are not saved.

        Exactly once: the save carries a write id (a UUIDv7 fixed before its first
        attempt), logged with the version it makes in ``rein_writes`` in the save's own
        transaction. When the connection is lost while the COMMIT is under way, every
        retry first looks the id up there: a save that was committed returns as if
        acknowledged (a compare-and-set one too), even when other saves or a delete of
        the id came in between, and is never applied twice. The entry is kept for at
        least :data:`WRITE_LOG_RETENTION` (a day), far beyond the retry budget
        (``retry_timeout``); when the budget runs out first, ``OutcomeUnknown`` carries
        the write id (``rein_writes.write_id``, a lookup for a day). Repeating the call
        makes a new write id: load the session to see whether it was applied first.

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

    def delete(self, id: str, *, idle_before: datetime | None = None) -> bool:
        """Delete the session stored under ``id``; a missing one is not an error.

        The row stays as a tombstone (no session JSON, the version bumped), so that the
        id's versions go on counting: see :meth:`save`. Returns whether a session was
        deleted.

        With ``idle_before`` (a timezone-aware instant) it is a conditional delete: only
        a session last saved (``updated_at``) before that instant is deleted, as the
        deleting transaction's ``UPDATE`` finds it; a save committed before it keeps
        the session (``False``). Instants are the writers' clocks (``updated_at``
        never moves back).

        Raises:
            ValueError: a bad ``id`` (see :meth:`save`); a naive ``idle_before`` or one
                outside the instants every backend stores.
            TypeError: ``id`` is not a ``str``, ``idle_before`` not a ``datetime``.
        """
        return self._runner.call(_delete, self.ledger, *self._prepare_delete(id, idle_before))

    def purge(
        self,
        *,
        older_than: timedelta | None = None,
        idle_before: datetime | None = None,
        prefix: str | None = None,
        batch_size: int = PURGE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Delete the sessions last saved before a cutoff and/or whose id starts with
        ``prefix``; returns how many it deleted.

        It reads the candidates a page (``batch_size`` ids) at a time, then deletes
        each as :meth:`delete` does, in a transaction of its own whose ``UPDATE``
        checks the whole selection again: a session saved after its page was read is
        kept, with that save. Every purged id keeps its tombstone. ``prefix`` is
        matched literally (``%``, ``_`` and ``\\`` are characters) and byte for byte
        (case and trailing spaces count) on every backend
        (:func:`chatledger.selection.id_prefix`).

        Args:
            older_than: last saved longer ago than this; the cutoff is
                ``utc_now() - older_than``, taken once when the call starts.
            idle_before: instead, the cutoff itself (timezone-aware).
            prefix: the ids start with this (1-255 characters, not blank).
            batch_size: candidates read per page (at least 1).
            progress: called after each candidate with its id and whether it was
                deleted, on the store's loop thread; an awaitable it returns is awaited
                there.

        Raises:
            ValueError: neither a cutoff nor ``prefix``, both ``older_than`` and
                ``idle_before``, or a bad value (see
                :meth:`chatledger.selection.Selection.of`); nothing is deleted then.
            TypeError: an argument of the wrong type.
        """
        return self._runner.call(
            _purge, self.ledger, *self._prepare_purge(older_than, idle_before, prefix, batch_size), progress
        )

    def purge_tombstones(
        self,
        *,
        horizon: timedelta | None = None,
        deleted_before: datetime | None = None,
        batch_size: int = PURGE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Delete the tombstones of sessions deleted longer than ``horizon`` ago (or
        before ``deleted_before``), each replaced by its high-water mark in the
        deleting transaction; returns how many it purged. A later save of a purged id
        numbers its version on from the mark, so no version is valid twice; what the
        horizon promises is in :mod:`chatledger.tombstones`.

        Raises:
            ValueError: both or neither of ``horizon`` and ``deleted_before``, or a bad
                value (:func:`chatledger.tombstones.cutoff`).
            TypeError: an argument of the wrong type.
        """
        return self._runner.call(
            _purge_tombstones,
            self.ledger,
            tombstones.cutoff(horizon, deleted_before),
            validate.integer(batch_size, "batch_size", minimum=1),
            progress,
        )

    async def apurge_tombstones(
        self,
        *,
        horizon: timedelta | None = None,
        deleted_before: datetime | None = None,
        batch_size: int = PURGE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """:meth:`purge_tombstones` for async code."""
        return await self._runner.acall(
            _purge_tombstones,
            self.ledger,
            tombstones.cutoff(horizon, deleted_before),
            validate.integer(batch_size, "batch_size", minimum=1),
            progress,
        )

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
        limit, offset = validate.page(limit, offset)
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

    async def adelete(self, id: str, *, idle_before: datetime | None = None) -> bool:
        """:meth:`delete` for async code."""
        return await self._runner.acall(_delete, self.ledger, *self._prepare_delete(id, idle_before))

    async def apurge(
        self,
        *,
        older_than: timedelta | None = None,
        idle_before: datetime | None = None,
        prefix: str | None = None,
        batch_size: int = PURGE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """:meth:`purge` for async code (``progress`` runs on the store's loop thread)."""
        prepared = self._prepare_purge(older_than, idle_before, prefix, batch_size)
        return await self._runner.acall(_purge, self.ledger, *prepared, progress)

    async def acontains(self, id: str) -> bool:
        """``id in store`` for async code."""
        return await self._runner.acall(_contains, self.ledger, _id(id))

    async def alist_sessions(self, limit: int = 100, offset: int = 0) -> list[ReinSessionInfo]:
        """:meth:`list_sessions` for async code."""
        limit, offset = validate.page(limit, offset)
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

    @staticmethod
    def _prepare_delete(id: str, idle_before: datetime | None) -> tuple[str, Selection]:
        return _id(id), Selection(idle_before=validate.optional_aware(idle_before, "idle_before"))

    @staticmethod
    def _prepare_purge(
        older_than: timedelta | None, idle_before: datetime | None, prefix: str | None, batch_size: int
    ) -> tuple[Selection, int]:
        """Validated in the caller's thread, before anything is submitted."""
        selection = Selection.of(idle_before=idle_before, older_than=older_than, prefix=prefix)
        return selection, validate.integer(batch_size, "batch_size", minimum=1)


def _id(value: object) -> str:
    return validate.identifier(value, "id")
