package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/bench/report"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestResultKeys pins every JSON key "sextant bench registry" can print:
// scripts and docs/benchmarks.md read them.
func TestResultKeys(t *testing.T) {
	if err := report.CompareKeys(Result{}, "testdata/result_keys.golden"); err != nil {
		t.Error(err)
	}
}

// TestEachScenarioTiny runs each scenario alone, scaled down, against a
// fresh real server: it must answer correctly on its own (no scenario
// relies on one before it), print only its own figure, and leave nothing
// behind. It checks behaviour, never a timing.
func TestEachScenarioTiny(t *testing.T) {
	tests := []struct {
		scenario string
		cfg      Config
		check    func(t *testing.T, res Result)
	}{
		{
			scenario: "register",
			// The budget, not the duration, ends the scenario.
			cfg: Config{Conns: 8, MaxInstances: 300, Duration: 30 * time.Second},
			check: func(t *testing.T, res Result) {
				th := res.Register
				checkThroughput(t, th, "instances", 1)
				if th.Items != 300 || th.Requests != 300 || res.Cleanup.Deregistered != 300 {
					t.Errorf("registered %d in %d requests, deregistered %d; want the budget of 300 each", th.Items, th.Requests, res.Cleanup.Deregistered)
				}
			},
		},
		{
			scenario: "batch",
			cfg:      Config{BatchConns: 2, BatchSize: 50, MaxInstances: 500, Duration: 30 * time.Second},
			check: func(t *testing.T, res Result) {
				th := res.Batch
				checkThroughput(t, th, "instances", 50)
				if th.Items != 500 || th.Requests != 10 || res.Cleanup.Deregistered != 500 {
					t.Errorf("registered %d in %d requests, deregistered %d; want 500 in 10", th.Items, th.Requests, res.Cleanup.Deregistered)
				}
			},
		},
		{
			scenario: "batch",
			cfg:      Config{BatchConns: 2, BatchSize: 50, MaxInstances: 200, Duration: 30 * time.Second, UniqueMetadata: true},
			check: func(t *testing.T, res Result) {
				th := res.Batch
				checkThroughput(t, th, "instances", 50)
				if th.Items != 200 || res.Cleanup.Deregistered != 200 {
					t.Errorf("registered %d, deregistered %d; want 200 each", th.Items, res.Cleanup.Deregistered)
				}
			},
		},
		{
			scenario: "heartbeat",
			cfg:      Config{HeartbeatConns: 2, HeartbeatIDs: 100, HeartbeatPool: 250, Duration: 200 * time.Millisecond},
			check: func(t *testing.T, res Result) {
				th := res.Heartbeat
				checkThroughput(t, th, "ids", 100)
				// Bodies of 100, 100 and 50 ids, sent in turn.
				if th.Items > th.Requests*100 || th.Items < th.Requests*50 {
					t.Errorf("%d ids in %d requests", th.Items, th.Requests)
				}
				if res.Cleanup.Deregistered != 250 {
					t.Errorf("deregistered %d, want the pool of 250", res.Cleanup.Deregistered)
				}
			},
		},
		{
			scenario: "query",
			cfg:      Config{QueryConns: 2, QuerySize: 10, Duration: 200 * time.Millisecond},
			check: func(t *testing.T, res Result) {
				th := res.Query
				checkThroughput(t, th, "queries", 1)
				if th.Items != th.Requests || !strings.Contains(th.Note, "matching 5") || res.Cleanup.Deregistered != 10 {
					t.Errorf("query %+v, cleanup %+v", th, res.Cleanup)
				}
			},
		},
		{
			scenario: "query",
			cfg:      Config{QueryConns: 2, QuerySize: 10, QueryGzip: true, Duration: 200 * time.Millisecond},
			check: func(t *testing.T, res Result) {
				th := res.Query
				checkThroughput(t, th, "queries", 1)
				if th.Items != th.Requests || !strings.Contains(th.Note, "Accept-Encoding: gzip") {
					t.Errorf("query %+v", th)
				}
			},
		},
		{
			scenario: "changes",
			cfg:      Config{BatchConns: 2, ChangesTotal: 600, ChangesCount: 200, ChangesRounds: 3},
			check: func(t *testing.T, res Result) {
				c := res.Changes
				if c == nil || c.Rounds != 3 || c.Preloaded != 600 || c.RegistryHolds != 600 || c.ChangesReturned != 200 ||
					c.BodyBytes <= 0 || c.P99Ms < c.P50Ms || c.MaxMs < c.P99Ms {
					t.Errorf("changes: %+v", c)
				}
				if res.Cleanup.Deregistered != 800 {
					t.Errorf("deregistered %d, want 600 preloaded + 200 changed", res.Cleanup.Deregistered)
				}
			},
		},
		{
			scenario: "watch",
			cfg:      Config{WatchRounds: 4},
			check: func(t *testing.T, res Result) {
				w := res.Watch
				if w == nil || w.Rounds != 4 || w.P99Ms < w.P50Ms || w.FromSendP99Ms < w.FromSendP50Ms || w.FromSendP50Ms <= 0 {
					t.Errorf("watch: %+v", w)
				}
				if res.Cleanup.Deregistered != 1 {
					t.Errorf("deregistered %d, want the one watched instance", res.Cleanup.Deregistered)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			url := realRegistry(t)
			cfg := tt.cfg
			cfg.Server, cfg.Namespace, cfg.Scenarios = url, "bench-"+tt.scenario, []string{tt.scenario}
			var out bytes.Buffer
			res, err := Run(context.Background(), cfg, &out)
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, out.String())
			}
			var printed map[string]json.RawMessage
			if err := json.Unmarshal(out.Bytes(), &printed); err != nil {
				t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
			}
			var keys []string
			for k := range printed {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if want := []string{"cleanup", "machine", "namespace", tt.scenario, "server"}; !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
				t.Errorf("printed keys %v, want %v", keys, want)
			}
			if res.Cleanup == nil {
				t.Fatal("no cleanup figure")
			}
			tt.check(t, res)
			c, _ := client.New(url)
			defer c.HTTPClient().CloseIdleConnections()
			left, err := c.List(context.Background(), client.ListOptions{Namespace: cfg.Namespace, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Instances) != 0 {
				t.Errorf("cleanup left %d+ instances, e.g. %s", len(left.Instances), left.Instances[0].ID)
			}
		})
	}
}

func checkThroughput(t *testing.T, th *Throughput, unit string, perRequest int) {
	t.Helper()
	if th == nil {
		t.Fatal("no figure")
	}
	if th.Unit != unit || th.PerRequest != perRequest || th.Items == 0 || th.Errors != 0 || th.FirstError != "" ||
		th.PerSecond <= 0 || th.P99Ms < th.P50Ms || th.MaxMs < th.P99Ms || th.Seconds <= 0 || th.LoaderCPUSeconds < 0 {
		t.Errorf("figure %+v", th)
	}
	// apitest's stack serves no /metrics: the server figure is left out.
	if th.ServerCPUSeconds != nil {
		t.Errorf("server CPU %v from a server without /metrics", *th.ServerCPUSeconds)
	}
}
