package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParseH2loadLog: percentiles of the 2xx answers after the skipped
// first second; a malformed line is an error naming it.
func TestParseH2loadLog(t *testing.T) {
	var b strings.Builder
	const t0 = 1795994285000000
	b.WriteString("1795994285000000\t200\t90000\n") // connecting: skipped
	for i := range 100 {
		status := "200"
		if i == 50 {
			status = "503" // not a latency
		}
		// 1 ms .. 100 ms, started after the first second.
		b.WriteString(strings.Join([]string{itoa(t0 + 1_000_000 + i), status, itoa((i + 1) * 1000)}, "\t") + "\n")
	}
	p50, p99, err := parseH2loadLog([]byte(b.String()), time.Second)
	if err != nil || p50 != 50 || p99 != 100 {
		t.Fatalf("p50 %v p99 %v err %v; want 50 (the 50th of 99 answers: 51 ms is the 503) and 100", p50, p99, err)
	}
	for _, bad := range []string{"1 200\n", "x\t200\t5\n", "1\t200\t-5\n"} {
		if _, _, err := parseH2loadLog([]byte(bad), 0); err == nil || !strings.Contains(err.Error(), strings.TrimSpace(bad[:1])) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, _, err := parseH2loadLog([]byte("1\t503\t5\n"), 0); err == nil {
		t.Error("no 2xx answer: no error")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDataplaneAdded: a fixed-rate figure reports each proxy's latency
// over the direct call's, paired per round, and no calls/s against direct.
func TestDataplaneAdded(t *testing.T) {
	f := DataplaneFigure{Scenario: "h1-rate", Runs: []DataplaneRun{
		{Round: 1, Proxy: "sextant", P50Ms: 1.5, P99Ms: 4}, {Round: 1, Proxy: "nginx", P50Ms: 1.2, P99Ms: 3},
		{Round: 2, Proxy: "nginx", P50Ms: 1.4, P99Ms: 5}, {Round: 2, Proxy: "sextant", P50Ms: 1.3, P99Ms: 3},
	}, Direct: []DataplaneRun{{Round: 1, Proxy: "direct", P50Ms: 1, P99Ms: 2}, {Round: 2, Proxy: "direct", P50Ms: 1, P99Ms: 2}}}
	f.summarize([]string{"sextant", "nginx"})
	if len(f.Added) != 2 || f.GatewayVsDirect != 0 {
		t.Fatalf("%+v, gateway vs direct %v", f.Added, f.GatewayVsDirect)
	}
	// sextant: (0.5, 0.3) and (2, 1); nginx: (0.2, 0.4) and (1, 3).
	if a := f.Added[0]; a.Proxy != "sextant" || a.P50Ms != 0.4 || a.P99Ms != 1.5 {
		t.Errorf("%+v", a)
	}
	if a := f.Added[1]; a.Proxy != "nginx" || a.P50Ms != 0.3 || a.P99Ms != 2 {
		t.Errorf("%+v", a)
	}
	// Below direct: rounded as it is, not toward zero.
	if r := round3(14.178 - 20.858); r != -6.68 {
		t.Errorf("round3(-6.67999...) = %v", r)
	}
}
