CREATE TABLE openai_sessions (
	id VARCHAR(255) NOT NULL, 
	last_sequence BIGINT DEFAULT '0' NOT NULL, 
	generation BIGINT DEFAULT '1' NOT NULL, 
	base_sequence BIGINT DEFAULT '0' NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	deleted_at DATETIME, 
	CONSTRAINT pk_openai_sessions PRIMARY KEY (id), 
	CONSTRAINT ck_openai_sessions_base_within_log CHECK (last_sequence >= base_sequence)
)
;
CREATE INDEX ix_openai_sessions_activity ON openai_sessions (deleted_at, updated_at, id)
;
CREATE TABLE openai_items (
	session_id VARCHAR(255) NOT NULL, 
	sequence BIGINT NOT NULL, 
	item_id VARCHAR(36) NOT NULL, 
	item_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	retracted_at DATETIME, 
	CONSTRAINT pk_openai_items PRIMARY KEY (session_id, sequence)
)
;
CREATE UNIQUE INDEX ux_openai_items_item ON openai_items (session_id, item_id)
;
CREATE INDEX ix_openai_items_live ON openai_items (session_id, retracted_at, sequence)
;
CREATE TABLE adk_sessions (
	app_name VARCHAR(128) NOT NULL, 
	user_id VARCHAR(128) NOT NULL, 
	id VARCHAR(255) NOT NULL, 
	last_sequence BIGINT DEFAULT '0' NOT NULL, 
	base_sequence BIGINT DEFAULT '0' NOT NULL, 
	state_json TEXT NOT NULL, 
	state_version BIGINT DEFAULT '1' NOT NULL, 
	created_at DATETIME NOT NULL, 
	updated_at DATETIME NOT NULL, 
	deleted_at DATETIME, 
	CONSTRAINT pk_adk_sessions PRIMARY KEY (app_name, user_id, id), 
	CONSTRAINT ck_adk_sessions_base_within_log CHECK (last_sequence >= base_sequence)
)
;
CREATE TABLE adk_events (
	app_name VARCHAR(128) NOT NULL, 
	user_id VARCHAR(128) NOT NULL, 
	session_id VARCHAR(255) NOT NULL, 
	sequence BIGINT NOT NULL, 
	event_id VARCHAR(255) NOT NULL, 
	timestamp DOUBLE NOT NULL, 
	event_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_adk_events PRIMARY KEY (app_name, user_id, session_id, sequence)
)
;
CREATE UNIQUE INDEX ux_adk_events_event ON adk_events (app_name, user_id, session_id, event_id)
;
CREATE INDEX ix_adk_events_timestamp ON adk_events (app_name, user_id, session_id, timestamp)
;
CREATE TABLE adk_app_states (
	app_name VARCHAR(128) NOT NULL, 
	state_json TEXT NOT NULL, 
	version BIGINT DEFAULT '1' NOT NULL, 
	updated_at DATETIME NOT NULL, 
	CONSTRAINT pk_adk_app_states PRIMARY KEY (app_name)
)
;
CREATE TABLE adk_user_states (
	app_name VARCHAR(128) NOT NULL, 
	user_id VARCHAR(128) NOT NULL, 
	state_json TEXT NOT NULL, 
	version BIGINT DEFAULT '1' NOT NULL, 
	updated_at DATETIME NOT NULL, 
	CONSTRAINT pk_adk_user_states PRIMARY KEY (app_name, user_id)
)
;
