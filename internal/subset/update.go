package subset

import (
	"fmt"
	"slices"
)

// edit derives the next snapshot from the current one, copying only the
// record chunks, table shards, postings and entries a change touches. Objects
// tagged with the edit's generation are its own and are changed in place.
type edit struct {
	lb     *LB
	s      *snapshot
	anyHit bool
	defHit bool
}

func (lb *LB) begin() *edit {
	if lb.ids == nil {
		lb.indexIDs()
	}
	lb.gen++
	old := lb.snap.Load()
	s := &snapshot{gen: lb.gen, index: old.index.Edit(), slots: old.slots, live: old.live, any: old.any, def: old.def}
	s.chunks = slices.Clone(old.chunks)
	s.table = table{shards: slices.Clone(old.table.shards), gens: slices.Clone(old.table.gens), n: old.table.n}
	return &edit{lb: lb, s: s}
}

// indexIDs builds the writer's id -> slot map on the first update.
func (lb *LB) indexIDs() {
	s := lb.snap.Load()
	lb.ids = make(map[string]uint32, s.live)
	for slot := uint32(0); slot < s.slots; slot++ {
		if h := s.rec(slot).host; h != nil {
			lb.ids[h.ID] = slot
		} else {
			lb.free = append(lb.free, slot)
		}
	}
}

func (ed *edit) commit() {
	s := ed.s
	if ed.anyHit {
		s.any = &entry{gen: s.gen, sel: selAny}
	}
	if ed.defHit {
		s.def = &entry{gen: s.gen, sel: selDefault}
	}
	ed.lb.snap.Store(s)
}

func (ed *edit) setRec(slot uint32, r slotRec) {
	s := ed.s
	ci := slot / chunkSize
	for int(ci) >= len(s.chunks) {
		s.chunks = append(s.chunks, newChunk(s.gen))
	}
	if slot >= s.slots {
		s.slots = slot + 1
	}
	if c := s.chunks[ci]; c.gen != s.gen || c.recs == nil {
		nc := newChunk(s.gen)
		for i := range uint32(chunkSize) {
			nc.recs[i] = c.rec(ci*chunkSize + i)
		}
		s.chunks[ci] = nc
	}
	s.chunks[ci].recs[slot%chunkSize] = r
}

// change moves slot from its record to r, updating only the subsets the
// host leaves, enters or stays in (the last get a fresh child picker).
func (ed *edit) change(slot uint32, r slotRec) {
	s, c := ed.s, ed.lb.cfg
	var old slotRec
	if slot < s.slots {
		old = s.rec(slot)
	}
	ed.setRec(slot, r)
	switch {
	case old.host == nil && r.host != nil:
		s.live++
	case old.host != nil && r.host == nil:
		s.live--
	}
	ed.anyHit = true
	if (old.host != nil && c.inDefault(old.host)) || (r.host != nil && c.inDefault(r.host)) {
		ed.defHit = true
	}
	// The index: only pairs that differ.
	lb := ed.lb
	if old.host != r.host {
		for _, k := range c.keys {
			if old.host != nil {
				lb.vs = c.appendValues(lb.vs[:0], old.host, k)
				for _, v := range lb.vs {
					if r.host == nil || !c.hasValue(r.host, k, v) {
						s.index.Remove(slot, k, v)
					}
				}
			}
			if r.host != nil {
				lb.vs = c.appendValues(lb.vs[:0], r.host, k)
				for _, v := range lb.vs {
					if old.host == nil || !c.hasValue(old.host, k, v) {
						s.index.Add(slot, k, v)
					}
				}
			}
		}
	}
	c.loadVals(&lb.oldVals, old.host)
	c.loadVals(&lb.newVals, r.host)
	for si := range c.sels {
		w := len(c.sels[si].names)
		lb.olds = lb.combos(lb.olds[:0], si, old.host, &lb.oldVals)
		lb.news = lb.combos(lb.news[:0], si, r.host, &lb.newVals)
		for i := 0; i < len(lb.olds); i += w {
			o := lb.olds[i : i+w]
			d := int32(-1)
			if containsTuple(lb.news, o) {
				d = 0
			}
			ed.delta(si, o, d)
		}
		for i := 0; i < len(lb.news); i += w {
			if n := lb.news[i : i+w]; !containsTuple(lb.olds, n) {
				ed.delta(si, n, 1)
			}
		}
	}
}

// containsTuple reports whether the flat tuples (stride len(t)) hold t.
func containsTuple(flat, t []string) bool {
	for i := 0; i < len(flat); i += len(t) {
		if slices.Equal(flat[i:i+len(t)], t) {
			return true
		}
	}
	return false
}

// hostVals is one host's single values by key id, read once per change.
type hostVals struct {
	v     [MaxKeys]string
	has   uint64 // key ids with a single value
	lists bool   // some key has a list value that counts (list_as_any)
}

func (c *compiled) loadVals(hv *hostVals, h *Host) {
	hv.has, hv.lists = 0, false
	if h == nil {
		return
	}
	for it := h.Labels.Pairs(); ; {
		kv, k, next, ok := it.Next()
		if !ok {
			break
		}
		it = next
		if id := c.kt.id(kv[:k]); id >= 0 {
			hv.v[id] = kv[k:]
			hv.has |= 1 << id
		}
	}
	if c.listAny {
		for k, vs := range h.Lists {
			if len(vs) > 0 && c.kt.id(k) >= 0 {
				hv.lists = true
			}
		}
	}
}

