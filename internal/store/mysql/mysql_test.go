package mysql

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's pool opener lives as long as a DB the test closed.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// TestSchemaMigratesOnceAndRefusesNewer: servers opening a fresh database
// together all succeed (one migrates under GET_LOCK); a schema newer than
// the binary's is refused with a clear error.
func TestSchemaMigratesOnceAndRefusesNewer(t *testing.T) {
	url := mysqltest.URL(t, "")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(context.Background(), url, Options{})
			if err == nil {
				_, err = s.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.System, Key: fmt.Sprint(i), Value: []byte("x")}}}}, true)
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
	}
	s := open(t, url, Options{})
	var version int
	if err := s.DB().QueryRow("SELECT version FROM sx_schema WHERE id = 1").Scan(&version); err != nil || version != SchemaVersion() || version < 1 {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion())
	}
	if _, rev := loadAll(t, s); rev != 4 {
		t.Fatalf("revision %d after 4 commits", rev)
	}
	if _, err := s.DB().Exec("UPDATE sx_schema SET version = ? WHERE id = 1", SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), url, Options{})
	if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", SchemaVersion()+1)) {
		t.Fatalf("Open on a newer schema: %v", err)
	}
}

func TestParseURL(t *testing.T) {
	for url, want := range map[string]string{
		"mysql://root@tcp(127.0.0.1:3306)/sextant":          "",
		"root:secret@tcp(127.0.0.1:3306)/sextant?tls=false": "",
		"mysql://root:secret@tcp(127.0.0.1:3306)/":          `"mysql://root:***@tcp(127.0.0.1:3306)/" names no database`,
		"mysql://root:secret@tcp(127.0.0.1:3306)":           "mysql://root:***@",
	} {
		_, err := ParseURL(url)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret")) {
			t.Errorf("ParseURL(%q) = %v, want %q", url, err, want)
		}
	}
}

func loadAll(t *testing.T, s *Store) (map[string]store.Record, int64) {
	t.Helper()
	got := map[string]store.Record{}
	rev, err := s.Load(store.Kinds(), func(r store.Record) error {
		got[r.Kind.String()+"/"+r.Key] = store.Record{Kind: r.Kind, Key: r.Key, Revision: r.Revision, Value: bytes.Clone(r.Value)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, rev
}

func testInstance(id string, md map[string]string) *instance.Instance {
	return &instance.Instance{
		ID: id, Namespace: "default", Service: "orders", Host: "10.0.0.1", Port: 8080, Protocol: "http", Version: "v1 ✓",
		Weight: 100, TTLSeconds: 5, Healthy: true, Metadata: label.FromMap(md),
		CreatedAt: time.Unix(1700000000, 123456789).UTC(), UpdatedAt: time.Unix(1700000001, 987654321).UTC(),
	}
}

// TestInstanceRows: instances are rows of sx_instance with readable
// columns and metadata as JSON, and load back to exactly the encoding
// that was written, from this process (objects) or another (bytes).
func TestInstanceRows(t *testing.T) {
	url := mysqltest.URL(t, "")
	s := open(t, url, Options{})
	md := map[string]string{"zone": "z1", "quote\"back\\slash": "tab\tnl\n", "unicode": "日本 ✓", "ctl": "\x01", "empty": ""}
	a := testInstance("a", md)
	b := testInstance("b", nil)
	b.Healthy, b.Isolated = false, true
	enc := map[string][]byte{"a": a.AppendBinary(nil), "b": b.AppendBinary(nil)}
	// a goes with its object (this process); b as bytes only (as a peer's
	// follower or a health flip of another process would send it).
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{
		{Kind: store.Instances, Key: "a", Value: enc["a"], Object: a},
		{Kind: store.Instances, Key: "b", Value: enc["b"]},
	}}}, true); err != nil {
		t.Fatal(err)
	}
	var zone, unicode string
	var healthy, isolated bool
	if err := s.DB().QueryRow(`SELECT JSON_UNQUOTE(JSON_EXTRACT(metadata, '$.zone')), JSON_UNQUOTE(JSON_EXTRACT(metadata, '$.unicode')) FROM sx_instance WHERE id = 'a'`).Scan(&zone, &unicode); err != nil || zone != "z1" || unicode != "日本 ✓" {
		t.Fatalf("metadata column: zone %q unicode %q (%v)", zone, unicode, err)
	}
	if err := s.DB().QueryRow(`SELECT healthy, isolated FROM sx_instance WHERE id = 'b'`).Scan(&healthy, &isolated); err != nil || healthy || !isolated {
		t.Fatalf("b: healthy %v isolated %v (%v)", healthy, isolated, err)
	}
	got, rev := loadAll(t, s)
	if rev != 1 || len(got) != 2 {
		t.Fatalf("load: %d records at %d", len(got), rev)
	}
	for id, want := range enc {
		if r := got["instances/"+id]; !bytes.Equal(r.Value, want) || r.Revision != 1 {
			t.Errorf("instance %s loads as %q at %d, want %q at 1", id, r.Value, r.Revision, want)
		}
	}
	// A row edited by hand with keys out of order still loads, sorted.
	if _, err := s.DB().Exec(`UPDATE sx_instance SET metadata = '{"z":"1", "a" : "2"}' WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	got, _ = loadAll(t, s)
	in, err := instance.Decode(got["instances/b"].Value, 1)
	if err != nil || fmt.Sprint(in.Metadata.Map()) != "map[a:2 z:1]" {
		t.Fatalf("hand-edited metadata: %v %v", in, err)
	}
	// A corrupt one names the instance.
	if _, err := s.DB().Exec(`UPDATE sx_instance SET metadata = '{"z":1}' WHERE id = 'b'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load([]store.Kind{store.Instances}, func(store.Record) error { return nil }); err == nil || !strings.Contains(err.Error(), `instance "b"`) {
		t.Fatalf("corrupt metadata: %v", err)
	}
}

// TestCompaction: the database keeps History revisions of changes; a
// follower behind them gets ErrCompacted, one within them reads on.
func TestCompaction(t *testing.T) {
	url := mysqltest.URL(t, "")
	s := open(t, url, Options{History: 10})
	for i := range 50 {
		if _, err := s.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.Config, Key: "k", Value: []byte(fmt.Sprint(i))}}}}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CompactNow(); err != nil {
		t.Fatal(err)
	}
	var rows int
	s.DB().QueryRow("SELECT COUNT(*) FROM sx_change").Scan(&rows)
	if rows != 10 {
		t.Fatalf("%d change rows kept, want 10", rows)
	}
	peer := open(t, url, Options{}) // reads the table, not s's memory
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := peer.Follow(5)
	if err == nil {
		_, err = f.Next(ctx)
		f.Close()
	}
	if !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("follow from 5 with history after 40: %v, want ErrCompacted", err)
	}
	f, err = peer.Follow(45)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if c, err := f.Next(ctx); err != nil || len(c) != 5 || c[0].Revision != 46 || string(c[4].Ops[0].Value) != "49" {
		t.Fatalf("follow from 45: %v %v", c, err)
	}
}

