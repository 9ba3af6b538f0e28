package balancer

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestPeakEWMAAvoidsSlowEndpoint(t *testing.T) {
	clk := newFakeClock()
	pol, _ := New("peak_ewma", WithClock(clk.now))
	pk := pol.Build(eps(1, 1, 1))
	lat := []time.Duration{100 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	got := make([]int, 3)
	for range 3000 {
		i, err := pk.Pick()
		if err != nil {
			t.Fatal(err)
		}
		got[i]++
		clk.add(time.Millisecond)
		pk.Done(i, lat[i], Success)
	}
	if got[0] > 3000/10 {
		t.Errorf("slow endpoint got %d of 3000 picks (%v), want < 10%%", got[0], got)
	}
}

func TestLeastRequestPrefersIdle(t *testing.T) {
	cases := []struct {
		name    string
		weights []uint32
		bias    float64
		busy    int     // in-flight calls left on endpoint 0
		wantMax float64 // endpoint 0's largest share of new picks
	}{
		{"equal weights", []uint32{1, 1, 1}, 1, 20, 0.05},
		{"weighted, busy heavy endpoint", []uint32{10, 1, 1}, 1, 100, 0.40},
		{"bias 0 ignores load", []uint32{10, 1, 1}, 0, 100, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pk := NewLeastRequest(tc.bias).Build(eps(tc.weights...)).(*lrPicker)
			pk.states[0].active.Store(int64(tc.busy))
			got := make([]int, len(tc.weights))
			for range 3000 {
				i, _ := pk.Pick()
				got[i]++
				pk.Done(i, time.Millisecond, Success)
			}
			if share := float64(got[0]) / 3000; share > tc.wantMax {
				t.Errorf("busy endpoint share %.2f (%v), want <= %.2f", share, got, tc.wantMax)
			}
			if tc.bias == 0 && got[0] < 3000/2 {
				t.Errorf("bias 0: heavy endpoint share %v, want its weight's majority", got)
			}
		})
	}
}

// Every policy under concurrent Pick/Done and rebuilds (run with -race): no
// data race, every Pick valid, in-flight accounting back to zero.
func TestConcurrentPickDoneRebuild(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			pol, _ := New(name, WithOutlierEjection(EjectionConfig{}))
			set := eps(1, 2, 3, 4, 5)
			var cur sync.Map // "pk" -> Picker, swapped by the rebuilder
			cur.Store("pk", pol.Build(set))
			var wg sync.WaitGroup
			stop := make(chan struct{})
			wg.Add(1)
			go func() { // the owner of the endpoint set
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					cur.Store("pk", pol.Build(set[:3+k%3]))
					time.Sleep(time.Millisecond)
				}
			}()
			var pickers sync.WaitGroup
			for g := range 8 {
				pickers.Add(1)
				go func() {
					defer pickers.Done()
					for k := range 2000 {
						v, _ := cur.Load("pk")
						pk := v.(Picker)
						i, err := pk.Pick()
						if err != nil {
							continue
						}
						pk.Done(i, time.Duration(k%7)*time.Millisecond, Outcome((g+k)%3))
					}
				}()
			}
			pickers.Wait()
			close(stop)
			wg.Wait()
			pk := pol.(*ejectPolicy).inner.Build(set)
			switch p := pk.(type) {
			case *lrPicker:
				for i, st := range p.states {
					if a := st.active.Load(); a != 0 {
						t.Errorf("endpoint %d: %d active after all calls ended", i, a)
					}
				}
			case *adaptivePicker:
				for i, st := range p.states {
					if a := st.inflight.Load(); a != 0 {
						t.Errorf("endpoint %d: %d in flight after all calls ended", i, a)
					}
				}
			case *ewmaPicker:
				for i, st := range p.states {
					if a := st.pending.Load(); a != 0 {
						t.Errorf("endpoint %d: %d pending after all calls ended", i, a)
					}
				}
			}
		})
	}
}

func TestPickAllocatesNothing(t *testing.T) {
	for _, name := range Names() {
		for _, n := range []int{3, 100} {
			t.Run(fmt.Sprintf("%s/n=%d", name, n), func(t *testing.T) {
				pol, _ := New(name)
				pk := pol.Build(benchEndpoints(n))
				allocs := testing.AllocsPerRun(1000, func() {
					i, err := pk.Pick()
					if err == nil {
						pk.Done(i, time.Millisecond, Success)
					}
				})
				if allocs != 0 {
					t.Errorf("Pick+Done allocates %.1f per call, want 0", allocs)
				}
			})
		}
	}
}

func benchEndpoints(n int) []Endpoint {
	out := make([]Endpoint, n)
	for i := range out {
		out[i] = Endpoint{ID: fmt.Sprintf("ep-%d", i), Addr: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250), Weight: uint32(1 + i%5)}
	}
	return out
}

// BenchmarkPick measures Pick alone at 100 endpoints. Stateful policies keep
// every call in flight (no Done), their worst case for scoring.
func BenchmarkPick(b *testing.B) {
	for _, name := range Names() {
		b.Run("policy="+name, func(b *testing.B) {
			pol, _ := New(name)
			pk := pol.Build(benchEndpoints(100))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pk.Pick(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPickDone measures a whole call's balancer work (Pick then Done)
// at 100 endpoints, from parallel goroutines.
func BenchmarkPickDone(b *testing.B) {
	for _, name := range Names() {
		b.Run("policy="+name, func(b *testing.B) {
			pol, _ := New(name)
			pk := pol.Build(benchEndpoints(100))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i, err := pk.Pick()
					if err != nil {
						b.Error(err)
						return
					}
					pk.Done(i, time.Millisecond, Success)
				}
			})
		})
	}
}
