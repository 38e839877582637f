"""What a chatledger database holds: sessions, their entries, checkpoints and bytes,
per kind of session.

    stats = await chatledger.stats.read_stats("postgresql://app@db/chat")
    stats.framework("zett").counts["raw_messages"], stats.size.tables["raw_messages"]

:func:`read_stats` reads everything in one snapshot-consistent read transaction of the
ledger (:meth:`chatledger.engine.Ledger.read`: PostgreSQL ``REPEATABLE READ READ
ONLY``, InnoDB's consistent snapshot, a deferred SQLite read in WAL mode), which
takes no lock a writer waits for. Every registered kind (:mod:`chatledger.kinds`) is
reported, whether its framework is installed or not: its figures are data of the
kind. Its live sessions and tombstones are counted from its session table (one read
of it, with its per-session figures, such as a zett session's raw messages,
``last_sequence - base_sequence`` of its counter row: no raw message is read), and
its other figures count rows of its tables (their primary keys). Sizes come from the
backend (:attr:`chatledger.dialects.Backend.storage_size`), of chatledger's own
tables only: the total says what it covers, so a database shared with other
applications is not taken for chatledger's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import dialects, validate
from .app_alembic import chatledger_tables
from .dsn import display
from .engine import Ledger
from .kinds import SessionKind, chosen

__all__ = ["FrameworkStats", "SessionSize", "Stats", "read_stats"]

#: How many of the largest sessions :func:`read_stats` lists per kind by default.
LARGEST = 10


@dataclass(frozen=True)
class SessionSize:
    """One of a kind's largest sessions."""

    #: Its id (a key of several columns, ADK's: ``app/user/id``).
    id: str
    #: What the kind ranks its sessions by (:attr:`FrameworkStats.largest_by`): a zett
    #: session's raw messages of its current generation, from its counter row.
    messages: int


@dataclass(frozen=True)
class FrameworkStats:
    """What one kind's tables hold."""

    #: The kind's name: ``zett``, ``rein``, ``openai``, ``adk``.
    name: str
    #: Counts by name: ``sessions`` (live), ``deleted`` (tombstones), and the kind's own
    #: (:attr:`chatledger.kinds.SessionKind.counters`: zett's ``raw_messages``, ``checkpoints``...).
    counts: dict[str, int]
    #: The largest live sessions, largest first (ties by key); empty for a kind whose
    #: sessions have no size outside their JSON (rein).
    largest: list[SessionSize]
    #: The kind's tables.
    tables: list[str]
    #: What :attr:`largest` ranks by, in words ("raw messages"); "" when it ranks none.
    largest_by: str = ""


@dataclass(frozen=True)
class Stats:
    """The result of :func:`read_stats`."""

    #: The database, its password masked (:func:`chatledger.dsn.display`).
    database: str
    #: OpenTelemetry's name of the backend (``postgresql``, ``mysql``, ``mariadb``, ``sqlite``).
    system: str
    frameworks: list[FrameworkStats]
    #: Bytes per table and in all, and where the figures come from: chatledger's tables
    #: only (the kinds' and its own bookkeeping tables).
    size: dialects.StorageSize
    #: Seconds the read transaction took.
    seconds: float = field(default=0.0)
    #: What :attr:`size`'s total covers, in words.
    total_covers: str = ""

    def framework(self, name: str) -> FrameworkStats:
        """One kind's figures; ``KeyError`` for a kind not reported."""
        for found in self.frameworks:
            if found.name == name:
                return found
        raise KeyError(name)

    def as_json(self) -> dict[str, Any]:
        """JSON-ready data: ``{"database", "system", "seconds", "frameworks": {name:
        {"counts", "largest", "largest_by", "tables"}}, "size": {"tables", "total",
        "source", "total_covers"}}``."""
        return {
            "database": self.database,
            "system": self.system,
            "seconds": round(self.seconds, 6),
            "frameworks": {
                found.name: {
                    "counts": found.counts,
                    "largest": [asdict(session) for session in found.largest],
                    "largest_by": found.largest_by,
                    "tables": found.tables,
                }
                for found in self.frameworks
            },
            "size": {**asdict(self.size), "total_covers": self.total_covers},
        }


