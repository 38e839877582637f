DROP PROCEDURE IF EXISTS chatledger_append
;
CREATE PROCEDURE chatledger_append(
  IN s_id VARBINARY(1020),
  IN s_parent_session_id VARBINARY(1020),
  IN s_title VARCHAR(200) CHARACTER SET utf8mb4,
  IN s_agent_name VARCHAR(64) CHARACTER SET utf8mb4,
  IN s_session_type INTEGER,
  IN s_created_at DATETIME(6),
  IN s_updated_at DATETIME(6),
  IN m_id VARBINARY(144),
  IN m_session_id VARBINARY(1020),
  IN m_request_id VARBINARY(1020),
  IN m_role INTEGER,
  IN m_content LONGTEXT CHARACTER SET utf8mb4,
  IN m_tool_name VARCHAR(200) CHARACTER SET utf8mb4,
  IN m_message_json LONGTEXT CHARACTER SET utf8mb4,
  IN m_metadata_json LONGTEXT CHARACTER SET utf8mb4,
  IN m_tags_json LONGTEXT CHARACTER SET utf8mb4,
  IN m_started_at DATETIME(6),
  IN m_completed_at DATETIME(6),
  IN m_duration_ns BIGINT,
  IN m_reasoning_started_at DATETIME(6),
  IN m_reasoning_completed_at DATETIME(6),
  IN m_reasoning_duration_ns BIGINT,
  IN m_content_started_at DATETIME(6),
  IN m_content_completed_at DATETIME(6),
  IN m_content_duration_ns BIGINT,
  IN m_input_tokens BIGINT,
  IN m_output_tokens BIGINT,
  IN m_cache_read_tokens BIGINT,
  IN m_cache_write_tokens BIGINT,
  IN m_reasoning_tokens BIGINT,
  IN m_created_at DATETIME(6),
  IN m_updated_at DATETIME(6)
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
    INSERT INTO raw_messages (`id`, `session_id`, `request_id`, `role`, `content`, `tool_name`, `message_json`, `metadata_json`, `tags_json`, `started_at`, `completed_at`, `duration_ns`, `reasoning_started_at`, `reasoning_completed_at`, `reasoning_duration_ns`, `content_started_at`, `content_completed_at`, `content_duration_ns`, `input_tokens`, `output_tokens`, `cache_read_tokens`, `cache_write_tokens`, `reasoning_tokens`, `created_at`, `updated_at`, sequence) VALUES (m_id, m_session_id, m_request_id, m_role, m_content, m_tool_name, m_message_json, m_metadata_json, m_tags_json, m_started_at, m_completed_at, m_duration_ns, m_reasoning_started_at, m_reasoning_completed_at, m_reasoning_duration_ns, m_content_started_at, m_content_completed_at, m_content_duration_ns, m_input_tokens, m_output_tokens, m_cache_read_tokens, m_cache_write_tokens, m_reasoning_tokens, m_created_at, m_updated_at, v_sequence);
  END IF;
  SELECT v_sequence AS sequence;
END body
;
