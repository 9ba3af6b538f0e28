package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
)

func TestRegisterBareAndBatch(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	var a registerAnswer
	s.must("POST", "/v1/instances", inst("orders", "10.0.0.1", 8080, map[string]string{"zone": "z1"}), &a)
	if a.Revision != 1 || len(a.IDs) != 1 || a.IDs[0] != instance.DefaultID("default", "orders", "10.0.0.1", 8080) {
		t.Fatalf("bare register answer %+v", a)
	}
	if len(a.IDs[0]) != 32 {
		t.Fatalf("default id %q is not 16 bytes of hex", a.IDs[0])
	}
	s.must("POST", "/v1/instances", batch(
		`{"id":"b","service":"orders","host":"h.example.com","port":1}`,
		`{"id":"a","namespace":"prod","service":"orders","host":"::1","port":65535,"weight":0}`,
	), &a)
	if a.Revision != 2 || fmt.Sprint(a.IDs) != "[b a]" {
		t.Fatalf("batch answer %+v, want revision 2 and ids in request order", a)
	}
	var got instanceOut
	r := s.must("GET", "/v1/instances/a", "", &got)
	if got.Weight != 0 || got.Namespace != "prod" || got.Revision != 2 || !got.Healthy {
		t.Fatalf("instance a = %+v; weight 0 must be kept", got)
	}
	if r.header.Get("X-Sextant-Revision") != "2" {
		t.Fatalf("X-Sextant-Revision = %q, want 2", r.header.Get("X-Sextant-Revision"))
	}
	s.must("GET", "/v1/instances/b", "", &got)
	if got.Weight != instance.DefaultWeight || got.Namespace != "default" {
		t.Fatalf("defaults not applied: %+v", got)
	}
}

