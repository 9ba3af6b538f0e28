package label

import "unsafe"

// LabelsCache remembers, for one version of an index, which posting each
// pair of a label set went to, keyed by the set's storage: sets handed out
// by an Interner share it, so instances with equal metadata are added by
// appending their slot to the remembered postings, without a map lookup per
// pair. Use one per edit (AddLabelsCached resets it for another index);
// the zero value is ready.
type LabelsCache struct {
	ix    *Postings
	sets  map[setID]int32 // offset of the set's postings in posts
	posts []*Posting
	// Sets that never recur (metadata unique per instance) only cost their
	// entries: the cache stops taking them after many misses and no hits.
	hits, misses int
}

// maxCachePosts bounds the postings a LabelsCache keeps across Reset.
const maxCachePosts = 1 << 16

// Reset empties c for another index, keeping its memory (up to a bound) and
// nothing it pointed to.
func (c *LabelsCache) Reset() {
	clear(c.sets)
	clear(c.posts)
	if cap(c.posts) > maxCachePosts {
		c.posts = nil
	}
	*c = LabelsCache{sets: c.sets, posts: c.posts[:0]}
}

// setID is a label set's storage: equal only for copies of one Labels.
type setID struct {
	s    *byte
	ends *uint32
	n    int
}

// cacheGiveUp is how many sets are taken before the cache checks that some
// recur.
const cacheGiveUp = 1024

// AddLabelsCached is AddLabels through c.
func (ix *Postings) AddLabelsCached(slot uint32, l Labels, c *LabelsCache) {
	n := l.Len()
	if n == 0 {
		return
	}
	if c.ix != ix {
		*c = LabelsCache{ix: ix, sets: c.sets, posts: c.posts[:0]}
		clear(c.sets)
	}
	id := setID{unsafe.StringData(l.s), unsafe.SliceData(l.ends), len(l.s)}
	if off, ok := c.sets[id]; ok {
		ps := c.posts[off : int(off)+n]
		// A posting emptied by Remove was dropped from the index: the set
		// is then added the long way, and remembered again.
		live := true
		for _, p := range ps {
			live = live && p.n > 0
		}
		if live {
			c.hits++
			if slot >= ix.universe {
				ix.universe = slot + 1
			}
			for _, p := range ps {
				p.add(slot, ix.universe)
			}
			return
		}
	}
	c.misses++
	if c.misses > cacheGiveUp && c.hits < c.misses/8 {
		ix.AddLabels(slot, l)
		return
	}
	if c.sets == nil {
		c.sets = make(map[setID]int32)
	}
	c.sets[id] = int32(len(c.posts))
	for j := range n {
		k, v := l.At(j)
		c.posts = append(c.posts, ix.addTo(ix.keyAt(j, k), slot, v))
	}
}