// TestDatabaseLoss: with the connection cut (a proxy, not a restart of the
// shared MariaDB) commits and feeds answer ErrUnavailable at once, nothing
// is acknowledged that is not stored, and both work again once it is back,
// the feed from where it stood.
func TestDatabaseLoss(t *testing.T) {
	name := mysqltest.Database(t)
	proxy := mysqltest.NewProxy(t, mysqltest.Addr())
	url := fmt.Sprintf("mysql://root@tcp(%s)/%s", proxy.Addr(), name)
	s := open(t, url, Options{Timeout: 2 * time.Second})
	direct := open(t, fmt.Sprintf("mysql://root@tcp(%s)/%s", mysqltest.Addr(), name), Options{})
	commit := func(st *Store, v string) (int64, error) {
		res, err := st.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.Config, Key: v, Value: []byte(v)}}}}, true)
		if err != nil {
			return 0, err
		}
		return res[0].Revision, nil
	}
	if _, err := commit(s, "before"); err != nil {
		t.Fatal(err)
	}
	f, err := s.Follow(1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	proxy.Cut()
	start := time.Now()
	if _, err := commit(s, "during"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("commit without the database: %v, want ErrUnavailable", err)
	}
	if _, err := commit(direct, "other server"); err != nil { // another server still reaches it
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Next(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Next without the database: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("failing took %v: the database's loss must be noticed, not waited out", d)
	}
	proxy.Restore()
	var rev int64
	for deadline := time.Now().Add(10 * time.Second); ; {
		if rev, err = commit(s, "after"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || rev != 3 {
		t.Fatalf("commit after the database came back: revision %d, %v; want 3", rev, err)
	}
	var seen []string
	for len(seen) < 2 {
		c, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("Next after the database came back: %v", err)
		}
		for _, ch := range c {
			seen = append(seen, fmt.Sprintf("%d:%s", ch.Revision, ch.Ops[0].Key))
		}
	}
	if fmt.Sprint(seen) != "[2:other server 3:after]" {
		t.Fatalf("feed after the outage: %v", seen)
	}
	got, _ := loadAll(t, direct)
	if _, ok := got["config/during"]; ok {
		t.Fatal("a commit that answered an error is stored")
	}
}

// TestCommitAfterClose answers ErrClosed.
func TestCommitAfterClose(t *testing.T) {
	s := open(t, mysqltest.URL(t, ""), Options{})
	s.Close()
	if _, err := s.Commit([]store.Txn{{Ops: []store.Op{{Kind: store.Config, Key: "a", Value: []byte("x")}}}}, true); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	if _, err := s.Follow(0); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("follow after close: %v", err)
	}
}
