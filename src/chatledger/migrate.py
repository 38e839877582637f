"""Alembic, run from Python: the revisions shipped in the wheel, and revision checks.

The repository's ``migrations/`` folder is the Alembic script directory; the wheel
carries the same files as ``chatledger/migrations``. ``alembic upgrade head`` from
the repository root and ``chatledger upgrade`` run the same revisions.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection

from .dsn import display, resolve_dsn, sqlite_file

T = TypeVar("T")


@cache
def script_location() -> Path:
    """The Alembic script directory: inside the installed package, or the source
    checkout's ``migrations/`` for an editable install."""
    packaged = Path(__file__).with_name("migrations")
    if (packaged / "env.py").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if (checkout / "env.py").is_file():
        return checkout
    raise RuntimeError("chatledger's migrations are missing from this installation")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic ``Config`` for the shipped revisions.

    With ``connection``, ``env.py`` runs the migrations on that (synchronous facade
    of an async) connection, inside the caller's transaction; without, it opens the
    database named by ``-x dsn=...``, ``CHATLEDGER_DSN`` or the embedded default.
    """
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision() -> str:
    """The newest revision this chatledger ships."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("chatledger ships no migration revision")
    return head


def is_known(revision: str) -> bool:
    """Whether this chatledger ships ``revision`` (a newer one may have migrated the database)."""
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at, or ``None`` for an empty database."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Upgrade the database on ``connection`` to ``revision``, in its transaction."""
    command.upgrade(alembic_config(connection=connection), revision)


def downgrade(connection: Connection, revision: str) -> None:
    """Downgrade the database on ``connection`` to ``revision``, in its transaction."""
    command.downgrade(alembic_config(connection=connection), revision)


def ahead_message(url: URL, current: str) -> str:
    """Why a database migrated by a newer chatledger cannot be used by this one."""
    return (
        f"database {display(url)} is at revision {current}, which this chatledger does not know "
        f"(its newest is {head_revision()}): a newer chatledger migrated it; upgrade chatledger"
    )


def behind_message(url: URL, current: str | None) -> str:
    """Why a database cannot be used yet, and the command that fixes it."""
    return (
        f"database {display(url)} is at revision {current or '<none>'}, chatledger needs "
        f"{head_revision()}; run `alembic upgrade head` (with CHATLEDGER_DSN set) from the "
        "chatledger repository, or `chatledger upgrade --dsn DSN`, as the schema owner"
    )


async def run_on_connection(url: URL, work: Callable[[Connection], T]) -> T:
    """Run ``work`` on a fresh async connection to ``url``, in one committed transaction."""
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool

    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            return await connection.run_sync(work)
    finally:
        await engine.dispose()


async def upgrade_database(dsn: str | URL | None = None, revision: str = "head") -> str | None:
    """Upgrade the database a DSN names (see :func:`chatledger.dsn.resolve_dsn`);
    return the revision it is at afterwards."""
    url = resolve_dsn(dsn)

    def work(connection: Connection) -> str | None:
        upgrade(connection, revision)
        return current_revision(connection)

    return await run_on_connection(url, work)


async def downgrade_database(dsn: str | URL | None, revision: str) -> str | None:
    """Downgrade the database a DSN names to ``revision`` (``"base"`` drops every table)."""
    url = resolve_dsn(dsn)

    def work(connection: Connection) -> str | None:
        downgrade(connection, revision)
        return current_revision(connection)

    return await run_on_connection(url, work)


async def database_revision(dsn: str | URL | None = None) -> str | None:
    """The revision of the database a DSN names; ``None`` when it has none."""
    return await run_on_connection(resolve_dsn(dsn), current_revision)
