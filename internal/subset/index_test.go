package subset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

// confusable returns strings of every length class of fingerprint (0-3,
// 4-7, 8-16, longer) that differ only in the middle, at one end, or in
// length, to catch a fingerprint or hash that confuses two strings.
func confusable(rng *rand.Rand) string {
	n := rng.IntN(40)
	b := []byte(strings.Repeat("x", n))
	if n > 0 && rng.IntN(2) == 0 {
		b[rng.IntN(n)] = byte('a' + rng.IntN(3))
	}
	return string(b)
}

// TestKeyTableAgainstMap: keyTable.id finds exactly the configured keys.
func TestKeyTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 200 {
		set := map[string]int{}
		var names []string
		for range 1 + rng.IntN(MaxKeys) {
			if k := confusable(rng); k != "" && set[k] == 0 {
				set[k] = 1
				names = append(names, k)
			}
		}
		slices.Sort(names)
		for i, k := range names {
			set[k] = i
		}
		kt := newKeyTable(names)
		for range 200 {
			k := confusable(rng)
			want, ok := set[k]
			if !ok {
				want = -1
			}
			if got := kt.id(k); got != want {
				t.Fatalf("round %d: id(%q) = %d, want %d (keys %q)", round, k, got, want, names)
			}
		}
	}
}

// TestIndexAgainstMap: the build's index holds, for every configured key
// and value, exactly the slots of the hosts having it (as a label, or in a
// list under list_as_any), whatever the strings' lengths.
func TestIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for round := range 100 {
		var keys []string
		for n := 1 + rng.IntN(6); len(keys) < n; {
			if k := confusable(rng); k != "" && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		cfg := Config{ListAsAny: rng.IntN(2) == 0}
		for _, k := range keys {
			cfg.Selectors = append(cfg.Selectors, Selector{Keys: []string{k}})
		}
		// Values: confusable ones, and two frequent ones that turn into
		// bitsets, frequent in one stretch of slots only.
		hosts := make([]Host, rng.IntN(2000))
		denseFrom, denseTo := rng.IntN(len(hosts)+1), rng.IntN(len(hosts)+1)
		var slot int
		value := func() string {
			if slot >= denseFrom && slot < denseTo && rng.IntN(3) != 0 || rng.IntN(24) == 0 {
				return []string{"v1", "v2"}[rng.IntN(2)]
			}
			return confusable(rng)
		}
		want := map[string]map[string][]uint32{} // key -> value -> slots
		for i := range hosts {
			slot = i
			m := map[string]string{}
			var lists map[string][]string
			for range rng.IntN(8) {
				k := confusable(rng) // keys no selector uses
				if rng.IntN(4) != 0 {
					k = keys[rng.IntN(len(keys))]
				}
				if k == "" || lists[k] != nil {
					continue
				}
				if rng.IntN(5) == 0 {
					if _, ok := m[k]; ok {
						continue
					}
					if lists == nil {
						lists = map[string][]string{}
					}
					for range 1 + rng.IntN(3) {
						lists[k] = append(lists[k], value())
					}
					continue
				}
				m[k] = value()
			}
			hosts[i] = Host{ID: fmt.Sprint(i), Labels: label.FromMap(m), Lists: lists}
			add := func(k, v string) {
				if !slices.Contains(keys, k) {
					return
				}
				if want[k] == nil {
					want[k] = map[string][]uint32{}
				}
				if s := want[k][v]; len(s) == 0 || s[len(s)-1] != uint32(i) {
					want[k][v] = append(s, uint32(i))
				}
			}
			for k, v := range m {
				add(k, v)
			}
			if cfg.ListAsAny {
				for k, vs := range lists {
					for _, v := range vs {
						add(k, v)
					}
				}
			}
		}
		lb, err := New(cfg, balancer.NewRoundRobin(), hosts)
		if err != nil {
			t.Fatal(err)
		}
		ix := lb.snap.Load().index
		for _, k := range keys {
			if got := ix.NumValues(k); got != len(want[k]) {
				t.Fatalf("round %d: key %q has %d values, want %d", round, k, got, len(want[k]))
			}
			for v, slots := range want[k] {
				p := ix.Get(k, v)
				var got []uint32
				if p != nil && p.Bits() != nil {
					for s, ok := p.Bits().NextSet(0); ok; s, ok = p.Bits().NextSet(s + 1) {
						got = append(got, uint32(s))
					}
				} else if p != nil {
					got = p.List()
				}
				if !slices.Equal(got, slots) || p.Len() != len(slots) {
					t.Fatalf("round %d: %q=%q has slots %v (len %d), want %v", round, k, v, got, p.Len(), slots)
				}
			}
		}
	}
}
