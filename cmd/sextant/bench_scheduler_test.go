package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/scheduler"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestBenchSchedulerTiny runs "bench scheduler" in a tiny size, the http
// scenario against the real server stack, and checks its one JSON object.
func TestBenchSchedulerTiny(t *testing.T) {
	srv := apitest.Start(t)
	cmd := newBenchSchedulerCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"-q", "--scenarios", "basic,topology_spreading,pod_anti_affinity,startup,http", "--nodes", "40", "--pods", "30",
		"--start-nodes", "50", "--start-placements", "400", "--server", srv.URL,
		"--http-nodes", "12", "--http-pods", "60", "--clients", "4", "--http-batch", "5"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var res scheduler.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	for _, k := range []string{"basic_40_nodes", "topology_spreading_40_nodes", "pod_anti_affinity_40_nodes"} {
		if f := res.Scenarios[k]; f == nil || f.Placed == 0 || f.PlacementsPerS <= 0 {
			t.Errorf("%s: %+v", k, f)
		}
	}
	if res.Startup == nil || res.Startup.Placements != 400 {
		t.Errorf("startup: %+v", res.Startup)
	}
	h := res.HTTP
	if h == nil || h.Placed != 60 || h.OverCommitted != 0 || h.ServerPlacedNow != 60 || h.P99Ms <= 0 {
		t.Fatalf("http: %+v", h)
	}
	// The run cleaned up after itself.
	var nodes struct {
		Items []json.RawMessage `json:"items"`
	}
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(context.Background(), "GET", "/v1/nodes", nil, &nodes); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("nodes left after the run: %d %v", len(nodes.Items), err)
	}
}

// TestServerStartupTiny starts the real binary over a small written store.
func TestServerStartupTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real server")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	st, err := scheduler.RunServerStartup(context.Background(), bin, 300, 3000)
	if err != nil {
		t.Fatal(err)
	}
	if st.ServerNodes != 300 || st.ServerPlaced != 3000 || st.ReadySeconds <= 0 || st.PeakRSSBytes <= 0 {
		t.Fatalf("%+v", st)
	}
}
