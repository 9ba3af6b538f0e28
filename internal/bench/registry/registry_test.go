package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// realRegistry starts the real server stack (pebble store in a temp dir,
// registry, HTTP API) on an httptest listener.
func realRegistry(t *testing.T) string {
	t.Helper()
	return apitest.Start(t).URL
}

func TestTemplatePatchesIDs(t *testing.T) {
	tests := []struct {
		name string
		n    int
		base uint64
	}{
		{name: "one", n: 1, base: 0},
		{name: "batch", n: 7, base: 123456789},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := newTemplate("ns", "svc", "p-", tt.n, 30)
			tm.set(tt.base)
			var body struct {
				Instances []client.Instance `json:"instances"`
			}
			dec := json.NewDecoder(bytes.NewReader(tm.body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatal(err)
			}
			if len(body.Instances) != tt.n {
				t.Fatalf("%d instances, want %d", len(body.Instances), tt.n)
			}
			for k, in := range body.Instances {
				if want := instanceID("p-", int64(tt.base)+int64(k)); in.ID != want {
					t.Errorf("instance %d id %q, want %q", k, in.ID, want)
				}
				if in.TTLSeconds != 30 || in.Namespace != "ns" || in.Service != "svc" {
					t.Errorf("instance %d = %+v", k, in)
				}
			}
		})
	}
}

// TestTemplateUniqueMetadata checks that with unique metadata no two
// instances share a metadata set: not within a template over two sends,
// nor across two templates (connections) whose ids are numbered alike; and
// that only meta-key16 differs from the default shape.
func TestTemplateUniqueMetadata(t *testing.T) {
	const n = 500
	seen := make(map[string]string) // meta-key16 value -> instance
	for g := range 2 {
		tm := newTemplate("ns", "svc", "p-", n, 0)
		tm.uniqueMetadata(g)
		for _, base := range []uint64{0, n} {
			tm.set(base)
			var body struct {
				Instances []client.Instance `json:"instances"`
			}
			if err := json.Unmarshal(tm.body, &body); err != nil {
				t.Fatal(err)
			}
			for k, in := range body.Instances {
				who := fmt.Sprintf("template %d, %s", g, in.ID)
				v16 := in.Metadata["meta-key16"]
				if len(v16) != 10 {
					t.Errorf("%s: meta-key16 %q, want 10 bytes", who, v16)
				}
				if prev, dup := seen[v16]; dup {
					t.Errorf("%s and %s share meta-key16 %q", prev, who, v16)
				}
				seen[v16] = who
				want := metadata(k)
				delete(want, "meta-key16")
				delete(in.Metadata, "meta-key16")
				if !maps.Equal(in.Metadata, want) {
					t.Errorf("%s: metadata %v, want %v beside meta-key16", who, in.Metadata, want)
				}
			}
		}
	}
}

func TestMetadataShape(t *testing.T) {
	for _, i := range []int{0, 1, 65535, 1 << 20} {
		md := metadata(i)
		if len(md) != 16 {
			t.Fatalf("instance %d: %d entries, want 16", i, len(md))
		}
		for k, v := range md {
			if len(k) != 10 || len(v) != 10 {
				t.Errorf("instance %d: %q=%q, want 10-byte key and value", i, k, v)
			}
		}
	}
	if metadata(0)["meta-key01"] == metadata(1)["meta-key01"] {
		t.Error("meta-key01 must alternate so the query selector matches half")
	}
}

