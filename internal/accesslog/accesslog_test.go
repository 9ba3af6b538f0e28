package accesslog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func entry() *Entry {
	return &Entry{
		Start: time.Date(2026, 11, 29, 4, 5, 6, 789e6, time.UTC), Method: []byte("GET"), Path: []byte("/orders/7?x=1"),
		Protocol: "HTTP/1.1", Code: 200, Details: "via_upstream", BytesIn: 12, BytesOut: 345,
		Duration: 23 * time.Millisecond, UpstreamTime: 21 * time.Millisecond, XForwardedFor: []byte("10.0.0.9"),
		UserAgent: []byte("curl/8.5.0"), RequestID: []byte("7f3c"), Authority: []byte("shop.example.com"),
		UpstreamHost: "127.0.0.1:9001", UpstreamCluster: "outbound|80||orders.default",
		DownstreamLocal: netip.MustParseAddrPort("127.0.0.1:8080"), DownstreamRemote: netip.MustParseAddrPort("127.0.0.1:51234"),
		Route: "orders",
	}
}

// TestText: the line Istio's default format gives, field by field, "-"
// for what is empty.
func TestText(t *testing.T) {
	got := string(AppendText(nil, entry()))
	want := `[2026-11-29T04:05:06.789Z] "GET /orders/7?x=1 HTTP/1.1" 200 - via_upstream - "-" 12 345 23 21 "10.0.0.9" "curl/8.5.0" "7f3c" "shop.example.com" "127.0.0.1:9001" outbound|80||orders.default - 127.0.0.1:8080 127.0.0.1:51234 - orders` + "\n"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// One operator of TextFormat per field, in its order.
	if n, m := strings.Count(TextFormat, "%")/2, len(strings.Fields(strings.TrimSuffix(want, "\n"))); n != m {
		t.Errorf("TextFormat has %d operators, the line %d fields", n, m)
	}
	e := entry()
	e.Code, e.Flags, e.Details, e.UpstreamTime, e.UpstreamHost, e.Path = 503, "UF,URX", "upstream_reset_before_response_started{connection_failure}", -1, "", []byte("/a\nb")
	got = string(AppendText(nil, e))
	if !strings.Contains(got, `"GET /a?b HTTP/1.1" 503 UF,URX upstream_reset_before_response_started{connection_failure} - "-" 12 345 23 - `) || !strings.Contains(got, `"shop.example.com" "-" `) {
		t.Errorf("a failed call: %s", got)
	}
}

// TestTime: the hand-written timestamp is time.AppendFormat's.
func TestTime(t *testing.T) {
	for _, ts := range []time.Time{time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), time.Date(999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", 3600)),
		time.Unix(0, 0), time.Now()} {
		if got, want := string(appendTime(nil, ts)), ts.UTC().Format("2006-01-02T15:04:05.000Z"); got != want {
			t.Errorf("%v: %s, want %s", ts, got, want)
		}
	}
}

// TestJSON: Istio's default JSON keys, numbers as numbers, null for
// empty values.
func TestJSON(t *testing.T) {
	e := entry()
	e.UserAgent = []byte("a \"quoted\"\x01 agent \xff")
	line := AppendJSON(nil, e)
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if got, want := slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(JSONFormat)); !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	for k, want := range map[string]any{"response_code": 200.0, "bytes_sent": 345.0, "duration": 23.0, "path": "/orders/7?x=1",
		"upstream_service_time": "21", "start_time": "2026-11-29T04:05:06.789Z", "requested_server_name": nil,
		"response_flags": "-", "user_agent": "a \"quoted\"\x01 agent \ufffd", "downstream_remote_address": "127.0.0.1:51234"} {
		if m[k] != want {
			t.Errorf("%s: %#v, want %#v", k, m[k], want)
		}
	}
}

// TestRotation: the file rotates past MaxBytes, Keep files are kept, and
// every line written is in one of them, whole.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	w, err := Open(Options{Path: path, MaxBytes: 4000, Keep: 2, Buffer: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(ctx) }()
	const n = 100
	for i := range n {
		b := w.Line()
		*b = fmt.Appendf(*b, "line %03d %s\n", i, strings.Repeat("x", 90))
		w.Submit(b)
	}
	cancel()
	wg.Wait()
	st := w.Stats()
	if st.Written != n || st.Dropped != 0 || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.Rotations < 2 {
		t.Errorf("%d rotations of a 10,000-byte log at 4,000 bytes", st.Rotations)
	}
	var lines []string
	for _, name := range []string{path + ".2", path + ".1", path} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4000 {
			t.Errorf("%s: %d bytes, past MaxBytes", name, len(b))
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Errorf("%s.3 kept; Keep is 2", path)
	}
	// The newest lines are kept, in order, none cut.
	last := n - len(lines)
	for i, l := range lines {
		if want := fmt.Sprintf("line %03d ", last+i); !strings.HasPrefix(l, want) || len(l) != 99 {
			t.Fatalf("line %d of the kept files: %q, want %q...", i, l, want)
		}
	}
}

// TestDropsWhenFull: with the writer stalled, Submit returns at once and
// counts what it could not queue.
func TestDropsWhenFull(t *testing.T) {
	w, err := Open(Options{Buffer: 8, Out: &strings.Builder{}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 100 {
		b := w.Line()
		*b = append(*b, "x\n"...)
		w.Submit(b)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("100 submits took %v", d)
	}
	if st := w.Stats(); st.Dropped != 92 {
		t.Errorf("dropped %d, want 92", st.Dropped)
	}
}

func TestOpenError(t *testing.T) {
	_, err := Open(Options{Path: filepath.Join(t.TempDir(), "no", "such", "dir", "access.log")})
	if err == nil || !strings.HasPrefix(err.Error(), "accesslog: open ") {
		t.Errorf("got %v", err)
	}
}

func BenchmarkAppendText(b *testing.B) {
	e := entry()
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendText(buf[:0], e)
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	e := entry()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendJSON(buf[:0], e)
	}
}

// BenchmarkSubmit: a call's whole cost, a line formatted into a pooled
// buffer and queued, with the writer draining to a discarded output.
func BenchmarkSubmit(b *testing.B) {
	w, err := Open(Options{Out: discard{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	e := entry()
	b.ReportAllocs()
	for b.Loop() {
		l := w.Line()
		*l = AppendText(*l, e)
		w.Submit(l)
	}
	cancel()
	<-done
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestFlushInterval: a line reaches the file within FlushInterval while
// the writer runs, without a flush per line.
func TestFlushInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	w, err := Open(Options{Path: path, FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	b := w.Line()
	*b = append(*b, "one\n"...)
	w.Submit(b)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := os.ReadFile(path)
		if string(got) == "one\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the line is not in the file after 5s: %q", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
