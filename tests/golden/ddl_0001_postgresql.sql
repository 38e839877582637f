CREATE TABLE agent_sessions (
	id VARCHAR(255) NOT NULL, 
	parent_session_id VARCHAR(255), 
	session_type INTEGER DEFAULT '0' NOT NULL, 
	title VARCHAR(200), 
	agent_name VARCHAR(64), 
	last_sequence BIGINT DEFAULT '0' NOT NULL, 
	snapshot_version BIGINT DEFAULT '0' NOT NULL, 
	compacted_through_sequence BIGINT DEFAULT '0' NOT NULL, 
	fields_version BIGINT DEFAULT '1' NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_agent_sessions PRIMARY KEY (id), 
	CONSTRAINT ck_agent_sessions_boundary_within_log CHECK (last_sequence >= compacted_through_sequence)
)
;
CREATE INDEX ix_agent_sessions_activity ON agent_sessions (updated_at, id)
;
CREATE TABLE raw_messages (
	id VARCHAR(36) NOT NULL, 
	session_id VARCHAR(255) NOT NULL, 
	request_id VARCHAR(255) NOT NULL, 
	sequence BIGINT NOT NULL, 
	role INTEGER NOT NULL, 
	content TEXT NOT NULL, 
	tool_name VARCHAR(200), 
	message_json TEXT NOT NULL, 
	metadata_json TEXT NOT NULL, 
	tags_json TEXT NOT NULL, 
	started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	completed_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	duration_ns BIGINT NOT NULL, 
	reasoning_started_at TIMESTAMP WITH TIME ZONE, 
	reasoning_completed_at TIMESTAMP WITH TIME ZONE, 
	reasoning_duration_ns BIGINT, 
	content_started_at TIMESTAMP WITH TIME ZONE, 
	content_completed_at TIMESTAMP WITH TIME ZONE, 
	content_duration_ns BIGINT, 
	input_tokens BIGINT, 
	output_tokens BIGINT, 
	cache_read_tokens BIGINT, 
	cache_write_tokens BIGINT, 
	reasoning_tokens BIGINT, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_raw_messages PRIMARY KEY (id)
)
;
CREATE UNIQUE INDEX ux_raw_session_sequence ON raw_messages (session_id, sequence)
;
CREATE TABLE rein_sessions (
	id VARCHAR(255) NOT NULL, 
	version BIGINT NOT NULL, 
	session_json TEXT NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_rein_sessions PRIMARY KEY (id)
)
;
CREATE INDEX ix_rein_sessions_activity ON rein_sessions (updated_at, id)
;
CREATE TABLE session_snapshots (
	id VARCHAR(36) NOT NULL, 
	session_id VARCHAR(255) NOT NULL, 
	version BIGINT NOT NULL, 
	compacted_through_sequence BIGINT NOT NULL, 
	message_json TEXT NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_session_snapshots PRIMARY KEY (id)
)
;
CREATE UNIQUE INDEX ux_snapshot_session_version ON session_snapshots (session_id, version)
;
