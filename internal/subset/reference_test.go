package subset

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

// ref is the brute-force model: it filters every host by the rules of
// docs/subset.md, with no index, table or snapshot.
type ref struct {
	cfg     Config
	hosts   map[string]*Host
	healthy map[string]bool
	added   map[string]int // when each host joined: single_host_per_subset takes the earliest
}

func (r *ref) has(h *Host, k, v string) bool {
	if x, ok := h.Labels.Get(k); ok {
		return x == v
	}
	return r.cfg.ListAsAny && slices.Contains(h.Lists[k], v)
}

func (r *ref) matching(md map[string]string) []*Host {
	var out []*Host
	for _, h := range r.hosts {
		ok := true
		for k, v := range md {
			ok = ok && r.has(h, k, v)
		}
		if ok {
			out = append(out, h)
		}
	}
	return out
}

func sameKeys(keys []string, md map[string]string) bool {
	if len(keys) != len(md) {
		return false
	}
	for _, k := range keys {
		if _, ok := md[k]; !ok {
			return false
		}
	}
	return true
}

// chooseRequest is choose for a request with a fallback list: under
// FALLBACK_LIST each entry merged over md is tried in order.
func (r *ref) chooseRequest(md map[string]string, list []map[string]string) ([]string, error) {
	if r.cfg.MetadataFallbackPolicy != FallbackList || len(list) == 0 {
		return r.choose(md)
	}
	var err error
	for _, over := range list {
		merged := maps.Clone(md)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, over)
		var ids []string
		if ids, err = r.choose(merged); err == nil {
			return ids, nil
		}
	}
	return nil, err
}

// narrow is allow_redundant_keys by brute force: the request cut down to
// the keys of the first of the largest selectors whose keys it all names.
func (r *ref) narrow(md map[string]string) map[string]string {
	sels := slices.Clone(r.cfg.Selectors)
	slices.SortStableFunc(sels, func(a, b Selector) int { return len(b.Keys) - len(a.Keys) })
	for _, s := range sels {
		sub := map[string]string{}
		for _, k := range s.Keys {
			if v, ok := md[k]; ok {
				sub[k] = v
			}
		}
		if len(sub) == len(s.Keys) {
			return sub
		}
	}
	return md
}

// choose returns the IDs a pick may return, or the error it must return.
func (r *ref) choose(md map[string]string) ([]string, error) {
	for len(md) > 0 {
		if r.cfg.AllowRedundantKeys {
			md = r.narrow(md)
		}
		si := slices.IndexFunc(r.cfg.Selectors, func(s Selector) bool { return sameKeys(s.Keys, md) })
		if si < 0 {
			break
		}
		sel := r.cfg.Selectors[si]
		if m := r.matching(md); len(m) > 0 {
			if sel.SingleHostPerSubset {
				sort.Slice(m, func(i, j int) bool { return r.added[m[i].ID] < r.added[m[j].ID] })
				m = m[:1]
			}
			return r.in(m)
		}
		switch sel.FallbackPolicy {
		case NoFallback:
			return nil, ErrNoSubset
		case AnyEndpoint:
			return r.in(r.matching(nil))
		case DefaultSubset:
			return r.in(r.matching(r.cfg.DefaultSubset))
		case KeysSubset:
			sub := map[string]string{}
			for _, k := range sel.FallbackKeysSubset {
				sub[k] = md[k]
			}
			md = sub
			continue
		}
		break
	}
	switch r.cfg.FallbackPolicy {
	case AnyEndpoint:
		return r.in(r.matching(nil))
	case DefaultSubset:
		return r.in(r.matching(r.cfg.DefaultSubset))
	}
	return nil, ErrNoSubset
}

func (r *ref) in(members []*Host) ([]string, error) {
	ids := r.healthyIDs(members)
	if len(ids) == 0 && r.cfg.PanicModeAny {
		ids = r.healthyIDs(r.matching(nil))
	}
	if len(ids) == 0 {
		return nil, ErrNoHealthyHost
	}
	return ids, nil
}

