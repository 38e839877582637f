"""What a chatledger database holds: sessions, messages, checkpoints and bytes, per framework.

    stats = await chatledger.stats.read_stats("postgresql://app@db/chat")
    stats.frameworks[0].counts["raw_messages"], stats.size.tables["raw_messages"]

:func:`read_stats` reads everything in one snapshot-consistent read transaction of the
ledger (:meth:`chatledger.engine.Ledger.read`: PostgreSQL ``REPEATABLE READ READ
ONLY``, InnoDB's consistent snapshot, a deferred SQLite read in WAL mode), which
takes no lock a writer waits for. The counts come from the counter rows: a zett
session's raw messages are ``last_sequence - base_sequence`` of its row (raw
messages are never deleted one by one), so no raw message is read; the statements
read each session table once (``agent_sessions``, ``rein_sessions``) and count the
checkpoint and write-log rows (their primary keys). Sizes come from the backend
(:attr:`chatledger.dialects.Backend.storage_size`).

Each framework is one :class:`Framework` in :data:`FRAMEWORKS` (its name, tables and
counting query), so another slots in as one more entry.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import dialects, validate
from .dsn import display
from .engine import Ledger
from .schema import raw_messages_table as _raw
from .schema import rein_sessions_table as _rein
from .schema import rein_writes_table as _writes
from .schema import sessions_table as _sessions
from .schema import snapshots_table as _snapshots

__all__ = ["FRAMEWORKS", "Framework", "FrameworkStats", "SessionSize", "Stats", "read_stats"]

#: How many of the largest sessions :func:`read_stats` lists per framework by default.
LARGEST = 10


@dataclass(frozen=True)
class SessionSize:
    """One of a framework's largest sessions."""

    id: str
    #: Raw messages of its current generation, from its counter row.
    messages: int


@dataclass(frozen=True)
class FrameworkStats:
    """What one framework's tables hold."""

    #: ``zett``, ``rein``.
    name: str
    #: Counts by name: ``sessions`` (live), ``deleted`` (tombstones), and the
    #: framework's own (zett: ``raw_messages``, ``checkpoints``; rein: ``write_log``).
    counts: dict[str, int]
    #: The largest live sessions, most messages first (ties by id); empty for a
    #: framework whose sessions have no message count outside their JSON (rein).
    largest: list[SessionSize]
    #: The framework's tables.
    tables: list[str]


@dataclass(frozen=True)
class Stats:
    """The result of :func:`read_stats`."""

    #: The database, its password masked (:func:`chatledger.dsn.display`).
    database: str
    #: OpenTelemetry's name of the backend (``postgresql``, ``mysql``, ``mariadb``, ``sqlite``).
    system: str
    frameworks: list[FrameworkStats]
    #: Bytes per table and in all, and where the figures come from.
    size: dialects.StorageSize
    #: Seconds the read transaction took.
    seconds: float = field(default=0.0)

    def framework(self, name: str) -> FrameworkStats:
        """One framework's figures; ``KeyError`` for a name :data:`FRAMEWORKS` lacks."""
        for found in self.frameworks:
            if found.name == name:
                return found
        raise KeyError(name)

    def as_json(self) -> dict[str, Any]:
        """JSON-ready data: ``{"database", "system", "seconds", "frameworks": {name:
        {"counts", "largest", "tables"}}, "size": {"tables", "total", "source"}}``."""
        return {
            "database": self.database,
            "system": self.system,
            "seconds": round(self.seconds, 6),
            "frameworks": {
                found.name: {
                    "counts": found.counts,
                    "largest": [asdict(session) for session in found.largest],
                    "tables": found.tables,
                }
                for found in self.frameworks
            },
            "size": asdict(self.size),
        }


#: Counts a framework's rows in the read transaction: (counts, largest sessions), given
#: how many of the largest to list.
Counter = Callable[[AsyncConnection, int], Awaitable[tuple[dict[str, int], list[SessionSize]]]]


@dataclass(frozen=True)
class Framework:
    """One framework's share of the schema: its name, tables and counting query."""

    name: str
    tables: tuple[str, ...]
    count: Counter


