package calllog

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func open(t *testing.T, dir string, mod func(*Options)) *Log {
	t.Helper()
	o := Options{Dir: dir, FlushInterval: time.Hour}
	if mod != nil {
		mod(&o)
	}
	l, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rec(svc string, start time.Time, lat time.Duration, ep string, status uint16) Record {
	return Record{Start: start.UnixNano(), Latency: lat, Service: svc, Cluster: svc, Endpoint: ep, Status: status,
		Subset: "version=v1", Route: "r", BytesIn: 3, BytesOut: 5, GRPCStatus: 14 + 1}
}

func TestRecordsPerServiceLateCallsAndReopen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, nil)
	base := time.Unix(1_800_000_000, 0)
	for i := range 100 {
		l.Record(rec("orders", base.Add(time.Duration(i)*time.Millisecond), time.Duration(i)*time.Millisecond, "10.0.0.1:80", 200))
		l.Record(rec("users", base.Add(time.Duration(i)*time.Millisecond), time.Millisecond, "10.0.0.2:80", 500))
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// A call that started before the ones written and ended after them.
	l.Record(rec("orders", base.Add(-time.Second), 5*time.Second, "10.0.0.3:80", 504))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		calls, _, err := l.Calls(Query{Service: "orders", From: base.Add(-time.Hour), To: base.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 101 || calls[0].Endpoint != "10.0.0.3:80" || calls[0].Status != 504 {
			t.Fatalf("orders: %d calls, first %+v", len(calls), calls[0])
		}
		for i := 1; i < len(calls); i++ {
			if calls[i].Start.Before(calls[i-1].Start) {
				t.Fatalf("not in start order at %d", i)
			}
		}
		c := calls[1]
		if c.Subset != "version=v1" || c.Route != "r" || c.Cluster != "orders" || c.BytesIn != 3 || c.BytesOut != 5 || c.GRPCStatus == nil || *c.GRPCStatus != 14 {
			t.Fatalf("record fields: %+v", c)
		}
		calls, _, _ = l.Calls(Query{Service: "orders", From: base, To: base.Add(time.Hour), MinLatency: 50 * time.Millisecond,
			MaxLatency: 59 * time.Millisecond})
		if len(calls) != 10 {
			t.Fatalf("latency window: %d", len(calls))
		}
		calls, _, _ = l.Calls(Query{Service: "users", Endpoint: "10.0.0.1:80"})
		if len(calls) != 0 {
			t.Fatalf("users has no calls to orders' endpoint: %d", len(calls))
		}
		steps, err := l.Stats(StatsQuery{Service: "users", From: base, To: base.Add(100 * time.Millisecond), Step: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != 10 || steps[3].Count != 10 || steps[3].Errors != 10 || steps[3].P50Ms != 1 {
			t.Fatalf("stats: %+v", steps)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = open(t, dir, nil)
	defer l.Close()
	check(l)
	if got := l.Services(); len(got) != 2 || got[0] != "orders" {
		t.Fatalf("services: %v", got)
	}
}

func TestRetentionByAgeAndSize(t *testing.T) {
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	dir := t.TempDir()
	l := open(t, dir, func(o *Options) {
		o.Now = clk.now
		o.SegmentSpan = time.Minute
		o.MaxAge = 10 * time.Minute
		o.MaxBytes = 1 << 40
	})
	defer l.Close()
	// One segment per minute for 15 minutes.
	for m := range 15 {
		for i := range 50 {
			l.Record(rec("svc", clk.now().Add(time.Duration(i)*time.Millisecond), time.Millisecond, "a:1", 200))
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = m
		clk.add(time.Minute)
	}
	l.Record(rec("svc", clk.now(), time.Millisecond, "a:1", 200)) // seals the last minute
	l.Flush()
	if err := l.retain(); err != nil {
		t.Fatal(err)
	}
	calls, _, err := l.Calls(Query{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	// Segments whose newest call is older than 10 minutes are gone.
	oldest := clk.now().Add(-10 * time.Minute)
	if len(calls) == 0 || calls[0].Start.Before(oldest.Add(-time.Minute)) || len(calls) > 11*50+1 || len(calls) < 9*50 {
		t.Fatalf("after age retention: %d calls, oldest %v (cutoff %v)", len(calls), calls[0].Start, oldest)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "svc", "seg-*"))
	if len(segs) > 12 {
		t.Fatalf("%d segment directories left", len(segs))
	}
	// Size: shrink the budget below the current size.
	before := l.Bytes()
	l.opts.MaxBytes = before / 2
	if err := l.retain(); err != nil {
		t.Fatal(err)
	}
	if after := l.Bytes(); after > before/2+before/8 {
		t.Fatalf("size retention: %d -> %d bytes, budget %d", before, after, before/2)
	}
}

func TestDroppedWhenQueueFull(t *testing.T) {
	l := open(t, t.TempDir(), func(o *Options) { o.QueueSize = 1 })
	defer l.Close()
	for range 1000 {
		l.Record(rec("svc", time.Now(), 0, "a:1", 200))
	}
	l.Flush()
	w, d := l.Counts()
	if w+d != 1000 || d == 0 {
		t.Fatalf("written %d dropped %d of 1000", w, d)
	}
}

func TestDictionaryTornTail(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "names.log")
	os.WriteFile(p, []byte("1 \"a:1\"\n2 \"b:2\"\n3 \"c:"), 0o644)
	d, err := openDict(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.name(2) != "b:2" {
		t.Fatalf("name(2) = %q", d.name(2))
	}
	id, err := d.id("c:3")
	if err != nil || id != 3 {
		t.Fatalf("id after torn tail: %d %v", id, err)
	}
	d.close()
	d, err = openDict(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if d.name(3) != "c:3" {
		t.Fatalf("reopened: %q", d.name(3))
	}
}

// tearingFile writes only half of the first append it is given after
// arm, failing it as a full disk would.
type tearingFile struct {
	*os.File
	arm bool
}

func (f *tearingFile) Write(p []byte) (int, error) {
	if f.arm {
		f.arm = false
		n, _ := f.File.Write(p[:len(p)/2])
		return n, errors.New("no space left on device")
	}
	return f.File.Write(p)
}

// TestDictionaryFailedAppend: an append that fails half-written is cut
// off, so the names appended after it survive a reopen.
func TestDictionaryFailedAppend(t *testing.T) {
	p := filepath.Join(t.TempDir(), "names.log")
	d, err := openDict(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.id("a:1"); err != nil {
		t.Fatal(err)
	}
	tf := &tearingFile{File: d.f.(*os.File), arm: true}
	d.f = tf
	if _, err := d.id("torn:2"); err == nil {
		t.Fatal("a failed append returned no error")
	}
	id, err := d.id("c:3")
	if err != nil || id != 2 {
		t.Fatalf("append after a failed one: %d %v", id, err)
	}
	d.close()
	d, err = openDict(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if got := d.name(2); got != "c:3" {
		t.Fatalf("reopened: name(2) = %q, want c:3 (names after a torn append were lost)", got)
	}
}

func FuzzOpenDict(f *testing.F) {
	f.Add([]byte("1 \"a:1\"\n2 \"b\\n\"\n"))
	f.Add([]byte("1 \"x"))
	f.Add([]byte("7 \"gap\"\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "names.log")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := openDict(p)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		n := len(d.names)
		id, err := d.id("fresh-name-\x00")
		if err != nil || int(id) != n || d.name(id) != "fresh-name-\x00" {
			t.Fatalf("id after load of %q: %d %v", data, id, err)
		}
	})
}

func TestBodyRoundTrip(t *testing.T) {
	b := body{version: layoutVersion, reason: ReasonShed, status: 503, retries: 2, grpc: 15, endpoint: 1, subset: 2, cluster: 3, route: 4, bytesIn: 5, bytesOut: 1 << 31, detail: 6}
	enc := b.encode()
	if got := decodeBody(&enc); got != b {
		t.Fatalf("%+v != %+v", got, b)
	}
	q := request{detail: "ns/deny", principal: "spiffe://td/ns/a/sa/b", subject: "O=td", method: "GET", path: "/a",
		host: "h", port: 8443, peer: netip.MustParseAddr("10.1.2.3"), conn: ConnTLS | ConnPeerCert, dropped: dropHost}
	if got, ok := parseRequest(string(q.encode(nil))); !ok || got != q {
		t.Fatalf("request %+v != %+v", got, q)
	}
	if _, ok := parseRequest("ns/deny"); ok {
		t.Fatal("a v1 detail parsed as a request")
	}
	if enc[0] != layoutVersion {
		t.Fatal("layout version")
	}
	if ReasonCode("shed") != ReasonShed || ReasonShed.String() != "shed" || ReasonCode("weird") != ReasonOther {
		t.Fatal("reason names")
	}
}

// TestStatsHugeRange: a range wider than a time.Duration (from far in the
// past, as ?from= in unix milliseconds allows) is refused as a bad query,
// not answered with a panic from a negative step count.
func TestStatsHugeRange(t *testing.T) {
	l := open(t, t.TempDir(), nil)
	defer l.Close()
	to := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		from time.Time
		step time.Duration
	}{
		{"default step", time.UnixMilli(-9_000_000_000_000_000), 0},
		{"step 2ns", time.UnixMilli(-9_000_000_000_000_000), 2},
		{"step 1h", time.UnixMilli(-9_000_000_000_000_000), time.Hour},
		{"max duration span", to.Add(-(1<<63 - 1)), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Stats(StatsQuery{Service: "users", From: tc.from, To: to, Step: tc.step})
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("Stats: %v, want ErrBadQuery", err)
			}
		})
	}
}

// Endpoints splits a service's calls by endpoint: the dead one's errors
// show apart from the healthy one's successes.
func TestEndpoints(t *testing.T) {
	l := open(t, t.TempDir(), nil)
	defer l.Close()
	base := time.Unix(1_800_000_000, 0)
	for i := range 30 {
		at := base.Add(time.Duration(i) * time.Millisecond)
		l.Record(rec("orders", at, time.Duration(i+1)*time.Millisecond, "10.0.0.1:80", 200))
		if i%3 == 0 {
			l.Record(rec("orders", at, time.Millisecond, "10.0.0.9:80", 502)) // refuses connections
		}
		l.Record(rec("users", at, time.Millisecond, "10.0.0.1:80", 500))
	}
	r := rec("orders", base, time.Millisecond, "", 503)
	r.Reason = ReasonNoHealthy
	l.Record(r)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := l.Endpoints(StatsQuery{Service: "orders", From: base, To: base.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	want := []EndpointStats{
		{Endpoint: "", Count: 1, Errors: 1, P50Ms: 1, P99Ms: 1},
		{Endpoint: "10.0.0.1:80", Count: 30, Errors: 0, P50Ms: 15, P99Ms: 30},
		{Endpoint: "10.0.0.9:80", Count: 10, Errors: 10, P50Ms: 1, P99Ms: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("endpoints: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("endpoint %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// The window's end is exclusive, as in Stats.
	if got, _ := l.Endpoints(StatsQuery{Service: "orders", From: base.Add(10 * time.Millisecond), To: base.Add(20 * time.Millisecond)}); len(got) != 2 || got[0].Count != 10 || got[1].Count != 3 {
		t.Errorf("window [10 ms, 20 ms): %+v", got)
	}
	if got, err := l.Endpoints(StatsQuery{Service: "nobody", From: base, To: base.Add(time.Second)}); err != nil || len(got) != 0 {
		t.Errorf("a service with no calls: %+v, %v", got, err)
	}
	for _, q := range []StatsQuery{{From: base, To: base.Add(time.Second)}, {Service: "orders", From: base, To: base}} {
		if _, err := l.Endpoints(q); !errors.Is(err, ErrBadQuery) {
			t.Errorf("%+v: %v, want ErrBadQuery", q, err)
		}
	}
}

// TestCallsByReason: a query for one reason keeps only its calls (the
// denied calls of an RBAC filter, with the policy), and its limit counts
// those; an unknown reason is a bad query naming the known ones.
func TestCallsByReason(t *testing.T) {
	l := open(t, t.TempDir(), nil)
	defer l.Close()
	base := time.Unix(1_800_000_000, 0)
	for i := range 30 {
		r := rec("orders", base.Add(time.Duration(i)*time.Millisecond), time.Millisecond, "10.0.0.1:80", 200)
		if i%3 == 0 {
			r.Status, r.Reason, r.Detail = 403, ReasonRBACDenied, "ns[default]-policy[edge]-rule[0]"
		}
		l.Record(r)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	calls, _, err := l.Calls(Query{Service: "orders", Reason: "rbac_denied"})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 10 {
		t.Fatalf("%d denied calls, want 10", len(calls))
	}
	for _, c := range calls {
		if c.Reason != "rbac_denied" || c.Status != 403 || c.Detail != "ns[default]-policy[edge]-rule[0]" {
			t.Fatalf("%+v", c)
		}
	}
	calls, truncated, _ := l.Calls(Query{Service: "orders", Reason: "rbac_denied", Limit: 4})
	if len(calls) != 4 || !truncated {
		t.Fatalf("limit 4: %d calls, truncated %v", len(calls), truncated)
	}
	if _, _, err := l.Calls(Query{Service: "orders", Reason: "nope"}); !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), "rbac_denied") {
		t.Fatalf("unknown reason: %v", err)
	}
}
