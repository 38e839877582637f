"""OpenAI Agents SDK and Google ADK sessions, in tables of their own.

This revision adds the tables of two more frameworks beside zett's and rein's, so a
fleet of services on mixed frameworks shares one database and the same id in two
frameworks never collides:

* ``openai_sessions`` -- one counter row per OpenAI Agents session: ``last_sequence``,
  the ``generation`` (+1 per ``clear_session``) and its ``base_sequence``, timestamps
  and the ``deleted_at`` tombstone a clear leaves until the next add;
  ``openai_items`` -- one item per row, keyed by (``session_id``, ``sequence``), with
  chatledger's ``item_id`` (unique per session: the settle of a lost COMMIT), the
  item's JSON and ``retracted_at`` (``pop_item``'s retraction: a sequence is never
  reused).
* ``adk_sessions`` -- one counter row per ADK session, keyed by (``app_name``,
  ``user_id``, ``id``), with the session state and its version; ``adk_events`` -- one
  event per row, keyed by the session and ``sequence``, ``event_id`` unique per session
  and ``timestamp`` indexed; ``adk_app_states`` and ``adk_user_states`` -- ADK's
  ``app:`` and ``user:`` state with a version each.

An expand-only revision: new tables and nothing else; zett's and rein's tables and
rows are untouched and code of earlier revisions neither reads nor writes these, so
``compatible_from`` keeps its predecessor's value. The downgrade drops the tables; the
drop guard (``chatledger downgrade``) refuses it while they hold rows unless told to
(``--yes``).

Frozen: this file imports nothing from chatledger.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 14:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0006"
#: The one predecessor.
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0004"

#: ``chatledger.types.Id()``: VARCHAR(255); VARBINARY(1020) on MySQL.
ID = sa.String(length=255).with_variant(mysql.VARBINARY(length=1020), "mysql")
#: ``chatledger.types.Id(128)`` (ADK's app and user): VARCHAR(128); VARBINARY(512) on MySQL.
SCOPE = sa.String(length=128).with_variant(mysql.VARBINARY(length=512), "mysql")
#: ``chatledger.types.Id(36)``: VARCHAR(36); VARBINARY(144) on MySQL.
ROW_ID = sa.String(length=36).with_variant(mysql.VARBINARY(length=144), "mysql")
#: ``chatledger.types.UTCDateTime``: timestamptz, DATETIME(6) on MySQL, DATETIME text on SQLite.
UTC_DATETIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")
#: ``chatledger.types.LongText``: TEXT; LONGTEXT on MySQL, where TEXT stops at 64 KiB.
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), "mysql")

MYSQL_TABLE_ARGS = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin", "mysql_engine": "InnoDB"}


def upgrade() -> None:
    op.create_table(
        "openai_sessions",
        sa.Column("id", ID, nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("base_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("deleted_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("last_sequence >= base_sequence", name=op.f("ck_openai_sessions_base_within_log")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_openai_sessions")),
        **MYSQL_TABLE_ARGS,
    )
    op.create_index(
        "ix_openai_sessions_activity", "openai_sessions", ["deleted_at", "updated_at", "id"], unique=False
    )
    op.create_table(
        "openai_items",
        sa.Column("session_id", ID, nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("item_id", ROW_ID, nullable=False),
        sa.Column("item_json", LONG_TEXT, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("retracted_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("session_id", "sequence", name=op.f("pk_openai_items")),
        **MYSQL_TABLE_ARGS,
    )
    op.create_index("ux_openai_items_item", "openai_items", ["session_id", "item_id"], unique=True)
    # get_items and pop_item: the newest live items of a session.
    op.create_index(
        "ix_openai_items_live", "openai_items", ["session_id", "retracted_at", "sequence"], unique=False
    )

    op.create_table(
        "adk_sessions",
        sa.Column("app_name", SCOPE, nullable=False),
        sa.Column("user_id", SCOPE, nullable=False),
        sa.Column("id", ID, nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("base_sequence", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("state_json", LONG_TEXT, nullable=False),
        sa.Column("state_version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("deleted_at", UTC_DATETIME, nullable=True),
        sa.CheckConstraint("last_sequence >= base_sequence", name=op.f("ck_adk_sessions_base_within_log")),
        sa.PrimaryKeyConstraint("app_name", "user_id", "id", name=op.f("pk_adk_sessions")),
        **MYSQL_TABLE_ARGS,
    )
    op.create_table(
        "adk_events",
        sa.Column("app_name", SCOPE, nullable=False),
        sa.Column("user_id", SCOPE, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("event_id", ID, nullable=False),
        sa.Column("timestamp", sa.Double(), nullable=False),
        sa.Column("event_json", LONG_TEXT, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("app_name", "user_id", "session_id", "sequence", name=op.f("pk_adk_events")),
        **MYSQL_TABLE_ARGS,
    )
    op.create_index(
        "ux_adk_events_event", "adk_events", ["app_name", "user_id", "session_id", "event_id"], unique=True
    )
    # GetSessionConfig.after_timestamp.
    op.create_index(
        "ix_adk_events_timestamp",
        "adk_events",
        ["app_name", "user_id", "session_id", "timestamp"],
        unique=False,
    )
    op.create_table(
        "adk_app_states",
        sa.Column("app_name", SCOPE, nullable=False),
        sa.Column("state_json", LONG_TEXT, nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("app_name", name=op.f("pk_adk_app_states")),
        **MYSQL_TABLE_ARGS,
    )
    op.create_table(
        "adk_user_states",
        sa.Column("app_name", SCOPE, nullable=False),
        sa.Column("user_id", SCOPE, nullable=False),
        sa.Column("state_json", LONG_TEXT, nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("app_name", "user_id", name=op.f("pk_adk_user_states")),
        **MYSQL_TABLE_ARGS,
    )


def downgrade() -> None:
    op.drop_table("adk_user_states")
    op.drop_table("adk_app_states")
    op.drop_index("ix_adk_events_timestamp", table_name="adk_events")
    op.drop_index("ux_adk_events_event", table_name="adk_events")
    op.drop_table("adk_events")
    op.drop_table("adk_sessions")
    op.drop_index("ix_openai_items_live", table_name="openai_items")
    op.drop_index("ux_openai_items_item", table_name="openai_items")
    op.drop_table("openai_items")
    op.drop_index("ix_openai_sessions_activity", table_name="openai_sessions")
    op.drop_table("openai_sessions")
