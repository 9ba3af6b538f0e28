package main

import (
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	benchgw "github.com/sextant-mesh/sextant/internal/bench/gateway"
	"github.com/sextant-mesh/sextant/internal/debian"
)

// TestBenchGatewayDataplane runs "bench gateway --scenario dataplane"
// tiny (one round of 1 s runs): the real binary, nginx, HAProxy, wrk,
// h2load and the gRPC loader, each proxy pinned to its own core, and the
// go-floor candidate in the h1 figure. Every figure is answered through
// every proxy without an error, each run has the proxy's CPU per request,
// and the ratios of the gateway to each peer (and to the direct gRPC call)
// are there; the fixed-rate figures have each proxy's added latency.
func TestBenchGatewayDataplane(t *testing.T) {
	bin := dataplaneBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"bench", "gateway", "--scenario", "dataplane", "--duration", "1s", "--rounds", "1",
		"--connections", "8", "--h2-clients", "2", "--h2-streams", "8", "--grpc-concurrency", "4",
		"--dataplane-rate", "400", "--dataplane-rate-connections", "4", "--proxies", "sextant,nginx,haproxy,go-floor"}
	pinned := runtime.NumCPU() >= 2
	if !pinned {
		args = append(args, "--no-pin") // one core: nothing to pin apart
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%v\n%s", err, stderr)
	}
	var res benchgw.DataplaneResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Pinned != pinned || len(res.Figures) != len(benchgw.DataplaneScenarios) {
		t.Fatalf("pinned %v, %d figures: %s", res.Pinned, len(res.Figures), out)
	}
	cpu := map[string]float64{} // /proc counts in 10 ms ticks: a short run on a loaded core may read 0
	for _, f := range res.Figures {
		var proxies []string
		for _, r := range f.Runs {
			proxies = append(proxies, r.Proxy)
			cpu[r.Proxy] += r.CPUUsPerReq
			if r.RequestsPS <= 0 || r.CPUUsPerReq < 0 || r.Errors != 0 {
				t.Errorf("%s through %s: %+v", f.Scenario, r.Proxy, r)
			}
		}
		slices.Sort(proxies)
		want := []string{"haproxy", "nginx", "sextant"}
		if f.Scenario == "h1" || f.Scenario == "h1-rate" { // go-floor speaks plaintext HTTP/1.1 only
			want = []string{"go-floor", "haproxy", "nginx", "sextant"}
		}
		if !slices.Equal(proxies, want) {
			t.Errorf("%s: runs of %v, want %v", f.Scenario, proxies, want)
		}
		var ratios []string
		for _, r := range f.Ratios {
			if r.Of != "sextant" || len(r.PerRound) != 1 || r.Median != r.PerRound[0] || r.Median <= 0 {
				t.Errorf("%s: ratio %+v", f.Scenario, r)
			}
			ratios = append(ratios, r.To+" "+r.Figure)
		}
		for _, want := range []string{"nginx requests_per_s", "haproxy requests_per_s"} {
			if !slices.Contains(ratios, want) {
				t.Errorf("%s: no %s ratio in %v", f.Scenario, want, ratios)
			}
		}
		grpc := f.Scenario == "grpc-unary" || f.Scenario == "grpc-stream"
		if grpc != (len(f.Direct) == 1 && f.Direct[0].RequestsPS > 0 && f.GatewayVsDirect > 0) {
			t.Errorf("%s: direct %+v, gateway/direct %v", f.Scenario, f.Direct, f.GatewayVsDirect)
		}
		rate := f.Scenario == "h1-rate" || f.Scenario == "h1-tls-rate"
		var added []string
		for _, a := range f.Added {
			// One round: the proxy's run less the direct one.
			for _, r := range f.Runs {
				if r.Proxy == a.Proxy && (math.Abs(a.P50Ms-(r.P50Ms-f.Direct[0].P50Ms)) > 0.0011 || math.Abs(a.P99Ms-(r.P99Ms-f.Direct[0].P99Ms)) > 0.0011 || r.P50Ms <= 0) {
					t.Errorf("%s: added %+v for the run %+v, direct %+v", f.Scenario, a, r, f.Direct[0])
				}
			}
			added = append(added, a.Proxy)
		}
		slices.Sort(added)
		if rate != (len(f.Direct) == 1 && f.Direct[0].P50Ms > 0 && slices.Equal(added, want)) {
			t.Errorf("%s: direct %+v, added %+v", f.Scenario, f.Direct, f.Added)
		}
	}
	for _, p := range []string{"sextant", "nginx", "haproxy"} {
		if cpu[p] <= 0 {
			t.Errorf("no CPU read for %s in any figure", p)
		}
	}
}

// TestBenchGatewayDataplaneFilters runs issue 43's header and CORS figure
// tiny: sextant-filters and sextant, pinned, one round of h1. Both are sent
// the same request to one of the 10 routes and answer it without an error;
// the bench said it checked that the filters ran in sextant-filters alone,
// and the ratios are of sextant-filters to sextant.
func TestBenchGatewayDataplaneFilters(t *testing.T) {
	bin := dataplaneBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"bench", "gateway", "--scenario", "dataplane", "--dataplane-scenarios", "h1",
		"--proxies", benchgw.FiltersProxy + ",sextant", "--duration", "1s", "--rounds", "1", "--connections", "8"}
	if runtime.NumCPU() < 2 {
		args = append(args, "--no-pin")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "filters checked") {
		t.Errorf("no filters check reported:\n%s", stderr.String())
	}
	var res benchgw.DataplaneResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(res.Figures) != 1 || res.Figures[0].Scenario != "h1" {
		t.Fatalf("figures: %s", out)
	}
	f := res.Figures[0]
	if !strings.Contains(f.Loader, "GET /r3/items with Origin: https://shop.example") {
		t.Errorf("loader %q", f.Loader)
	}
	var proxies []string
	for _, r := range f.Runs {
		proxies = append(proxies, r.Proxy)
		if r.RequestsPS <= 0 || r.Errors != 0 {
			t.Errorf("%s: %+v", r.Proxy, r)
		}
	}
	if !slices.Equal(proxies, []string{benchgw.FiltersProxy, "sextant"}) && !slices.Equal(proxies, []string{"sextant", benchgw.FiltersProxy}) {
		t.Errorf("runs of %v", proxies)
	}
	rps := false
	for _, r := range f.Ratios {
		if r.Of != benchgw.FiltersProxy || r.To != "sextant" {
			t.Errorf("ratio %+v", r)
		}
		rps = rps || r.Figure == "requests_per_s" && r.Median > 0
	}
	if !rps {
		t.Errorf("no requests/s ratio: %+v", f.Ratios)
	}
}

// dataplaneBinary installs the dataplane scenario's peers and loaders from
// Debian when missing and returns the sextant binary under test.
func dataplaneBinary(t *testing.T) string {
	t.Helper()
	for _, tool := range [][]string{{"nginx", "nginx"}, {"haproxy", "haproxy"}, {"wrk", "wrk"}, {"h2load", "nghttp2-client"}} {
		if _, err := debian.Ensure(tool[0], tool[1]); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
