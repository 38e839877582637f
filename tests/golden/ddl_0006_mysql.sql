CREATE TABLE openai_sessions (
	id VARBINARY(1020) NOT NULL, 
	last_sequence BIGINT NOT NULL DEFAULT '0', 
	generation BIGINT NOT NULL DEFAULT '1', 
	base_sequence BIGINT NOT NULL DEFAULT '0', 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	deleted_at DATETIME(6), 
	CONSTRAINT pk_openai_sessions PRIMARY KEY (id), 
	CONSTRAINT ck_openai_sessions_base_within_log CHECK (last_sequence >= base_sequence)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE INDEX ix_openai_sessions_activity ON openai_sessions (deleted_at, updated_at, id)
;
CREATE TABLE openai_items (
	session_id VARBINARY(1020) NOT NULL, 
	sequence BIGINT NOT NULL, 
	item_id VARBINARY(144) NOT NULL, 
	item_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	retracted_at DATETIME(6), 
	CONSTRAINT pk_openai_items PRIMARY KEY (session_id, sequence)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE UNIQUE INDEX ux_openai_items_item ON openai_items (session_id, item_id)
;
CREATE INDEX ix_openai_items_live ON openai_items (session_id, retracted_at, sequence)
;
CREATE TABLE adk_sessions (
	app_name VARBINARY(512) NOT NULL, 
	user_id VARBINARY(512) NOT NULL, 
	id VARBINARY(1020) NOT NULL, 
	last_sequence BIGINT NOT NULL DEFAULT '0', 
	base_sequence BIGINT NOT NULL DEFAULT '0', 
	state_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	state_version BIGINT NOT NULL DEFAULT '1', 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	deleted_at DATETIME(6), 
	CONSTRAINT pk_adk_sessions PRIMARY KEY (app_name, user_id, id), 
	CONSTRAINT ck_adk_sessions_base_within_log CHECK (last_sequence >= base_sequence)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE TABLE adk_events (
	app_name VARBINARY(512) NOT NULL, 
	user_id VARBINARY(512) NOT NULL, 
	session_id VARBINARY(1020) NOT NULL, 
	sequence BIGINT NOT NULL, 
	event_id VARBINARY(1020) NOT NULL, 
	timestamp DOUBLE NOT NULL, 
	event_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_adk_events PRIMARY KEY (app_name, user_id, session_id, sequence)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE UNIQUE INDEX ux_adk_events_event ON adk_events (app_name, user_id, session_id, event_id)
;
CREATE INDEX ix_adk_events_timestamp ON adk_events (app_name, user_id, session_id, timestamp)
;
CREATE TABLE adk_app_states (
	app_name VARBINARY(512) NOT NULL, 
	state_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	version BIGINT NOT NULL DEFAULT '1', 
	updated_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_adk_app_states PRIMARY KEY (app_name)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE TABLE adk_user_states (
	app_name VARBINARY(512) NOT NULL, 
	user_id VARBINARY(512) NOT NULL, 
	state_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	version BIGINT NOT NULL DEFAULT '1', 
	updated_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_adk_user_states PRIMARY KEY (app_name, user_id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
