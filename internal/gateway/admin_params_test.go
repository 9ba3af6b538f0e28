package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// TestAdminCallQueryTimes: a from or to the answer could not encode (JSON
// times are years 0..9999) is a 400 naming the parameter, not a 200 with
// an empty body.
func TestAdminCallQueryTimes(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	h := New(Options{}).AdminHandler(lg)
	for _, c := range []struct {
		name, path string
		status     int
	}{
		{"stats, to far in the past", "/v1/calls/stats?service=x&to=-9223372036854775808", http.StatusBadRequest},
		{"stats, from far in the past", "/v1/calls/stats?service=x&from=-9000000000000000", http.StatusBadRequest},
		{"stats, to after year 9999", "/v1/calls/stats?service=x&from=0&to=9000000000000000", http.StatusBadRequest},
		{"calls, from after year 9999", "/v1/calls?service=x&from=9000000000000000", http.StatusBadRequest},
		{"stats, unix ms", "/v1/calls/stats?service=x&from=0&to=60000", http.StatusOK},
		{"stats, RFC 3339", "/v1/calls/stats?service=x&from=2026-01-01T00:00:00Z&to=2026-01-01T01:00:00Z", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
			if w.Code != c.status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			if !json.Valid(w.Body.Bytes()) {
				t.Fatalf("answer is not JSON: %q", w.Body)
			}
		})
	}
}

// TestAdminCallQueryService: a bare service name is the default
// namespace's, as everywhere else ("orders" once found nothing, the calls
// being filed under "default/orders"); a partition of exactly the given
// name (another control plane's cluster) is read as it is; what cannot name
// a service is a 400.
func TestAdminCallQueryService(t *testing.T) {
	lg, err := calllog.Open(calllog.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	now := time.Now()
	for svc, n := range map[string]int{"default/orders": 2, "prod/orders": 3, "outbound|80||web": 4} {
		for i := range n {
			lg.Record(calllog.Record{Start: now.Add(-time.Duration(i+1) * time.Second).UnixNano(), Latency: time.Millisecond,
				Service: svc, Cluster: svc, Status: 200})
		}
	}
	srv := httptest.NewServer(New(Options{}).AdminHandler(lg))
	defer srv.Close()
	for _, c := range []struct {
		service, want string
		count         int
	}{
		{"orders", "default/orders", 2},
		{"default/orders", "default/orders", 2},
		{"prod/orders", "prod/orders", 3},
		{"outbound|80||web", "outbound|80||web", 4},
		{"a/b/c", "", 0},
		{"/orders", "", 0},
		{"prod/", "", 0},
	} {
		for _, path := range []string{"/v1/calls/stats", "/v1/calls"} {
			resp, err := http.Get(srv.URL + path + "?" + url.Values{"service": {c.service}, "from": {"0"}}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			var ans struct {
				Service string            `json:"service"`
				Count   int               `json:"count"`
				Calls   []json.RawMessage `json:"calls"`
				Error   struct{ Message string }
			}
			err = json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(ans.Error.Message, "service") {
					t.Errorf("%s %q: %d %q, want 400 naming the service", path, c.service, resp.StatusCode, ans.Error.Message)
				}
				continue
			}
			n := ans.Count + len(ans.Calls)
			if resp.StatusCode != 200 || ans.Service != c.want || n != c.count {
				t.Errorf("%s %q: %d, service %q with %d calls, want %q with %d", path, c.service, resp.StatusCode, ans.Service, n, c.want, c.count)
			}
		}
	}
}
