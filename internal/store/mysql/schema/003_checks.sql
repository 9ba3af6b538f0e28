-- Schema version 3: an instance's health checks (their definitions and
-- state, as the API's JSON array; NULL: none) and whether its TTL expired
-- (apart from healthy, which is also false while a check is critical).
-- Rows written before it read no checks, and an expired TTL from healthy.
ALTER TABLE sx_instance ADD COLUMN ttl_expired BOOLEAN NOT NULL DEFAULT FALSE, ADD COLUMN checks MEDIUMTEXT NULL;
