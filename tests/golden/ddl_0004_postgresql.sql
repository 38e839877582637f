CREATE TABLE rein_writes (
	write_id VARCHAR(36) NOT NULL, 
	session_id VARCHAR(255) NOT NULL, 
	version BIGINT NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT pk_rein_writes PRIMARY KEY (write_id)
)
;
CREATE INDEX ix_rein_writes_session ON rein_writes (session_id, created_at)
;
