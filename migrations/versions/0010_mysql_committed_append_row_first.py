"""MySQL/MariaDB: ``chatledger_append_committed_v2``, revision 0009's append that
commits itself, with its row sent before its ``COMMIT``.

Revision 0009's procedure returns the sequence after its ``COMMIT``: the server's
commit and the client's reading of the row take turns. This one returns it between
the insert and the ``COMMIT``, so that the client reads the row while the server
commits; the ``COMMIT``'s outcome comes in the call's closing status, which the
client reads before the call returns (a ``COMMIT`` that fails, or a connection lost
under it, is that call's error, and the append's outcome is settled by its message id
as for any lost ``COMMIT``). Everything else is revision 0009's, called the same way:

1. ``START TRANSACTION``;
2. ``UPDATE agent_sessions`` of the session's counter row, only if the session is live
   (``deleted_at IS NULL``), has the given parent, and has the given title and agent
   name already (``NULL``: any), byte for byte in utf8mb4: ``last_sequence`` goes up by
   one (read back through ``LAST_INSERT_ID(expr)``) and ``updated_at`` becomes the later
   of the stored and the given instant;
3. when it moved the row, ``INSERT INTO raw_messages`` of the message at that sequence,
   the sequence as a result set of one row, and ``COMMIT``; else ``ROLLBACK`` and a row
   of ``NULL`` (nothing written: a new session, a tombstone, another parent or a field
   to change, which the caller appends in a transaction of its own).

A statement that fails inside it leaves its transaction open and uncommitted, which
the caller rolls back. Called with a ``NULL`` session id, it returns a row of ``NULL``
before beginning anything: the probe by which a ledger learns that its login may call
it. Its parameters are revision 0008's, bound by the caller; ``s_session_type`` and
``s_created_at`` go unused. ``SQL SECURITY INVOKER`` and a strict ``sql_mode``, as
revisions 0008's and 0009's procedures. ``START TRANSACTION`` commits a transaction
already open: chatledger calls it only as the first statement of a connection with
none. Galera nodes do not use it (see revision 0008).

A procedure of its own name, not 0009's replaced: code of revision 0009 keeps calling
the procedure it knows through a rolling deploy, and MySQL has no ``CREATE OR REPLACE
PROCEDURE``: a ``DROP`` then ``CREATE`` would leave running code a moment with none and
(``automatic_sp_privileges``, on by default) revoke the grants made on it by name. A
login granted ``EXECUTE`` on procedures by name needs it on this one too; without it,
code of this revision appends as code of revision 0008 does. PostgreSQL and SQLite:
nothing changes.
An expand-only revision: ``compatible_from`` keeps its predecessor's value. The
downgrade drops the procedure.

Frozen: this file imports nothing from chatledger.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 05:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
#: The one predecessor.
down_revision: str | Sequence[str] | None = "0009"
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
#: The row goes out before the ``COMMIT``, which the client's read of the call's
#: closing status waits for: the client reads the row while the server commits.
APPEND_PROCEDURE = f"""CREATE PROCEDURE chatledger_append_committed_v2(
{_parameters()}
)
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'chatledger: one append, committed by itself, its row first (revision 0010)'
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
    SELECT v_sequence AS sequence;
    COMMIT;
  ELSE
    ROLLBACK;
    SELECT NULL AS sequence;
  END IF;
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
        op.execute("DROP PROCEDURE IF EXISTS chatledger_append_committed_v2")
        _create()


def downgrade() -> None:
    if _mysql():
        op.execute("DROP PROCEDURE IF EXISTS chatledger_append_committed_v2")
