package gateway

import (
	"fmt"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// TestDecodeRetryPriority: Envoy's previous_priorities retry priority is
// read with its update_frequency (by name or by type); none leaves
// retries as they were; an update_frequency of 0, a config of another
// type and another retry priority are refused naming the field.
func TestDecodeRetryPriority(t *testing.T) {
	prio := func(name string, m *previouspriorities.PreviousPrioritiesConfig) *route.RetryPolicy_RetryPriority {
		p := &route.RetryPolicy_RetryPriority{Name: name}
		if m != nil {
			a, err := anypb.New(m)
			if err != nil {
				t.Fatal(err)
			}
			p.ConfigType = &route.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: a}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		p    *route.RetryPolicy_RetryPriority
		want int
	}{
		{"none", nil, 0},
		{"istio's", prio(previousPrioritiesName, &previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 2}), 2},
		{"by type", prio("", &previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 1}), 1},
	} {
		s, err := decodeRetry(&route.RetryPolicy{RetryOn: "5xx", RetryPriority: tc.p}, "r")
		if err != nil || s.otherLevel != tc.want {
			t.Errorf("%s: otherLevel %d (%v), want %d", tc.name, s.otherLevel, err, tc.want)
		}
	}
	other, _ := anypb.New(&emptypb.Empty{})
	for _, tc := range []struct {
		name, want string
		p          *route.RetryPolicy_RetryPriority
	}{
		{"no config", "r.retry_priority.typed_config.update_frequency: 0: must be above 0", prio(previousPrioritiesName, nil)},
		{"frequency 0", "update_frequency: 0: must be above 0", prio(previousPrioritiesName, &previouspriorities.PreviousPrioritiesConfig{})},
		{"another type", "r.retry_priority.typed_config", &route.RetryPolicy_RetryPriority{Name: previousPrioritiesName,
			ConfigType: &route.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: other}}},
		{"another priority", `r.retry_priority.name: "envoy.retry_priorities.other" not supported`, prio("envoy.retry_priorities.other", nil)},
	} {
		if _, err := decodeRetry(&route.RetryPolicy{RetryPriority: tc.p}, "r"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestPickSkipsLevels: a pick leaving out levels never picks from them
// and reports the level it picked from; leaving out every level with
// health falls back to the unmodified load (level 0 while it is healthy);
// and it allocates nothing.
func TestPickSkipsLevels(t *testing.T) {
	p, err := balancer.New("round_robin")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := newLevelLB(subset.Config{FallbackPolicy: subset.AnyEndpoint}, p, false)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []*subset.Host
	var places []hostPlace
	level := map[string]uint32{}
	for i, lv := range []uint32{0, 0, 2, 3} {
		a := fmt.Sprintf("10.0.0.%d:80", i+1)
		hosts = append(hosts, &subset.Host{ID: a, Addr: a, Weight: 1})
		places = append(places, hostPlace{level: lv})
		level[a] = lv
	}
	if err := lb.upsert(hosts, places); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		skip uint64
		want uint32
	}{
		{0, 0},                         // level 0 healthy: all of the load
		{levelBit(0), 2},               // the next level with hosts
		{levelBit(0) | levelBit(2), 3}, // and the next
		{levelBit(0) | levelBit(2) | levelBit(3), 0}, // none left: the unmodified load
		{levelBit(1), 0}, // an empty level left out changes nothing
	} {
		for range 50 {
			res, lv, err := lb.pickSkip(nil, 0, false, tc.skip)
			if err != nil {
				t.Fatal(err)
			}
			if lv != tc.want || level[res.Host.ID] != tc.want {
				t.Fatalf("skip %b: picked %s of level %d (reported %d), want level %d", tc.skip, res.Host.ID, level[res.Host.ID], lv, tc.want)
			}
			res.Done(0, balancer.Success)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		res, _, _ := lb.pickSkip(nil, 0, false, levelBit(0))
		res.Done(0, balancer.Success)
	}); n != 0 {
		t.Fatalf("a pick leaving out a level allocates %v times", n)
	}
}

// TestLevelsLeftOut: Envoy's update_frequency: with 2 (Istio's) the
// first retry keeps the unmodified load, the second leaves out the levels
// of both attempts before it, the third keeps that; with 1 every retry
// leaves out every level tried; without a retry priority none is.
func TestLevelsLeftOut(t *testing.T) {
	for _, tc := range []struct {
		freq   int
		levels []uint32 // level of each attempt
		want   []uint64 // the skip of each attempt
	}{
		{0, []uint32{0, 0, 1}, []uint64{0, 0, 0}},
		{2, []uint32{0, 0, 2, 3, 4}, []uint64{0, 0, 0b1, 0b1, 0b1101}},
		{1, []uint32{0, 2, 3}, []uint64{0, 0b1, 0b101}},
		{3, []uint32{0, 1, 0, 2}, []uint64{0, 0, 0, 0b11}},
	} {
		k := call{retry: &retrySpec{otherLevel: tc.freq}}
		for i, lv := range tc.levels {
			k.retries = i
			if got := k.levelsLeftOut(); got != tc.want[i] {
				t.Fatalf("update_frequency %d, attempt %d: leaves out %b, want %b", tc.freq, i+1, got, tc.want[i])
			}
			k.levels |= levelBit(lv)
		}
	}
}
