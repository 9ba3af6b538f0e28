package balancer

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
)

// HashPicker is implemented by the pickers of the consistent-hash policies
// (RingHash, Maglev): a call carrying a hash (of a header, a cookie, the
// source address: Istio's consistentHash, Envoy's route hash_policy) goes
// to the endpoint the hash maps to, the same one for the same hash while
// the set stands, and for most hashes after one endpoint of many leaves.
// Pick, for a call without a hash, picks at random, as Envoy does.
type HashPicker interface {
	Picker
	// PickHash chooses the endpoint hash maps to. Any goroutine; it never
	// blocks and allocates nothing. Error: ErrNoEndpoint.
	PickHash(hash uint64) (int, error)
}

// Hash is the hash of a call's key (a header's value, a cookie, an
// address) as the consistent-hash policies take it: xxHash64, Envoy's and
// grpc-go's.
func Hash(key string) uint64 { return xxhash.Sum64String(key) }

// Envoy's bounds of a ring's size (RingHashLbConfig).
const (
	DefaultMinRingSize = 1024
	MaxRingSize        = 8 << 20
	// DefaultMaglevTableSize is Envoy's default (a prime).
	DefaultMaglevTableSize = 65537
)

// RingHash is the "ring_hash" policy (Envoy's RING_HASH, Istio's
// consistentHash ringHash): each endpoint is placed on a ring of 64-bit
// hashes at several points (more for a higher weight), and a call's hash
// goes to the first point at or after it. An endpoint leaving takes only
// its own points: every other hash keeps its endpoint.
type RingHash struct {
	// MinRingSize is the ring's least number of points (0: 1024, Envoy's
	// default); MaxRingSize caps it.
	MinRingSize uint64
}

var _ Policy = RingHash{}

// Name implements Policy.
func (RingHash) Name() string { return "ring_hash" }

// Build implements Policy: as Envoy builds its ring, each endpoint's points
// are the hashes of "ADDRESS_N" (its ID when it has no address), their
// number in proportion to its weight, the lightest endpoint getting at
// least one point in MinRingSize.
func (p RingHash) Build(eps []Endpoint) Picker {
	minSize := p.MinRingSize
	if minSize == 0 {
		minSize = DefaultMinRingSize
	}
	minSize = min(minSize, MaxRingSize)
	var total uint64
	for _, e := range eps {
		total += uint64(e.Weight)
	}
	r := &ringPicker{n: len(eps)}
	if total == 0 {
		return r
	}
	minNorm := 1.0
	for _, e := range eps {
		if e.Weight > 0 {
			minNorm = min(minNorm, float64(e.Weight)/float64(total))
		}
	}
	scale := min(math.Ceil(minNorm*float64(minSize))/minNorm, float64(MaxRingSize))
	var buf []byte
	for i, e := range eps {
		if e.Weight == 0 {
			continue
		}
		n := int(math.Ceil(float64(e.Weight) / float64(total) * scale))
		key := e.Addr
		if key == "" {
			key = e.ID
		}
		for j := range n {
			buf = strconv.AppendInt(append(append(buf[:0], key...), '_'), int64(j), 10)
			r.points = append(r.points, ringPoint{hash: xxhash.Sum64(buf), idx: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return int(a.idx - b.idx)
	})
	return r
}

type ringPoint struct {
	hash uint64
	idx  int32
}

type ringPicker struct {
	points []ringPoint
	n      int
}

var _ HashPicker = (*ringPicker)(nil)

func (r *ringPicker) Pick() (int, error) { return r.PickHash(rand.Uint64()) }

// PickHash implements HashPicker: the first point at or after hash, the
// ring wrapping around.
func (r *ringPicker) PickHash(hash uint64) (int, error) {
	pts := r.points
	if len(pts) == 0 {
		return -1, ErrNoEndpoint
	}
	lo, hi := 0, len(pts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if pts[m].hash < hash {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(pts) {
		lo = 0
	}
	return int(pts[lo].idx), nil
}

func (*ringPicker) Done(int, time.Duration, Outcome) {}

// Maglev is the "maglev" policy (Envoy's MAGLEV, Istio's consistentHash
// maglev): a lookup table of a prime size filled from each endpoint's
// permutation of it (Google's Maglev paper), in proportion to weights; a
// call's hash picks the table's entry hash mod size. Lookups are O(1); an
// endpoint leaving moves its own entries and a few others.
type Maglev struct {
	// TableSize is the table's size, a prime (0: 65537, Envoy's default).
	TableSize uint64
}

var _ Policy = Maglev{}

// Name implements Policy.
func (Maglev) Name() string { return "maglev" }

// Build implements Policy.
func (p Maglev) Build(eps []Endpoint) Picker {
	m := p.TableSize
	if m == 0 {
		m = DefaultMaglevTableSize
	}
	type perm struct {
		offset, skip, next uint64
		weight, target     float64
		idx                int32
	}
	var perms []perm
	maxW := 0.0
	for i, e := range eps {
		if e.Weight == 0 {
			continue
		}
		key := e.Addr
		if key == "" {
			key = e.ID
		}
		perms = append(perms, perm{offset: xxhash.Sum64String(key) % m, skip: xxhash.Sum64String(key+"#")%(m-1) + 1,
			weight: float64(e.Weight), idx: int32(i)})
		maxW = max(maxW, float64(e.Weight))
	}
	t := &maglevPicker{n: len(eps)}
	if len(perms) == 0 {
		return t
	}
	table := make([]int32, m)
	for i := range table {
		table[i] = -1
	}
	// Weighted fill, as Envoy's: each round, an endpoint takes a slot when
	// its accumulated share reaches the heaviest one's.
	filled := uint64(0)
	for iter := 0; filled < m; iter++ {
		for i := range perms {
			pm := &perms[i]
			pm.target += pm.weight / maxW
			if pm.target < 1 {
				continue
			}
			pm.target--
			for {
				c := (pm.offset + pm.skip*pm.next) % m
				pm.next++
				if table[c] < 0 {
					table[c] = pm.idx
					filled++
					break
				}
			}
			if filled == m {
				break
			}
		}
	}
	t.table = table
	return t
}

type maglevPicker struct {
	table []int32
	n     int
}

var _ HashPicker = (*maglevPicker)(nil)

func (t *maglevPicker) Pick() (int, error) { return t.PickHash(rand.Uint64()) }

// PickHash implements HashPicker.
func (t *maglevPicker) PickHash(hash uint64) (int, error) {
	if len(t.table) == 0 {
		return -1, ErrNoEndpoint
	}
	return int(t.table[hash%uint64(len(t.table))]), nil
}

func (*maglevPicker) Done(int, time.Duration, Outcome) {}
