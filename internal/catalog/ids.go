package catalog

import (
	"hash/maphash"
	"sync"
)

// idShards is a power of two, enough that readers on every core rarely
// share a shard's lock.
const idShards = 64

// idIndex maps item ids (an instance's) to their current version for lookups by id
// (heartbeats, the registry's planning of every write). It is plain maps in
// shards under read-write locks: with a million ids a sync.Map lookup chases
// a pointer per trie level, 2.5-3x the cost of a map shard (docs/perf/registry.md,
// issue 16 second pass). One writer, the table's Apply and Load.
//
// A shard's map is keyed by the id's 64-bit hash, not by the id: a map that
// grows rehashes every key, and rehashing a string key reads its bytes, a
// cache miss per id (half of what storing a new id cost with a million
// held). The instance a hash maps to says which id it is; the rare id whose
// hash is already held by another id goes to a small map by id.
//
// In front of each map is a bit per hash value (16 bits per id held, 2 MB
// for a million): the registry looks up every id it is asked to register,
// and for a new one the map's answer was a cache miss into tens of
// megabytes; a clear bit answers without it.
type idIndex[T Item] struct {
	seed   maphash.Seed
	hash   func(seed maphash.Seed, id string) uint64 // maphash.String; tests force collisions
	shards [idShards]idShard[T]
}

type idShard[T Item] struct {
	mu     sync.RWMutex
	m      map[uint64]T // by hash of the id
	over   map[string]T // ids whose hash m holds for another id; usually nil
	filter []uint64     // a set bit for the hash of every id held (and of some deleted)
	peak   int32        // the most entries m has held: Go maps never shrink
	set    int32        // bits set in filter
	_      [56]byte     // whole cache lines: readers of neighbours do not share one
}

// Filter sizing: at least filterBits bits per entry of m (doubled when m
// grows past that), rebuilt when bits left by deleted ids make more than
// 1/filterStale of it set.
const (
	filterBits  = 16
	filterStale = 4
	filterMin   = 1024
)

func newIDIndex[T Item]() *idIndex[T] {
	x := &idIndex[T]{seed: maphash.MakeSeed(), hash: maphash.String}
	for i := range x.shards {
		x.shards[i].m = make(map[uint64]T)
		x.shards[i].refilter(0)
	}
	return x
}

// bit is h's place in the filter; the shard took h's low bits.
func (s *idShard[T]) bit(h uint64) (word int, mask uint64) {
	b := (h >> 6) & uint64(len(s.filter)*64-1)
	return int(b >> 6), 1 << (b & 63)
}

func (s *idShard[T]) mark(h uint64) {
	w, m := s.bit(h)
	if s.filter[w]&m == 0 {
		s.filter[w] |= m
		s.set++
	}
}

// refilter rebuilds the filter from m at the size for n entries.
func (s *idShard[T]) refilter(n int) {
	size := filterMin
	for size < filterBits*n {
		size *= 2
	}
	s.filter, s.set = make([]uint64, size/64), 0
	for h := range s.m {
		s.mark(h)
	}
}

func (x *idIndex[T]) locate(id string) (uint64, *idShard[T]) {
	h := x.hash(x.seed, id)
	return h, &x.shards[h&(idShards-1)]
}

func (x *idIndex[T]) get(id string) T {
	h, s := x.locate(id)
	s.mu.RLock()
	in := s.lookup(h, id)
	s.mu.RUnlock()
	return in
}

// lookup relies on over holding only ids whose hash m holds for another id:
// a hash m does not hold is no id's.
func (s *idShard[T]) lookup(h uint64, id string) T {
	var zero T
	if w, m := s.bit(h); s.filter[w]&m == 0 {
		return zero
	}
	in := s.m[h]
	if in == zero || in.ItemID() == id {
		return in
	}
	return s.over[id]
}

func (x *idIndex[T]) store(id string, in T) {
	h, s := x.locate(id)
	s.mu.Lock()
	s.put(h, id, in)
	s.peak = max(s.peak, int32(len(s.m)))
	s.mu.Unlock()
}

func (s *idShard[T]) put(h uint64, id string, in T) {
	// A clear bit says no id with this hash is held: a new id (the common
	// case) is stored without looking first, one probe of m instead of two.
	var cur, zero T
	if w, m := s.bit(h); s.filter[w]&m != 0 {
		cur = s.m[h]
	}
	if cur == zero || cur.ItemID() == id {
		s.m[h] = in
		s.mark(h)
		if n := len(s.m); filterBits*n > len(s.filter)*64 || int(s.set)*filterStale > len(s.filter)*64 {
			s.refilter(n)
		}
		return
	}
	if s.over == nil {
		s.over = make(map[string]T)
	}
	s.over[id] = in
}

// deleteIf removes id if it still maps to prev.
func (x *idIndex[T]) deleteIf(id string, prev T) {
	h, s := x.locate(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	if cur := s.m[h]; cur == zero || cur != prev || cur.ItemID() != id {
		if s.over[id] == prev {
			delete(s.over, id)
		}
		return
	}
	delete(s.m, h)
	// Another id with this hash moves up from over, keeping lookup's rule.
	for oid, in := range s.over {
		if x.hash(x.seed, oid) == h {
			s.m[h] = in
			delete(s.over, oid)
			break
		}
	}
	if s.peak > 1024 && len(s.m) < int(s.peak/4) {
		// Mostly emptied (a mass deregister): a map sized for its peak
		// would be scanned by every GC cycle. Copy it to its size; the
		// copy is paid by the deletes that emptied it.
		m := make(map[uint64]T, len(s.m))
		for k, v := range s.m {
			m[k] = v
		}
		s.m, s.peak = m, int32(len(m))
		s.refilter(len(m))
	}
}

// reset replaces every entry with the instances of all, sharded first so
// that each shard is locked once and its map made at its size.
func (x *idIndex[T]) reset(all []any) {
	var parts [idShards][]T
	var hashes [idShards][]uint64
	for _, v := range all {
		in := v.(T)
		h := x.hash(x.seed, in.ItemID())
		i := h & (idShards - 1)
		parts[i] = append(parts[i], in)
		hashes[i] = append(hashes[i], h)
	}
	for i := range x.shards {
		n := idShard[T]{m: make(map[uint64]T, len(parts[i]))}
		n.refilter(len(parts[i]))
		for j, in := range parts[i] {
			n.put(hashes[i][j], in.ItemID(), in)
		}
		s := &x.shards[i]
		s.mu.Lock()
		s.m, s.over, s.filter, s.set, s.peak = n.m, n.over, n.filter, n.set, int32(len(n.m))
		s.mu.Unlock()
	}
}