func (r *ref) healthyIDs(hs []*Host) []string {
	var ids []string
	for _, h := range hs {
		if r.healthy[h.ID] {
			ids = append(ids, h.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// numSubsets counts the non-empty (selector, values) pairs by enumeration.
func (r *ref) numSubsets() int {
	seen := map[string]bool{}
	for si, s := range r.cfg.Selectors {
		for _, h := range r.hosts {
			combos := []string{fmt.Sprint(si)}
			for _, k := range s.Keys {
				var vs []string
				if v, ok := h.Labels.Get(k); ok {
					vs = []string{v}
				} else if r.cfg.ListAsAny {
					vs = h.Lists[k]
				}
				var next []string
				for _, c := range combos {
					for _, v := range vs {
						next = append(next, c+"\x00"+k+"="+v)
					}
				}
				combos = next
			}
			for _, c := range combos {
				seen[c] = true
			}
		}
	}
	return len(seen)
}

// refKeys: "e" has many values, so small sets are partitioned by each
// host's own value (the high-cardinality path of the build).
var refKeys = []string{"a", "b", "c", "d", "e"}

func randVal(rng *rand.Rand, key string) string {
	if key == "e" {
		return fmt.Sprint(rng.IntN(40))
	}
	return fmt.Sprint(rng.IntN(3))
}

func randConfig(rng *rand.Rand) Config {
	var c Config
	c.ListAsAny = rng.IntN(2) == 0
	c.PanicModeAny = rng.IntN(3) == 0
	c.FallbackPolicy = []Fallback{Unset, NoFallback, AnyEndpoint, DefaultSubset}[rng.IntN(4)]
	c.AllowRedundantKeys = rng.IntN(3) == 0
	if rng.IntN(2) == 0 {
		c.MetadataFallbackPolicy = FallbackList
	}
	if rng.IntN(2) == 0 {
		c.DefaultSubset = map[string]string{}
		for range rng.IntN(3) {
			k := refKeys[rng.IntN(len(refKeys))]
			c.DefaultSubset[k] = randVal(rng, k)
		}
	}
	seen := map[string]bool{}
	for range 1 + rng.IntN(6) {
		var keys []string
		for _, k := range refKeys {
			if rng.IntN(2) == 0 {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 || seen[strings.Join(keys, ",")] {
			continue
		}
		seen[strings.Join(keys, ",")] = true
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		s := Selector{Keys: keys}
		s.FallbackPolicy = []Fallback{Unset, NoFallback, AnyEndpoint, DefaultSubset, KeysSubset}[rng.IntN(5)]
		if s.FallbackPolicy == KeysSubset {
			if len(keys) < 2 {
				s.FallbackPolicy = Unset
			} else {
				s.FallbackKeysSubset = slices.Clone(keys[:1+rng.IntN(len(keys)-1)])
			}
		}
		s.SingleHostPerSubset = rng.IntN(3) == 0
		c.Selectors = append(c.Selectors, s)
	}
	return c
}

func randHost(rng *rand.Rand, id string) *Host {
	h := &Host{ID: id, Addr: id + ":80", Weight: uint32(1 + rng.IntN(3))}
	labels := map[string]string{}
	for _, k := range refKeys {
		switch rng.IntN(8) {
		case 0, 1: // missing
		case 2:
			if h.Lists == nil {
				h.Lists = map[string][]string{}
			}
			for range rng.IntN(3) + 1 {
				h.Lists[k] = append(h.Lists[k], randVal(rng, k))
			}
		default:
			labels[k] = randVal(rng, k)
		}
	}
	h.Labels = label.FromMap(labels)
	return h
}

func randRequest(rng *rand.Rand, c Config) map[string]string {
	md := map[string]string{}
	switch rng.IntN(6) {
	case 0: // arbitrary keys
		for _, k := range refKeys {
			if rng.IntN(2) == 0 {
				md[k] = randVal(rng, k)
			}
		}
	case 1:
		md["zz"] = "0" // a key no selector has
	default:
		if len(c.Selectors) > 0 {
			for _, k := range c.Selectors[rng.IntN(len(c.Selectors))].Keys {
				md[k] = randVal(rng, k)
				if rng.IntN(10) == 0 {
					md[k] = "9" // a value no host has
				}
			}
		}
	}
	return md
}

// randFallbacks is a fallback list of up to three entries, each naming a
// few keys (or none).
func randFallbacks(rng *rand.Rand) []map[string]string {
	var list []map[string]string
	for range rng.IntN(4) {
		e := map[string]string{}
		for _, k := range refKeys {
			if rng.IntN(3) == 0 {
				e[k] = randVal(rng, k)
			}
		}
		list = append(list, e)
	}
	return list
}

// TestAgainstReference checks every pick against the brute-force model over
// random configurations, hosts and update sequences. Seeded: a failure prints
// the seed; set it in seeds to replay.
func TestAgainstReference(t *testing.T) {
	seeds := []uint64{}
	for i := range uint64(300) {
		seeds = append(seeds, 1000+i)
	}
	deadline := time.Now().Add(8 * time.Second)
	for _, seed := range seeds {
		if time.Now().After(deadline) {
			t.Logf("stopped at seed %d: time bound", seed)
			break
		}
		runReference(t, seed)
		if t.Failed() {
			return
		}
	}
}

func runReference(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	cfg := randConfig(rng)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("seed %d: random config invalid: %v", seed, err)
	}
	var hosts []Host
	nextID := 0
	for range rng.IntN(60) {
		hosts = append(hosts, *randHost(rng, fmt.Sprintf("h%d", nextID)))
		nextID++
	}
	lb, err := New(cfg, balancer.NewRoundRobin(), hosts)
	if err != nil {
		t.Fatalf("seed %d: New: %v", seed, err)
	}
	r := &ref{cfg: cfg, hosts: map[string]*Host{}, healthy: map[string]bool{}, added: map[string]int{}}
	for i := range hosts {
		r.hosts[hosts[i].ID] = &hosts[i]
		r.healthy[hosts[i].ID] = true
		r.added[hosts[i].ID] = len(r.added)
	}
	ids := func() []string {
		var out []string
		for id := range r.hosts {
			out = append(out, id)
		}
		sort.Strings(out)
		return out
	}
	for step := range 40 {
		check(t, seed, step, lb, r, rng)
		if t.Failed() {
			return
		}
		existing := ids()
		switch op := rng.IntN(6); {
		case op == 0 || len(existing) == 0:
			var batch []*Host
			for range 1 + rng.IntN(3) {
				h := randHost(rng, fmt.Sprintf("h%d", nextID))
				nextID++
				batch = append(batch, h)
				r.hosts[h.ID], r.healthy[h.ID] = h, true
				r.added[h.ID] = len(r.added)
			}
			if err := lb.Upsert(batch...); err != nil {
				t.Fatalf("seed %d step %d: Upsert: %v", seed, step, err)
			}
		case op == 1: // relabel
			id := existing[rng.IntN(len(existing))]
			h := randHost(rng, id)
			r.hosts[id] = h
			if err := lb.Upsert(h); err != nil {
				t.Fatalf("seed %d step %d: Upsert: %v", seed, step, err)
			}
		case op == 2:
			id := existing[rng.IntN(len(existing))]
			delete(r.hosts, id)
			delete(r.healthy, id)
			lb.Remove(id)
		case op == 3 || op == 4:
			id := existing[rng.IntN(len(existing))]
			r.healthy[id] = !r.healthy[id]
			if err := lb.SetHealth(id, r.healthy[id]); err != nil {
				t.Fatalf("seed %d step %d: SetHealth: %v", seed, step, err)
			}
		default:
			id := existing[rng.IntN(len(existing))]
			if err := lb.SetWeight(id, uint32(rng.IntN(5))); err != nil {
				t.Fatalf("seed %d step %d: SetWeight: %v", seed, step, err)
			}
		}
	}
}

func check(t *testing.T, seed uint64, step int, lb *LB, r *ref, rng *rand.Rand) {
	t.Helper()
	if got, want := lb.NumSubsets(), r.numSubsets(); got != want {
		t.Fatalf("seed %d step %d: %d subsets, reference has %d", seed, step, got, want)
	}
	if got, want := lb.Len(), len(r.hosts); got != want {
		t.Fatalf("seed %d step %d: Len %d, want %d", seed, step, got, want)
	}
	for range 15 {
		md := randRequest(rng, r.cfg)
		// Half the requests go through PickRequest, with a fallback list.
		var req *Request
		var list []map[string]string
		if rng.IntN(2) == 0 {
			list = randFallbacks(rng)
			req = &Request{Metadata: label.FromMap(md)}
			for _, e := range list {
				req.FallbackList = append(req.FallbackList, label.FromMap(e))
			}
		}
		pick := func() (Result, error) {
			if req != nil {
				return lb.PickRequest(req)
			}
			return lb.Pick(md)
		}
		want, wantErr := r.chooseRequest(md, list)
		if wantErr != nil {
			if _, err := pick(); !errors.Is(err, wantErr) {
				t.Fatalf("seed %d step %d: Pick(%v, fallbacks %v) err = %v, want %v\nconfig %+v", seed, step, md, list, err, wantErr, r.cfg)
			}
			continue
		}
		// Round robin over the chosen subset visits each member once in
		// len(want) consecutive picks: the picked set must equal want.
		var got []string
		for range want {
			res, err := pick()
			if err != nil {
				t.Fatalf("seed %d step %d: Pick(%v, fallbacks %v): %v, want one of %v\nconfig %+v", seed, step, md, list, err, want, r.cfg)
			}
			res.Done(time.Millisecond, balancer.Success)
			got = append(got, res.Host.ID)
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d step %d: Pick(%v, fallbacks %v) chose %v, want %v\nconfig %+v", seed, step, md, list, got, want, r.cfg)
		}
	}
}
