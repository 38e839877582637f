"""The one schema: sessions (the sequence counter rows), raw messages, snapshots, rein sessions,
the rein write log, the high-water marks of purged tombstones, and the OpenAI Agents SDK's and
Google ADK's sessions and LangGraph's threads in tables of their own.

Table and column names follow zett-agent's own SQL store (``agent_sessions``,
``raw_messages``, ``session_snapshots``) wherever the meaning is the same, so SQL
written against zett's store keeps working. What zett keeps too narrow is widened
(see :mod:`chatledger.types`), and the session row gains the counter, version and
generation columns that make the store safe to share:

* ``last_sequence`` -- the last raw-log sequence allocated for the id; an append
  advances it in the same transaction that inserts the message, so sequences run
  ``base_sequence + 1``, ``+ 2``... with no gap or duplicate.
* ``snapshot_version`` / ``compacted_through_sequence`` -- the current checkpoint,
  advanced by compare-and-set on ``snapshot_version``.
* ``fields_version`` -- optimistic version of the mutable fields (title, agent name).
* ``deleted_at`` -- the tombstone: a deleted session keeps its counter row, with its
  content erased and this set, so that no version or sequence of the id is ever
  valid again (a late append or a stale checkpoint cannot revive it).
* ``base_sequence`` -- the last sequence of the id's earlier generations (0 for the
  first); ``create_session`` on a tombstone starts a new generation numbered from
  ``base_sequence + 1``. The message count is ``last_sequence - base_sequence``.

``rein_sessions`` keeps the same rule: a deleted rein session is a row whose
``session_json`` is NULL, and its ``version`` goes on counting after it.
``rein_writes`` logs each rein save's write id and version for settling.
``high_water_marks`` keeps, for an id whose tombstone was purged, the last sequence
and version it reached, keyed by a digest of the id (:mod:`chatledger.marks`).

The OpenAI Agents SDK (``openai_*``), Google ADK (``adk_*``) and LangGraph
(``langgraph_*``) keep their own tables,
so the same id in two frameworks never collides and zett's and rein's rows are never
touched by them. Each has the same counter row rule: ``last_sequence`` is allocated in
the transaction that inserts the items, never decreases and is never reused.

Every identifier column (``id``, ``*_id``) is :class:`chatledger.types.Id`, compared
byte for byte on every backend (``x``, ``x `` and ``X`` are three ids); only the
display texts ``title``, ``agent_name`` and ``tool_name`` are plain strings
(``tests/test_id_columns.py`` walks the metadata to keep it so).

Plain Core tables: nothing here is mapped to classes, and every default the
database fills in is a ``server_default`` (the migrations create the same).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
)

from .types import (
    MAX_ADK_SCOPE_LENGTH,
    MAX_LANGGRAPH_KEY_LENGTH,
    MAX_LANGGRAPH_NAME_LENGTH,
    MAX_ROW_ID_LENGTH,
    BigInt,
    Id,
    LongBlob,
    LongText,
    UTCDateTime,
)

#: Constraint names are fixed so that migrations and ``alembic check`` agree on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

#: Table options for MySQL/MariaDB: InnoDB (transactions, row locks) and full UTF-8.
MYSQL_TABLE_ARGS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}

#: The chatledger schema, the target of ``alembic check`` and autogenerate.
metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: One conversation: its sequence counter row, checkpoint pointer and generation.
sessions_table = Table(
    "agent_sessions",
    metadata,
    Column("id", Id(), primary_key=True),
    Column("parent_session_id", Id(), nullable=True),
    Column("session_type", Integer, nullable=False, server_default="0"),
    Column("title", String(200), nullable=True),
    Column("agent_name", String(64), nullable=True),
    Column("last_sequence", BigInt, nullable=False, server_default="0"),
    Column("snapshot_version", BigInt, nullable=False, server_default="0"),
    Column("compacted_through_sequence", BigInt, nullable=False, server_default="0"),
    Column("fields_version", BigInt, nullable=False, server_default="1"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # When the session was deleted (UTC); NULL while it lives. See the module docstring.
    Column("deleted_at", UTCDateTime, nullable=True),
    Column("base_sequence", BigInt, nullable=False, server_default="0"),
    # list_sessions: live sessions (deleted_at IS NULL) newest activity first, ties broken
    # by id; the tombstone column leads, so tombstones are never read past.
    Index("ix_agent_sessions_activity", "deleted_at", "updated_at", "id"),
    CheckConstraint("last_sequence >= compacted_through_sequence", name="boundary_within_log"),
    **MYSQL_TABLE_ARGS,
)

#: One immutable original message; ``role`` is zett's numeric ``MessageKind``.
raw_messages_table = Table(
    "raw_messages",
    metadata,
    Column("id", Id(MAX_ROW_ID_LENGTH), primary_key=True),
    Column("session_id", Id(), nullable=False),
    Column("request_id", Id(), nullable=False),
    Column("sequence", BigInt, nullable=False),
    Column("role", Integer, nullable=False),
    # Plain text of the message, for SQL readers; message_json is authoritative.
    Column("content", LongText, nullable=False),
    Column("tool_name", String(200), nullable=True),
    Column("message_json", LongText, nullable=False),
    Column("metadata_json", LongText, nullable=False),
    Column("tags_json", LongText, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("completed_at", UTCDateTime, nullable=False),
    Column("duration_ns", BigInt, nullable=False),
    Column("reasoning_started_at", UTCDateTime, nullable=True),
    Column("reasoning_completed_at", UTCDateTime, nullable=True),
    Column("reasoning_duration_ns", BigInt, nullable=True),
    Column("content_started_at", UTCDateTime, nullable=True),
    Column("content_completed_at", UTCDateTime, nullable=True),
    Column("content_duration_ns", BigInt, nullable=True),
    Column("input_tokens", BigInt, nullable=True),
    Column("output_tokens", BigInt, nullable=True),
    Column("cache_read_tokens", BigInt, nullable=True),
    Column("cache_write_tokens", BigInt, nullable=True),
    Column("reasoning_tokens", BigInt, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The tail read: WHERE session_id = ? AND sequence > ? ORDER BY sequence.
    Index("ux_raw_session_sequence", "session_id", "sequence", unique=True),
    **MYSQL_TABLE_ARGS,
)

#: One immutable checkpoint: a summary replacing the raw messages through
#: ``compacted_through_sequence``.
snapshots_table = Table(
    "session_snapshots",
    metadata,
    Column("id", Id(MAX_ROW_ID_LENGTH), primary_key=True),
    Column("session_id", Id(), nullable=False),
    Column("version", BigInt, nullable=False),
    Column("compacted_through_sequence", BigInt, nullable=False),
    Column("message_json", LongText, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ux_snapshot_session_version", "session_id", "version", unique=True),
    **MYSQL_TABLE_ARGS,
)

#: One whole rein-agent ``Session`` as JSON, with an optimistic version.
rein_sessions_table = Table(
    "rein_sessions",
    metadata,
    Column("id", Id(), primary_key=True),
    # 1 after the first save, +1 per save and per delete, never reset for the id.
    Column("version", BigInt, nullable=False),
    # NULL: the tombstone of a deleted session.
    Column("session_json", LongText, nullable=True),
    # The id of the save that last wrote the row (a UUIDv7 fixed before its first
    # attempt), so that a save whose commit was not acknowledged can be looked up.
    Column("write_id", Id(MAX_ROW_ID_LENGTH), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_rein_sessions_activity", "updated_at", "id"),
    **MYSQL_TABLE_ARGS,
)

#: The rein write log: one row per rein save, written in the save's transaction, so
#: that a save whose COMMIT was not acknowledged is found by its write id after later
#: saves of the id replaced ``rein_sessions.write_id`` (see ``chatledger.rein.store``).
#: Settle bookkeeping, not session data: pruned by age, and not exported or copied.
rein_writes_table = Table(
    "rein_writes",
    metadata,
    # The save's write id: a UUIDv7 fixed before its first attempt.
    Column("write_id", Id(MAX_ROW_ID_LENGTH), primary_key=True),
    Column("session_id", Id(), nullable=False),
    # The version the save made: what a settle of it returns.
    Column("version", BigInt, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_rein_writes_session", "session_id", "created_at"),
    **MYSQL_TABLE_ARGS,
)

#: The high-water marks: what a purged tombstone remembered, without the id. One row per
#: id (of one store) whose tombstone was purged (see :mod:`chatledger.marks`).
high_water_marks_table = Table(
    "high_water_marks",
    metadata,
    # Which store's id: 0 a zett session (agent_sessions), 1 a rein session, 2 an OpenAI
    # Agents session (openai_sessions), 3 an ADK session (adk_sessions), 4 a LangGraph
    # thread (langgraph_threads).
    Column("store", Integer, primary_key=True),
    # SHA-256 of the id's UTF-8 bytes, in hex: the id itself is not kept.
    Column("id_digest", Id(64), primary_key=True),
    # zett: the id's last sequence (its next generation's base_sequence); rein: 0.
    Column("last_sequence", BigInt, nullable=False),
    # zett: the tombstone's fields_version; rein: the tombstone's version.
    Column("version", BigInt, nullable=False),
    Column("purged_at", UTCDateTime, nullable=False),
    **MYSQL_TABLE_ARGS,
)

#: One OpenAI Agents SDK session: its sequence counter row and generation.
openai_sessions_table = Table(
    "openai_sessions",
    metadata,
    Column("id", Id(), primary_key=True),
    # The last sequence allocated for the id, over all its generations.
    Column("last_sequence", BigInt, nullable=False, server_default="0"),
    # 1 for the first generation, +1 per clear_session: an add_items whose COMMIT was
    # lost and that finds a later generation was overtaken by a clear, not lost.
    Column("generation", BigInt, nullable=False, server_default="1"),
    # The last sequence of the earlier generations (0 for the first).
    Column("base_sequence", BigInt, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # Set by clear_session (the items are erased), NULL again once the next add_items
    # starts the new generation.
    Column("deleted_at", UTCDateTime, nullable=True),
    Index("ix_openai_sessions_activity", "deleted_at", "updated_at", "id"),
    CheckConstraint("last_sequence >= base_sequence", name="base_within_log"),
    **MYSQL_TABLE_ARGS,
)

#: One OpenAI Agents SDK item (``TResponseInputItem``) as JSON text.
openai_items_table = Table(
    "openai_items",
    metadata,
    Column("session_id", Id(), nullable=False),
    Column("sequence", BigInt, nullable=False),
    # chatledger's id of the item (a UUIDv7 fixed before the add's first attempt), by
    # which an add whose COMMIT was not acknowledged is settled.
    Column("item_id", Id(MAX_ROW_ID_LENGTH), nullable=False),
    Column("item_json", LongText, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # The retraction: set by pop_item; the row and its sequence stay, never reused.
    Column("retracted_at", UTCDateTime, nullable=True),
    PrimaryKeyConstraint("session_id", "sequence"),
    Index("ux_openai_items_item", "session_id", "item_id", unique=True),
    # get_items(limit) and pop_item: the newest live items, WHERE session_id = ? AND
    # retracted_at IS NULL ORDER BY sequence DESC LIMIT ?.
    Index("ix_openai_items_live", "session_id", "retracted_at", "sequence"),
    **MYSQL_TABLE_ARGS,
)

#: One Google ADK session: counter row, session state and tombstone. ADK's key is
#: (app_name, user_id, id); app and user are ADK's 128 characters, so every key fits
#: MySQL's 3,072-byte index limit.
adk_sessions_table = Table(
    "adk_sessions",
    metadata,
    Column("app_name", Id(MAX_ADK_SCOPE_LENGTH), nullable=False),
    Column("user_id", Id(MAX_ADK_SCOPE_LENGTH), nullable=False),
    Column("id", Id(), nullable=False),
    # The last event sequence allocated for the key, over all its generations; a stale
    # Session object is one whose last sequence is behind it.
    Column("last_sequence", BigInt, nullable=False, server_default="0"),
    # The last sequence of the key's earlier generations (0 for the first).
    Column("base_sequence", BigInt, nullable=False, server_default="0"),
    # The session-scoped state (no app:/user:/temp: keys) as a JSON object.
    Column("state_json", LongText, nullable=False),
    Column("state_version", BigInt, nullable=False, server_default="1"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime, nullable=True),
    # The primary key serves paged list_sessions: WHERE app_name = ? AND user_id = ?
    # AND id > ? ORDER BY id.
    PrimaryKeyConstraint("app_name", "user_id", "id"),
    CheckConstraint("last_sequence >= base_sequence", name="base_within_log"),
    **MYSQL_TABLE_ARGS,
)

#: One Google ADK event as JSON text, in its session's raw log.
adk_events_table = Table(
    "adk_events",
    metadata,
    Column("app_name", Id(MAX_ADK_SCOPE_LENGTH), nullable=False),
    Column("user_id", Id(MAX_ADK_SCOPE_LENGTH), nullable=False),
    Column("session_id", Id(), nullable=False),
    Column("sequence", BigInt, nullable=False),
    # ADK's Event.id: settles an append whose COMMIT was not acknowledged.
    Column("event_id", Id(), nullable=False),
    # ADK's Event.timestamp (float seconds since the epoch), kept exactly as given.
    Column("timestamp", Double, nullable=False),
    Column("event_json", LongText, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("app_name", "user_id", "session_id", "sequence"),
    Index("ux_adk_events_event", "app_name", "user_id", "session_id", "event_id", unique=True),
    # GetSessionConfig.after_timestamp.
    Index("ix_adk_events_timestamp", "app_name", "user_id", "session_id", "timestamp"),
    **MYSQL_TABLE_ARGS,
)

#: ADK's ``app:`` state of one app, with an optimistic version.
adk_app_states_table = Table(
    "adk_app_states",
    metadata,
    Column("app_name", Id(MAX_ADK_SCOPE_LENGTH), primary_key=True),
    Column("state_json", LongText, nullable=False),
    Column("version", BigInt, nullable=False, server_default="1"),
    Column("updated_at", UTCDateTime, nullable=False),
    **MYSQL_TABLE_ARGS,
)

#: ADK's ``user:`` state of one user of an app, with an optimistic version.
adk_user_states_table = Table(
    "adk_user_states",
    metadata,
    Column("app_name", Id(MAX_ADK_SCOPE_LENGTH), nullable=False),
    Column("user_id", Id(MAX_ADK_SCOPE_LENGTH), nullable=False),
    Column("state_json", LongText, nullable=False),
    Column("version", BigInt, nullable=False, server_default="1"),
    Column("updated_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("app_name", "user_id"),
    **MYSQL_TABLE_ARGS,
)


#: The names of LangGraph's keys: a namespace or channel (up to 200 characters), a
#: checkpoint id, task id or channel version (up to 64).
_LG_NAME = MAX_LANGGRAPH_NAME_LENGTH
_LG_KEY = MAX_LANGGRAPH_KEY_LENGTH

#: One LangGraph thread: the row every write of the thread locks first, its generation
#: and tombstone. A deleted thread keeps this row (``deleted_at`` set, its checkpoints,
#: blobs and writes erased) with ``deleted_through``, the instant of the latest
#: checkpoint its deleted generations held (the timestamp of its time-ordered UUID, in
#: 100 ns since 1582-10-15): a write of a checkpoint of that instant or before that the
#: live generation does not hold is a stale write of a run from before the delete,
#: refused. A purged tombstone's mark keeps it (:mod:`chatledger.marks`).
langgraph_threads_table = Table(
    "langgraph_threads",
    metadata,
    # The thread id (LangGraph's ``thread_id``).
    Column("id", Id(), primary_key=True),
    # 1 for the first generation, +1 per delete.
    Column("generation", BigInt, nullable=False, server_default="1"),
    # +1 per write of any kind (put, put_writes, delete, prune, copy into it): what a
    # purge checks again before it deletes.
    Column("version", BigInt, nullable=False, server_default="1"),
    Column("deleted_through", BigInt, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # Set by a delete; NULL again once a put starts the next generation.
    Column("deleted_at", UTCDateTime, nullable=True),
    # Listing and purging by age: live threads (deleted_at IS NULL) by activity.
    Index("ix_langgraph_threads_activity", "deleted_at", "updated_at", "id"),
    **MYSQL_TABLE_ARGS,
)

#: One LangGraph checkpoint: the checkpoint serialized by the saver's ``serde`` with only
#: its primitive channel values inline (the others are blobs), and its metadata as JSON.
langgraph_checkpoints_table = Table(
    "langgraph_checkpoints",
    metadata,
    Column("thread_id", Id(), nullable=False),
    Column("checkpoint_ns", Id(_LG_NAME), nullable=False),
    Column("checkpoint_id", Id(_LG_KEY), nullable=False),
    Column("parent_checkpoint_id", Id(_LG_KEY), nullable=True),
    # The serde's type tag and bytes of the checkpoint.
    Column("checkpoint_type", Id(_LG_KEY), nullable=False),
    Column("checkpoint_blob", LongBlob, nullable=False),
    Column("metadata_json", LongText, nullable=False),
    # metadata["run_id"], for delete_for_runs.
    Column("run_id", Id(), nullable=True),
    # The put that last wrote the row (a UUIDv7 fixed before its first attempt), by which
    # a put whose COMMIT was not acknowledged is settled.
    Column("write_id", Id(MAX_ROW_ID_LENGTH), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # The primary key serves get_tuple's latest (WHERE thread_id = ? AND checkpoint_ns = ?
    # ORDER BY checkpoint_id DESC LIMIT 1) and list's pages, newest first.
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "checkpoint_id"),
    Index("ix_langgraph_checkpoints_run", "run_id"),
    **MYSQL_TABLE_ARGS,
)

#: One channel value at one version, written once: a checkpoint whose channel did not
#: change refers to the blob an earlier one wrote.
langgraph_blobs_table = Table(
    "langgraph_blobs",
    metadata,
    Column("thread_id", Id(), nullable=False),
    Column("checkpoint_ns", Id(_LG_NAME), nullable=False),
    Column("channel", Id(_LG_NAME), nullable=False),
    Column("version", Id(_LG_KEY), nullable=False),
    Column("value_type", Id(_LG_KEY), nullable=False),
    # NULL for LangGraph's "empty" channel.
    Column("value_blob", LongBlob, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "channel", "version"),
    **MYSQL_TABLE_ARGS,
)

#: One pending write of a task to a checkpoint, keyed as LangGraph keys it: ``idx`` is
#: the write's index in its call, or the negative index of a special channel
#: (``WRITES_IDX_MAP``: an error, an interrupt, a resume), which a later write replaces.
langgraph_writes_table = Table(
    "langgraph_writes",
    metadata,
    Column("thread_id", Id(), nullable=False),
    Column("checkpoint_ns", Id(_LG_NAME), nullable=False),
    Column("checkpoint_id", Id(_LG_KEY), nullable=False),
    Column("task_id", Id(_LG_KEY), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("task_path", LongText, nullable=False),
    Column("channel", Id(_LG_NAME), nullable=False),
    Column("value_type", Id(_LG_KEY), nullable=False),
    Column("value_blob", LongBlob, nullable=True),
    # The put_writes call that last wrote the row, for its settle.
    Column("write_id", Id(MAX_ROW_ID_LENGTH), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
    **MYSQL_TABLE_ARGS,
)
