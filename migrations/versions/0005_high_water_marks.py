"""High-water marks: a tombstone can be purged without an id's sequences or versions
ever being valid twice.

This revision adds ``high_water_marks``: one narrow row per id whose tombstone was
purged, keyed by ``(store, id_digest)`` (0 for a zett session, 1 for a rein session;
the SHA-256 of the id's UTF-8 bytes in hex, so the id itself is not kept), holding the
last sequence and the version the id reached and when it was purged. The tombstone
purge writes it in the transaction that deletes the tombstone; every path that
creates a session under an id looks it up (``chatledger.marks``).

An expand-only revision: a new table and nothing else. Code of revision 0004 runs on
it unchanged (it neither reads nor writes the table): ``compatible_from`` is 0004, so
a rolling deploy from the code of 0004 keeps its old services running. That code
does not look marks up, though: purge tombstones only once every writer runs code of
this revision (``docs/retention.md``). The downgrade
drops the table; the drop guard (``chatledger downgrade``) refuses it while it holds
rows unless told to (``--yes``): without the marks, a purged id numbers from 1 again.

Frozen: this file imports nothing from chatledger.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 06:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0004"

#: ``chatledger.types.Id(64)``: VARCHAR(64); VARBINARY(256) on MySQL.
DIGEST = sa.String(length=64).with_variant(mysql.VARBINARY(length=256), "mysql")
#: ``chatledger.types.UTCDateTime``: timestamptz, DATETIME(6) on MySQL, DATETIME text on SQLite.
UTC_DATETIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")


def upgrade() -> None:
    op.create_table(
        "high_water_marks",
        sa.Column("store", sa.Integer(), nullable=False),
        sa.Column("id_digest", DIGEST, nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("purged_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("store", "id_digest", name=op.f("pk_high_water_marks")),
        mysql_charset="utf8mb4",
        mysql_collate="utf8mb4_bin",
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table("high_water_marks")
