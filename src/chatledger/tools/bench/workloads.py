"""The benchmark's workloads: fresh databases per backend, the stores and the floor, and
the seeding of large sessions."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import MetaData, Table, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from ... import dialects
from ...engine import Ledger
from ...schema import raw_messages_table, sessions_table, snapshots_table
from ..harness import Store, user_message
from .floor_rows import floor_row
from .results import MARK, SEED_CHUNK

#: The contenders of the append measurement, in table order.


@dataclass(frozen=True)
class Databases:
    """The four fresh databases of one backend."""

    #: chatledger's, migrated (chatledger's async driver).
    ledger: URL
    #: zett-agent's own store's (zett's driver); zett creates its tables.
    zett: URL
    #: The floor's table (chatledger's async driver).
    floor: URL
    #: The naive floor's table (:class:`chatledger.tools.bench.seen.NaiveFloor`).
    naive: URL


async def _admin(url: URL, sql: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


def _sqlite_root(admin: URL) -> Path:
    """A new temporary directory inside the one a SQLite admin URL names."""
    parent = Path(admin.database).expanduser() if admin.database not in (None, "", ":memory:") else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="chatledger-bench-", dir=parent))


@contextlib.asynccontextmanager
async def fresh_databases(admin: URL) -> AsyncIterator[Databases]:
    """Create the benchmark's databases on the server ``admin`` names, yield them,
    and drop them afterwards.

    ``admin`` is an async URL (see :func:`chatledger.dsn.resolve_dsn`). For SQLite its
    path is a directory (``None`` or empty: the system's temporary directory) where
    a temporary directory of files is made and removed afterwards.
    """
    backend = dialects.backend(admin.get_backend_name())
    if backend.create_database is None or backend.drop_database is None:
        root = _sqlite_root(admin)
        try:
            yield Databases(
                ledger=admin.set(database=str(root / "chatledger.sqlite3")),
                zett=admin.set(drivername=backend.zett_driver, database=str(root / "zett.sqlite3")),
                floor=admin.set(database=str(root / "floor.sqlite3")),
                naive=admin.set(database=str(root / "naive.sqlite3")),
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    run = uuid.uuid4().hex[:10]
    names = {role: f"chatledger_bench_{run}_{role}" for role in ("ledger", "zett", "floor", "naive")}
    created: list[str] = []
    try:
        for name in names.values():
            await _admin(admin, backend.create_database.format(name=name))
            created.append(name)
        yield Databases(
            ledger=admin.set(database=names["ledger"]),
            zett=admin.set(drivername=backend.zett_driver, database=names["zett"]),
            floor=admin.set(database=names["floor"]),
            naive=admin.set(database=names["naive"]),
        )
    finally:
        for name in created:
            await _admin(admin, backend.drop_database.format(name=name))


# -- the stores -----------------------------------------------------------------------


def store_engine(store: Store) -> AsyncEngine:
    """The store's own engine, for seeding and statistics."""
    ledger = getattr(store, "ledger", None)
    engine = ledger.engine if isinstance(ledger, Ledger) else getattr(store, "engine", None)
    if not isinstance(engine, AsyncEngine):
        raise TypeError(f"{type(store).__name__} has no AsyncEngine")
    return engine


class Floor:
    """The floor: one ``raw_messages`` row (chatledger's columns and unique index) per
    call, encoded by zett's codec, in its own committed transaction through
    SQLAlchemy Core, on chatledger's driver and engine settings (pool, SQLite
    pragmas). No counter row, no validation, no retry: the least any store
    must do to persist a message."""

    def __init__(self, url: URL) -> None:
        from zett_agent.ids import new_uuid7
        from zett_agent.storage import MessageKind, encode_messages

        self._ledger = Ledger(url)
        self._table = raw_messages_table.to_metadata(MetaData())
        self._sequence = 0
        self._encode = encode_messages
        self._new_id = new_uuid7
        self._role = int(MessageKind.USER)

    @property
    def engine(self) -> AsyncEngine:
        return self._ledger.engine

    async def create_table(self) -> None:
        async with self._ledger.engine.begin() as conn:
            await conn.run_sync(self._table.metadata.create_all)

    async def append(self, session_id: str, request_id: str, message: Any) -> int:
        self._sequence += 1
        row = floor_row(
            self._new_id(), session_id, request_id, self._sequence, self._role, message.content,
            None, self._encode([message]),
        )  # fmt: skip
        async with self._ledger.engine.begin() as conn:
            await conn.execute(self._table.insert(), row)
        return self._sequence

    async def close(self) -> None:
        await self._ledger.close()


# -- seeding --------------------------------------------------------------------------


def chunks(rows: Iterable[dict[str, Any]], size: int = SEED_CHUNK) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclass(frozen=True)
class _Layout:
    """One store's tables and timestamp convention, for seeding it directly."""

    sessions: Table
    raw: Table
    snapshots: Table
    #: chatledger stores aware UTC instants; zett's columns are naive UTC.
    aware: bool
    #: chatledger's counter-row columns (``None``: zett has none).
    counters: bool


def _layout(kind: str) -> _Layout:
    if kind == "chatledger":
        return _Layout(sessions_table, raw_messages_table, snapshots_table, aware=True, counters=True)
    # zett-agent's ORM tables (its private module; pinned by chatledger's zett extra).
    from zett_agent._sql_storage import AgentSessionModel, ContextSnapshotModel, RawLogMessageModel

    return _Layout(
        cast(Table, AgentSessionModel.__table__),
        cast(Table, RawLogMessageModel.__table__),
        cast(Table, ContextSnapshotModel.__table__),
        aware=False,
        counters=False,
    )


class Seeder:
    """Bulk rows straight into one store's tables: valid zett message JSON, consistent
    counters, distinct activity times; far faster than appending one by one."""

    def __init__(self, kind: str, engine: AsyncEngine, base: datetime) -> None:
        from zett_agent.extensions.compaction import CompactedMessage
        from zett_agent.storage import MessageKind, encode_messages

        self.engine = engine
        self.layout = _layout(kind)
        self.base = base
        self._template = encode_messages([user_message(f"seeded message {MARK}")])
        self._summary = encode_messages([CompactedMessage(content="summary of the seeded messages")])
        self._role = int(MessageKind.USER)

    def _at(self, offset_ms: int) -> datetime:
        instant = self.base + timedelta(milliseconds=offset_ms)
        return instant if self.layout.aware else instant.replace(tzinfo=None)

    def _session_row(self, session_id: str, at: datetime, messages: int, boundary: int) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": session_id,
            "parent_session_id": None,
            "session_type": 0,
            "title": None,
            "agent_name": None,
            "created_at": at,
            "updated_at": at,
        }
        if self.layout.counters:
            row.update(
                last_sequence=messages,
                snapshot_version=1 if boundary else 0,
                compacted_through_sequence=boundary,
                fields_version=1,
            )
        return row

    def _raw_rows(self, session_id: str, first: int, count: int, at: datetime) -> Iterator[dict[str, Any]]:
        from zett_agent.ids import new_uuid7

        for sequence in range(first, first + count):
            yield {
                "id": new_uuid7(),
                "session_id": session_id,
                "request_id": "seed",
                "sequence": sequence,
                "role": self._role,
                "content": f"seeded message {sequence}",
                "tool_name": None,
                "message_json": self._template.replace(MARK, str(sequence)),
                "metadata_json": "{}",
                "tags_json": "{}",
                "started_at": at,
                "completed_at": at,
                "duration_ns": 0,
                "created_at": at,
                "updated_at": at,
            }

    async def _insert(self, table: Table, rows: Iterable[dict[str, Any]]) -> None:
        async with self.engine.begin() as conn:
            for chunk in chunks(rows):
                await conn.execute(table.insert(), chunk)

    async def session(self, session_id: str, messages: int, boundary: int, offset_ms: int) -> None:
        """One session of ``messages`` raw messages with, when ``boundary`` > 0, a
        version-1 checkpoint through ``boundary``."""
        at = self._at(offset_ms)
        await self._insert(self.layout.sessions, [self._session_row(session_id, at, messages, boundary)])
        await self._insert(self.layout.raw, self._raw_rows(session_id, 1, messages, at))
        if boundary:
            from zett_agent.ids import new_uuid7

            snapshot = {
                "id": new_uuid7(),
                "session_id": session_id,
                "version": 1,
                "compacted_through_sequence": boundary,
                "message_json": self._summary,
                "created_at": at,
                "updated_at": at,
            }
            await self._insert(self.layout.snapshots, [snapshot])

    async def many_sessions(self, first: int, stop: int, prefix: str = "list") -> None:
        """Sessions ``first..stop-1`` of one raw message each, activity 1 ms apart."""
        ids = [(f"{prefix}-{index:07d}", self._at(index)) for index in range(first, stop)]
        await self._insert(self.layout.sessions, (self._session_row(sid, at, 1, 0) for sid, at in ids))
        await self._insert(self.layout.raw, (row for sid, at in ids for row in self._raw_rows(sid, 1, 1, at)))

    async def analyze(self, statement: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(text(statement))
