CREATE TABLE high_water_marks (
	store INTEGER NOT NULL, 
	id_digest VARCHAR(64) NOT NULL, 
	last_sequence BIGINT NOT NULL, 
	version BIGINT NOT NULL, 
	purged_at DATETIME NOT NULL, 
	CONSTRAINT pk_high_water_marks PRIMARY KEY (store, id_digest)
)
;
