package balancer

import (
	"errors"
	"math"
	"strconv"
	"testing"
)

func eps(weights ...uint32) []Endpoint {
	out := make([]Endpoint, len(weights))
	for i, w := range weights {
		// Distinct addresses: the consistent-hash policies place endpoints by address.
		out[i] = Endpoint{ID: string(rune('a' + i)), Addr: "127.0.0.1:" + strconv.Itoa(1+i), Weight: w}
	}
	return out
}

func TestNewUnknown(t *testing.T) {
	if _, err := New("nope"); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("New(nope) err = %v, want ErrUnknownPolicy", err)
	}
	p, err := New("")
	if err != nil || p.Name() != Default {
		t.Fatalf(`New("") = %v, %v; want %s`, p, err, Default)
	}
	for _, name := range Names() {
		p, err := New(name)
		if err != nil || p.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, p, err)
		}
	}
}

func TestEmptySet(t *testing.T) {
	for _, name := range Names() {
		p, _ := New(name)
		if _, err := p.Build(nil).Pick(); !errors.Is(err, ErrNoEndpoint) {
			t.Errorf("%s: Pick on empty set err = %v, want ErrNoEndpoint", name, err)
		}
	}
}

func TestRoundRobinCycles(t *testing.T) {
	pk := NewRoundRobin().Build(eps(1, 1, 1, 1))
	first, _ := pk.Pick()
	for k := 1; k < 12; k++ {
		i, err := pk.Pick()
		if err != nil {
			t.Fatal(err)
		}
		if want := (first + k) % 4; i != want {
			t.Fatalf("pick %d = %d, want %d", k, i, want)
		}
	}
}

func TestWeightedRoundRobinShares(t *testing.T) {
	cases := []struct {
		name    string
		weights []uint32
	}{
		{"equal", []uint32{1, 1, 1}},
		{"race threads", []uint32{200, 450, 650}},
		{"skewed", []uint32{1, 10, 100}},
		{"zero never picked", []uint32{0, 3, 1}},
		{"one", []uint32{7}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pk := NewWeightedRoundRobin().Build(eps(tc.weights...))
			var sum uint32
			for _, w := range tc.weights {
				sum += w
			}
			const n = 111000
			got := make([]int, len(tc.weights))
			for range n {
				i, err := pk.Pick()
				if err != nil {
					t.Fatal(err)
				}
				got[i]++
			}
			for i, w := range tc.weights {
				want := float64(n) * float64(w) / float64(sum)
				if math.Abs(float64(got[i])-want) > 0.01*n {
					t.Errorf("endpoint %d (weight %d): %d picks, want %.0f +-1%%", i, w, got[i], want)
				}
				if w == 0 && got[i] != 0 {
					t.Errorf("weight 0 endpoint picked %d times", got[i])
				}
			}
		})
	}
}

// Smoothness: with weights 1:1:2 the heavy endpoint never runs more than
// twice in a row (a burst-free interleaving, unlike plain weighted lists).
func TestWeightedRoundRobinSmooth(t *testing.T) {
	pk := NewWeightedRoundRobin().Build(eps(1, 1, 2))
	run, prev := 0, -1
	for range 4000 {
		i, _ := pk.Pick()
		if i == prev {
			run++
		} else {
			run = 1
		}
		prev = i
		if run > 2 {
			t.Fatalf("endpoint %d picked %d times in a row", i, run)
		}
	}
}

func TestWeightedRoundRobinAllZero(t *testing.T) {
	if _, err := NewWeightedRoundRobin().Build(eps(0, 0)).Pick(); !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("err = %v, want ErrNoEndpoint", err)
	}
}
