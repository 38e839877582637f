DROP PROCEDURE IF EXISTS chatledger_append_committed_v2
;
CREATE PROCEDURE chatledger_append_committed_v2(
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
    INSERT INTO raw_messages (`id`, `session_id`, `request_id`, `role`, `content`, `tool_name`, `message_json`, `metadata_json`, `tags_json`, `started_at`, `completed_at`, `duration_ns`, `reasoning_started_at`, `reasoning_completed_at`, `reasoning_duration_ns`, `content_started_at`, `content_completed_at`, `content_duration_ns`, `input_tokens`, `output_tokens`, `cache_read_tokens`, `cache_write_tokens`, `reasoning_tokens`, `created_at`, `updated_at`, sequence) VALUES (m_id, m_session_id, m_request_id, m_role, m_content, m_tool_name, m_message_json, m_metadata_json, m_tags_json, m_started_at, m_completed_at, m_duration_ns, m_reasoning_started_at, m_reasoning_completed_at, m_reasoning_duration_ns, m_content_started_at, m_content_completed_at, m_content_duration_ns, m_input_tokens, m_output_tokens, m_cache_read_tokens, m_cache_write_tokens, m_reasoning_tokens, m_created_at, m_updated_at, v_sequence);
    SELECT v_sequence AS sequence;
    COMMIT;
  ELSE
    ROLLBACK;
    SELECT NULL AS sequence;
  END IF;
END body
;
