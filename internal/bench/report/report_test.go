package report

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSummarize(t *testing.T) {
	tests := []struct {
		name                string
		in                  []time.Duration
		p50, p99, p999, max float64
	}{
		{name: "empty"},
		{name: "one", in: []time.Duration{time.Millisecond}, p50: 1, p99: 1, p999: 1, max: 1},
		{name: "hundred", in: func() []time.Duration {
			d := make([]time.Duration, 100)
			for i := range d {
				d[i] = time.Duration(100-i) * time.Millisecond
			}
			return d
		}(), p50: 50, p99: 99, p999: 99, max: 100},
		{name: "rounded to the microsecond", in: []time.Duration{1234567 * time.Nanosecond, 1234499 * time.Nanosecond},
			p50: 1.234, p99: 1.234, p999: 1.234, max: 1.235},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(tt.in)
			want := Summary{P50Ms: tt.p50, P99Ms: tt.p99, P999Ms: tt.p999, MaxMs: tt.max}
			if s != want {
				t.Errorf("got %+v, want %+v", s, want)
			}
			if !slices.IsSorted(tt.in) {
				t.Error("Summarize left its input unsorted")
			}
		})
	}
}

func TestQuantileIsASample(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0: 1, 0.5: 5, 0.9: 9, 0.99: 9, 1: 10} {
		if got := Quantile(d, q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of nothing is not 0")
	}
}

func TestRound3(t *testing.T) {
	for in, want := range map[float64]float64{0: 0, 1.0004: 1, 1.0005: 1.001, 2.5e-4: 0, 12345.6789: 12345.679} {
		if got := Round3(in); got != want {
			t.Errorf("Round3(%v) = %v, want %v", in, got, want)
		}
	}
}

