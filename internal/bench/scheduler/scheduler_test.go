package scheduler

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/placement"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func benchScenario(b *testing.B, scenario string, nodes int) {
	s, err := Cluster(nodes, nodes)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ws, err := Workloads(scenario, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	f, err := Measure(context.Background(), s, scenario, nodes, nodes, ws, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(f.P99Ms, "p99_ms")
	if f.Placed == 0 {
		b.Fatal("nothing placed")
	}
}

func BenchmarkBasic5000(b *testing.B)        { benchScenario(b, "basic", 5000) }
func BenchmarkBasic50000(b *testing.B)       { benchScenario(b, "basic", 50000) }
func BenchmarkNodeAffinity5000(b *testing.B) { benchScenario(b, "node_affinity", 5000) }
func BenchmarkSpread5000(b *testing.B)       { benchScenario(b, "topology_spreading", 5000) }
func BenchmarkAntiAffinity5000(b *testing.B) { benchScenario(b, "pod_anti_affinity", 5000) }
func BenchmarkPreferred5000(b *testing.B)    { benchScenario(b, "preferred_pod_affinity", 5000) }

// TestScenariosPlace runs every scenario on a small cluster and checks
// that pods are placed and constraints hold.
func TestScenariosPlace(t *testing.T) {
	for _, sc := range Scenarios[:5] {
		s, err := Cluster(30, 30)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ws, err := Workloads(sc, 24)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Measure(context.Background(), s, sc, 30, 30, ws, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f.Placed != 24 {
			t.Errorf("%s: placed %d of 24", sc, f.Placed)
		}
	}
}

// BenchmarkStartup loads 50,000 nodes and 500,000 placements from encoded
// records, as the server does at start.
func BenchmarkStartup(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		st, err := RunStartup(50000, 500000)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(st.LoadSeconds, "load_s")
		b.ReportMetric(float64(st.HeapBytes), "heap_bytes")
	}
}

// TestStartupSmall loads a small store and checks what it loaded.
func TestStartupSmall(t *testing.T) {
	st, err := RunStartup(100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if st.Nodes != 100 || st.Placements != 1000 || st.LoadSeconds <= 0 {
		t.Fatalf("%+v", st)
	}
}

// BenchmarkRegistryOpen opens a registry with the scheduler's tables over a
// store of 50,000 nodes and 500,000 placements: the server's start-up
// minus the process start (sextant bench scheduler --scenarios
// server_startup measures that too).
func BenchmarkRegistryOpen(b *testing.B) {
	dir := b.TempDir()
	if err := WriteStore(dir, 50000, 500000); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		st, err := embedded.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		s := placement.New(placement.Config{Workers: runtime.GOMAXPROCS(0)})
		t0 := time.Now()
		reg, err := registry.Open(st, registry.Options{Engine: commit.Options{Tables: s.Tables()}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(t0).Seconds(), "open_s")
		if n, p := s.Len(); n != 50000 || p != 500000 {
			b.Fatalf("loaded %d nodes and %d placements", n, p)
		}
		reg.Close()
		st.Close()
		s.Close()
	}
}
