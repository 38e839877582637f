CREATE TABLE rein_writes (
	write_id VARBINARY(144) NOT NULL, 
	session_id VARBINARY(1020) NOT NULL, 
	version BIGINT NOT NULL, 
	created_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_rein_writes PRIMARY KEY (write_id)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
CREATE INDEX ix_rein_writes_session ON rein_writes (session_id, created_at)
;
