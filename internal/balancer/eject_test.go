package balancer

import (
	"slices"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1000, 0)} }
func picks(pk Picker, n int) map[int]int {
	got := map[int]int{}
	for range n {
		i, err := pk.Pick()
		if err != nil {
			got[-1]++
			continue
		}
		got[i]++
		pk.Done(i, time.Millisecond, Success)
	}
	return got
}

func TestEjectionBackoff(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			pol, err := New(name, WithClock(clk.now), WithOutlierEjection(EjectionConfig{
				ConsecutiveFailures: 3, BaseEjection: 10 * time.Second, MaxEjection: 25 * time.Second,
			}))
			if err != nil {
				t.Fatal(err)
			}
			pk := pol.Build(eps(1, 1, 1))
			fail := func() {
				for range 3 {
					pk.Done(1, time.Millisecond, Failed)
				}
			}
			// Balance the Done calls above with picks so in-flight counts
			// stay sane for stateful policies.
			for range 3 {
				pk.Pick()
			}
			fail()
			if got := picks(pk, 300); got[1] != 0 {
				t.Fatalf("ejected endpoint picked %d times", got[1])
			}
			if n := pol.(EjectionCounter).Ejections(); n != 1 {
				t.Fatalf("Ejections() = %d after one ejection", n)
			}
			clk.add(10 * time.Second) // first ejection: 1 x base
			if got := picks(pk, 300); got[1] == 0 {
				t.Fatal("endpoint not back after its first ejection")
			}
			for range 3 {
				pk.Pick()
			}
			fail()
			clk.add(19 * time.Second) // second in a row: 2 x base
			if got := picks(pk, 300); got[1] != 0 {
				t.Fatalf("second ejection ended before 2 x base (picked %d times)", got[1])
			}
			clk.add(time.Second)
			if got := picks(pk, 300); got[1] == 0 {
				t.Fatal("endpoint not back after 2 x base")
			}
			for range 3 {
				pk.Pick()
			}
			fail()
			clk.add(25 * time.Second) // third: 3 x base capped at MaxEjection
			if got := picks(pk, 300); got[1] == 0 {
				t.Fatal("ejection not capped at MaxEjection")
			}
		})
	}
}

func TestEjectionIgnoresRejectionsAndSuccessResets(t *testing.T) {
	clk := newFakeClock()
	pol, _ := New("round_robin", WithClock(clk.now), WithOutlierEjection(EjectionConfig{ConsecutiveFailures: 2}))
	pk := pol.Build(eps(1, 1))
	pk.Done(0, 0, Rejected)
	pk.Done(0, 0, Rejected)
	pk.Done(0, 0, Rejected)
	pk.Done(1, 0, Failed)
	pk.Done(1, 0, Success)
	pk.Done(1, 0, Timeout)
	if got := picks(pk, 100); got[0] == 0 || got[1] == 0 {
		t.Fatalf("picks %v: nothing should be ejected", got)
	}
}

func TestEjectionCap(t *testing.T) {
	clk := newFakeClock()
	pol, _ := New("random", WithClock(clk.now), WithOutlierEjection(EjectionConfig{ConsecutiveFailures: 1, MaxEjectedPercent: 50}))
	pk := pol.Build(eps(1, 1, 1, 1))
	for i := range 4 {
		pk.Done(i, 0, Failed)
	}
	got := picks(pk, 400)
	if len(got) != 2 || got[-1] != 0 {
		t.Fatalf("picks %v: want exactly 2 of 4 endpoints left (50%% cap)", got)
	}
}

func TestEjectionSurvivesRebuild(t *testing.T) {
	clk := newFakeClock()
	pol, _ := New("round_robin", WithClock(clk.now), WithOutlierEjection(EjectionConfig{ConsecutiveFailures: 1}))
	pk := pol.Build(eps(1, 1, 1))
	pk.Done(1, 0, Failed) // ejects "b"
	pk2 := pol.Build([]Endpoint{{ID: "b"}, {ID: "c"}})
	if got := picks(pk2, 100); got[0] != 0 {
		t.Fatalf("ejected endpoint b picked %d times after a rebuild", got[0])
	}
}

