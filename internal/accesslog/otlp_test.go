package accesslog

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	logsv1 "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sextant-mesh/sextant/internal/otlp"
)

// logsCollector is OTLP's logs service decoding with OpenTelemetry's own
// generated types (cmd/sextant's test sends to a real collector): an
// ExportLogsServiceRequest is a LogsData on the wire, and an empty answer
// an ExportLogsServiceResponse without partial success. (The generated
// service package would bring grpc-gateway into go.mod.)
type logsCollector struct {
	mu   sync.Mutex
	reqs []*logsv1.LogsData
}

func (c *logsCollector) register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "opentelemetry.proto.collector.logs.v1.LogsService",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Export", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			r := new(logsv1.LogsData)
			if err := dec(r); err != nil {
				return nil, err
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.reqs = append(c.reqs, r)
			return &emptypb.Empty{}, nil
		}}},
	}, c)
}

func TestExporterSendsLogRecords(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	col := &logsCollector{}
	col.register(srv)
	go srv.Serve(ln)
	defer srv.Stop()

	x, err := NewExporter(otlp.Options{Endpoint: ln.Addr().String(), ServiceName: "gw", ResourceAttrs: []otlp.Attr{otlp.String("node_name", "gw-1")}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	e := Entry{Start: start, Method: []byte("GET"), Path: []byte("/productpage"), Protocol: "HTTP/1.1", Code: 200, UpstreamTime: -1}
	for range 3 {
		b := x.Line()
		*b = AppendText(*b, &e)
		x.Export(b, start)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats(); st.Exported != 3 {
		t.Fatalf("stats %+v, want 3 exported", st)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(col.reqs))
	}
	rl := col.reqs[0].ResourceLogs[0]
	attrs := map[string]string{}
	for _, kv := range rl.Resource.Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	if attrs["service.name"] != "gw" || attrs["log_name"] != LogName || attrs["node_name"] != "gw-1" {
		t.Fatalf("resource %v", attrs)
	}
	recs := rl.ScopeLogs[0].LogRecords
	if len(recs) != 3 || rl.ScopeLogs[0].Scope.Name != otlp.ScopeName {
		t.Fatalf("%d records, scope %v", len(recs), rl.ScopeLogs[0].Scope)
	}
	r := recs[0]
	body := r.Body.GetStringValue()
	if !strings.HasPrefix(body, `[2026-11-29T10:00:00.000Z] "GET /productpage HTTP/1.1" 200 `) || strings.HasSuffix(body, "\n") {
		t.Fatalf("body %q", body)
	}
	if r.TimeUnixNano != uint64(start.UnixNano()) || r.ObservedTimeUnixNano < r.TimeUnixNano || r.SeverityText != "INFO" || r.SeverityNumber != 9 {
		t.Fatalf("record %v", r)
	}
}

// TestExporterDropsWhenFull: with the collector holding the first export
// (it accepts connections and says nothing) and the queue full, Export
// returns at once and counts the drop; every line is accounted for.
func TestExporterDropsWhenFull(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	x, err := NewExporter(otlp.Options{Endpoint: ln.Addr().String(), QueueSize: 2, BatchSize: 1, ExportTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Start: time.Now(), UpstreamTime: -1}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			b := x.Line()
			*b = AppendText(*b, &e)
			x.Export(b, e.Start)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Export blocked")
	}
	// One line in the held export at most, two queued: the rest dropped.
	if st := x.Stats(); st.DroppedFull < 97 {
		t.Fatalf("stats %+v: want at least 97 dropped, the queue full", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := x.Close(ctx); err == nil {
		t.Fatal("Close returned no error with exports held past its context")
	}
	if st := x.Stats(); st.Exported != 0 || st.DroppedFull+st.DroppedError != 100 {
		t.Fatalf("stats %+v: 100 lines not all accounted for", st)
	}
}
