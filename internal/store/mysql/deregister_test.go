package mysql

import (
	"bytes"
	"database/sql"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// TestMigrateDeregisterAfter: a database at schema version 1 with an
// instance row migrates to version 2, the row loads as it was written
// (no removal delay, version 1's bytes), and an instance with a removal
// delay, committed as bytes only (another server's op), keeps it in its
// column and loads back to the same bytes.
func TestMigrateDeregisterAfter(t *testing.T) {
	url := mysqltest.URL(t, "")
	cfg, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ms, err := migrations()
	if err != nil || len(ms) < 2 {
		t.Fatalf("migrations: %d, %v", len(ms), err)
	}
	for _, stmt := range ms[0].statements {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`CREATE TABLE sx_schema (id TINYINT NOT NULL PRIMARY KEY, version INT NOT NULL, migrated_us BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO sx_schema VALUES (1, 1, 0)`); err != nil {
		t.Fatal(err)
	}
	old := testInstance("old", map[string]string{"zone": "z1"})
	old.Revision = 1
	if _, err := db.Exec(`INSERT INTO sx_instance (id, namespace, service, host, port, protocol, version, weight, isolated, healthy, ttl_seconds, metadata, created_ns, updated_ns, revision)
VALUES ('old', 'default', 'orders', '10.0.0.1', 8080, 'http', ?, 100, false, true, 5, '{"zone":"z1"}', ?, ?, 1)`,
		old.Version, old.CreatedAt.UnixNano(), old.UpdatedAt.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE sx_sequence SET revision = 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}

	s := open(t, url, Options{})
	var version int
	if err := s.DB().QueryRow("SELECT version FROM sx_schema WHERE id = 1").Scan(&version); err != nil || version != SchemaVersion() {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion())
	}
	got, _ := loadAll(t, s)
	if r := got["instances/old"]; !bytes.Equal(r.Value, old.AppendBinary(nil)) {
		t.Fatalf("the version 1 row loads as %q, want %q", r.Value, old.AppendBinary(nil))
	}

	in := testInstance("new", nil)
	in.DeregisterAfterSeconds = 90
	enc := in.AppendBinary(nil)
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.Instances, Key: "new", Value: enc}}}}, true); err != nil {
		t.Fatal(err)
	}
	var after int
	if err := s.DB().QueryRow(`SELECT deregister_after_seconds FROM sx_instance WHERE id = 'new'`).Scan(&after); err != nil || after != 90 {
		t.Fatalf("deregister_after_seconds column %d (%v), want 90", after, err)
	}
	got, _ = loadAll(t, s)
	if r := got["instances/new"]; !bytes.Equal(r.Value, enc) {
		t.Fatalf("loads as %q, want %q", r.Value, enc)
	}
	back, err := instance.Decode(got["instances/new"].Value, 1)
	if err != nil || back.DeregisterAfterSeconds != 90 {
		t.Fatalf("decoded %+v %v", back, err)
	}
}
