-- Schema version 1 of Sextant's MySQL/MariaDB store. Statements end with a
-- semicolon at the end of a line. Never edit a released migration: add the
-- next file.

-- The one revision sequence. Every commit locks this row (SELECT ... FOR
-- UPDATE) until it commits, so revisions are handed out in the order the
-- database commits them, whichever server writes.
CREATE TABLE IF NOT EXISTS sx_sequence (
  id TINYINT NOT NULL PRIMARY KEY,
  revision BIGINT NOT NULL
) ENGINE=InnoDB;

INSERT IGNORE INTO sx_sequence (id, revision) VALUES (1, 0);

-- Registry instances: one row each, metadata a JSON column (the Polaris
-- seed's single-table layout). Times are unix nanoseconds so that every
-- server reads back exactly what was written.
CREATE TABLE IF NOT EXISTS sx_instance (
  id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  namespace VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  service VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  host VARCHAR(253) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  port INT NOT NULL,
  protocol VARBINARY(64) NOT NULL,
  version VARBINARY(64) NOT NULL,
  weight INT NOT NULL,
  isolated BOOLEAN NOT NULL,
  healthy BOOLEAN NOT NULL,
  ttl_seconds INT NOT NULL,
  metadata MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_ns BIGINT NOT NULL,
  updated_ns BIGINT NOT NULL,
  revision BIGINT NOT NULL
) ENGINE=InnoDB;

-- Every other kind (routing config, nodes, placements, tokens, policies,
-- system records): opaque values keyed by kind and key.
CREATE TABLE IF NOT EXISTS sx_record (
  kind CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  rkey VARBINARY(512) NOT NULL,
  revision BIGINT NOT NULL,
  value MEDIUMBLOB NOT NULL,
  PRIMARY KEY (kind, rkey)
) ENGINE=InnoDB;

-- The change stream: every op of every committed transaction, by revision
-- (dense: each revision is one transaction with at least one op) and its
-- position in the transaction. value is the record as put (NULL: a delete).
-- Followers read it by revision, never by time. Bounded: the oldest
-- revisions are deleted, and sx_compaction says up to where.
CREATE TABLE IF NOT EXISTS sx_change (
  revision BIGINT NOT NULL,
  seq INT NOT NULL,
  kind CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  rkey VARBINARY(512) NOT NULL,
  value MEDIUMBLOB NULL,
  committed_ns BIGINT NOT NULL,
  PRIMARY KEY (revision, seq)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS sx_compaction (
  id TINYINT NOT NULL PRIMARY KEY,
  revision BIGINT NOT NULL
) ENGINE=InnoDB;

INSERT IGNORE INTO sx_compaction (id, revision) VALUES (1, 0);

-- Cluster membership: one row per server, alive while lease_until (the
-- database's clock, unix microseconds) is in the future.
CREATE TABLE IF NOT EXISTS sx_member (
  id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  addr VARCHAR(255) NOT NULL,
  started_us BIGINT NOT NULL,
  lease_until_us BIGINT NOT NULL
) ENGINE=InnoDB;

-- Heartbeats a server received for instances another server judges,
-- waiting for that owner to take them.
CREATE TABLE IF NOT EXISTS sx_beat (
  seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  owner VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  sender VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_us BIGINT NOT NULL,
  beats MEDIUMBLOB NOT NULL,
  KEY sx_beat_owner (owner, seq)
) ENGINE=InnoDB;
