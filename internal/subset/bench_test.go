package subset

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

var seedKeys = []string{"zone", "physics", "mosn_aig", "mosn_version"}
var seedPrefix = []string{"zone", "m", "aig", "v"}

// seedConfig is the seed's benchmark: the 15 non-empty combinations of the
// four keys.
func seedConfig() Config {
	var c Config
	for mask := 1; mask < 16; mask++ {
		var keys []string
		for i, k := range seedKeys {
			if mask&(1<<i) != 0 {
				keys = append(keys, k)
			}
		}
		c.Selectors = append(c.Selectors, Selector{Keys: keys})
	}
	return c
}

// seedHosts is the seed's data: each key has 3 values and is missing from a
// host with probability 1/4. Strings are built per host, as decoding a
// registry response would.
func seedHosts(n int, seed uint64) []Host {
	rng := rand.New(rand.NewPCG(seed, 3))
	hosts := make([]Host, n)
	for i := range hosts {
		h := &hosts[i]
		h.ID = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
		h.Addr = h.ID + ":12200"
		h.Weight = 100
		m := make(map[string]string, 4)
		for k, key := range seedKeys {
			if rng.IntN(4) != 0 {
				m[key] = fmt.Sprintf("%s%d", seedPrefix[k], rng.IntN(3))
			}
		}
		h.Labels = label.FromMap(m)
	}
	return hosts
}

func BenchmarkSubsetBuild(b *testing.B) {
	for _, n := range []int{20, 100, 500, 2000, 8000, 50000} {
		hosts := seedHosts(n, 1)
		cfg := seedConfig()
		policy := balancer.NewRoundRobin()
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(cfg, policy, hosts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSubsetUpdate: one host of 8000 is relabelled (it leaves up to 15
// subsets and enters up to 15), and the next snapshot is published.
func BenchmarkSubsetUpdate(b *testing.B) {
	const n = 8000
	hosts := seedHosts(n, 1)
	lb, err := New(seedConfig(), balancer.NewRoundRobin(), hosts)
	if err != nil {
		b.Fatal(err)
	}
	// Alternate every host between its own labels and another's, so each op
	// is a real relabel.
	alt := seedHosts(n, 2)
	for i := range alt {
		alt[i].ID = hosts[i].ID
	}
	if err := lb.Upsert(&alt[0]); err != nil { // builds the id map once
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		i := 1
		for b.Loop() {
			h := &alt[i%n]
			if (i/n)%2 == 1 {
				h = &hosts[i%n]
			}
			if err := lb.Upsert(h); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkSubsetUpdateThenPick is the honest total of an update: the
// relabel plus the first pick from every subset the host entered, which
// builds their child pickers (the cold path of Pick).
func BenchmarkSubsetUpdateThenPick(b *testing.B) {
	const n = 8000
	hosts := seedHosts(n, 1)
	lb, err := New(seedConfig(), balancer.NewRoundRobin(), hosts)
	if err != nil {
		b.Fatal(err)
	}
	alt := seedHosts(n, 2)
	for i := range alt {
		alt[i].ID = hosts[i].ID
	}
	if err := lb.Upsert(&alt[0]); err != nil {
		b.Fatal(err)
	}
	cfg := seedConfig()
	b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
		b.ReportAllocs()
		i := 1
		md := map[string]string{}
		for b.Loop() {
			h := &alt[i%n]
			if (i/n)%2 == 1 {
				h = &hosts[i%n]
			}
			if err := lb.Upsert(h); err != nil {
				b.Fatal(err)
			}
			for _, s := range cfg.Selectors {
				clear(md)
				for _, k := range s.Keys {
					md[k], _ = h.Labels.Get(k)
				}
				lb.Pick(md)
			}
			i++
		}
	})
}

// BenchmarkSubsetPick: a request naming 2 keys, 8000 hosts, round robin.
func BenchmarkSubsetPick(b *testing.B) {
	lb, err := New(seedConfig(), balancer.NewRoundRobin(), seedHosts(8000, 1))
	if err != nil {
		b.Fatal(err)
	}
	md := map[string]string{"zone": "zone1", "mosn_version": "v2"}
	b.ReportAllocs()
	for b.Loop() {
		r, err := lb.Pick(md)
		if err != nil {
			b.Fatal(err)
		}
		r.Done(time.Millisecond, balancer.Success)
	}
}

// BenchmarkSubsetBuildHighCardinality: 50,000 hosts, the seed's keys plus
// "instance_group" with 5,000 distinct values, used by two more selectors.
// Enumerating the Cartesian product of seen values would try 3*5000 and
// 3*3*5000 combinations; only co-occurring ones are visited.
func BenchmarkSubsetBuildHighCardinality(b *testing.B) {
	const n = 50000
	hosts := seedHosts(n, 1)
	for i := range hosts {
		m := hosts[i].Labels.Map()
		m["instance_group"] = fmt.Sprintf("g%d", i%5000)
		hosts[i].Labels = label.FromMap(m)
	}
	cfg := seedConfig()
	cfg.Selectors = append(cfg.Selectors,
		Selector{Keys: []string{"zone", "instance_group"}},
		Selector{Keys: []string{"physics", "mosn_aig", "instance_group"}})
	policy := balancer.NewRoundRobin()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(cfg, policy, hosts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubsetBuildFloor is what bounds the build: only touching each
// host's labels as the build reads them (every pair's string, its first and
// last byte), with no lookup, index, subsets or snapshot.
func BenchmarkSubsetBuildFloor(b *testing.B) {
	hosts := seedHosts(8000, 1)
	b.Run("hosts=8000", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n += touchLabels(hosts)
		}
		if n == 0 {
			b.Fatal("no labels read")
		}
	})
}

// touchLabels is the floor's loop, out of b.Loop's body: b.Loop keeps the
// results of calls inlined in its body alive, which here would keep the
// cursor in memory and triple the figure.
func touchLabels(hosts []Host) int {
	n := 0
	for i := range hosts {
		for it := hosts[i].Labels.Pairs(); ; {
			kv, _, next, ok := it.Next()
			if !ok {
				break
			}
			it = next
			n += int(kv[0]) + int(kv[len(kv)-1])
		}
	}
	return n
}

// BenchmarkSubsetPickRequest: Pick's request as label.Labels (a route's
// precomputed metadata), plain and with a two-entry fallback list whose
// first entry has no subset.
func BenchmarkSubsetPickRequest(b *testing.B) {
	cfg := seedConfig()
	cfg.MetadataFallbackPolicy = FallbackList
	lb, err := New(cfg, balancer.NewRoundRobin(), seedHosts(8000, 1))
	if err != nil {
		b.Fatal(err)
	}
	plain := &Request{Metadata: label.FromMap(map[string]string{"zone": "zone1", "mosn_version": "v2"})}
	list := &Request{Metadata: label.FromMap(map[string]string{"zone": "zone1"}), FallbackList: []label.Labels{
		label.FromMap(map[string]string{"mosn_version": "none"}), label.FromMap(map[string]string{"mosn_version": "v2"})}}
	for _, c := range []struct {
		name string
		req  *Request
	}{{"plain", plain}, {"fallback_list", list}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := lb.PickRequest(c.req)
				if err != nil {
					b.Fatal(err)
				}
				r.Done(time.Millisecond, balancer.Success)
			}
		})
	}
}