// TestRunTiny runs every scenario, scaled down, against the real
// server and checks the figures are there and everything was cleaned up.
func TestRunTiny(t *testing.T) {
	url := realRegistry(t)
	cfg := Config{
		Server: url, Namespace: "bench-test", Duration: 200 * time.Millisecond, MaxInstances: 2000,
		Conns: 8, BatchConns: 2, BatchSize: 50, HeartbeatConns: 2, HeartbeatIDs: 100, HeartbeatPool: 1000,
		QueryConns: 4, QuerySize: 20, ChangesTotal: 3000, ChangesCount: 300, ChangesRounds: 3, WatchRounds: 5,
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	for name, th := range map[string]*Throughput{"register": res.Register, "batch": res.Batch, "heartbeat": res.Heartbeat, "query": res.Query} {
		if th == nil || th.Items == 0 || th.Errors != 0 || th.PerSecond <= 0 || th.P99Ms < th.P50Ms {
			t.Errorf("%s: %+v", name, th)
		}
	}
	if res.Changes == nil || res.Changes.ChangesReturned < 300 || res.Changes.RegistryHolds < 3000 {
		t.Errorf("changes: %+v", res.Changes)
	}
	if res.Watch == nil || res.Watch.Rounds != 5 {
		t.Errorf("watch: %+v", res.Watch)
	}
	var printed Result
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	c, _ := client.New(url)
	defer c.HTTPClient().CloseIdleConnections()
	left, err := c.List(context.Background(), client.ListOptions{Namespace: "bench-test", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Instances) != 0 {
		t.Errorf("cleanup left %d+ instances, e.g. %s", len(left.Instances), left.Instances[0].ID)
	}
	if res.Cleanup == nil || res.Cleanup.Deregistered == 0 {
		t.Errorf("cleanup: %+v", res.Cleanup)
	}
}

func TestRunRejectsUnknownScenario(t *testing.T) {
	_, err := Run(context.Background(), Config{Server: "http://127.0.0.1:1", Scenarios: []string{"nope"}}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `unknown registry scenario "nope"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestCallerAnswers(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		method     string
		body       string
		wantStatus int
		wantBody   string
		wantErr    string
		wantConns  int64 // connections after two requests
	}{
		{
			name:    "content length, kept alive",
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) },
			method:  "GET", wantStatus: 200, wantBody: `{"ok":true}`, wantConns: 1,
		},
		{
			name: "echo post body",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Content-Type") != "application/json" || r.ContentLength != int64(len(`{"ids":["a"]}`)) {
					w.WriteHeader(400)
				}
				io.Copy(w, r.Body)
			},
			method: "POST", body: `{"ids":["a"]}`, wantStatus: 200, wantBody: `{"ids":["a"]}`, wantConns: 1,
		},
		{
			name: "chunked",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, big[:50_000])
				w.(http.Flusher).Flush()
				io.WriteString(w, big[50_000:])
			},
			method: "GET", wantStatus: 200, wantBody: big, wantConns: 1,
		},
		{
			name: "connection close redials",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				io.WriteString(w, "bye")
			},
			method: "GET", wantStatus: 200, wantBody: "bye", wantConns: 2,
		},
		{
			name: "error status",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(503)
				io.WriteString(w, `{"error":{"code":"unavailable"}}`)
			},
			method: "GET", wantStatus: 503, wantBody: `{"error":{"code":"unavailable"}}`, wantErr: "status 503", wantConns: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(tt.handler)
			var conns atomic.Int64
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			c := &caller{addr: addr, host: addr}
			defer c.close()
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			for i := range 2 {
				status, err := c.send(context.Background(), tt.method, "/x?y=1", body)
				if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Fatalf("request %d: error %v, want %q", i, err, tt.wantErr)
				}
				if status != tt.wantStatus || string(c.buf) != tt.wantBody {
					t.Fatalf("request %d: status %d body %.80q, want %d %.80q", i, status, c.buf, tt.wantStatus, tt.wantBody)
				}
			}
			if got := conns.Load(); got != tt.wantConns {
				t.Errorf("%d connections for two requests, want %d", got, tt.wantConns)
			}
		})
	}
}

func TestCallerStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &caller{addr: "127.0.0.1:1", host: "x"}
	if _, err := c.send(ctx, "GET", "/", nil); err == nil {
		t.Fatal("send on a cancelled context succeeded")
	}
}
