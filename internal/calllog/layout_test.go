package calllog

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/callstore"
)

// TestRecordV2RoundTrip: every layout v2 field comes back from the store
// through the dictionary, after a reopen too, and so does layout v3's
// trace id.
func TestRecordV2RoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, nil)
	base := time.Unix(1_800_000_000, 0)
	r := rec("orders", base, time.Millisecond, "10.0.0.1:80", 200)
	r.Principal, r.Subject, r.Method, r.Path, r.Host = "spiffe://td/ns/a/sa/b", "O=td", "POST", "/orders/7", "orders.example"
	r.Port, r.PeerIP, r.Conn = 8443, netip.MustParseAddr("192.0.2.9"), ConnTLS|ConnPeerCert|ConnOtherNames
	r.TraceID = [16]byte{0x4b, 0xf9, 15: 0x36}
	l.Record(r)
	plain := rec("orders", base.Add(time.Millisecond), time.Millisecond, "10.0.0.1:80", 200)
	plain.Method, plain.Path, plain.Port, plain.PeerIP = "GET", "/", 8080, netip.MustParseAddr("2001:db8::1")
	plain.Upstream = "spiffe://td/ns/shop/sa/orders" // a sidecar's outbound call: the server's identity
	l.Record(plain)
	check := func(l *Log) {
		t.Helper()
		calls, _, err := l.Calls(Query{Service: "orders"})
		if err != nil || len(calls) != 2 {
			t.Fatalf("calls %v %v", calls, err)
		}
		c := calls[0]
		if c.Layout != layoutVersion || c.TraceID != "4bf90000000000000000000000000036" || c.Principal != r.Principal || c.Subject != "O=td" || c.Method != "POST" || c.Path != "/orders/7" || c.Host != "orders.example" ||
			c.Port != 8443 || c.PeerIP != "192.0.2.9" || !c.TLS || !c.PeerCert || !c.OtherNames || c.NotKept != nil {
			t.Fatalf("v2 call %+v", c)
		}
		c = calls[1]
		if c.TraceID != "" || c.Principal != "" || c.Method != "GET" || c.Path != "/" || c.Port != 8080 || c.PeerIP != "2001:db8::1" || c.TLS || c.PeerCert ||
			c.UpstreamPrincipal != plain.Upstream {
			t.Fatalf("plaintext call %+v", c)
		}
		if calls[0].UpstreamPrincipal != "" {
			t.Fatalf("no upstream identity recorded, one read: %+v", calls[0])
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, nil)
	defer l.Close()
	check(l)
}