async def _count(conn: AsyncConnection, kind: SessionKind, largest: int) -> FrameworkStats:
    """One kind's figures, in the caller's read transaction."""
    tombstones = kind.tombstone_rows()
    table, live = tombstones.table, tombstones.live
    summed = [counter for counter in kind.counters if counter.per_session is not None]
    row = (
        await conn.execute(
            select(
                func.coalesce(func.sum(case((live, 1), else_=0)), 0).label("sessions"),
                func.coalesce(func.sum(case((live, 0), else_=1)), 0).label("deleted"),
                # A tombstone's entries are gone: only the live sessions' are counted.
                *(
                    func.coalesce(func.sum(case((live, counter.per_session), else_=0)), 0).label(counter.name)
                    for counter in summed
                ),
            ).select_from(table)
        )
    ).one()
    counts = {"sessions": int(row.sessions), "deleted": int(row.deleted)}
    for counter in kind.counters:
        if counter.per_session is not None:
            counts[counter.name] = int(row._mapping[counter.name])
        elif counter.rows is not None:
            statement = select(func.count()).select_from(counter.rows)
            if counter.where is not None:
                statement = statement.where(counter.where)
            counts[counter.name] = int(await conn.scalar(statement) or 0)
    top: list[SessionSize] = []
    if largest and kind.largest is not None:
        keys = [table.c[name] for name in tombstones.key]
        size = kind.largest.size
        rows = await conn.execute(
            select(*keys, size.label("size")).where(live).order_by(size.desc(), *keys).limit(largest)
        )
        top = [
            SessionSize("/".join(str(found._mapping[name]) for name in tombstones.key), int(found.size))
            for found in rows
        ]
    return FrameworkStats(
        kind.name,
        counts,
        top,
        [table.name for table in kind.tables],
        kind.largest.unit if kind.largest is not None else "",
    )


async def read_stats(
    dsn: str | URL | None = None,
    *,
    engine: AsyncEngine | None = None,
    largest: int = LARGEST,
    kinds: Sequence[str] | None = None,
    **options: Any,
) -> Stats:
    """Counts, sizes and the largest sessions of a chatledger database, read in one
    snapshot-consistent read transaction (see the module docstring); never migrates.

    Args:
        dsn: See :func:`chatledger.dsn.resolve_dsn`; or ``engine``, an ``AsyncEngine``
            of the caller's (see :class:`chatledger.engine.Ledger`).
        largest: how many of the largest sessions to list per kind (0: none).
        kinds: the kinds to report, by name (``all``: every one; default: every
            registered kind, :func:`chatledger.kinds.registered`). The sizes are of
            chatledger's every table whichever are reported.
        **options: :class:`chatledger.options.LedgerOptions`.

    Raises:
        ValueError / TypeError: a bad DSN, option, kind or ``largest`` (not an int >= 0).
        SchemaNotReady: the database is not at a revision this chatledger runs on.
        StorageUnavailable, ConfigurationError, DatabaseError: as every read
            (:meth:`chatledger.engine.Ledger.read`).
    """
    top = validate.integer(largest, "largest")
    reported = chosen(kinds)
    ledger = Ledger(dsn, engine=engine, auto_upgrade=False, **options)
    tables = sorted(chatledger_tables())

    async def work(conn: AsyncConnection) -> Stats:
        started = time.perf_counter()
        found = [await _count(conn, kind, top) for kind in reported]
        size = await conn.run_sync(ledger.backend.storage_size, tables)
        if size.tables:
            covers = f"chatledger's {len(size.tables)} tables; other tables of the database are not counted"
        else:
            covers = "the whole database file, any other application's tables in it included"
        return Stats(
            display(ledger.url),
            ledger.backend.db_system(conn.dialect),
            found,
            size,
            time.perf_counter() - started,
            covers,
        )

    try:
        return await ledger.read(work)
    finally:
        await ledger.close()
