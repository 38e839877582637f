"""MySQL/MariaDB: the append as one stored procedure, ``chatledger_append``.

With it, chatledger's append on MySQL/MariaDB is one statement, ``CALL
chatledger_append(..)``, and the transaction's ``COMMIT``: two round trips where the
counter upsert, the message insert and the ``COMMIT`` took three. The procedure runs
exactly those two statements, in the caller's transaction (it neither begins nor
commits one):

1. ``INSERT INTO agent_sessions .. ON DUPLICATE KEY UPDATE`` of the counter row, the
   new sequence handed back through ``LAST_INSERT_ID(expr)``, 0 when the parent does
   not match or the session is a tombstone;
2. when it is not 0, ``INSERT INTO raw_messages`` of the message at that sequence;

then returns the sequence (``NULL``: refused, nothing inserted; the caller rolls the
transaction back) as a result set of one row. Called with a ``NULL`` session id (which
no append has), it returns that row, ``NULL``, and does nothing else: the probe by
which a ledger learns that its login may call it. Its parameters are the two statements'
(``s_<column>`` of the counter row, ``m_<column>`` of the message), bound by the
caller: no SQL text is built from values.

``SQL SECURITY INVOKER``: it runs with the privileges of the login that calls it (the
runtime role needs ``EXECUTE`` on the database besides its table privileges), so a
dropped owner account never breaks it. It is created under ``STRICT_ALL_TABLES``
(MySQL keeps a routine's ``sql_mode`` from its creation): a value too long for a
parameter or column fails, as the statements do, whatever the server's default. The
login that may not call it (no ``EXECUTE``) appends with the two statements, as code
of earlier revisions does.

PostgreSQL's append is one statement already, and SQLite's one with revision 0007's
trigger: on them this revision changes nothing. An expand-only revision: code of
earlier revisions keeps appending correctly, so ``compatible_from`` keeps its
predecessor's value. The downgrade drops the procedure. A later revision that needs
other parameters (a column added to either table) creates a procedure of another name
beside this one, which code of this revision still calls, and drops this one only when
that code is no longer compatible.

Frozen: this file imports nothing from chatledger.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 19:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
#: The one predecessor.
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0004"

_TEXT = "LONGTEXT CHARACTER SET utf8mb4"
#: The counter row's parameters (``s_``) and the message's (``m_``), in the order of
#: the call, each typed as its column.
SESSION_PARAMETERS = (
    ("id", "VARBINARY(1020)"),
    ("parent_session_id", "VARBINARY(1020)"),
    ("title", "VARCHAR(200) CHARACTER SET utf8mb4"),
    ("agent_name", "VARCHAR(64) CHARACTER SET utf8mb4"),
    ("session_type", "INTEGER"),
    ("created_at", "DATETIME(6)"),
    ("updated_at", "DATETIME(6)"),
)
MESSAGE_PARAMETERS = (
    ("id", "VARBINARY(144)"),
    ("session_id", "VARBINARY(1020)"),
    ("request_id", "VARBINARY(1020)"),
    ("role", "INTEGER"),
    ("content", _TEXT),
    ("tool_name", "VARCHAR(200) CHARACTER SET utf8mb4"),
    ("message_json", _TEXT),
    ("metadata_json", _TEXT),
    ("tags_json", _TEXT),
    ("started_at", "DATETIME(6)"),
    ("completed_at", "DATETIME(6)"),
    ("duration_ns", "BIGINT"),
    ("reasoning_started_at", "DATETIME(6)"),
    ("reasoning_completed_at", "DATETIME(6)"),
    ("reasoning_duration_ns", "BIGINT"),
    ("content_started_at", "DATETIME(6)"),
    ("content_completed_at", "DATETIME(6)"),
    ("content_duration_ns", "BIGINT"),
    ("input_tokens", "BIGINT"),
    ("output_tokens", "BIGINT"),
    ("cache_read_tokens", "BIGINT"),
    ("cache_write_tokens", "BIGINT"),
    ("reasoning_tokens", "BIGINT"),
    ("created_at", "DATETIME(6)"),
    ("updated_at", "DATETIME(6)"),
)


def _parameters() -> str:
    return ",\n".join(
        [f"  IN s_{name} {kind}" for name, kind in SESSION_PARAMETERS]
        + [f"  IN m_{name} {kind}" for name, kind in MESSAGE_PARAMETERS]
    )


def _message_insert() -> str:
    columns = ", ".join(f"`{name}`" for name, _ in MESSAGE_PARAMETERS)
    values = ", ".join(f"m_{name}" for name, _ in MESSAGE_PARAMETERS)
    return f"INSERT INTO raw_messages ({columns}, sequence) VALUES ({values}, v_sequence)"


#: The counter upsert is chatledger's own (``dialects/mysql.py``, ``_mysql_counter``):
#: ``fields_version`` first, since MySQL assigns left to right, each assignment seeing
#: the ones before it.
APPEND_PROCEDURE = f"""CREATE PROCEDURE chatledger_append(
{_parameters()}
)
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'chatledger: one append (revision 0008)'
body: BEGIN
  DECLARE v_sequence BIGINT;
  IF s_id IS NULL THEN
    SELECT NULL AS sequence;
    LEAVE body;
  END IF;
  INSERT INTO agent_sessions (id, parent_session_id, session_type, title, agent_name, last_sequence,
    snapshot_version, compacted_through_sequence, fields_version, created_at, updated_at, base_sequence)
  VALUES (s_id, s_parent_session_id, s_session_type, s_title, s_agent_name, LAST_INSERT_ID(1),
    0, 0, 1, s_created_at, s_updated_at, 0)
  ON DUPLICATE KEY UPDATE
    fields_version = agent_sessions.fields_version + CASE WHEN
      (VALUES(title) IS NOT NULL AND NOT (VALUES(title) <=> agent_sessions.title))
      OR (VALUES(agent_name) IS NOT NULL AND NOT (VALUES(agent_name) <=> agent_sessions.agent_name))
      THEN 1 ELSE 0 END,
    title = COALESCE(VALUES(title), agent_sessions.title),
    agent_name = COALESCE(VALUES(agent_name), agent_sessions.agent_name),
    last_sequence = IF(agent_sessions.parent_session_id <=> VALUES(parent_session_id)
      AND agent_sessions.deleted_at IS NULL,
      LAST_INSERT_ID(agent_sessions.last_sequence + 1), agent_sessions.last_sequence + LAST_INSERT_ID(0)),
    updated_at = GREATEST(agent_sessions.updated_at, VALUES(updated_at));
  SET v_sequence = NULLIF(LAST_INSERT_ID(), 0);
  IF v_sequence IS NOT NULL THEN
    {_message_insert()};
  END IF;
  SELECT v_sequence AS sequence;
END body"""

#: The ``sql_mode`` the procedure is created under, then put back.
_MODE = "STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


def _mysql() -> bool:
    return op.get_context().dialect.name == "mysql"


def _create() -> None:
    context = op.get_context()
    op.execute("SET @chatledger_sql_mode = @@SESSION.sql_mode")
    op.execute(f"SET SESSION sql_mode = '{_MODE}'")
    if context.as_sql:
        # The mysql client splits a script at ';', and the body holds several.
        output = context.impl.static_output
        output("DELIMITER //")
        output(f"{APPEND_PROCEDURE}\n//")
        output("DELIMITER ;")
    else:
        op.execute(APPEND_PROCEDURE)
    op.execute("SET SESSION sql_mode = @chatledger_sql_mode")


def upgrade() -> None:
    if _mysql():
        op.execute("DROP PROCEDURE IF EXISTS chatledger_append")
        _create()


def downgrade() -> None:
    if _mysql():
        op.execute("DROP PROCEDURE IF EXISTS chatledger_append")
