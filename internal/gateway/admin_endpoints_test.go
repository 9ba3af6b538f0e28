package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// TestAdminCallEndpoints: /v1/calls/endpoints splits a service's calls by
// endpoint, so that a dead endpoint's errors show apart from the live
// ones' successes (the console's Calls page and Overview read it).
func TestAdminCallEndpoints(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	now := time.Now()
	for i := range 9 {
		at := now.Add(-time.Duration(i+1) * time.Second).UnixNano()
		lg.Record(calllog.Record{Start: at, Latency: time.Millisecond, Service: "default/orders", Endpoint: "127.0.0.1:8001", Status: 200})
		if i%3 == 0 {
			lg.Record(calllog.Record{Start: at, Latency: time.Millisecond, Service: "default/orders", Endpoint: "127.0.0.1:8002", Status: 502,
				Reason: calllog.ReasonConnect})
		}
	}
	h := New(Options{}).AdminHandler(lg)
	get := func(path string) (int, []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.Bytes()
	}
	code, body := get("/v1/calls/endpoints?service=default/orders&from=" + strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var a struct {
		Service   string                  `json:"service"`
		Endpoints []calllog.EndpointStats `json:"endpoints"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	if a.Service != "default/orders" || len(a.Endpoints) != 2 ||
		a.Endpoints[0] != (calllog.EndpointStats{Endpoint: "127.0.0.1:8001", Count: 9, P50Ms: 1, P99Ms: 1}) ||
		a.Endpoints[1] != (calllog.EndpointStats{Endpoint: "127.0.0.1:8002", Count: 3, Errors: 3, P50Ms: 1, P99Ms: 1}) {
		t.Fatalf("answer %s", body)
	}
	// A service without calls is an empty list, not null; bad parameters
	// are a 400 naming them.
	if code, body := get("/v1/calls/endpoints?service=default/none"); code != http.StatusOK || !jsonHas(t, body, "endpoints", "[]") {
		t.Errorf("no calls: %d %s", code, body)
	}
	for _, path := range []string{"/v1/calls/endpoints", "/v1/calls/endpoints?service=x&from=yesterday", "/v1/calls/endpoints?service=x&from=60000&to=0"} {
		if code, body := get(path); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", path, code, body)
		}
	}
	// The console (another origin, named in AdminOptions.Origins) reads it.
	console := "http://127.0.0.1:7400"
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/calls/endpoints?service=x", nil)
	r.Header.Set("Origin", console)
	New(Options{}).AdminHandlerOptions(lg, AdminOptions{Origins: []string{console}}).ServeHTTP(w, r)
	if w.Header().Get("Access-Control-Allow-Origin") != console {
		t.Error("the console cannot read it: no Access-Control-Allow-Origin")
	}
}

func jsonHas(t *testing.T, body []byte, key, want string) bool {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return string(m[key]) == want
}
