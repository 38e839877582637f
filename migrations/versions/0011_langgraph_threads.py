"""LangGraph threads, in tables of their own.

This revision adds the tables of ``chatledger.langgraph.LedgerSaver``, LangGraph's
checkpointer on the ledger:

* ``langgraph_threads`` -- one row per thread (``id``, LangGraph's ``thread_id``), the
  row every write of the thread locks first: its ``generation`` (+1 per delete),
  ``version`` (+1 per write of any kind), the tombstone a delete leaves
  (``deleted_at``) and ``deleted_through``, the instant (UUID timestamp) of the latest
  checkpoint its deleted generations held (a stale write of a checkpoint of that
  instant or before is refused); indexed by activity.
* ``langgraph_checkpoints`` -- one checkpoint per row, keyed by (``thread_id``,
  ``checkpoint_ns``, ``checkpoint_id``), which also serves the latest checkpoint of a
  namespace: the checkpoint as its saver's serializer wrote it (type and bytes), its
  metadata as JSON, ``run_id`` (indexed) and the ``write_id`` of the put that wrote it.
* ``langgraph_blobs`` -- one channel value per (thread, namespace, channel, version),
  written once and shared by the checkpoints that did not change the channel.
* ``langgraph_writes`` -- one pending write per (thread, namespace, checkpoint, task,
  ``idx``), as LangGraph keys them, with its task path, channel, value and ``write_id``.

Serialized values are ``BYTEA`` on PostgreSQL, ``BLOB`` on SQLite and ``LONGBLOB`` on
MySQL/MariaDB. Namespaces and channel names are up to 200 characters, checkpoint ids,
task ids and versions up to 64, so every key fits MySQL's 3,072-byte index limit.

An expand-only revision: new tables and nothing else; code of earlier revisions
neither reads nor writes them, so ``compatible_from`` keeps its predecessor's value.
The downgrade drops the tables; the drop guard (``chatledger downgrade``) refuses it
while they hold rows unless told to (``--yes``).

Frozen: this file imports nothing from chatledger.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0011"
#: The one predecessor.
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0004"

#: ``chatledger.types.Id()``: VARCHAR(255); VARBINARY(1020) on MySQL.
ID = sa.String(length=255).with_variant(mysql.VARBINARY(length=1020), "mysql")
#: ``chatledger.types.Id(200)`` (a namespace or channel): VARCHAR(200); VARBINARY(800) on MySQL.
NAME = sa.String(length=200).with_variant(mysql.VARBINARY(length=800), "mysql")
#: ``chatledger.types.Id(64)`` (a checkpoint or task id, a version, a type tag):
#: VARCHAR(64); VARBINARY(256) on MySQL.
KEY = sa.String(length=64).with_variant(mysql.VARBINARY(length=256), "mysql")
#: ``chatledger.types.Id(36)``: VARCHAR(36); VARBINARY(144) on MySQL.
ROW_ID = sa.String(length=36).with_variant(mysql.VARBINARY(length=144), "mysql")
#: ``chatledger.types.UTCDateTime``: timestamptz, DATETIME(6) on MySQL, DATETIME text on SQLite.
UTC_DATETIME = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")
#: ``chatledger.types.LongText``: TEXT; LONGTEXT on MySQL, where TEXT stops at 64 KiB.
LONG_TEXT = sa.Text().with_variant(mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), "mysql")
#: ``chatledger.types.LongBlob``: BYTEA, BLOB on SQLite; LONGBLOB on MySQL, where BLOB stops at 64 KiB.
LONG_BLOB = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql")

MYSQL_TABLE_ARGS = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin", "mysql_engine": "InnoDB"}


def upgrade() -> None:
    op.create_table(
        "langgraph_threads",
        sa.Column("id", ID, nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column("deleted_through", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("deleted_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_langgraph_threads")),
        **MYSQL_TABLE_ARGS,
    )
    op.create_index(
        "ix_langgraph_threads_activity",
        "langgraph_threads",
        ["deleted_at", "updated_at", "id"],
        unique=False,
    )
    op.create_table(
        "langgraph_checkpoints",
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("checkpoint_ns", NAME, nullable=False),
        sa.Column("checkpoint_id", KEY, nullable=False),
        sa.Column("parent_checkpoint_id", KEY, nullable=True),
        sa.Column("checkpoint_type", KEY, nullable=False),
        sa.Column("checkpoint_blob", LONG_BLOB, nullable=False),
        sa.Column("metadata_json", LONG_TEXT, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("write_id", ROW_ID, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id", "checkpoint_ns", "checkpoint_id", name=op.f("pk_langgraph_checkpoints")
        ),
        **MYSQL_TABLE_ARGS,
    )
    # delete_for_runs: the checkpoints of a run.
    op.create_index("ix_langgraph_checkpoints_run", "langgraph_checkpoints", ["run_id"], unique=False)
    op.create_table(
        "langgraph_blobs",
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("checkpoint_ns", NAME, nullable=False),
        sa.Column("channel", NAME, nullable=False),
        sa.Column("version", KEY, nullable=False),
        sa.Column("value_type", KEY, nullable=False),
        sa.Column("value_blob", LONG_BLOB, nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id", "checkpoint_ns", "channel", "version", name=op.f("pk_langgraph_blobs")
        ),
        **MYSQL_TABLE_ARGS,
    )
    op.create_table(
        "langgraph_writes",
        sa.Column("thread_id", ID, nullable=False),
        sa.Column("checkpoint_ns", NAME, nullable=False),
        sa.Column("checkpoint_id", KEY, nullable=False),
        sa.Column("task_id", KEY, nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("task_path", LONG_TEXT, nullable=False),
        sa.Column("channel", NAME, nullable=False),
        sa.Column("value_type", KEY, nullable=False),
        sa.Column("value_blob", LONG_BLOB, nullable=True),
        sa.Column("write_id", ROW_ID, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", name=op.f("pk_langgraph_writes")
        ),
        **MYSQL_TABLE_ARGS,
    )


def downgrade() -> None:
    op.drop_table("langgraph_writes")
    op.drop_table("langgraph_blobs")
    op.drop_index("ix_langgraph_checkpoints_run", table_name="langgraph_checkpoints")
    op.drop_table("langgraph_checkpoints")
    op.drop_index("ix_langgraph_threads_activity", table_name="langgraph_threads")
    op.drop_table("langgraph_threads")
