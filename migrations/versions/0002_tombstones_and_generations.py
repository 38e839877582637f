"""Tombstones and generations: a deleted session keeps its row, and no version or
sequence of its id is ever valid again.

* ``agent_sessions.deleted_at`` (nullable UTC instant): the tombstone.
* ``agent_sessions.base_sequence`` (default 0): the last sequence of the id's earlier
  generations; the current one is numbered from ``base_sequence + 1``.
* ``rein_sessions.session_json`` becomes nullable: NULL is the rein tombstone.
* ``rein_sessions.write_id`` (nullable): the id of the save that last wrote the row.

Existing rows stay as they are (live, generation 0, no write id). A contract
revision: code of revision 0001 must not run on this schema, since it would append
to tombstones and so revive deleted sessions.

Frozen: this file imports nothing from chatledger. The column types are spelled
out as ``chatledger.types`` renders them on each backend. (Added later, for ``--sql``
only: the table SQLite rebuilds, given instead of reflected; online DDL is unchanged.)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0002"

#: ``chatledger.types.Id``: VARCHAR(255); VARBINARY(1020) on MySQL.
ID = sa.String(length=255).with_variant(mysql.VARBINARY(length=1020), "mysql")
#: ``chatledger.types.UTCDateTime``: timestamptz, DATETIME(6) on MySQL, DATETIME text on SQLite.
UTC_DATETIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")
#: ``chatledger.types.LongText``.
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), "mysql")


def _rein_sessions_0001() -> sa.Table:
    """``rein_sessions`` exactly as revision 0001 creates it."""
    return sa.Table(
        "rein_sessions",
        sa.MetaData(),
        sa.Column("id", ID, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("session_json", LONG_TEXT, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rein_sessions"),
        sa.Index("ix_rein_sessions_activity", "updated_at", "id"),
    )


def upgrade() -> None:
    # Batch operations: plain ALTER TABLE statements where the database has them; on
    # SQLite, which cannot change a column's nullability, a copy of the table.
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(sa.Column("deleted_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("base_sequence", sa.BigInteger(), server_default="0", nullable=False))
    # Offline (--sql) SQLite's batch mode cannot reflect the table it rebuilds: it is given
    # as revision 0001 left it. Online the live table is reflected, as always.
    rein_sessions = _rein_sessions_0001() if op.get_context().as_sql else None
    with op.batch_alter_table("rein_sessions", copy_from=rein_sessions) as batch:
        batch.alter_column("session_json", existing_type=LONG_TEXT, nullable=True)
        batch.add_column(sa.Column("write_id", sa.String(length=36), nullable=True))
    # list_sessions reads live sessions only (deleted_at IS NULL), newest first: with the
    # tombstone column leading, the page is an index range, however many tombstones.
    op.drop_index("ix_agent_sessions_activity", table_name="agent_sessions")
    op.create_index("ix_agent_sessions_activity", "agent_sessions", ["deleted_at", "updated_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_agent_sessions_activity", table_name="agent_sessions")
    op.create_index("ix_agent_sessions_activity", "agent_sessions", ["updated_at", "id"])
    # Revision 0001 has no tombstones: a deleted session is no row at all.
    op.execute("DELETE FROM agent_sessions WHERE deleted_at IS NOT NULL")
    op.execute("DELETE FROM rein_sessions WHERE session_json IS NULL")
    # Revision 0001 numbers every session from 1 and counts messages by last_sequence:
    # renumber the sessions recreated on this revision (base_sequence > 0) that way.
    # Through negative values, so that no intermediate row collides with another on
    # the unique (session_id, sequence) index, whatever order the rows are updated in.
    base = "(SELECT s.base_sequence FROM agent_sessions s WHERE s.id = {table}.session_id)"
    recreated = "session_id IN (SELECT s.id FROM agent_sessions s WHERE s.base_sequence > 0)"
    op.execute(
        f"UPDATE raw_messages SET sequence = {base.format(table='raw_messages')} - sequence WHERE {recreated}"
    )
    op.execute("UPDATE raw_messages SET sequence = -sequence WHERE sequence < 0")
    op.execute(
        "UPDATE session_snapshots SET compacted_through_sequence = compacted_through_sequence - "
        f"{base.format(table='session_snapshots')} WHERE {recreated}"
    )
    op.execute(
        "UPDATE agent_sessions SET last_sequence = last_sequence - base_sequence, "
        "compacted_through_sequence = compacted_through_sequence - base_sequence WHERE base_sequence > 0"
    )
    with op.batch_alter_table("rein_sessions") as batch:
        batch.drop_column("write_id")
        batch.alter_column("session_json", existing_type=LONG_TEXT, nullable=False)
    with op.batch_alter_table("agent_sessions") as batch:
        batch.drop_column("base_sequence")
        batch.drop_column("deleted_at")
