"""Alembic, run from Python: upgrades and downgrades under the schema lock, in one
transaction.

The repository's ``migrations/`` folder is the Alembic script directory; the wheel
carries the same files as ``chatledger/migrations``. ``alembic upgrade head`` from the
repository root, ``chatledger upgrade`` and ``auto_upgrade`` run the same revisions,
the same way:

* **serialised**: under a schema lock of the server, held for the whole upgrade
  (PostgreSQL ``pg_advisory_xact_lock``, MySQL/MariaDB ``GET_LOCK``, SQLite
  ``BEGIN IMMEDIATE``; see :data:`chatledger.dialects.MIGRATION_TRANSACTIONS`), and
  inside one process one Alembic run at a time (Alembic's ``context`` and ``op`` are
  process-wide). Whoever waits re-reads the revision once granted the lock, and finds
  nothing left to do. The wait is bounded (:data:`LOCK_TIMEOUT`), then
  ``SchemaNotReady`` says who holds what;
* **atomic** on PostgreSQL and SQLite: the whole upgrade, every revision and the
  version rows, is one transaction, so a revision failing halfway leaves the database
  exactly as it was. MySQL/MariaDB commit every DDL statement by itself: a revision
  failing there leaves the statements before the failure applied, and the version
  row at the last revision that completed;
* **bookkept in tables of chatledger's own**: the revision in :data:`VERSION_TABLE`
  (so an application's own Alembic keeps ``alembic_version``), and its
  ``compatible_from`` (the rolling-deploy rule) in :data:`COMPATIBILITY_TABLE`. A
  revision recorded by an older chatledger in ``alembic_version`` moves over on the
  next upgrade; until then it is read from there.

The revisions and their conventions: :mod:`chatledger.revisions`. What a database
records and whether this chatledger can use it: :mod:`chatledger.versioning`; both are
re-exported here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from sqlalchemy.engine import URL, Connection

from . import dialects
from .dsn import display, resolve_dsn, sqlite_file
from .errors import SchemaNotReady
from .revisions import (
    Revisions,
    alembic_config,
    head_revision,
    imports_chatledger,
    is_known,
    revisions,
    script_location,
)
from .versioning import (
    COMPATIBILITY_TABLE,
    LEGACY_VERSION_TABLE,
    VERSION_TABLE,
    SchemaState,
    Standing,
    adopt_legacy_revision,
    context_options,
    current_revision,
    describe,
    read_state,
    record_compatibility,
    standing,
)

__all__ = [
    "COMPATIBILITY_TABLE",
    "LEGACY_VERSION_TABLE",
    "LOCK_TIMEOUT",
    "VERSION_TABLE",
    "Revisions",
    "SchemaState",
    "Standing",
    "adopt_legacy_revision",
    "alembic_config",
    "context_options",
    "current_revision",
    "database_revision",
    "database_state",
    "describe",
    "downgrade_database",
    "head_revision",
    "imports_chatledger",
    "is_known",
    "read_state",
    "record_compatibility",
    "revisions",
    "run_alembic_from_command_line",
    "run_locked",
    "run_on_connection",
    "script_location",
    "standing",
    "upgrade_database",
    "upgrade_schema",
]

T = TypeVar("T")

#: Seconds an upgrade waits for the schema lock (another process upgrading) by default.
LOCK_TIMEOUT = 300.0

#: One Alembic run per process at a time: ``alembic.context`` and ``alembic.op`` are
#: module-wide proxies, so two runs at once (two stores, two threads) use each other's
#: connections and deadlock or fail.
_ALEMBIC_RUN = threading.Lock()


async def run_on_connection(url: URL, work: Callable[[Connection], T]) -> T:
    """Run ``work`` on a fresh async connection to ``url``, in one committed transaction
    (no schema lock: for reads and tests)."""
    from sqlalchemy.pool import NullPool

    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = dialects.create_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            return await connection.run_sync(work)
    finally:
        await engine.dispose()


async def run_locked(
    url: URL,
    work: Callable[[Connection], T],
    *,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> T:
    """Run ``work`` in one transaction holding the schema lock, on a connection of its own.

    On PostgreSQL and SQLite that transaction is atomic, DDL included; see
    :func:`chatledger.dialects.migration_transaction`.

    Raises:
        SchemaNotReady: the lock was not granted within ``lock_timeout`` seconds.
        ValueError: ``lock_timeout`` is not a positive number of seconds.
    """
    from sqlalchemy.pool import NullPool

    _check_lock_timeout(lock_timeout)
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = dialects.create_engine(url, poolclass=NullPool, connect_args=dict(connect_args or {}))
    dialects.configure_migration_engine(engine, lock_timeout=lock_timeout)
    try:
        async with (
            engine.connect() as connection,
            dialects.migration_transaction(connection, lock_timeout) as locked,
        ):
            return await locked.run_sync(work)
    except dialects.SchemaLockTimeout as error:
        raise SchemaNotReady(_lock_message(url, lock_timeout, str(error))) from error
    finally:
        await engine.dispose()


def _check_lock_timeout(lock_timeout: float) -> None:
    # 0 and negative values mean "no wait" to some servers and "forever" to others.
    if not (isinstance(lock_timeout, int | float) and 0 < lock_timeout < float("inf")):
        raise ValueError(f"lock_timeout must be a positive number of seconds, not {lock_timeout!r}")


def _lock_message(url: URL, lock_timeout: float, lock: str) -> str:
    return (
        f"database {display(url)}: waited {lock_timeout:g} s for the schema lock ({lock}), which "
        "another process holds while it migrates the database; try again once it is done, or "
        "wait longer (--lock-timeout)"
    )


async def _alembic(
    url: URL,
    work: Callable[[Connection], T],
    connect_args: Mapping[str, Any] | None,
    lock_timeout: float,
) -> T:
    """:func:`run_locked` for work that runs Alembic: in a thread of its own with an event
    loop of its own, once no other Alembic run of this process is under way. The
    thread finishes the migration (or rolls it back) even if the caller is cancelled."""

    _check_lock_timeout(lock_timeout)

    def in_thread() -> T:
        if not _ALEMBIC_RUN.acquire(timeout=lock_timeout):
            raise SchemaNotReady(_lock_message(url, lock_timeout, "another migration in this process"))
        try:
            return asyncio.run(run_locked(url, work, connect_args=connect_args, lock_timeout=lock_timeout))
        finally:
            _ALEMBIC_RUN.release()

    return await asyncio.to_thread(in_thread)


async def upgrade_schema(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> SchemaState:
    """Upgrade the database a DSN names (see :func:`chatledger.dsn.resolve_dsn`) to
    ``revision``, serialised and atomic as this module's docstring says; return its
    state afterwards. A database at a revision the scripts do not know (a newer
    chatledger migrated it) is left as it is.

    Raises:
        SchemaNotReady: the schema lock was not granted within ``lock_timeout`` seconds.
        ValueError: ``lock_timeout`` is not a positive number of seconds.
        alembic.util.CommandError: ``revision`` is not a valid target.
    """
    url = resolve_dsn(dsn)

    def work(connection: Connection) -> SchemaState:
        state = read_state(connection, script_location)
        if state.revision is not None and not is_known(state.revision, script_location):
            return state
        command.upgrade(alembic_config(connection, script_location), revision)
        return read_state(connection, script_location)

    return await _alembic(url, work, connect_args, lock_timeout)


async def upgrade_database(
    dsn: str | URL | None = None,
    revision: str = "head",
    *,
    script_location: str | Path | None = None,
    connect_args: Mapping[str, Any] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> str | None:
    """:func:`upgrade_schema`, returning the revision the database is at afterwards.

    Raises:
        SchemaNotReady: as :func:`upgrade_schema`; or the database is at a newer
            revision this chatledger cannot run on (upgrade chatledger).
    """
    url = resolve_dsn(dsn)
    state = await upgrade_schema(
        url, revision, script_location=script_location, connect_args=connect_args, lock_timeout=lock_timeout
    )
    if standing(state, script_location) is Standing.AHEAD_INCOMPATIBLE:
        raise SchemaNotReady(describe(url, state, script_location))
    return state.revision


async def downgrade_database(
    dsn: str | URL | None,
    revision: str,
    *,
    script_location: str | Path | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
) -> str | None:
    """Downgrade the database a DSN names to ``revision`` (``"base"`` drops every chatledger
    table), under the schema lock, atomically where DDL is transactional; return the
    revision it is at afterwards."""
    url = resolve_dsn(dsn)

    def work(connection: Connection) -> str | None:
        command.downgrade(alembic_config(connection, script_location), revision)
        return read_state(connection, script_location).revision

    return await _alembic(url, work, None, lock_timeout)


async def database_state(
    dsn: str | URL | None = None, script_location: str | Path | None = None
) -> SchemaState:
    """The state of the database a DSN names; reads only."""
    return await run_on_connection(resolve_dsn(dsn), lambda conn: read_state(conn, script_location))


async def database_revision(dsn: str | URL | None = None) -> str | None:
    """The revision of the database a DSN names; ``None`` when it has none."""
    return (await database_state(dsn)).revision


def run_alembic_from_command_line(url: URL, work: Callable[[Connection], None], lock_timeout: float) -> None:
    """``env.py`` under the ``alembic`` command: ``work`` under the schema lock, in one transaction."""
    asyncio.run(run_locked(url, work, lock_timeout=lock_timeout))
