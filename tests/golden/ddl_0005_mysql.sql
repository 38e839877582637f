CREATE TABLE high_water_marks (
	store INTEGER NOT NULL, 
	id_digest VARBINARY(256) NOT NULL, 
	last_sequence BIGINT NOT NULL, 
	version BIGINT NOT NULL, 
	purged_at DATETIME(6) NOT NULL, 
	CONSTRAINT pk_high_water_marks PRIMARY KEY (store, id_digest)
)CHARSET=utf8mb4 ENGINE=InnoDB COLLATE utf8mb4_bin
;
