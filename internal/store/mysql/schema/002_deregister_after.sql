-- Schema version 2: an instance's removal delay (deregister_after_seconds;
-- 0: the server's default). Rows written before it read 0, as before.
ALTER TABLE sx_instance ADD COLUMN deregister_after_seconds INT NOT NULL DEFAULT 0 AFTER ttl_seconds;