// metricsServer serves a Prometheus text page whose CPU counter advances
// by one second per scrape.
func metricsServer(t *testing.T, status int) *httptest.Server {
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		n := scrapes.Add(1)
		io.WriteString(w, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n")
		io.WriteString(w, "# TYPE process_cpu_seconds_total counter\n")
		io.WriteString(w, "process_cpu_seconds_total_other 99\n")
		io.WriteString(w, "process_cpu_seconds_total "+[]string{"", "12.25", "13.5", "14.75"}[min(n, 3)]+"\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCPUMeter(t *testing.T) {
	ctx := context.Background()
	t.Run("server from metrics", func(t *testing.T) {
		srv := metricsServer(t, http.StatusOK)
		c := srv.Client()
		defer c.CloseIdleConnections()
		m := StartCPU(ctx, MetricsCPU(c, srv.URL+"/metrics"))
		got := m.Stop(ctx)
		if got.ServerCPUSeconds == nil || *got.ServerCPUSeconds != 1.25 {
			t.Fatalf("server CPU %v, want 1.25", got.ServerCPUSeconds)
		}
		if got.LoaderCPUSeconds < 0 {
			t.Errorf("loader CPU %v < 0", got.LoaderCPUSeconds)
		}
	})
	t.Run("server error leaves the figure out", func(t *testing.T) {
		srv := metricsServer(t, http.StatusInternalServerError)
		c := srv.Client()
		defer c.CloseIdleConnections()
		got := StartCPU(ctx, MetricsCPU(c, srv.URL+"/metrics")).Stop(ctx)
		if got.ServerCPUSeconds != nil {
			t.Fatalf("server CPU %v from a failing server", *got.ServerCPUSeconds)
		}
		b, _ := json.Marshal(got)
		if strings.Contains(string(b), "server_cpu_seconds") {
			t.Errorf("JSON %s names an unknown server figure", b)
		}
	})
	t.Run("no server", func(t *testing.T) {
		m := StartCPU(ctx, nil)
		deadline := time.Now().Add(2 * time.Second)
		for ProcessCPU()-m.loader < 0.02 && time.Now().Before(deadline) {
			// spin: the loader's figure must see CPU this goroutine used
		}
		got := m.Stop(ctx)
		if got.ServerCPUSeconds != nil || got.LoaderCPUSeconds <= 0 {
			t.Fatalf("got %+v, want loader CPU > 0 and no server figure", got)
		}
	})
}

func TestProcessFigures(t *testing.T) {
	if MaxRSS() <= 0 {
		t.Error("MaxRSS <= 0")
	}
	if ProcessCPU() <= 0 {
		t.Error("ProcessCPU <= 0")
	}
	for _, l := range LoadAvg() {
		if l < 0 {
			t.Errorf("load average %v < 0", l)
		}
	}
	if s := LoadAvgText(); s != "" && len(strings.Fields(s)) != 3 {
		t.Errorf("LoadAvgText() = %q, want three figures", s)
	}
}

func TestBars(t *testing.T) {
	ctx := context.Background()
	t.Run("quiet", func(t *testing.T) {
		for _, b := range []*Bar{NewBar(nil, "x", 10), NewPollBar(ctx, nil, "x", 10, func() int64 { return 1 }),
			NewTimeBar(ctx, nil, "x", time.Second), nil} {
			b.Add(3)
			b.Finish()
			b.Finish()
		}
	})
	t.Run("count", func(t *testing.T) {
		var w bytes.Buffer
		b := NewBar(&w, "load", 10)
		b.Add(4)
		b.Finish()
		if !strings.Contains(w.String(), "load") {
			t.Errorf("bar drew %q", w.String())
		}
	})
	t.Run("poll stops and shows the last value", func(t *testing.T) {
		var w bytes.Buffer
		var n atomic.Int64
		b := NewPollBar(ctx, &w, "put", 1000, n.Load)
		n.Store(700)
		b.Finish()
		if !strings.Contains(w.String(), "700/1000") {
			t.Errorf("bar drew %q, want 700/1000", w.String())
		}
	})
	t.Run("time bar ends with its context", func(t *testing.T) {
		var w bytes.Buffer
		cctx, cancel := context.WithCancel(ctx)
		b := NewTimeBar(cctx, &w, "register", time.Hour)
		cancel()
		b.Finish() // goleak in TestMain checks the goroutine is gone
	})
}

func TestPrintIsOneObject(t *testing.T) {
	var w bytes.Buffer
	in := struct {
		A float64 `json:"a_ms"`
		CPU
	}{A: 1.5}
	if err := Print(&w, in); err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a_ms\": 1.5,\n  \"loader_cpu_seconds\": 0\n}\n"
	if w.String() != want {
		t.Errorf("printed %q, want %q", w.String(), want)
	}
	if err := Print(&w, func() {}); err == nil || !strings.HasPrefix(err.Error(), "report: ") {
		t.Errorf("err = %v, want a report: error", err)
	}
}

func TestKeys(t *testing.T) {
	type run struct {
		Seconds float64 `json:"seconds"`
	}
	type inner struct {
		P99 float64 `json:"p99_ms"`
		CPU
	}
	v := struct {
		Name     string            `json:"name"`
		Query    *inner            `json:"query,omitempty"`
		Runs     []run             `json:"runs"`
		Per      map[string]int64  `json:"per_provider"`
		ByPolicy map[string]*inner `json:"by_policy"`
		Recovery []int64           `json:"recovery_ms"`
		At       time.Time         `json:"at"`
		Skipped  int               `json:"-"`
		Untagged int
		hidden   int
	}{}
	_ = v.hidden
	want := []string{
		"Untagged", "at", "by_policy.*.loader_cpu_seconds", "by_policy.*.p99_ms", "by_policy.*.server_cpu_seconds",
		"name", "per_provider", "query.loader_cpu_seconds", "query.p99_ms", "query.server_cpu_seconds",
		"recovery_ms", "runs[].seconds",
	}
	if got := Keys(v); !slices.Equal(got, want) {
		t.Errorf("Keys = %q\nwant   %q", got, want)
	}
}

func TestCompareKeys(t *testing.T) {
	v := struct {
		A int `json:"a_ms"`
		B int `json:"b_ms"`
	}{}
	dir := t.TempDir()
	for name, keys := range map[string]string{"same": "a_ms\nb_ms\n", "other": "a_ms\nc_ms\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(keys), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := CompareKeys(v, filepath.Join(dir, "same")); err != nil {
		t.Fatal(err)
	}
	if err := CompareKeys(v, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("no error for a missing golden file")
	}
	err := CompareKeys(v, filepath.Join(dir, "other"))
	if err == nil || !strings.Contains(err.Error(), `added ["b_ms"], removed ["c_ms"]`) {
		t.Fatalf("err = %v, want b_ms added and c_ms removed", err)
	}
}
