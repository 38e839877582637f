"""The one schema: sessions (the sequence counter rows), raw messages, snapshots, rein sessions.

Table and column names follow zett-agent's own SQL store (``agent_sessions``,
``raw_messages``, ``session_snapshots``) wherever the meaning is the same, so SQL
written against zett's store keeps working. What zett keeps too narrow is widened
(see :mod:`chatledger.types`), and the session row gains the counter and version
columns that make the store safe to share:

* ``last_sequence`` -- the last raw-log sequence allocated; an append advances it
  in the same transaction that inserts the message, so sequences run 1, 2, 3...
  with no gap or duplicate, and it doubles as the message count.
* ``snapshot_version`` / ``compacted_through_sequence`` -- the current checkpoint,
  advanced by compare-and-set on ``snapshot_version``.
* ``fields_version`` -- optimistic version of the mutable fields (title, agent name).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import CheckConstraint, Index, Integer, MetaData, String, Table
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .types import BigInt, Id, LongText, UTCDateTime

#: Constraint names are fixed so that migrations and ``alembic check`` agree on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

#: Table options for MySQL/MariaDB: InnoDB (transactions, row locks) and full UTF-8.
MYSQL_TABLE_ARGS = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


class Base(DeclarativeBase):
    """Declarative base of the chatledger schema."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class AgentSession(Base):
    """One conversation and its sequence counter row."""

    __tablename__ = "agent_sessions"
    __table_args__ = (
        # list_sessions: newest activity first, ties broken by id.
        Index("ix_agent_sessions_activity", "updated_at", "id"),
        CheckConstraint("last_sequence >= compacted_through_sequence", name="boundary_within_log"),
        MYSQL_TABLE_ARGS,
    )

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    parent_session_id: Mapped[str | None] = mapped_column(Id)
    session_type: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    title: Mapped[str | None] = mapped_column(String(200))
    agent_name: Mapped[str | None] = mapped_column(String(64))
    last_sequence: Mapped[int] = mapped_column(BigInt, default=0, server_default="0")
    snapshot_version: Mapped[int] = mapped_column(BigInt, default=0, server_default="0")
    compacted_through_sequence: Mapped[int] = mapped_column(BigInt, default=0, server_default="0")
    fields_version: Mapped[int] = mapped_column(BigInt, default=1, server_default="1")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RawMessage(Base):
    """One immutable original message; ``role`` is zett's numeric ``MessageKind``."""

    __tablename__ = "raw_messages"
    __table_args__ = (
        # The tail read: WHERE session_id = ? AND sequence > ? ORDER BY sequence.
        Index("ux_raw_session_sequence", "session_id", "sequence", unique=True),
        MYSQL_TABLE_ARGS,
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    session_id: Mapped[str] = mapped_column(Id)
    request_id: Mapped[str] = mapped_column(Id)
    sequence: Mapped[int] = mapped_column(BigInt)
    role: Mapped[int] = mapped_column(Integer)
    # Plain text of the message, for SQL readers; message_json is authoritative.
    content: Mapped[str] = mapped_column(LongText)
    tool_name: Mapped[str | None] = mapped_column(String(200))
    message_json: Mapped[str] = mapped_column(LongText)
    metadata_json: Mapped[str] = mapped_column(LongText)
    tags_json: Mapped[str] = mapped_column(LongText)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    duration_ns: Mapped[int] = mapped_column(BigInt)
    reasoning_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reasoning_completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reasoning_duration_ns: Mapped[int | None] = mapped_column(BigInt)
    content_started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    content_completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    content_duration_ns: Mapped[int | None] = mapped_column(BigInt)
    input_tokens: Mapped[int | None] = mapped_column(BigInt)
    output_tokens: Mapped[int | None] = mapped_column(BigInt)
    cache_read_tokens: Mapped[int | None] = mapped_column(BigInt)
    cache_write_tokens: Mapped[int | None] = mapped_column(BigInt)
    reasoning_tokens: Mapped[int | None] = mapped_column(BigInt)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SessionSnapshot(Base):
    """One immutable checkpoint: a summary replacing raw messages 1..compacted_through_sequence."""

    __tablename__ = "session_snapshots"
    __table_args__ = (
        Index("ux_snapshot_session_version", "session_id", "version", unique=True),
        MYSQL_TABLE_ARGS,
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    session_id: Mapped[str] = mapped_column(Id)
    version: Mapped[int] = mapped_column(BigInt)
    compacted_through_sequence: Mapped[int] = mapped_column(BigInt)
    message_json: Mapped[str] = mapped_column(LongText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ReinSession(Base):
    """One whole rein-agent ``Session`` as JSON, with an optimistic version."""

    __tablename__ = "rein_sessions"
    __table_args__ = (
        Index("ix_rein_sessions_activity", "updated_at", "id"),
        MYSQL_TABLE_ARGS,
    )

    id: Mapped[str] = mapped_column(Id, primary_key=True)
    version: Mapped[int] = mapped_column(BigInt)
    session_json: Mapped[str] = mapped_column(LongText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


#: The tables as Core ``Table`` objects, for the statements of the stores.
sessions_table = cast(Table, AgentSession.__table__)
raw_messages_table = cast(Table, RawMessage.__table__)
snapshots_table = cast(Table, SessionSnapshot.__table__)
rein_sessions_table = cast(Table, ReinSession.__table__)
