package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// TestRun: a short run against a real registry stack's Consul API, with
// the same API as its peer: every figure is measured, the ratios are
// computed, and what the run registered is gone at the end.
func TestRun(t *testing.T) {
	s := apitest.StartWith(t, apitest.Options{})
	api, err := consulapi.New(s.Registry, consulapi.Options{KV: s.KV})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() { api.Shutdown(); srv.Close() })
	addr := strings.TrimPrefix(srv.URL, "http://")

	var out bytes.Buffer
	res, err := Run(context.Background(), Config{Server: addr, Peer: addr, Metrics: s.URL + "/metrics", Clients: 4, Duration: 300 * time.Millisecond,
		Instances: 10, Wakes: 5, Rounds: 2, KVKeys: 50, KVWatchServer: addr}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]ServerResult{"sextant": res.Sextant, "peer": *res.Peer} {
		if r.RegisterDeregisterPerS.Median <= 0 || r.HealthPassingPerS.Median <= 0 || len(r.WakeP99Ms.PerRound) != 2 || r.Errors != 0 ||
			r.KVPutPerS.Median <= 0 || r.KVGetPerS.Median <= 0 || len(r.KVWakeP99Ms.PerRound) != 2 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if res.KVVsInstances["kv_put_per_s_over_instance_writes_per_s"] <= 0 {
		t.Errorf("KV beside instances: %v", res.KVVsInstances)
	}
	// A wake is timed from the put's answer and clamped at 0: on a loaded
	// machine every wake of a round may come before the answer, and a
	// ratio over a p99 of 0 is reported as 0 (undefined).
	sx := res.Sextant
	want := 0.0
	if sx.WakeP99Ms.Median > 0 {
		want = report.Round3(sx.KVWakeP99Ms.Median / sx.WakeP99Ms.Median)
	}
	if got := res.KVVsInstances["kv_watch_wake_p99_over_health_wake_p99"]; got != want {
		t.Errorf("KV wake p99 over the health wake's: %v, want %v (KV %v, health %v)", got, want, sx.KVWakeP99Ms, sx.WakeP99Ms)
	}
	if res.Ratios["register_deregister"] <= 0 || res.Ratios["health_passing"] <= 0 || res.Ratios["kv_put"] <= 0 {
		t.Errorf("ratios %v", res.Ratios)
	}
	var printed map[string]any
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed["sextant"] == nil {
		t.Errorf("printed %s: %v", out.String(), err)
	}
	if n := s.Registry.Instances().Len(); n != 0 {
		t.Errorf("%d instances left after the run", n)
	}
	n := 0
	s.KV.Table().List("default", "", func(e *kv.Entry) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d KV keys left after the run", n)
	}
}
