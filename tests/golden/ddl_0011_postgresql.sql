CREATE TABLE langgraph_threads (
	id VARCHAR(255) NOT NULL, 
	generation BIGINT DEFAULT '1' NOT NULL, 
	version BIGINT DEFAULT '1' NOT NULL, 
	deleted_through BIGINT, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	deleted_at TIMESTAMP WITH TIME ZONE, 
	CONSTRAINT pk_langgraph_threads PRIMARY KEY (id)
)
;
CREATE INDEX ix_langgraph_threads_activity ON langgraph_threads (deleted_at, updated_at, id)
;
CREATE TABLE langgraph_checkpoints (
	thread_id VARCHAR(255) NOT NULL, 
	checkpoint_ns VARCHAR(200) NOT NULL, 
	checkpoint_id VARCHAR(64) NOT NULL, 
	parent_checkpoint_id VARCHAR(64), 
	checkpoint_type VARCHAR(64) NOT NULL, 
	checkpoint_blob BYTEA NOT NULL, 
	metadata_json TEXT NOT NULL, 
	run_id VARCHAR(255), 
	write_id VARCHAR(36) NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_langgraph_checkpoints PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
)
;
CREATE INDEX ix_langgraph_checkpoints_run ON langgraph_checkpoints (run_id)
;
CREATE TABLE langgraph_blobs (
	thread_id VARCHAR(255) NOT NULL, 
	checkpoint_ns VARCHAR(200) NOT NULL, 
	channel VARCHAR(200) NOT NULL, 
	version VARCHAR(64) NOT NULL, 
	value_type VARCHAR(64) NOT NULL, 
	value_blob BYTEA, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_langgraph_blobs PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
)
;
CREATE TABLE langgraph_writes (
	thread_id VARCHAR(255) NOT NULL, 
	checkpoint_ns VARCHAR(200) NOT NULL, 
	checkpoint_id VARCHAR(64) NOT NULL, 
	task_id VARCHAR(64) NOT NULL, 
	idx INTEGER NOT NULL, 
	task_path TEXT NOT NULL, 
	channel VARCHAR(200) NOT NULL, 
	value_type VARCHAR(64) NOT NULL, 
	value_blob BYTEA, 
	write_id VARCHAR(36) NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_langgraph_writes PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
)
;
