CREATE TABLE agent_sessions (
	id VARBINARY(1020) NOT NULL, 
	parent_session_id VARBINARY(1020), 
	session_type INTEGER NOT NULL DEFAULT '0', 
	title VARCHAR(200), 
	agent_name VARCHAR(64), 
	last_sequence BIGINT NOT NULL DEFAULT '0', 
	snapshot_version BIGINT NOT NULL DEFAULT '0', 
	compacted_through_sequence BIGINT NOT NULL DEFAULT '0', 
	fields_version BIGINT NOT NULL DEFAULT '1', 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_agent_sessions PRIMARY KEY (id), 
	CONSTRAINT ck_agent_sessions_boundary_within_log CHECK (last_sequence >= compacted_through_sequence)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE INDEX ix_agent_sessions_activity ON agent_sessions (updated_at, id)
;
CREATE TABLE raw_messages (
	id VARCHAR(36) NOT NULL, 
	session_id VARBINARY(1020) NOT NULL, 
	request_id VARBINARY(1020) NOT NULL, 
	sequence BIGINT NOT NULL, 
	role INTEGER NOT NULL, 
	content LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	tool_name VARCHAR(200), 
	message_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	metadata_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	tags_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	started_at DATETIME(6) NOT NULL, 
	completed_at DATETIME(6) NOT NULL, 
	duration_ns BIGINT NOT NULL, 
	reasoning_started_at DATETIME(6), 
	reasoning_completed_at DATETIME(6), 
	reasoning_duration_ns BIGINT, 
	content_started_at DATETIME(6), 
	content_completed_at DATETIME(6), 
	content_duration_ns BIGINT, 
	input_tokens BIGINT, 
	output_tokens BIGINT, 
	cache_read_tokens BIGINT, 
	cache_write_tokens BIGINT, 
	reasoning_tokens BIGINT, 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_raw_messages PRIMARY KEY (id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE UNIQUE INDEX ux_raw_session_sequence ON raw_messages (session_id, sequence)
;
CREATE TABLE rein_sessions (
	id VARBINARY(1020) NOT NULL, 
	version BIGINT NOT NULL, 
	session_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_rein_sessions PRIMARY KEY (id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE INDEX ix_rein_sessions_activity ON rein_sessions (updated_at, id)
;
CREATE TABLE session_snapshots (
	id VARCHAR(36) NOT NULL, 
	session_id VARBINARY(1020) NOT NULL, 
	version BIGINT NOT NULL, 
	compacted_through_sequence BIGINT NOT NULL, 
	message_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_session_snapshots PRIMARY KEY (id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE UNIQUE INDEX ux_snapshot_session_version ON session_snapshots (session_id, version)
;
