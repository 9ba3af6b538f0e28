package balancer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestResultKeys pins every JSON key "sextant bench balancer" prints:
// scripts and docs/benchmarks.md read them.
func TestResultKeys(t *testing.T) {
	if err := report.CompareKeys(Result{}, "testdata/result_keys.golden"); err != nil {
		t.Error(err)
	}
}

func TestParseProvidersErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"unknown field", `{"threads":{"a":1},"phase_seconds":6,"phases":{"a":[{"max_concurrent":1,"avg_rtt_ms":1}]},"x":1}`, `unknown field "x"`},
		{"phase_seconds", `{"threads":{"a":1},"phase_seconds":0,"phases":{"a":[{"max_concurrent":1,"avg_rtt_ms":1}]}}`, "phase_seconds"},
		{"no threads", `{"threads":{},"phase_seconds":6,"phases":{}}`, "threads: no provider"},
		{"threads value", `{"threads":{"a":0},"phase_seconds":6,"phases":{"a":[{"max_concurrent":1,"avg_rtt_ms":1}]}}`, "threads.a"},
		{"missing phases", `{"threads":{"a":1},"phase_seconds":6,"phases":{}}`, "phases.a missing"},
		{"empty phases", `{"threads":{"a":1},"phase_seconds":6,"phases":{"a":[]}}`, "phases.a is empty"},
		{"max_concurrent", `{"threads":{"a":1},"phase_seconds":6,"phases":{"a":[{"max_concurrent":0,"avg_rtt_ms":1}]}}`, "phases.a[0].max_concurrent"},
		{"avg_rtt_ms", `{"threads":{"a":1},"phase_seconds":6,"phases":{"a":[{"max_concurrent":1,"avg_rtt_ms":-1}]}}`, "phases.a[0].avg_rtt_ms"},
		{"phase counts differ", `{"threads":{"a":1,"b":1},"phase_seconds":6,"phases":{"a":[{"max_concurrent":1,"avg_rtt_ms":1}],"b":[]}}`, "phases.b"},
		{"orphan phases", `{"threads":{"a":1},"phase_seconds":6,"phases":{"a":[{"max_concurrent":1,"avg_rtt_ms":1}],"z":[{"max_concurrent":1,"avg_rtt_ms":1}]}}`, "phases.z"},
		{"not json", `{`, "invalid providers file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProviders([]byte(tc.json))
			if !errors.Is(err, ErrProviders) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrProviders mentioning %q", err, tc.want)
			}
		})
	}
}

// raceFile is the race's providers file as built in (LoadProviders("")),
// checked against the copy in testdata.
func raceFile(t *testing.T) *ProvidersFile {
	t.Helper()
	f, err := LoadProviders("")
	if err != nil {
		t.Fatal(err)
	}
	g, err := LoadProviders("testdata/race-providers.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f, g) || len(f.Threads) != 3 {
		t.Fatalf("built-in providers %+v, testdata %+v", f, g)
	}
	return f
}

func TestRaceFileCeiling(t *testing.T) {
	f := raceFile(t)
	// The seed's ceiling: about 1.35M successes at scale 1.
	provs := newSimProviders(f, 1, 1)
	ceiling := 0.0
	for ph := range provs[0].phases {
		for _, p := range provs {
			c := p.phases[ph]
			ceiling += float64(min(int64(c.MaxConcurrent), p.threads)) / meanServiceMs(c.AvgRTTMs) * 1000 * f.PhaseSeconds
		}
	}
	if math.Abs(ceiling-1.352e6) > 0.005e6 {
		t.Fatalf("ceiling %.0f, want about 1.352M", ceiling)
	}
}

func TestServiceTimeDraw(t *testing.T) {
	p := newSimProviders(&ProvidersFile{
		Threads: map[string]int{"a": 1}, PhaseSeconds: 1,
		Phases: map[string][]ProviderPhase{"a": {{MaxConcurrent: 1, AvgRTTMs: 40}}},
	}, 1, 3)[0]
	const n = 200000
	sum := 0
	for range n {
		x := p.serviceMs(40)
		if x < 1 {
			t.Fatalf("service time %d < 1", x)
		}
		sum += x
	}
	if mean, want := float64(sum)/n, meanServiceMs(40); math.Abs(mean-want) > 0.01*want {
		t.Fatalf("mean service %.2f ms, want %.2f", mean, want)
	}
}

// A tiny run of the real bench (loopback HTTP, real providers): every
// policy completes calls, the closed loop keeps its calls in flight, the
// oracle loses nothing to rejections, and the JSON carries every figure.
func TestRunTiny(t *testing.T) {
	f := raceFile(t)
	var out bytes.Buffer
	res, err := Run(context.Background(), Config{
		Providers: f, Policies: []string{"random", "adaptive", "oracle"},
		Scale: 32, Warmup: 300 * time.Millisecond, Phase: 250 * time.Millisecond, Seed: 1,
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(res) != 3 || len(lines) != 3 {
		t.Fatalf("%d results, %d JSON lines; want 3", len(res), len(lines))
	}
	for i, r := range res {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"successes", "provider_rejections", "gateway_sheds", "timeouts", "p50_ms", "p99_ms", "p999_ms", "ratio", "recovery_ms"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: JSON has no %q", r.Policy, k)
			}
		}
		t.Logf("%s: ratio %.3f successes %d rejections %d sheds %d p99 %.1f ms", r.Policy, r.Ratio, r.Successes, r.Rejections, r.Sheds, r.P99Ms)
		if r.Successes == 0 || r.Ratio <= 0.3 || r.Ratio > 1.1 {
			t.Errorf("%s: ratio %.3f (%d successes), want a working run", r.Policy, r.Ratio, r.Successes)
		}
		if r.P50Ms <= 0 || r.P99Ms < r.P50Ms || r.P999Ms < r.P99Ms {
			t.Errorf("%s: percentiles %v/%v/%v not ordered", r.Policy, r.P50Ms, r.P99Ms, r.P999Ms)
		}
	}
	if res[2].Rejections != 0 || res[2].Sheds != 0 {
		t.Errorf("oracle: %d rejections, %d sheds; want none (1024/scale calls fit in the threads)", res[2].Rejections, res[2].Sheds)
	}
}

func TestRunUnknownPolicy(t *testing.T) {
	_, err := Run(context.Background(), Config{Providers: &ProvidersFile{}, Policies: []string{"nope"}}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "unknown policy") {
		t.Fatalf("err = %v, want unknown policy", err)
	}
}
