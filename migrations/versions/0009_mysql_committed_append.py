"""MySQL/MariaDB: the append that commits itself, ``chatledger_append_committed``.

With it, chatledger's append to a session it only moves along is one round trip on
MySQL/MariaDB: ``CALL chatledger_append_committed(..)``, whose procedure begins, makes
and commits the append's transaction itself, where revision 0008's ``CALL`` and the
transaction's ``COMMIT`` took two. The procedure, called with no transaction open:

1. ``START TRANSACTION``;
2. ``UPDATE agent_sessions`` of the session's counter row, only if the session is live
   (``deleted_at IS NULL``), has the given parent, and has the given title and agent
   name already (``NULL``: any), byte for byte in utf8mb4: ``last_sequence`` goes up by one (the
   new sequence, read back through ``LAST_INSERT_ID(expr)``) and ``updated_at`` becomes
   the later of the stored and the given instant, what revision 0008's counter upsert
   does to such a row;
3. when it moved the row, ``INSERT INTO raw_messages`` of the message at that sequence,
   and ``COMMIT``; else ``ROLLBACK``: a new session, a tombstone, another parent or a
   field to change, which the caller appends in a transaction of its own (revision
   0008's procedure or its two statements);

then returns the sequence (``NULL``: nothing written) as a result set of one row, read
after the ``COMMIT``. A statement that fails inside it leaves its transaction open and
uncommitted, which the caller rolls back. Called with a ``NULL`` session id, it returns
that row, ``NULL``, before beginning anything: the probe by which a ledger learns that
its login may call it. Its parameters are revision 0008's (``s_<column>`` of the counter
row, ``m_<column>`` of the message), bound by the caller; ``s_session_type`` and
``s_created_at``, which only a new counter row takes, go unused.

``SQL SECURITY INVOKER`` and a strict ``sql_mode``, as revision 0008's procedure; a
login that may not call it appends as code of revision 0008 does. ``START
TRANSACTION`` commits a transaction already open: chatledger calls it only as the first
statement of a connection with none. Galera nodes do not use it (chatledger appends
there with two statements, see revision 0008).

PostgreSQL's append is one statement committed by itself already, and SQLite's
transaction costs no round trip of its own: on them this revision changes nothing. An
expand-only revision: code of earlier revisions keeps appending correctly, so
``compatible_from`` keeps its predecessor's value. The downgrade drops the procedure.

Frozen: this file imports nothing from chatledger.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 01:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
#: The one predecessor.
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0004"

_TEXT = "LONGTEXT CHARACTER SET utf8mb4"
#: Revision 0008's parameters, in its order: the counter row's (``s_``) and the
#: message's (``m_``), each typed as its column.
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


#: The fields compare byte for byte as utf8mb4 (``CONVERT .. USING utf8mb4``, then
#: ``CAST .. AS BINARY``), whatever the columns' character set and collation: equal
#: bytes are the same value under any collation, and a title that differs only under a
#: case-folding one goes to the counter upsert, which decides.
#: ``ROW_COUNT()`` is 1 when the row moved: ``last_sequence`` always changes.
APPEND_PROCEDURE = f"""CREATE PROCEDURE chatledger_append_committed(
{_parameters()}
)
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'chatledger: one append, committed by itself (revision 0009)'
body: BEGIN
  DECLARE v_sequence BIGINT;
  IF s_id IS NULL THEN
    SELECT NULL AS sequence;
    LEAVE body;
  END IF;
  START TRANSACTION;
  UPDATE agent_sessions
  SET last_sequence = LAST_INSERT_ID(last_sequence + 1), updated_at = GREATEST(updated_at, s_updated_at)
  WHERE id = s_id AND parent_session_id <=> s_parent_session_id AND deleted_at IS NULL
    AND (s_title IS NULL OR CAST(CONVERT(title USING utf8mb4) AS BINARY) <=> CAST(s_title AS BINARY))
    AND (s_agent_name IS NULL
      OR CAST(CONVERT(agent_name USING utf8mb4) AS BINARY) <=> CAST(s_agent_name AS BINARY));
  IF ROW_COUNT() = 1 THEN
    SET v_sequence = LAST_INSERT_ID();
    {_message_insert()};
    COMMIT;
  ELSE
    ROLLBACK;
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
        op.execute("DROP PROCEDURE IF EXISTS chatledger_append_committed")
        _create()


def downgrade() -> None:
    if _mysql():
        op.execute("DROP PROCEDURE IF EXISTS chatledger_append_committed")
