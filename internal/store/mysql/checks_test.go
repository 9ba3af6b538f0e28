package mysql

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// TestChecksColumns: an instance with health checks and their state,
// committed as bytes only (another server's op), is laid out in its
// checks and ttl_expired columns and loads back to the same bytes.
func TestChecksColumns(t *testing.T) {
	s := open(t, mysqltest.URL(t, ""), Options{})
	in := testInstance("checked", nil)
	in.Checks = []instance.Check{{ID: "web", Type: instance.CheckHTTP, Target: "http://10.0.0.1:8080/health", Interval: 10 * time.Second, Timeout: time.Second},
		{ID: "beat", Type: instance.CheckTTL, TTL: 30 * time.Second, Status: instance.StatusPassing}}
	if err := instance.Prepare(-1, in); err != nil {
		t.Fatal(err)
	}
	in.KeepChecks(nil, time.Unix(1700000000, 0))
	in.Checks[0].Output = "connection refused"
	in.TTLExpired = true
	in.SetHealthy()
	enc := in.AppendBinary(nil)
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.Instances, Key: in.ID, Value: enc}}}}, true); err != nil {
		t.Fatal(err)
	}
	var checks string
	var expired, healthy bool
	if err := s.DB().QueryRow(`SELECT checks, ttl_expired, healthy FROM sx_instance WHERE id = 'checked'`).Scan(&checks, &expired, &healthy); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(checks, `"status":"critical","output":"connection refused"`) || !expired || healthy {
		t.Fatalf("columns: checks %s, ttl_expired %v, healthy %v", checks, expired, healthy)
	}
	got, _ := loadAll(t, s)
	if r := got["instances/checked"]; !bytes.Equal(r.Value, enc) {
		t.Fatalf("loads as %q, want %q", r.Value, enc)
	}
}
