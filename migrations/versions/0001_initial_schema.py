"""Initial schema: sessions (counter rows), raw messages, snapshots, rein sessions.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 12:31:16.774268
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The oldest revision whose code runs on the schema this revision leaves.
compatible_from: str = "0001"

# Frozen copies of what chatledger.types rendered when this revision was written; a
# revision never imports chatledger, so later changes there cannot change it.
#: types.Id: VARCHAR(255); on MySQL/MariaDB VARBINARY(1020) (utf8mb4 bytes, compared exactly).
Id = sa.String(length=255).with_variant(mysql.VARBINARY(length=1020), "mysql")
#: types.UTCDateTime: TIMESTAMP WITH TIME ZONE on PostgreSQL, DATETIME(6) on MySQL, DATETIME on SQLite.
UTCDateTime = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")
#: types.LongText: TEXT; LONGTEXT on MySQL, where TEXT stops at 64 KiB.
LongText = sa.Text().with_variant(mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), "mysql")


def upgrade() -> None:
    op.create_table(
        "agent_sessions",
        sa.Column("id", Id, nullable=False),
        sa.Column("parent_session_id", Id, nullable=True),
        sa.Column("session_type", sa.Integer(), server_default="0", nullable=False),
        sa.Column("title", sa.String(length=200), nullable=True),
        sa.Column("agent_name", sa.String(length=64), nullable=True),
        sa.Column("last_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("snapshot_version", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("compacted_through_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("fields_version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.CheckConstraint(
            "last_sequence >= compacted_through_sequence", name=op.f("ck_agent_sessions_boundary_within_log")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_sessions")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_index("ix_agent_sessions_activity", "agent_sessions", ["updated_at", "id"], unique=False)

    op.create_table(
        "raw_messages",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("session_id", Id, nullable=False),
        sa.Column("request_id", Id, nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.Integer(), nullable=False),
        sa.Column("content", LongText, nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=True),
        sa.Column("message_json", LongText, nullable=False),
        sa.Column("metadata_json", LongText, nullable=False),
        sa.Column("tags_json", LongText, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("completed_at", UTCDateTime, nullable=False),
        sa.Column("duration_ns", sa.BigInteger(), nullable=False),
        sa.Column("reasoning_started_at", UTCDateTime, nullable=True),
        sa.Column("reasoning_completed_at", UTCDateTime, nullable=True),
        sa.Column("reasoning_duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("content_started_at", UTCDateTime, nullable=True),
        sa.Column("content_completed_at", UTCDateTime, nullable=True),
        sa.Column("content_duration_ns", sa.BigInteger(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=True),
        sa.Column("output_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=True),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=True),
        sa.Column("reasoning_tokens", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_raw_messages")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_index("ux_raw_session_sequence", "raw_messages", ["session_id", "sequence"], unique=True)

    op.create_table(
        "rein_sessions",
        sa.Column("id", Id, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("session_json", LongText, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rein_sessions")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_index("ix_rein_sessions_activity", "rein_sessions", ["updated_at", "id"], unique=False)

    op.create_table(
        "session_snapshots",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("session_id", Id, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("compacted_through_sequence", sa.BigInteger(), nullable=False),
        sa.Column("message_json", LongText, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_snapshots")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    op.create_index(
        "ux_snapshot_session_version", "session_snapshots", ["session_id", "version"], unique=True
    )


def downgrade() -> None:
    op.drop_index("ux_snapshot_session_version", table_name="session_snapshots")

    op.drop_table("session_snapshots")
    op.drop_index("ix_rein_sessions_activity", table_name="rein_sessions")

    op.drop_table("rein_sessions")
    op.drop_index("ux_raw_session_sequence", table_name="raw_messages")

    op.drop_table("raw_messages")
    op.drop_index("ix_agent_sessions_activity", table_name="agent_sessions")

    op.drop_table("agent_sessions")
