package balancer

import (
	"errors"
	"testing"
	"time"
)

func newSimPolicy(t *testing.T, name string, s *simulation) Policy {
	t.Helper()
	p, err := New(name, WithClock(s.clock))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// On the race's first phase (128 callers, 127 permits) adaptive must come
// close to the ceiling and beat every baseline.
func TestAdaptiveRaceSim(t *testing.T) {
	const dur = 5 * time.Second
	ratios := map[string]float64{}
	for _, name := range Names() {
		s := raceSim(7)
		pk := newSimPolicy(t, name, s).Build(raceEndpoints())
		s.run(pk, time.Second) // warm-up
		r := s.run(pk, dur)
		ratios[name] = float64(r.successes) / (s.ceiling() * dur.Seconds())
		t.Logf("%-22s ratio %.3f rejections %5d sheds %d", name, ratios[name], r.rejections, r.sheds)
	}
	if ratios["adaptive"] < 0.96 {
		t.Errorf("adaptive ratio %.3f, want >= 0.96", ratios["adaptive"])
	}
	for name, r := range ratios {
		if name != "adaptive" && r > ratios["adaptive"] {
			t.Errorf("%s ratio %.3f beats adaptive's %.3f", name, r, ratios["adaptive"])
		}
	}
}

// When capacity moves between providers, the limit estimates follow and
// throughput is back to 90% of the new ceiling within a second.
func TestAdaptiveFollowsCapacityChange(t *testing.T) {
	s := raceSim(3)
	pol := newSimPolicy(t, "adaptive", s)
	pk := pol.Build(raceEndpoints())
	s.run(pk, 3*time.Second)
	// The race's phase 0 -> 1 at scale 8: small and large trade permits.
	s.provs[0].limit, s.provs[0].meanMs = 18, 56.3
	s.provs[1].limit, s.provs[1].meanMs = 49, 47.1
	s.provs[2].limit, s.provs[2].meanMs = 60, 48.1
	r := s.run(pk, 3*time.Second)
	target := 0.9 * s.ceiling() / 10 // per 100 ms bin
	recovered := -1
	for k := 0; k+3 <= len(r.bins); k++ {
		if float64(r.bins[k]+r.bins[k+1]+r.bins[k+2])/3 >= target {
			recovered = k * 100
			break
		}
	}
	if recovered < 0 || recovered > 1000 {
		t.Errorf("back to 90%% of the new ceiling after %d ms, want <= 1000 (bins %v)", recovered, r.bins)
	}
	states := pk.(*adaptivePicker).states
	for i, want := range []int64{18, 49, 60} {
		if got := states[i].limit.Load(); got < want-3 || got > want+3 {
			t.Errorf("endpoint %d: limit estimate %d, want %d+-3", i, got, want)
		}
	}
}

// The least-request trap: a full endpoint that rejects at once looks idle.
// Adaptive learns its thread bound from the rejections and stops sending
// it more than it holds.
func TestAdaptiveAvoidsRejectingEndpoint(t *testing.T) {
	run := func(name string) simResult {
		s := &simulation{
			provs: []*simProv{
				{threads: 4, limit: 4, meanMs: 20},
				{threads: 200, limit: 100, meanMs: 50},
			},
			clients: 80,
			rng:     raceSim(1).rng,
		}
		pk := newSimPolicy(t, name, s).Build([]Endpoint{{ID: "tiny", Weight: 1}, {ID: "big", Weight: 1}})
		return s.run(pk, 2*time.Second)
	}
	lr, ad := run("least_request"), run("adaptive")
	t.Logf("least_request: %d successes, %d rejections; adaptive: %d successes, %d rejections",
		lr.successes, lr.rejections, ad.successes, ad.rejections)
	if ad.rejections*50 > ad.successes {
		t.Errorf("adaptive: %d rejections for %d successes, want < 2%% (one thread probe per window)", ad.rejections, ad.successes)
	}
	if lr.rejections < 10*max(ad.rejections, 1) {
		t.Errorf("least_request rejections %d not >> adaptive's %d: the trap test lost its point", lr.rejections, ad.rejections)
	}
}

func TestAdaptiveShedsWhenAllFull(t *testing.T) {
	clock := time.Unix(0, 0)
	pol, _ := New("adaptive", WithClock(func() time.Time { return clock }))
	pk := pol.Build([]Endpoint{{ID: "a"}})
	for range 3 {
		if _, err := pk.Pick(); err != nil {
			t.Fatal(err)
		}
	}
	// The third call is refused with two ahead of it: the endpoint holds 2.
	clock = clock.Add(time.Millisecond)
	pk.Done(0, 0, Rejected)
	if _, err := pk.Pick(); !errors.Is(err, ErrShed) {
		t.Fatalf("Pick with the only endpoint full: err = %v, want ErrShed", err)
	}
	pk.Done(0, time.Millisecond, Success)
	if i, err := pk.Pick(); err != nil || i != 0 {
		t.Fatalf("Pick after a call ended = %d, %v; want 0, nil", i, err)
	}
}

// A rejection is overload, not speed: it must not lower the latency estimate
// nor raise the limit.
func TestAdaptiveRejectionIsNotSpeed(t *testing.T) {
	clock := time.Unix(0, 0)
	pol, _ := New("adaptive", WithClock(func() time.Time { return clock }))
	pk := pol.Build([]Endpoint{{ID: "a"}}).(*adaptivePicker)
	st := pk.states[0]
	pk.Pick()
	clock = clock.Add(50 * time.Millisecond)
	pk.Done(0, 50*time.Millisecond, Success)
	lat, lim := st.latency.Load(), st.limit.Load()
	for range 20 {
		pk.Pick()
		clock = clock.Add(100 * time.Microsecond)
		pk.Done(0, 100*time.Microsecond, Rejected)
	}
	if st.latency.Load() != lat {
		t.Errorf("latency estimate moved on rejections: %d -> %d", lat, st.latency.Load())
	}
	if st.limit.Load() > lim {
		t.Errorf("limit rose on rejections: %d -> %d", lim, st.limit.Load())
	}
}

// A rejection reported late (its Done delayed, as by a starved caller)
// matches an old call with a small rank; it must not collapse the thread
// bound below the limit, or Pick would shed with capacity to spare.
func TestAdaptiveLateRejectionDoesNotCollapse(t *testing.T) {
	clock := time.Unix(0, 0)
	pol, _ := New("adaptive", WithClock(func() time.Time { return clock }))
	pk := pol.Build([]Endpoint{{ID: "a"}}).(*adaptivePicker)
	st := pk.states[0]
	for range 40 {
		pk.Pick()
		clock = clock.Add(time.Millisecond)
	}
	// Establish a limit of about 30 from ranks.
	for range 30 {
		pk.Done(0, 10*time.Millisecond, Success)
		pk.Pick()
	}
	lim := st.limit.Load()
	if lim < 10 {
		t.Fatalf("setup: limit %d, want a learned limit", lim)
	}
	clock = clock.Add(time.Second)
	pk.Done(0, time.Second, Rejected) // matches the oldest call: rank 1
	if got := st.threads.Load(); got < lim {
		t.Fatalf("threads %d after a late rejection, want >= limit %d", got, lim)
	}
}

// Learned state is keyed by endpoint ID and survives a rebuild, whatever
// the order of the new set.
func TestLearnedStateSurvivesRebuild(t *testing.T) {
	s := raceSim(5)
	pol := newSimPolicy(t, "adaptive", s)
	pk := pol.Build(raceEndpoints()).(*adaptivePicker)
	s.run(pk, 3*time.Second)
	before := map[string]int64{}
	for i, ep := range raceEndpoints() {
		before[ep.ID] = pk.states[i].limit.Load()
	}
	eps := []Endpoint{{ID: "large"}, {ID: "new"}, {ID: "small"}}
	pk2 := pol.Build(eps).(*adaptivePicker)
	for i, ep := range eps {
		got := pk2.states[i].limit.Load()
		switch ep.ID {
		case "new":
			if got != startLimit {
				t.Errorf("new endpoint starts with limit %d, want %d", got, startLimit)
			}
		default:
			if got != before[ep.ID] || got <= startLimit {
				t.Errorf("%s: limit %d after rebuild, want the learned %d", ep.ID, got, before[ep.ID])
			}
		}
	}
	// Done through the replaced picker still lands on the shared state.
	idx, _ := pk.Pick()
	in := pk.states[idx].inflight.Load()
	pk.Done(idx, time.Millisecond, Success)
	if pk.states[idx].inflight.Load() != in-1 {
		t.Error("Done through an old picker did not release its call")
	}
}
