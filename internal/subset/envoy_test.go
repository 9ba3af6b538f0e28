package subset

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

// The tests in envoy_*_test.go are Envoy's own subset load balancer tests
// (test/extensions/load_balancing_policies/subset/subset_test.cc in
// envoyproxy/envoy), one case per Envoy TEST, named after it, run through
// this package's exported API. Translation rules:
//   - A host "tcp://127.0.0.1:81" is the host with ID "81". Envoy orders the
//     initial hosts by URL (a std::map) and appends added hosts: here hosts
//     are given in that order, so slot order is Envoy's host order.
//   - Envoy's child load balancer is round robin and its tests assert the
//     first picks in turn; here the child is round robin too and a step
//     asserts the whole set of hosts consecutive picks return (a subset's
//     members, each once per turn). nullptr is an error: ErrNoSubset when no
//     subset and no fallback answers.
//   - chooseHost(nullptr) and a context without metadata are a request with
//     no metadata.
//   - Envoy's TEST_P cases run once per update order (removes first, or in
//     one update); here a step that adds and removes runs removes-first and
//     adds-first, as two subtests.
//   - Envoy's mock config falls back to ANY_ENDPOINT unless a test says
//     otherwise (MockLoadBalancerSubsetInfo); so does envoyCase.
//   - Statistics (lb_subsets_created, ...) have no equivalent; the active
//     subset gauge is NumSubsets.
//
// Left out, with the reason: UpdateFailover (priorities: Sextant has one
// priority level), ZoneAware*, *LocalityWeight* (no localities),
// DescribeMetadata, DoesNotCheckHostHealth, GaugesUpdatedOnDestroy,
// DeregisterCallbacks (Envoy internals).

// envoyCase is one Envoy test.
type envoyCase struct {
	name  string
	cfg   Config
	hosts []Host
	steps []envoyStep
	// policy is the child policy's name; round_robin when empty.
	policy string
}

// envoyStep is one action of a case, then one check.
type envoyStep struct {
	// The action, if any.
	upsert    []Host   // added or relabelled hosts (one Upsert)
	remove    []string // removed host IDs (one Remove)
	unhealthy []string // hosts marked unhealthy

	// The check: a pick (md, or req when set) returning exactly the hosts
	// want or the error wantErr; or, with subsets > 0, NumSubsets.
	md      map[string]string
	req     *Request
	want    []string
	wantErr error
	subsets int
}

// host is an Envoy test host: its ID and label pairs.
func host(id string, kv ...string) Host {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return Host{ID: id, Addr: "127.0.0.1:" + id, Weight: 1, Labels: label.FromMap(m)}
}

// listHost is a host whose metadata values are lists.
func listHost(id string, lists map[string][]string) Host {
	return Host{ID: id, Addr: "127.0.0.1:" + id, Weight: 1, Lists: lists}
}

func md(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func pick(m map[string]string, want ...string) envoyStep { return envoyStep{md: m, want: want} }
func pickErr(m map[string]string) envoyStep              { return envoyStep{md: m, wantErr: ErrNoSubset} }
func subsets(n int) envoyStep                            { return envoyStep{subsets: n} }
func upsert(hs ...Host) envoyStep                        { return envoyStep{upsert: hs} }
func remove(ids ...string) envoyStep                     { return envoyStep{remove: ids} }
func modify(add []Host, rm ...string) envoyStep          { return envoyStep{upsert: add, remove: rm} }

func sel(fb Fallback, keys ...string) Selector { return Selector{Keys: keys, FallbackPolicy: fb} }

func runEnvoyCases(t *testing.T, cases []envoyCase) {
	t.Helper()
	for _, c := range cases {
		orders := []string{""}
		for _, st := range c.steps {
			if len(st.upsert) > 0 && len(st.remove) > 0 {
				orders = []string{"removes first", "adds first"}
				break
			}
		}
		for _, order := range orders {
			name := c.name
			if order != "" {
				name += "/" + order
			}
			t.Run(name, func(t *testing.T) { runEnvoyCase(t, c, order == "adds first") })
		}
	}
}

func runEnvoyCase(t *testing.T, c envoyCase, addsFirst bool) {
	cfg := c.cfg
	if cfg.FallbackPolicy == Unset {
		cfg.FallbackPolicy = AnyEndpoint // Envoy's MockLoadBalancerSubsetInfo
	}
	policy := balancer.Policy(balancer.NewRoundRobin())
	if c.policy != "" {
		var err error
		if policy, err = balancer.New(c.policy); err != nil {
			t.Fatal(err)
		}
	}
	lb, err := New(cfg, policy, slices.Clone(c.hosts))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range c.steps {
		where := fmt.Sprintf("step %d", i)
		up := func() {
			if len(st.upsert) > 0 {
				hs := make([]*Host, len(st.upsert))
				for j := range st.upsert {
					hs[j] = &st.upsert[j]
				}
				if err := lb.Upsert(hs...); err != nil {
					t.Fatalf("%s: Upsert: %v", where, err)
				}
			}
		}
		if addsFirst {
			up()
		}
		if len(st.remove) > 0 {
			lb.Remove(st.remove...)
		}
		if !addsFirst {
			up()
		}
		for _, id := range st.unhealthy {
			if err := lb.SetHealth(id, false); err != nil {
				t.Fatalf("%s: SetHealth: %v", where, err)
			}
		}
		switch {
		case st.subsets > 0:
			if got := lb.NumSubsets(); got != st.subsets {
				t.Fatalf("%s: %d active subsets, want %d", where, got, st.subsets)
			}
		case st.md != nil || st.req != nil || st.want != nil || st.wantErr != nil:
			got, err := envoyPicks(lb, st, 2*lb.Len()+2)
			if st.wantErr != nil || st.want == nil {
				want := st.wantErr
				if want == nil {
					want = ErrNoSubset
				}
				if !errors.Is(err, want) {
					t.Fatalf("%s: pick %v: got %v, %v; want error %v", where, st.describe(), got, err, want)
				}
				continue
			}
			want := slices.Clone(st.want)
			sort.Strings(want)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: pick %v: got %v, %v; want %v", where, st.describe(), got, err, want)
			}
		}
	}
}

func (st envoyStep) describe() string {
	if st.req != nil {
		return fmt.Sprintf("metadata %v, fallback_list %v", st.req.Metadata.Map(), len(st.req.FallbackList))
	}
	return fmt.Sprint(st.md)
}

// envoyPicks picks n times and returns the distinct host IDs, sorted.
func envoyPicks(lb *LB, st envoyStep, n int) ([]string, error) {
	seen := map[string]bool{}
	for range n {
		var r Result
		var err error
		if st.req != nil {
			r, err = lb.PickRequest(st.req)
		} else {
			r, err = lb.Pick(st.md)
		}
		if err != nil {
			return nil, err
		}
		r.Done(time.Millisecond, balancer.Success)
		seen[r.Host.ID] = true
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}
