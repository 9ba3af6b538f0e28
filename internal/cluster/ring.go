package cluster

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// view is one membership: the live servers, and who owns what among them
// by rendezvous (highest random weight) hashing: the owner of an instance
// is the member whose seed, mixed with the instance id's hash, scores
// highest. When a member leaves, only its instances move, spread over the
// others; when one joins, it takes about 1/n of everyone's. Immutable.
type view struct {
	ids   []string // sorted
	seeds []uint64
}

func newView(ids []string) *view {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	v := &view{ids: ids, seeds: make([]uint64, len(ids))}
	for i, id := range ids {
		v.seeds[i] = xxhash.Sum64String(id)
	}
	return v
}

// owner returns the member that judges instance id ("" if none is live).
func (v *view) owner(id string) string {
	if v == nil || len(v.ids) == 0 {
		return ""
	}
	h := xxhash.Sum64String(id)
	best, score := 0, uint64(0)
	for i, seed := range v.seeds {
		if s := mix(h ^ seed); i == 0 || s > score {
			best, score = i, s
		}
	}
	return v.ids[best]
}

func (v *view) equal(o *view) bool {
	if v == nil || o == nil {
		return v == o
	}
	return slices.Equal(v.ids, o.ids)
}

// mix is splitmix64's finalizer: every input bit moves every output bit,
// so that scores of one id under different seeds are independent.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// OwnerOf is the server among members that judges instance id: what every
// member computes, for tools and tests that check it from outside.
func OwnerOf(members []string, id string) string { return newView(members).owner(id) }
