package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// BenchmarkLevelPick: a pick through levelLB against the subset balancer
// it wraps (the previous code's pick), 12 round-robin hosts: one level,
// three priority levels (and a retry's pick there leaving level 0 out,
// previous_priorities), and three weighted localities of one level.
func BenchmarkLevelPick(b *testing.B) {
	hosts := make([]*subset.Host, 12)
	for i := range hosts {
		a := fmt.Sprintf("10.0.0.%d:80", i+1)
		hosts[i] = &subset.Host{ID: a, Addr: a, Weight: 1}
	}
	policy := func() balancer.Policy {
		p, err := balancer.New("round_robin")
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	cfg := subset.Config{FallbackPolicy: subset.AnyEndpoint}
	b.Run("subset", func(b *testing.B) {
		lb, err := subset.New(cfg, policy(), nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := lb.Upsert(hosts...); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, _ := lb.Pick(nil)
			res.Done(0, balancer.Success)
		}
	})
	for _, c := range []struct {
		name     string
		weighted bool
		place    func(i int) hostPlace
		skip     uint64 // levels a retry leaves out
	}{
		{"one-level", false, func(int) hostPlace { return hostPlace{} }, 0},
		{"three-levels", false, func(i int) hostPlace { return hostPlace{level: uint32(i % 3)} }, 0},
		{"three-levels-retry-skip-0", false, func(i int) hostPlace { return hostPlace{level: uint32(i % 3)} }, levelBit(0)},
		{"three-localities", true, func(i int) hostPlace {
			return hostPlace{loc: locality.Locality{Region: "r", Zone: fmt.Sprint(i % 3)}, weight: uint32(i%3 + 1)}
		}, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			lb, err := newLevelLB(cfg, policy(), c.weighted)
			if err != nil {
				b.Fatal(err)
			}
			places := make([]hostPlace, len(hosts))
			for i := range places {
				places[i] = c.place(i)
			}
			if err := lb.upsert(hosts, places); err != nil {
				b.Fatal(err)
			}
			// Level 0 half down: the level load spills, so picks reach
			// every level.
			if strings.HasPrefix(c.name, "three-levels") {
				for i := 0; i < len(hosts); i += 6 {
					_ = lb.SetHealth(hosts[i].ID, false)
				}
			}
			b.ReportAllocs()
			if c.skip != 0 {
				for b.Loop() {
					res, _, _ := lb.pickSkip(nil, 0, false, c.skip)
					res.Done(0, balancer.Success)
				}
				return
			}
			for b.Loop() {
				res, _ := lb.Pick(nil)
				res.Done(0, balancer.Success)
			}
		})
	}
}