// TestDictLimit: beyond Options.DictLimit names a new path (or host,
// method, principal) is recorded as not kept, distinct from empty; values
// the dictionary holds are still kept, config strings always are, and the
// bound holds across a reopen.
func TestDictLimit(t *testing.T) {
	dir := t.TempDir()
	const limit = 16
	l := open(t, dir, func(o *Options) { o.DictLimit = limit })
	base := time.Unix(1_800_000_000, 0)
	put := func(l *Log, i int, path string) {
		r := rec("orders", base.Add(time.Duration(i)*time.Millisecond), time.Millisecond, "10.0.0.1:80", 200)
		r.Method, r.Path = "GET", path
		l.Record(r)
	}
	for i := range 100 {
		put(l, i, "/items/"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	put(l, 100, "/items/aa") // the first one: held
	put(l, 101, "")          // empty is always kept
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	calls, _, err := l.Calls(Query{Service: "orders"})
	if err != nil || len(calls) != 102 {
		t.Fatalf("%d calls, %v", len(calls), err)
	}
	kept, notKept := 0, 0
	for _, c := range calls[:100] {
		switch {
		case slices.Equal(c.NotKept, []string{"path"}) && c.Path == "":
			notKept++
		case c.NotKept == nil && c.Path != "":
			kept++
		default:
			t.Fatalf("call %+v", c)
		}
		if c.Method != "GET" || c.Cluster != "orders" || c.Route != "r" {
			t.Fatalf("config strings or a held method lost: %+v", c)
		}
	}
	if kept == 0 || notKept == 0 || kept > limit {
		t.Fatalf("kept %d, not kept %d (limit %d)", kept, notKept, limit)
	}
	if c := calls[100]; c.Path != "/items/aa" || c.NotKept != nil {
		t.Fatalf("a held path: %+v", c)
	}
	if c := calls[101]; c.Path != "" || c.NotKept != nil {
		t.Fatalf("an empty path: %+v", c)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, "orders", "names.log"))
	l = open(t, dir, func(o *Options) { o.DictLimit = limit })
	defer l.Close()
	put(l, 200, "/new/after/reopen")
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	calls, _, _ = l.Calls(Query{Service: "orders", From: base.Add(200 * time.Millisecond)})
	if len(calls) != 1 || !slices.Equal(calls[0].NotKept, []string{"path"}) {
		t.Fatalf("after reopen: %+v", calls)
	}
	if st2, _ := os.Stat(filepath.Join(dir, "orders", "names.log")); st2.Size() != st.Size() {
		t.Fatalf("dictionary grew past its limit after a reopen: %d -> %d bytes", st.Size(), st2.Size())
	}
}

// TestV1RecordsInOldStore: a segment whose store an earlier version made
// (header SXCALLS1, 34-byte bodies of layout v1) reads through the log,
// its v2 fields empty.
func TestV1RecordsInOldStore(t *testing.T) {
	dir := t.TempDir()
	seg := filepath.Join(dir, "orders", "seg-1")
	if err := os.MkdirAll(seg, 0o755); err != nil {
		t.Fatal(err)
	}
	var h [16]byte
	copy(h[:], "SXCALLS1")
	binary.LittleEndian.PutUint32(h[8:], 96)
	binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(h[:12], crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(filepath.Join(seg, "index.dat"), h[:], 0o644); err != nil {
		t.Fatal(err)
	}
	// names.log as the previous version wrote it.
	if err := os.WriteFile(filepath.Join(dir, "orders", "names.log"), []byte("1 \"10.0.0.1:80\"\n2 \"orders\"\n3 \"r\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := callstore.Open(seg, callstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.BodySize() != 34 {
		t.Fatalf("body size %d", st.BodySize())
	}
	w, _ := st.Writer()
	v1 := body{version: 1, status: 200, endpoint: 1, cluster: 2, route: 3, bytesIn: 9}
	enc := v1.encode()
	enc[0] = 1
	for i := 34; i < len(enc); i++ {
		enc[i] = 0xFF // not the record's: never stored in a 34-byte store
	}
	if err := w.Put(time.Unix(1_800_000_000, 0).UnixNano(), 1500, enc); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	l := open(t, dir, nil)
	defer l.Close()
	calls, _, err := l.Calls(Query{Service: "orders"})
	if err != nil || len(calls) != 1 {
		t.Fatalf("%v %v", calls, err)
	}
	c := calls[0]
	if c.Layout != 1 || c.Endpoint != "10.0.0.1:80" || c.Cluster != "orders" || c.Route != "r" || c.Status != 200 || c.BytesIn != 9 ||
		c.Principal != "" || c.Path != "" || c.Port != 0 || c.PeerIP != "" || c.NotKept != nil {
		t.Fatalf("v1 call %+v", c)
	}
}

// TestRequestsInARow: calls in a row with the same request (each after
// the first takes its id from the last one's, requestID) and with
// another come back each with its own, below DictLimit and beyond it.
func TestRequestsInARow(t *testing.T) {
	l := open(t, t.TempDir(), func(o *Options) { o.DictLimit = 12 })
	defer l.Close()
	base := time.Unix(1_800_000_000, 0)
	paths := []string{"/a", "/a", "/b", "/a", "/b", "/b", "/c", "/c"}
	for i := range 20 { // then beyond the limit
		paths = append(paths, "/many/"+string(rune('a'+i)))
	}
	paths = append(paths, "/z", "/z", "/a", "/a")
	for i, p := range paths {
		r := rec("orders", base.Add(time.Duration(i)*time.Millisecond), time.Millisecond, "10.0.0.1:80", 200)
		r.Method, r.Path, r.PeerIP = "GET", p, netip.MustParseAddr("192.0.2.1")
		if i%3 == 0 {
			r.PeerIP = netip.MustParseAddr("192.0.2.2")
		}
		l.Record(r)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	calls, _, err := l.Calls(Query{Service: "orders"})
	if err != nil || len(calls) != len(paths) {
		t.Fatalf("%d calls, %v", len(calls), err)
	}
	dropped := 0
	for i, c := range calls {
		peer := "192.0.2.1"
		if i%3 == 0 {
			peer = "192.0.2.2"
		}
		switch {
		case c.NotKept == nil && c.Path == paths[i] && c.PeerIP == peer:
		case c.NotKept != nil && i >= 8 && paths[i] != "/a":
			dropped++ // beyond the limit: less kept
		default:
			t.Fatalf("call %d (%s from %s): %+v", i, paths[i], peer, c)
		}
	}
	if dropped == 0 {
		t.Fatal("no call beyond the dictionary's limit")
	}
}
