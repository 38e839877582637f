CREATE TABLE langgraph_threads (
	id VARBINARY(1020) NOT NULL, 
	generation BIGINT NOT NULL DEFAULT '1', 
	version BIGINT NOT NULL DEFAULT '1', 
	deleted_through BIGINT, 
	created_at DATETIME(6) NOT NULL, 
	updated_at DATETIME(6) NOT NULL, 
	deleted_at DATETIME(6), 
	CONSTRAINT pk_langgraph_threads PRIMARY KEY (id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE INDEX ix_langgraph_threads_activity ON langgraph_threads (deleted_at, updated_at, id)
;
CREATE TABLE langgraph_checkpoints (
	thread_id VARBINARY(1020) NOT NULL, 
	checkpoint_ns VARBINARY(800) NOT NULL, 
	checkpoint_id VARBINARY(256) NOT NULL, 
	parent_checkpoint_id VARBINARY(256), 
	checkpoint_type VARBINARY(256) NOT NULL, 
	checkpoint_blob LONGBLOB NOT NULL, 
	metadata_json LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	run_id VARBINARY(1020), 
	write_id VARBINARY(144) NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_langgraph_checkpoints PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE INDEX ix_langgraph_checkpoints_run ON langgraph_checkpoints (run_id)
;
CREATE TABLE langgraph_blobs (
	thread_id VARBINARY(1020) NOT NULL, 
	checkpoint_ns VARBINARY(800) NOT NULL, 
	channel VARBINARY(800) NOT NULL, 
	version VARBINARY(256) NOT NULL, 
	value_type VARBINARY(256) NOT NULL, 
	value_blob LONGBLOB, 
	created_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_langgraph_blobs PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE TABLE langgraph_writes (
	thread_id VARBINARY(1020) NOT NULL, 
	checkpoint_ns VARBINARY(800) NOT NULL, 
	checkpoint_id VARBINARY(256) NOT NULL, 
	task_id VARBINARY(256) NOT NULL, 
	idx INTEGER NOT NULL, 
	task_path LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, 
	channel VARBINARY(800) NOT NULL, 
	value_type VARBINARY(256) NOT NULL, 
	value_blob LONGBLOB, 
	write_id VARBINARY(144) NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_langgraph_writes PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