func TestRegisterValidation(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	meta65 := map[string]string{}
	for i := range 65 {
		meta65[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"empty body", ``, 400, "invalid_argument", ""},
		{"malformed", `{"service":`, 400, "invalid_argument", ""},
		{"not an object", `[1,2]`, 400, "invalid_argument", ""},
		{"trailing data", inst("s", "h", 1, nil) + `{}`, 400, "invalid_argument", ""},
		{"unknown field", `{"service":"s","host":"h","port":1,"prot":"x"}`, 400, "invalid_argument", "prot"},
		{"unknown field in batch", batch(inst("s", "h", 1, nil), `{"service":"s","host":"h","port":1,"colour":1}`), 400, "invalid_argument", "instances[1].colour"},
		{"wrong type", `{"service":"s","host":"h","port":"80"}`, 400, "invalid_argument", "port"},
		{"wrong type in batch", batch(inst("s", "h", 1, nil), inst("s", "h", 2, nil), `{"service":"s","host":"h","port":1.5}`), 400, "invalid_argument", "instances[2].port"},
		{"both forms", `{"instances":[],"service":"s"}`, 400, "invalid_argument", "instances"},
		{"empty batch", `{"instances":[]}`, 400, "invalid_argument", "instances"},
		{"missing service", `{"host":"h","port":1}`, 400, "invalid_argument", "service"},
		{"bad service", inst("Orders", "h", 1, nil), 400, "invalid_argument", "service"},
		{"service ends with dash", inst("orders-", "h", 1, nil), 400, "invalid_argument", "service"},
		{"service too long", inst(long(129), "h", 1, nil), 400, "invalid_argument", "service"},
		{"bad namespace", `{"namespace":"a b","service":"s","host":"h","port":1}`, 400, "invalid_argument", "namespace"},
		{"missing host", `{"service":"s","port":1}`, 400, "invalid_argument", "host"},
		{"bad host", inst("s", "bad host!", 1, nil), 400, "invalid_argument", "host"},
		{"host too long", inst("s", strings.Repeat("a.", 127), 1, nil), 400, "invalid_argument", "host"},
		{"port zero", inst("s", "h", 0, nil), 400, "invalid_argument", "port"},
		{"port too big", inst("s", "h", 65536, nil), 400, "invalid_argument", "port"},
		{"bad id", `{"id":"a/b","service":"s","host":"h","port":1}`, 400, "invalid_argument", "id"},
		{"id too long", `{"id":"` + long(129) + `","service":"s","host":"h","port":1}`, 400, "invalid_argument", "id"},
		{"protocol too long", `{"service":"s","host":"h","port":1,"protocol":"` + long(65) + `"}`, 400, "invalid_argument", "protocol"},
		{"version too long", `{"service":"s","host":"h","port":1,"version":"` + long(65) + `"}`, 400, "invalid_argument", "version"},
		{"negative weight", `{"service":"s","host":"h","port":1,"weight":-1}`, 400, "invalid_argument", "weight"},
		{"weight too big", `{"service":"s","host":"h","port":1,"weight":65536}`, 400, "invalid_argument", "weight"},
		{"too much metadata", inst("s", "h", 1, meta65), 400, "invalid_argument", "metadata"},
		{"bad metadata key", inst("s", "h", 1, map[string]string{"a b": "v"}), 400, "invalid_argument", "metadata"},
		{"metadata value too long", inst("s", "h", 1, map[string]string{"k": long(4097)}), 400, "invalid_argument", "metadata.k"},
		{"ttl too big", `{"service":"s","host":"h","port":1,"ttl_seconds":3601}`, 400, "invalid_argument", "ttl_seconds"},
		{"negative ttl", `{"service":"s","host":"h","port":1,"ttl_seconds":-1}`, 400, "invalid_argument", "ttl_seconds"},
		{"removal delay without ttl", `{"service":"s","host":"h","port":1,"deregister_after_seconds":60}`, 400, "invalid_argument", "deregister_after_seconds"},
		{"negative removal delay", `{"service":"s","host":"h","port":1,"ttl_seconds":5,"deregister_after_seconds":-1}`, 400, "invalid_argument", "deregister_after_seconds"},
		{"removal delay too big", `{"service":"s","host":"h","port":1,"ttl_seconds":5,"deregister_after_seconds":2592001}`, 400, "invalid_argument", "deregister_after_seconds"},
		{"removal delay not a number", `{"service":"s","host":"h","port":1,"ttl_seconds":5,"deregister_after_seconds":"60s"}`, 400, "invalid_argument", "deregister_after_seconds"},
		{"version contradicted by metadata", `{"service":"s","host":"h","port":1,"version":"v2","metadata":{"version":"v1"}}`, 400, "invalid_argument", "metadata.version"},
		{"bad third in batch", batch(inst("s", "h", 1, nil), inst("s", "h", 2, nil), inst("s", "h", 3, nil), inst("s", "h", 0, nil)), 400, "invalid_argument", "instances[3].port"},
	}
	s := newTestServer(t, registry.Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.t = t
			s.expectError(s.do("POST", "/v1/instances", tt.body), tt.status, tt.code, tt.field)
		})
	}
	s.t = t
	// A rejected batch writes nothing.
	var q queryAnswer
	s.must("GET", "/v1/instances", "", &q)
	if len(q.Instances) != 0 || q.Revision != 0 {
		t.Fatalf("rejected requests wrote %d instances (revision %d)", len(q.Instances), q.Revision)
	}
}

func TestRegisterLimits(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	items := make([]string, instance.MaxBatch+1)
	for i := range items {
		items[i] = inst("s", "h", i%65535+1, nil)
	}
	s.expectError(s.do("POST", "/v1/instances", batch(items...)), 400, "invalid_argument", "instances")
	var a registerAnswer
	s.must("POST", "/v1/instances", batch(items[:instance.MaxBatch]...), &a) // exactly the limit
	if len(a.IDs) != instance.MaxBatch {
		t.Fatalf("%d ids", len(a.IDs))
	}
	huge := `{"service":"s","host":"h","port":1,"metadata":{"k":"` + strings.Repeat("x", MaxBody) + `"}}`
	s.expectError(s.do("POST", "/v1/instances", huge), http.StatusRequestEntityTooLarge, "payload_too_large", "")
}

