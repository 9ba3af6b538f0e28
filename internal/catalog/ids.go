package catalog

import (
	"hash/maphash"
	"sync"
)

// idShards is a power of two, enough that readers on every core rarely
// share a shard's lock.
const idShards = 64

// idIndex maps instance ids to their current version for lookups by id
// (heartbeats, the registry's planning of every write). It is plain maps in
// shards under read-write locks: with a million ids a sync.Map lookup chases
// a pointer per trie level, 2.5-3x the cost of a map shard (docs/benchmarks.md,
// issue 16 second pass). One writer, the table's Apply and Load.
//
// A shard's map is keyed by the id's 64-bit hash, not by the id: a map that
// grows rehashes every key, and rehashing a string key reads its bytes, a
// cache miss per id (half of what storing a new id cost with a million
// held). The instance a hash maps to says which id it is; the rare id whose
// hash is already held by another id goes to a small map by id.
type idIndex struct {
	seed   maphash.Seed
	hash   func(seed maphash.Seed, id string) uint64 // maphash.String; tests force collisions
	shards [idShards]idShard
}

type idShard struct {
	mu   sync.RWMutex
	m    map[uint64]*Instance // by hash of the id
	over map[string]*Instance // ids whose hash m holds for another id; usually nil
	peak int                  // the most entries m has held: Go maps never shrink
	_    [16]byte             // 64 bytes a shard: readers of neighbours do not share a cache line
}

func newIDIndex() *idIndex {
	x := &idIndex{seed: maphash.MakeSeed(), hash: maphash.String}
	for i := range x.shards {
		x.shards[i].m = make(map[uint64]*Instance)
	}
	return x
}

func (x *idIndex) locate(id string) (uint64, *idShard) {
	h := x.hash(x.seed, id)
	return h, &x.shards[h&(idShards-1)]
}

func (x *idIndex) get(id string) *Instance {
	h, s := x.locate(id)
	s.mu.RLock()
	in := s.lookup(h, id)
	s.mu.RUnlock()
	return in
}

// lookup relies on over holding only ids whose hash m holds for another id:
// a hash m does not hold is no id's.
func (s *idShard) lookup(h uint64, id string) *Instance {
	in := s.m[h]
	if in == nil || in.ID == id {
		return in
	}
	return s.over[id]
}

func (x *idIndex) store(id string, in *Instance) {
	h, s := x.locate(id)
	s.mu.Lock()
	s.put(h, id, in)
	s.peak = max(s.peak, len(s.m))
	s.mu.Unlock()
}

func (s *idShard) put(h uint64, id string, in *Instance) {
	if cur := s.m[h]; cur == nil || cur.ID == id {
		s.m[h] = in
		return
	}
	if s.over == nil {
		s.over = make(map[string]*Instance)
	}
	s.over[id] = in
}

// deleteIf removes id if it still maps to prev.
func (x *idIndex) deleteIf(id string, prev *Instance) {
	h, s := x.locate(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.m[h]; cur == nil || cur != prev || cur.ID != id {
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
	if s.peak > 1024 && len(s.m) < s.peak/4 {
		// Mostly emptied (a mass deregister): a map sized for its peak
		// would be scanned by every GC cycle. Copy it to its size; the
		// copy is paid by the deletes that emptied it.
		m := make(map[uint64]*Instance, len(s.m))
		for k, v := range s.m {
			m[k] = v
		}
		s.m, s.peak = m, len(m)
	}
}

// reset replaces every entry with the instances of all, sharded first so
// that each shard is locked once and its map made at its size.
func (x *idIndex) reset(all []any) {
	var parts [idShards][]*Instance
	var hashes [idShards][]uint64
	for _, v := range all {
		in := v.(*Instance)
		h := x.hash(x.seed, in.ID)
		i := h & (idShards - 1)
		parts[i] = append(parts[i], in)
		hashes[i] = append(hashes[i], h)
	}
	for i := range x.shards {
		n := idShard{m: make(map[uint64]*Instance, len(parts[i]))}
		for j, in := range parts[i] {
			n.put(hashes[i][j], in.ID, in)
		}
		s := &x.shards[i]
		s.mu.Lock()
		s.m, s.over, s.peak = n.m, n.over, len(n.m)
		s.mu.Unlock()
	}
}