async def _count_zett(conn: AsyncConnection, largest: int) -> tuple[dict[str, int], list[SessionSize]]:
    live = _sessions.c.deleted_at.is_(None)
    messages = _sessions.c.last_sequence - _sessions.c.base_sequence
    row = (
        await conn.execute(
            select(
                func.coalesce(func.sum(case((live, 1), else_=0)), 0).label("sessions"),
                func.coalesce(func.sum(case((live, 0), else_=1)), 0).label("deleted"),
                # Deleted sessions' raw messages are gone; the live ones' are counted by their rows.
                func.coalesce(func.sum(case((live, messages), else_=0)), 0).label("raw_messages"),
            )
        )
    ).one()
    checkpoints = await conn.scalar(select(func.count()).select_from(_snapshots))
    counts = {
        "sessions": int(row.sessions),
        "deleted": int(row.deleted),
        "raw_messages": int(row.raw_messages),
        "checkpoints": int(checkpoints or 0),
    }
    top: list[SessionSize] = []
    if largest:
        rows = await conn.execute(
            select(_sessions.c.id, messages.label("messages"))
            .where(live)
            .order_by(messages.desc(), _sessions.c.id)
            .limit(largest)
        )
        top = [SessionSize(found.id, int(found.messages)) for found in rows]
    return counts, top


async def _count_rein(conn: AsyncConnection, largest: int) -> tuple[dict[str, int], list[SessionSize]]:
    # A NULL test reads the row's null flags, not the (off-page) JSON.
    live = _rein.c.session_json.is_not(None)
    row = (
        await conn.execute(
            select(
                func.coalesce(func.sum(case((live, 1), else_=0)), 0).label("sessions"),
                func.coalesce(func.sum(case((live, 0), else_=1)), 0).label("deleted"),
            )
        )
    ).one()
    write_log = await conn.scalar(select(func.count()).select_from(_writes))
    return {"sessions": int(row.sessions), "deleted": int(row.deleted), "write_log": int(write_log or 0)}, []


#: The frameworks whose sessions chatledger stores, in the order they are reported.
FRAMEWORKS: tuple[Framework, ...] = (
    Framework("zett", (_sessions.name, _raw.name, _snapshots.name), _count_zett),
    Framework("rein", (_rein.name, _writes.name), _count_rein),
)


async def read_stats(
    dsn: str | URL | None = None,
    *,
    engine: AsyncEngine | None = None,
    largest: int = LARGEST,
    frameworks: Sequence[Framework] = FRAMEWORKS,
    **options: Any,
) -> Stats:
    """Counts, sizes and the largest sessions of a chatledger database, read in one
    snapshot-consistent read transaction (see the module docstring); never migrates.

    Args:
        dsn: See :func:`chatledger.dsn.resolve_dsn`; or ``engine``, an ``AsyncEngine``
            of the caller's (see :class:`chatledger.engine.Ledger`).
        largest: how many of the largest sessions to list per framework (0: none).
        frameworks: the frameworks to report (default: all, :data:`FRAMEWORKS`).
        **options: :class:`chatledger.options.LedgerOptions`.

    Raises:
        ValueError / TypeError: a bad DSN, option or ``largest`` (not an int >= 0).
        SchemaNotReady: the database is not at a revision this chatledger runs on.
        StorageUnavailable, ConfigurationError, DatabaseError: as every read
            (:meth:`chatledger.engine.Ledger.read`).
    """
    top = validate.integer(largest, "largest")
    ledger = Ledger(dsn, engine=engine, auto_upgrade=False, **options)
    tables = [name for framework in frameworks for name in framework.tables]

    async def work(conn: AsyncConnection) -> Stats:
        started = time.perf_counter()
        found = []
        for framework in frameworks:
            counts, biggest = await framework.count(conn, top)
            found.append(FrameworkStats(framework.name, counts, biggest, list(framework.tables)))
        size = await conn.run_sync(ledger.backend.storage_size, tables)
        return Stats(
            display(ledger.url),
            ledger.backend.db_system(conn.dialect),
            found,
            size,
            time.perf_counter() - started,
        )

    try:
        return await ledger.read(work)
    finally:
        await ledger.close()
