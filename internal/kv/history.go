package kv

import (
	"strings"
)

// The table keeps a bounded history of each key's writes, for the
// console's history by revision (docs/api.md, "KV"): the store keeps one
// version of a record, so older ones exist only here. It is what this
// server applied since it loaded its catalog: a restart (or a reload
// after falling behind the change log) starts each key's history again
// at its current version.
const (
	// HistoryLen is how many revisions of one key are kept, its current
	// one and deletes included.
	HistoryLen = 16
	// HistoryBytes bounds the values of one key's older revisions: past
	// it the oldest are dropped (the current one is always kept).
	HistoryBytes = 1 << 20
	// DeletedHistories is how many deleted keys keep their history; past
	// it the longest deleted lose it.
	DeletedHistories = 4096
	// HistoryTotalBytes bounds the memory of every key's older versions
	// together (their values, keys and entryCost each): past it the
	// versions superseded longest ago are dropped, whatever their key.
	HistoryTotalBytes = 64 << 20
	// entryCost is what an older version costs beside its value and key:
	// the Entry, its place in a history and in the table's queue.
	entryCost = 256
)

// Version is one revision of a key: the entry written then, or a delete.
type Version struct {
	Revision int64
	// Committed is when the store committed it (unix nanoseconds); 0 for
	// a version loaded at start, whose time the store does not keep.
	Committed int64
	// Entry is the key as written, nil for a delete.
	Entry *Entry
}

// history is one key's versions, oldest first, and the bytes of their
// values but the newest's.
type history struct {
	versions []Version
	older    int
}

type deletedKey struct {
	id  string
	rev int64
}

// superseded is a version that a newer one replaced, in the order they
// were replaced (Table.superseded): the oldest go first when the older
// versions of every key exceed HistoryTotalBytes.
type superseded struct {
	h    *history
	rev  int64
	cost int
}

// queue is a ring of superseded versions: it grows to the most it held
// at once and is reused after, so a put allocates nothing for it.
type queue struct {
	buf     []superseded
	head, n int
	cost    int
}

func (q *queue) push(s superseded) {
	if q.n == len(q.buf) {
		buf := make([]superseded, max(64, 2*len(q.buf)))
		for i := range q.n {
			buf[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = buf, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = s
	q.n++
	q.cost += s.cost
}

func (q *queue) pop() superseded {
	s := q.buf[q.head]
	q.buf[q.head] = superseded{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	q.cost -= s.cost
	return s
}

// internalNS reports whether ns is one of the table's own (sessions, lock
// delays): their writes are not user keys and keep no history.
func internalNS(ns string) bool { return strings.HasPrefix(ns, "~") }

// record adds a change to its key's history. The caller holds t.mu.
func (t *Table) record(id string, v Version) {
	h := t.hist[id]
	if h == nil {
		h = &history{}
		t.hist[id] = h
	}
	if n := len(h.versions); n > 0 {
		prev := h.versions[n-1]
		cost := entryCost + len(id)
		if prev.Entry != nil {
			h.older += len(prev.Entry.Value)
			cost += len(prev.Entry.Value)
		}
		t.superseded.push(superseded{h, prev.Revision, cost})
	}
	if len(h.versions) == HistoryLen {
		h.drop()
	}
	h.versions = append(h.versions, v)
	for h.older > HistoryBytes && len(h.versions) > 1 {
		h.drop()
	}
	for t.superseded.cost > HistoryTotalBytes {
		// Dropped already if its key's own bounds dropped it: then
		// nothing to do (nor if its key was forgotten: its history is
		// garbage once out of the queue).
		o := t.superseded.pop()
		for len(o.h.versions) > 1 && o.h.versions[0].Revision <= o.rev {
			o.h.drop()
		}
	}
	if v.Entry == nil {
		t.deleted = append(t.deleted, deletedKey{id, v.Revision})
		if len(t.deleted) > DeletedHistories {
			d := t.deleted[0]
			t.deleted = t.deleted[1:]
			if h := t.hist[d.id]; h != nil && h.versions[len(h.versions)-1].Revision == d.rev {
				// Still deleted since: forget it, its values too (the
				// queue may hold it a while longer).
				h.versions, h.older = nil, 0
				delete(t.hist, d.id)
			}
		}
	}
}

// drop forgets the oldest version (never the only one).
func (h *history) drop() {
	if e := h.versions[0].Entry; e != nil {
		h.older -= len(e.Value)
	}
	copy(h.versions, h.versions[1:])
	h.versions[len(h.versions)-1] = Version{}
	h.versions = h.versions[:len(h.versions)-1]
}

// History returns the versions of key in namespace ns this table keeps,
// newest first: its writes and deletes applied since the load, and the
// version it loaded. Empty for a key neither present nor kept.
func (t *Table) History(ns, key string) []Version {
	cur := t.Get(ns, key)
	t.mu.Lock()
	var out []Version
	if h := t.hist[ID(ns, key)]; h != nil {
		out = make([]Version, len(h.versions), len(h.versions)+1)
		copy(out, h.versions)
	}
	t.mu.Unlock()
	// A key loaded and not written since has no history but its entry;
	// one written meanwhile may be newer than the tree read above.
	if cur != nil && (len(out) == 0 || out[len(out)-1].Revision < cur.ModifyIndex) {
		out = append(out, Version{Revision: cur.ModifyIndex, Entry: cur})
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
