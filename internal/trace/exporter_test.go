package trace

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sextant-mesh/sextant/internal/otlp"
)

func testSpan(i int) Span {
	s := Span{TraceID: NewTraceID(), SpanID: NewSpanID(), Parent: NewSpanID(), Name: "orders/*", Kind: KindServer,
		Start: time.Now().UnixNano(), End: time.Now().UnixNano() + 1000, Error: i%2 == 0, ErrorMessage: "upstream_reset"}
	s.Add(String("http.method", "GET"))
	s.Add(Int("http.status_code", 503))
	s.Add(String("component", "proxy"))
	return s
}

// TestEncodeRequest reads an encoded request back field by field: the
// nesting and numbers a collector decodes (a real one reads it in
// cmd/sextant's Jaeger test).
func TestEncodeRequest(t *testing.T) {
	e := newEncoder("svc", []Attr{String("k", "v")})
	s := testSpan(0)
	b := e.Request([]Span{s, testSpan(1)})
	rs := field(t, b, 1)
	res := field(t, rs, 1)
	if kv := field(t, res, 1); string(field(t, kv, 1)) != "service.name" || string(field(t, field(t, kv, 2), 1)) != "svc" {
		t.Fatalf("resource attribute %q", kv)
	}
	ss := field(t, rs, 2)
	if string(field(t, field(t, ss, 1), 1)) != otlp.ScopeName {
		t.Fatal("scope name")
	}
	sp := field(t, ss, 2) // the first span
	if got := field(t, sp, 1); string(got) != string(s.TraceID[:]) {
		t.Fatalf("trace id %x, want %x", got, s.TraceID)
	}
	if got := field(t, sp, 4); string(got) != string(s.Parent[:]) {
		t.Fatalf("parent %x", got)
	}
	if got := string(field(t, sp, 5)); got != "orders/*" {
		t.Fatalf("name %q", got)
	}
	if st := field(t, sp, 15); string(field(t, st, 2)) != "upstream_reset" {
		t.Fatalf("status %x", st)
	}
	if n := count(t, ss, 2); n != 2 {
		t.Fatalf("%d spans, want 2", n)
	}
	// the status code attribute is an int_value
	var found bool
	for _, kv := range all(t, sp, 9) {
		if string(field(t, kv, 1)) == "http.status_code" {
			v, n := protowire.ConsumeVarint(field(t, kv, 2)[1:])
			found = n > 0 && v == 503
		}
	}
	if !found {
		t.Fatal("http.status_code 503 not found")
	}
}

// all returns the values of every bytes field num of message b.
func all(t *testing.T, b []byte, num protowire.Number) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatalf("bad tag in %x", b)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				t.Fatal("bad bytes")
			}
			out = append(out, v)
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			t.Fatal("bad field")
		}
		b = b[l:]
	}
	return out
}

func field(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	f := all(t, b, num)
	if len(f) == 0 {
		t.Fatalf("no field %d in %x", num, b)
	}
	return f[0]
}

func count(t *testing.T, b []byte, num protowire.Number) int { t.Helper(); return len(all(t, b, num)) }

// TestExporterSlowCollector: a collector that does not answer holds one
// export; Submit still returns at once, the queue fills, the rest is
// dropped and counted; Close gives up at its context.
func TestExporterSlowCollector(t *testing.T) {
	release := make(chan struct{})
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	e, err := NewExporter(ExporterOptions{Endpoint: srv.URL, Protocol: "http", QueueSize: 16, BatchSize: 4, BatchTimeout: 10 * time.Millisecond, ExportTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := testSpan(1)
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() == 0 && time.Now().Before(deadline) { // until an export is held
		e.Submit(s)
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	for range 10000 {
		e.Submit(s)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("10000 submits took %v with the collector stuck", d)
	}
	st := e.Stats()
	if st.DroppedFull < 10000-16 || st.Queued > 16 {
		t.Fatalf("stats %+v: want the queue (16) full and the rest dropped", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.Close(ctx); err == nil {
		t.Fatal("Close with a stuck collector: no error")
	}
}

// TestExporterCollectorDown: nothing listens at the endpoint: exports
// fail, their spans are counted as dropped, and HTTP/protobuf and gRPC
// both say so.
func TestExporterCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, proto := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			e, err := NewExporter(ExporterOptions{Endpoint: addr, Protocol: proto, BatchSize: 2, BatchTimeout: time.Millisecond, ExportTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			s := testSpan(1)
			e.Submit(s)
			e.Submit(s)
			deadline := time.Now().Add(20 * time.Second)
			for e.Stats().DroppedError < 2 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if st := e.Stats(); st.DroppedError != 2 || st.ExportErrors == 0 || st.Exported != 0 {
				t.Fatalf("stats %+v: want 2 spans dropped by a failed export", st)
			}
		})
	}
}

// TestExporterHTTP sends to a collector that answers a partial success:
// the rejected spans are counted as dropped, the rest as exported.
func TestExporterHTTP(t *testing.T) {
	var ctype atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		ctype.Store(r.Header.Get("Content-Type"))
		io.Copy(io.Discard, r.Body)
		var ps []byte
		ps = protowire.AppendTag(ps, 1, protowire.VarintType)
		ps = protowire.AppendVarint(ps, 1)
		ps = protowire.AppendTag(ps, 2, protowire.BytesType)
		ps = protowire.AppendString(ps, "one too old")
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, ps)
		w.Write(b)
	}))
	defer srv.Close()
	e, err := NewExporter(ExporterOptions{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Protocol: "http", BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s := testSpan(i)
		e.Submit(s)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Exported != 2 || st.DroppedError != 1 {
		t.Fatalf("stats %+v: want 2 exported, 1 rejected", st)
	}
	if ctype.Load() != "application/x-protobuf" {
		t.Fatalf("content type %v", ctype.Load())
	}
}

func TestExporterOptionsRefused(t *testing.T) {
	for _, tc := range []struct {
		o    ExporterOptions
		want string
	}{
		{ExporterOptions{}, "endpoint is empty"},
		{ExporterOptions{Endpoint: "http://x:4317"}, "want host:port"},
		{ExporterOptions{Endpoint: "x:4318", Protocol: "thrift"}, `protocol "thrift"`},
		{ExporterOptions{Endpoint: "ftp://x", Protocol: "http"}, "http(s) URL"},
	} {
		if _, err := NewExporter(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
