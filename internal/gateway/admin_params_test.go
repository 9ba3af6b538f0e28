package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

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