func TestRegisterReplacesWholeAndNoOp(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	var a registerAnswer
	s.must("POST", "/v1/instances", `{"id":"x","service":"s","host":"h","port":1,"metadata":{"a":"1","b":"2"}}`, &a)
	var before instanceOut
	s.must("GET", "/v1/instances/x", "", &before)
	s.must("POST", "/v1/instances", `{"id":"x","service":"s","host":"h","port":1,"metadata":{"c":"3"}}`, &a)
	var got instanceOut
	s.must("GET", "/v1/instances/x", "", &got)
	if fmt.Sprint(got.Metadata) != "map[c:3]" || got.Revision != 2 {
		t.Fatalf("after replace: %+v; metadata must be replaced, not merged", got)
	}
	if got.CreatedAt != before.CreatedAt || got.UpdatedAt == before.UpdatedAt {
		t.Fatalf("created_at must stay (%s -> %s) and updated_at move (%s -> %s)", before.CreatedAt, got.CreatedAt, before.UpdatedAt, got.UpdatedAt)
	}
	// The same fields again: no new revision.
	s.must("POST", "/v1/instances", `{"id":"x","service":"s","host":"h","port":1,"metadata":{"c":"3"}}`, &a)
	if a.Revision != 2 || s.reg.Catalog().Revision() != 2 {
		t.Fatalf("no-op register moved the revision to %d / %d", a.Revision, s.reg.Catalog().Revision())
	}
	// Moving the id to another service removes it from the first.
	s.must("POST", "/v1/instances", `{"id":"x","service":"t","host":"h","port":1}`, &a)
	var q queryAnswer
	s.must("GET", "/v1/namespaces/default/services/s/instances", "", &q)
	if len(q.Instances) != 0 || q.Revision != 3 {
		t.Fatalf("service s after move: %+v", q)
	}
	s.must("GET", "/v1/namespaces/default/services/t/instances", "", &q)
	if fmt.Sprint(ids(q.Instances)) != "[x]" {
		t.Fatalf("service t after move: %+v", q)
	}
}

func TestDeregister(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.must("POST", "/v1/instances", batch(`{"id":"a","service":"s","host":"h","port":1}`, `{"id":"b","service":"s","host":"h","port":2}`, `{"id":"c","service":"s","host":"h","port":3}`), nil)
	var d struct {
		Revision int64    `json:"revision"`
		NotFound []string `json:"not_found"`
	}
	s.must("DELETE", "/v1/instances/a", "", &d)
	if d.Revision != 2 {
		t.Fatalf("delete revision %d, want 2", d.Revision)
	}
	s.expectError(s.do("DELETE", "/v1/instances/a", ""), 404, "not_found", "id")
	s.expectError(s.do("GET", "/v1/instances/a", ""), 404, "not_found", "id")
	s.must("POST", "/v1/instances:deregister", `{"ids":["b","zz","c"]}`, &d)
	if d.Revision != 3 || fmt.Sprint(d.NotFound) != "[zz]" {
		t.Fatalf("batch deregister %+v", d)
	}
	s.must("POST", "/v1/instances:deregister", `{"ids":["zz"]}`, &d)
	if d.Revision != 3 || fmt.Sprint(d.NotFound) != "[zz]" {
		t.Fatalf("deregister of nothing %+v: must not move the revision", d)
	}
	s.expectError(s.do("POST", "/v1/instances:deregister", `{"ids":[]}`), 400, "invalid_argument", "ids")
	s.expectError(s.do("POST", "/v1/instances:deregister", `{"ids":["ok","bad/id"]}`), 400, "invalid_argument", "ids[1]")
	s.expectError(s.do("POST", "/v1/instances:deregister", `{"id":["a"]}`), 400, "invalid_argument", "id")
	many := `{"ids":["` + strings.Repeat(`a","`, instance.MaxBatch) + `a"]}`
	s.expectError(s.do("POST", "/v1/instances:deregister", many), 400, "invalid_argument", "ids")
}

