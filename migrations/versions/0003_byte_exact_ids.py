"""Byte-exact ids: raw-message, checkpoint and rein write ids compare byte for byte.

Revisions 0001 and 0002 create ``raw_messages.id``, ``session_snapshots.id`` and
``rein_sessions.write_id`` as ``VARCHAR(36)``. On MySQL/MariaDB that is text under
the table's ``utf8mb4_bin``, a PAD SPACE collation: ``'m1' = 'm1 '``, so an append
with ``message_id="m1 "`` after one with ``"m1"`` clashed on the primary key, was
taken for the first one "already written", and stored nothing. The other id columns
are ``VARBINARY`` there already (``chatledger.types.Id``); this revision makes these
three ``VARBINARY(144)`` too (36 characters of up to 4 UTF-8 bytes), where every byte
counts. MySQL 8 has no NO PAD binary utf8mb4 collation that MariaDB shares
(``utf8mb4_nopad_bin`` is MariaDB's only), ``VARBINARY`` is the same on both.

Per backend:

* **MySQL/MariaDB**: one ``ALTER TABLE .. MODIFY`` per table. Converting a character
  column to a binary one keeps each value's bytes in the column's character set
  (utf8mb4), which is what chatledger binds (a str, sent as utf8mb4), so every row
  reads back as it was; ids unique under PAD SPACE are unique byte for byte too, so
  the primary keys hold. Each statement rebuilds its table and commits on its own
  (writers wait on the table's metadata lock meanwhile) and is idempotent: an upgrade
  stopped between them is continued by running it again (the revision is recorded
  only after the last). Adopted databases (``chatledger adopt``) get here as any
  other: adoption converts zett-agent's tables to revision 0001 and upgrades to head.
* **PostgreSQL**: no DDL. ``varchar`` equality under a deterministic collation (the
  only kind a database's default can be, and the columns name none) is byte equality,
  trailing spaces and case included.
* **SQLite**: no DDL. ``=`` and the primary key's uniqueness use the ``BINARY``
  collation (``memcmp``) for columns that declare none, as these do.

A contract revision: code of revision 0002 reads these columns as plain strings, and
would get ``bytes`` back on MySQL/MariaDB (the raw message id it hands to zett-agent,
the rows ``copy`` and ``export`` move). ``compatible_from`` is the same for every
backend, so it names this revision.

The downgrade converts the columns back on MySQL/MariaDB; it refuses, changing
nothing, when two ids of one column would be equal under PAD SPACE again.

Frozen: this file imports nothing from chatledger.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 22:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from alembic.util import CommandError
from sqlalchemy.dialects import mysql

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0003"

#: ``chatledger.types.Id(36)`` on MySQL: UTF-8 bytes, up to 4 per character.
ROW_ID_MYSQL = mysql.VARBINARY(length=144)
#: What revisions 0001 and 0002 created: ``VARCHAR(36)`` in the table's ``utf8mb4_bin``.
ROW_ID_0002 = sa.String(length=36)

#: (table, column, nullable): the id columns that were not ``chatledger.types.Id`` yet.
COLUMNS = (
    ("raw_messages", "id", False),
    ("session_snapshots", "id", False),
    ("rein_sessions", "write_id", True),
)


def _mysql() -> bool:
    return op.get_context().dialect.name == "mysql"


def upgrade() -> None:
    if not _mysql():  # PostgreSQL and SQLite compare these columns byte for byte already
        return
    for table, column, nullable in COLUMNS:
        op.alter_column(
            table, column, type_=ROW_ID_MYSQL, existing_type=ROW_ID_0002, existing_nullable=nullable
        )


def _pad_space_clashes(table: str, column: str) -> list[str]:
    """Ids of ``table.column`` that revision 0002's PAD SPACE column would hold equal."""
    padded = f"CONVERT({column} USING utf8mb4) COLLATE utf8mb4_bin"
    rows = op.get_bind().exec_driver_sql(
        f"SELECT MIN({padded}) FROM {table} WHERE {column} IS NOT NULL "
        f"GROUP BY {padded} HAVING COUNT(*) > 1 LIMIT 5"
    )
    return [repr(row[0]) for row in rows]


def downgrade() -> None:
    if not _mysql():
        return
    if not op.get_context().as_sql:
        for table, column, nullable in COLUMNS:
            clashes = [] if nullable else _pad_space_clashes(table, column)
            if clashes:
                raise CommandError(
                    f"cannot downgrade to revision 0002: {table}.{column} holds ids that differ only by "
                    f"trailing spaces (such as {', '.join(clashes)}), which 0002's column holds equal; "
                    "nothing was changed"
                )
    for table, column, nullable in reversed(COLUMNS):
        op.alter_column(
            table,
            column,
            type_=ROW_ID_0002,  # as 0001 created it: the table's utf8mb4_bin
            existing_type=ROW_ID_MYSQL,
            existing_nullable=nullable,
        )
