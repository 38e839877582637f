"""Rein write log: a rein save stays findable by its write id after later saves.

``rein_sessions.write_id`` holds only the LAST save's write id, so a save whose COMMIT
answer was lost, overtaken by another save of the id before it settled, was not found
and ran a second time (or, as a compare-and-set, was refused though applied). This
revision adds ``rein_writes``: one row per save (its write id, the session id and the
version it made), written in the save's own transaction; the settle reads it there.
Entries are pruned by age (``chatledger.rein.store.WRITE_LOG_RETENTION``).

An expand-only revision: a new table and nothing else. Code of revision 0003 runs on
it unchanged (it neither reads nor writes the table), so ``compatible_from`` stays
0003. The downgrade drops the table: settle bookkeeping, no session data; the drop
guard (``chatledger downgrade``) still refuses it while it holds rows unless told to
(``--yes``).

Frozen: this file imports nothing from chatledger.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 23:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0003"

#: ``chatledger.types.Id()``: VARCHAR(255); VARBINARY(1020) on MySQL.
ID = sa.String(length=255).with_variant(mysql.VARBINARY(length=1020), "mysql")
#: ``chatledger.types.Id(36)``: VARCHAR(36); VARBINARY(144) on MySQL.
ROW_ID = sa.String(length=36).with_variant(mysql.VARBINARY(length=144), "mysql")
#: ``chatledger.types.UTCDateTime``: timestamptz, DATETIME(6) on MySQL, DATETIME text on SQLite.
UTC_DATETIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")


def upgrade() -> None:
    op.create_table(
        "rein_writes",
        sa.Column("write_id", ROW_ID, nullable=False),
        sa.Column("session_id", ID, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("write_id", name=op.f("pk_rein_writes")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )
    # The prune: WHERE session_id = ? AND created_at < ?.
    op.create_index("ix_rein_writes_session", "rein_writes", ["session_id", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_rein_writes_session", table_name="rein_writes")
    op.drop_table("rein_writes")