// TestRemovalDelayField: deregister_after_seconds is kept and answered,
// and only when set.
func TestRemovalDelayField(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.must("POST", "/v1/instances", `{"id":"a","service":"s","host":"h","port":1,"ttl_seconds":5,"deregister_after_seconds":60}`, nil)
	s.must("POST", "/v1/instances", `{"id":"b","service":"s","host":"h","port":2,"ttl_seconds":5}`, nil)
	if r := s.must("GET", "/v1/instances/a", "", nil); !strings.Contains(string(r.body), `"ttl_seconds":5,"deregister_after_seconds":60,`) {
		t.Fatalf("a: %s", r.body)
	}
	if r := s.must("GET", "/v1/instances/b", "", nil); strings.Contains(string(r.body), "deregister_after") {
		t.Fatalf("b: %s", r.body)
	}
}

func TestHeartbeatEndpoint(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.must("POST", "/v1/instances", `{"id":"a","service":"s","host":"h","port":1,"ttl_seconds":5}`, nil)
	var h struct {
		NotFound []string `json:"not_found"`
	}
	s.must("POST", "/v1/heartbeats", `{"ids":["a","nope"]}`, &h)
	if fmt.Sprint(h.NotFound) != "[nope]" {
		t.Fatalf("not_found %v", h.NotFound)
	}
	s.expectError(s.do("POST", "/v1/heartbeats", `{"ids":[]}`), 400, "invalid_argument", "ids")
	s.expectError(s.do("POST", "/v1/heartbeats", `{}`), 400, "invalid_argument", "ids")
}

func TestRoutes(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.expectError(s.do("PUT", "/v1/instances", ""), 405, "method_not_allowed", "")
	s.expectError(s.do("GET", "/v2/anything", ""), 404, "not_found", "")
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := s.do("GET", p, ""); r.status != 200 {
			t.Fatalf("%s: %d", p, r.status)
		}
	}
	s.must("POST", "/v1/instances", inst("s", "h", 1, nil), nil)
	r := s.do("GET", "/metrics", "")
	for _, want := range []string{`sextant_http_requests_total{code="200",route="POST /v1/instances"} 1`, "sextant_http_request_seconds_bucket"} {
		if !strings.Contains(string(r.body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

func TestNotReady(t *testing.T) {
	api := New(Options{})
	srv := newHTTPTest(t, api)
	s := &testServer{t: t, url: srv.URL, srv: srv}
	if r := s.do("GET", "/readyz", ""); r.status != 503 {
		t.Fatalf("/readyz before load: %d", r.status)
	}
	s.expectError(s.do("GET", "/v1/namespaces", ""), 503, "unavailable", "")
}

type flagSource struct{ synced atomic.Bool }

func (f *flagSource) Synced() bool { return f.synced.Load() }

// TestReadyWaitsForSources: /readyz is 503 "loading" before the registry,
// then 503 "syncing" naming a source (the Kubernetes sync) until its first
// full read, then 200; /healthz is 200 throughout.
func TestReadyWaitsForSources(t *testing.T) {
	api := New(Options{})
	srv := newHTTPTest(t, api)
	s := &testServer{t: t, url: srv.URL, srv: srv}
	src := &flagSource{}
	api.AddSource("kubernetes", src)
	check := func(path string, status int, body string) {
		t.Helper()
		r := s.do("GET", path, "")
		if r.status != status || strings.TrimSpace(string(r.body)) != body {
			t.Fatalf("%s: %d %s, want %d %s", path, r.status, r.body, status, body)
		}
	}
	check("/readyz", 503, `{"status":"loading"}`)
	check("/healthz", 200, `{"status":"ok"}`)
	s2 := newTestServer(t, registry.Options{})
	api.SetRegistry(s2.reg)
	check("/readyz", 503, `{"status":"syncing","source":"kubernetes"}`)
	check("/healthz", 200, `{"status":"ok"}`)
	src.synced.Store(true)
	check("/readyz", 200, `{"status":"ready"}`)
}
