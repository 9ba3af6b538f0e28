-- Schema version 4: commit announcements between the servers of a
-- cluster (wake.go). Each server that listens for them keeps its UDP
-- address here with a lease; the key authenticates announcements (any
-- server with the database's credentials reads it; nobody else).
CREATE TABLE IF NOT EXISTS sx_wake (
  addr VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  until_us BIGINT NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS sx_wake_key (
  id TINYINT NOT NULL PRIMARY KEY,
  k VARBINARY(32) NOT NULL
) ENGINE=InnoDB;