// TestEjectionSplitLocalOrigin: with SplitLocalOrigin an endpoint is
// ejected for calls that could not reach it (Unreachable, Timeout) in a
// row, an answer of any kind resets that count, and with
// NoConsecutiveFailures its error answers never eject it. Without the
// split, Unreachable counts as Failed.
func TestEjectionSplitLocalOrigin(t *testing.T) {
	split := EjectionConfig{SplitLocalOrigin: true, ConsecutiveLocalOriginFailures: 3, NoConsecutiveFailures: true}
	for _, tc := range []struct {
		name     string
		cfg      EjectionConfig
		outcomes []Outcome // reported for endpoint "b"
		ejected  bool
	}{
		{"unreachable in a row", split, []Outcome{Unreachable, Timeout, Unreachable}, true},
		{"an error answer resets", split, []Outcome{Unreachable, Unreachable, Failed, Unreachable, Unreachable}, false},
		{"a rejection resets", split, []Outcome{Unreachable, Unreachable, Rejected, Unreachable, Unreachable}, false},
		{"error answers do not eject", split, []Outcome{Failed, Failed, Failed, Failed, Failed, Failed}, false},
		{"local origin off", EjectionConfig{SplitLocalOrigin: true, NoLocalOriginFailures: true, ConsecutiveFailures: 2},
			[]Outcome{Unreachable, Unreachable, Unreachable, Unreachable, Unreachable, Unreachable}, false},
		{"split: error answers still count", EjectionConfig{SplitLocalOrigin: true, ConsecutiveFailures: 2},
			[]Outcome{Failed, Unreachable, Failed}, true},
		{"unsplit: unreachable is a failure", EjectionConfig{ConsecutiveFailures: 3}, []Outcome{Unreachable, Failed, Timeout}, true},
		{"unsplit: off", EjectionConfig{ConsecutiveFailures: 3, NoConsecutiveFailures: true}, []Outcome{Unreachable, Failed, Timeout}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			pol, err := New("round_robin", WithClock(clk.now), WithOutlierEjection(tc.cfg))
			if err != nil {
				t.Fatal(err)
			}
			pk := pol.Build(eps(1, 1, 1))
			for _, o := range tc.outcomes {
				pk.Done(1, time.Millisecond, o)
			}
			got := picks(pk, 30)
			want := []string(nil)
			if tc.ejected {
				want = []string{"b"}
			}
			if ej := pol.(EjectedLister).Ejected(); (got[1] == 0) != tc.ejected || !slices.Equal(ej, want) {
				t.Fatalf("picks %v, Ejected() %v: want ejected %v", got, ej, tc.ejected)
			}
		})
	}
}

// TestEjectionNeverEmptiesASetOfOne: a lone endpoint is counted as ejected
// but still picked, so that it takes calls as soon as it answers again
// (it refused connections while it restarted) instead of after its
// ejection; in a larger set it is avoided.
func TestEjectionNeverEmptiesASetOfOne(t *testing.T) {
	clk := newFakeClock()
	pol, err := New("round_robin", WithClock(clk.now), WithOutlierEjection(EjectionConfig{
		SplitLocalOrigin: true, ConsecutiveLocalOriginFailures: 2, NoConsecutiveFailures: true}))
	if err != nil {
		t.Fatal(err)
	}
	lone := pol.Build(eps(1))
	lone.Done(0, 0, Unreachable)
	lone.Done(0, 0, Unreachable)
	if got := pol.(EjectedLister).Ejected(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Ejected() = %v, want [a]", got)
	}
	if got := picks(lone, 10); got[0] != 10 {
		t.Fatalf("lone ejected endpoint: picks %v, want all 10", got)
	}
	if got := picks(pol.Build(eps(1, 1)), 10); got[0] != 0 || got[1] != 10 {
		t.Fatalf("ejected endpoint beside another: picks %v, want all 10 to the other", got)
	}
}

// TestUneject: a passing active health check ends an ejection at once.
func TestUneject(t *testing.T) {
	now := time.Unix(1000, 0)
	p := Eject(NewRoundRobin(), EjectionConfig{ConsecutiveFailures: 1, MaxEjectedPercent: 100}, func() time.Time { return now })
	pk := p.Build([]Endpoint{{ID: "a"}, {ID: "b"}})
	pk.Done(0, 0, Failed)
	if got := p.(EjectedLister).Ejected(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("ejected %v", got)
	}
	u := p.(interface{ Uneject(string) bool })
	if u.Uneject("b") {
		t.Error("b was not ejected")
	}
	if !u.Uneject("a") {
		t.Fatal("a was ejected")
	}
	if got := p.(EjectedLister).Ejected(); len(got) != 0 {
		t.Fatalf("after uneject: %v", got)
	}
	for range 4 {
		if i, err := pk.Pick(); err != nil || i < 0 {
			t.Fatalf("pick %d %v", i, err)
		}
	}
}