// combos appends to dst, flat, the value tuples under which h (whose values
// are hv) enters selector si: one, or with list_as_any the product of its
// lists.
func (lb *LB) combos(dst []string, si int, h *Host, hv *hostVals) []string {
	if h == nil {
		return dst
	}
	sel := &lb.cfg.sels[si]
	if hv.has&sel.mask == sel.mask {
		for _, id := range sel.ids {
			dst = append(dst, hv.v[id])
		}
		return dst
	}
	if hv.lists {
		return lb.listCombos(dst, sel, h)
	}
	return dst
}

// listCombos is combos' slow path, for a host with list values.
func (lb *LB) listCombos(dst []string, sel *csel, h *Host) []string {
	tuples := [][]string{nil}
	for _, k := range sel.names {
		var vs []string
		for _, v := range lb.cfg.appendValues(nil, h, k) {
			if !slices.Contains(vs, v) {
				vs = append(vs, v)
			}
		}
		var next [][]string
		for _, t := range tuples {
			for _, v := range vs {
				next = append(next, append(slices.Clone(t), v))
			}
		}
		tuples = next
	}
	for _, t := range tuples {
		dst = append(dst, t...)
	}
	return dst
}

// delta adds d to the member count of (si, vals), creating or dropping the
// entry, and gives it a fresh child picker.
func (ed *edit) delta(si int, vals []string, d int32) {
	s, lb := ed.s, ed.lb
	h := lb.hashValues(si, vals)
	t := &s.table
	shi := h & uint64(len(t.shards)-1)
	if t.gens[shi] != s.gen {
		t.shards[shi] = slices.Clone(t.shards[shi])
		t.gens[shi] = s.gen
	}
	sh := t.shards[shi]
	for i, e := range sh {
		if e.hash != h || e.sel != int32(si) || !slices.Equal(e.values, vals) {
			continue
		}
		if e.gen != s.gen {
			e = &entry{gen: s.gen, hash: h, sel: e.sel, count: e.count, values: e.values}
			sh[i] = e
		}
		e.count += d
		if e.count <= 0 {
			t.shards[shi] = slices.Delete(sh, i, i+1)
			t.n--
		}
		return
	}
	if d <= 0 {
		panic(fmt.Sprintf("subset: internal error: no subset %v of selector %d to leave", vals, si))
	}
	t.shards[shi] = append(sh, &entry{gen: s.gen, hash: h, sel: int32(si), count: d, values: slices.Clone(vals)})
	t.n++
}

// renumber gives the live hosts the join order 0..n-1 they have, once
// 2^31 hosts have joined, so the order of later ones stays representable.
// Child pickers stay valid: the order does not change.
func (ed *edit) renumber() {
	s, lb := ed.s, ed.lb
	var live []uint32
	for slot := uint32(0); slot < s.slots; slot++ {
		if s.rec(slot).host != nil {
			live = append(live, slot)
		}
	}
	slices.SortFunc(live, func(a, b uint32) int { return int(s.rec(a).added()) - int(s.rec(b).added()) })
	for i, slot := range live {
		r := s.rec(slot)
		r.state = uint32(i)<<1 | r.state&1
		ed.setRec(slot, r)
	}
	lb.added = uint32(len(live))
}

// Upsert adds hosts, or replaces the hosts with the same IDs (new labels,
// address or weight); a replaced host keeps its health. All changes are
// published at once. Writer only.
func (lb *LB) Upsert(hosts ...*Host) error {
	for _, h := range hosts {
		if err := checkHost(h); err != nil {
			return err
		}
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	ed := lb.begin()
	for _, h := range hosts {
		slot, ok := lb.ids[h.ID]
		var state uint32 // a new host: healthy, joined now
		if ok {
			state = ed.s.rec(slot).state
		} else {
			if lb.added == maxAdded {
				ed.renumber()
			}
			state = lb.added << 1
			lb.added++
			if n := len(lb.free); n > 0 {
				slot, lb.free = lb.free[n-1], lb.free[:n-1]
			} else {
				slot = ed.s.slots
			}
			lb.ids[h.ID] = slot
		}
		ed.change(slot, slotRec{host: h, weight: h.Weight, state: state})
	}
	ed.commit()
	return nil
}

// Remove removes the hosts with the given IDs; unknown IDs are ignored.
// Writer only.
func (lb *LB) Remove(ids ...string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	ed := lb.begin()
	for _, id := range ids {
		slot, ok := lb.ids[id]
		if !ok {
			continue
		}
		delete(lb.ids, id)
		lb.free = append(lb.free, slot)
		ed.change(slot, slotRec{})
	}
	ed.commit()
}

// SetHealth marks a host healthy or not. Only the child pickers of the
// host's subsets are rebuilt (on their next pick). Writer only.
func (lb *LB) SetHealth(id string, healthy bool) error {
	return lb.setRec(id, func(r *slotRec) { r.setHealthy(healthy) })
}

// SetWeight changes a host's weight for weighted child policies. Writer only.
func (lb *LB) SetWeight(id string, weight uint32) error {
	return lb.setRec(id, func(r *slotRec) { r.weight = weight })
}

func (lb *LB) setRec(id string, fn func(*slotRec)) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.ids == nil {
		lb.indexIDs()
	}
	slot, ok := lb.ids[id]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownHost, id)
	}
	r := lb.snap.Load().rec(slot)
	fn(&r)
	if r == lb.snap.Load().rec(slot) {
		return nil // a write that changes nothing publishes nothing
	}
	ed := lb.begin()
	ed.change(slot, r)
	ed.commit()
	return nil
}
