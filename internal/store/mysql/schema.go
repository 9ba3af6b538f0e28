package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed schema/*.sql
var schemaFS embed.FS

// migration is one schema file: version N is schema/NNN_name.sql.
type migration struct {
	version    int
	name       string
	statements []string
}

// migrations returns the embedded schema files in version order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(schemaFS, "schema/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []migration
	for i, n := range names {
		base := strings.TrimPrefix(n, "schema/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("mysql: schema file %s: want %03d_<name>.sql", n, i+1)
		}
		b, err := schemaFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, statements: splitSQL(string(b))})
	}
	return out, nil
}

// splitSQL splits a schema file into statements: each ends with ";" at the
// end of a line; "--" lines are comments.
func splitSQL(s string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(s) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// SchemaVersion is the newest schema this binary knows.
func SchemaVersion() int {
	m, err := migrations()
	if err != nil {
		return 0
	}
	return len(m)
}

// ErrNewerSchema is returned by Open when the database was migrated by a
// newer Sextant than this one.
var ErrNewerSchema = errors.New("mysql: the database schema is newer than this binary")

// migrate brings the schema to this binary's version under an advisory
// lock, so servers starting together migrate once; it refuses a database
// whose schema is newer.
func migrate(ctx context.Context, db *sql.DB, lockWait time.Duration) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, unavailable("connect", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('sextant_schema', ?)", int(lockWait/time.Second)).Scan(&got); err != nil {
		return 0, unavailable("take the schema lock", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return 0, fmt.Errorf("mysql: another server held the schema lock (GET_LOCK('sextant_schema')) for %v", lockWait)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('sextant_schema')")
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sx_schema (
  id TINYINT NOT NULL PRIMARY KEY,
  version INT NOT NULL,
  migrated_us BIGINT NOT NULL
) ENGINE=InnoDB`); err != nil {
		return 0, fmt.Errorf("mysql: create sx_schema: %w", err)
	}
	var have int
	err = conn.QueryRowContext(ctx, "SELECT version FROM sx_schema WHERE id = 1").Scan(&have)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("mysql: read the schema version: %w", err)
	}
	if have > len(ms) {
		return have, fmt.Errorf("%w: the database is at schema version %d, this sextant knows up to %d; run a newer sextant (or restore a database of this version)", ErrNewerSchema, have, len(ms))
	}
	for _, m := range ms[have:] {
		for i, stmt := range m.statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return have, fmt.Errorf("mysql: schema %s statement %d: %w", m.name, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO sx_schema (id, version, migrated_us) VALUES (1, ?, ?)
ON DUPLICATE KEY UPDATE version = VALUES(version), migrated_us = VALUES(migrated_us)`, m.version, time.Now().UnixMicro()); err != nil {
			return have, fmt.Errorf("mysql: record schema version %d: %w", m.version, err)
		}
		have = m.version
	}
	return have, nil
}
