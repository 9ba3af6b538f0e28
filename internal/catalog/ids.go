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
type idIndex struct {
	seed   maphash.Seed
	shards [idShards]idShard
}

type idShard struct {
	mu   sync.RWMutex
	m    map[string]*Instance
	peak int      // the most entries m has held: Go maps never shrink
	_    [24]byte // 64 bytes a shard: readers of neighbours do not share a cache line
}

func newIDIndex() *idIndex {
	x := &idIndex{seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].m = make(map[string]*Instance)
	}
	return x
}

func (x *idIndex) shard(id string) *idShard {
	return &x.shards[maphash.String(x.seed, id)&(idShards-1)]
}

func (x *idIndex) get(id string) *Instance {
	s := x.shard(id)
	s.mu.RLock()
	in := s.m[id]
	s.mu.RUnlock()
	return in
}

func (x *idIndex) store(id string, in *Instance) {
	s := x.shard(id)
	s.mu.Lock()
	s.m[id] = in
	s.peak = max(s.peak, len(s.m))
	s.mu.Unlock()
}

// deleteIf removes id if it still maps to prev.
func (x *idIndex) deleteIf(id string, prev *Instance) {
	s := x.shard(id)
	s.mu.Lock()
	if s.m[id] == prev {
		delete(s.m, id)
		if s.peak > 1024 && len(s.m) < s.peak/4 {
			// Mostly emptied (a mass deregister): a map sized for its peak
			// would be scanned by every GC cycle. Copy it to its size; the
			// copy is paid by the deletes that emptied it.
			m := make(map[string]*Instance, len(s.m))
			for k, v := range s.m {
				m[k] = v
			}
			s.m, s.peak = m, len(m)
		}
	}
	s.mu.Unlock()
}

// reset replaces every entry with the instances of all, sharded first so
// that each shard is locked once and its map made at its size.
func (x *idIndex) reset(all []any) {
	var parts [idShards][]*Instance
	for _, v := range all {
		in := v.(*Instance)
		i := maphash.String(x.seed, in.ID) & (idShards - 1)
		parts[i] = append(parts[i], in)
	}
	for i := range x.shards {
		m := make(map[string]*Instance, len(parts[i]))
		for _, in := range parts[i] {
			m[in.ID] = in
		}
		s := &x.shards[i]
		s.mu.Lock()
		s.m, s.peak = m, len(m)
		s.mu.Unlock()
	}
}
