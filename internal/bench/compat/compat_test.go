package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestRun: a short run against a real registry stack's Consul API, with
// the same API as its peer: every figure is measured, the ratios are
// computed, and what the run registered is gone at the end.
func TestRun(t *testing.T) {
	s := apitest.StartWith(t, apitest.Options{})
	api, err := consulapi.New(s.Registry, consulapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() { api.Shutdown(); srv.Close() })
	addr := strings.TrimPrefix(srv.URL, "http://")

	var out bytes.Buffer
	res, err := Run(context.Background(), Config{Server: addr, Peer: addr, Metrics: s.URL + "/metrics", Clients: 4, Duration: 300 * time.Millisecond,
		Instances: 10, Wakes: 5, Rounds: 2}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]ServerResult{"sextant": res.Sextant, "peer": *res.Peer} {
		if r.RegisterDeregisterPerS.Median <= 0 || r.HealthPassingPerS.Median <= 0 || len(r.WakeP99Ms.PerRound) != 2 || r.Errors != 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if res.Ratios["register_deregister"] <= 0 || res.Ratios["health_passing"] <= 0 {
		t.Errorf("ratios %v", res.Ratios)
	}
	var printed map[string]any
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed["sextant"] == nil {
		t.Errorf("printed %s: %v", out.String(), err)
	}
	if n := s.Registry.Instances().Len(); n != 0 {
		t.Errorf("%d instances left after the run", n)
	}
}
