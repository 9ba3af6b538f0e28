package callstore

import (
	"cmp"
	"fmt"
	"hash/crc32"
	"math/bits"
	"slices"
	"sort"
)

// What a query sees: the index snapshot current when it starts. That holds
// every chunk the encoder had written by then, which includes every record
// put before the last Sync that returned; records still buffered in writers
// or the merger are not seen. A query never sees part of a chunk, and
// records published later do not appear in a query already running.

type query struct {
	aMin, aMax, tMin, tMax int64
}

type queryScratch struct {
	ta    []byte
	slots []*slot
}

func (s *Store) getScratch() *queryScratch {
	if sc, ok := s.scratch.Get().(*queryScratch); ok {
		return sc
	}
	return &queryScratch{}
}

// begin validates a query and takes the close lock; the caller must
// RUnlock closeMu when done if err is nil.
func (s *Store) begin(aMin, aMax, tMin, tMax int64) error {
	if aMin > aMax || tMin > tMax {
		return fmt.Errorf("%w: a [%d, %d], t [%d, %d]", ErrBadRange, aMin, aMax, tMin, tMax)
	}
	s.closeMu.RLock()
	if s.closed.Load() {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Messages returns the records with aMin <= a <= aMax and tMin <= t <= tMax,
// sorted by t. Records with equal t come in no particular order.
func (s *Store) Messages(aMin, aMax, tMin, tMax int64) ([]Message, error) {
	return s.AppendMessages(nil, aMin, aMax, tMin, tMax)
}

// AppendMessages is Messages appending to dst, so callers can reuse memory.
func (s *Store) AppendMessages(dst []Message, aMin, aMax, tMin, tMax int64) ([]Message, error) {
	if err := s.begin(aMin, aMax, tMin, tMax); err != nil {
		return dst, err
	}
	defer s.closeMu.RUnlock()
	q := query{aMin: aMin, aMax: aMax, tMin: tMin, tMax: tMax}
	sc := s.getScratch()
	defer s.scratch.Put(sc)
	start := len(dst)
	runsHit := 0
	var err error
	for _, r := range s.view.Load().runs {
		if r.hi < tMin || r.lo > tMax {
			continue
		}
		before := len(dst)
		i := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].hi >= tMin })
		for ; i < len(r.chunks) && r.chunks[i].lo <= tMax; i++ {
			if dst, err = s.chunkMessages(dst, r.chunks[i], &q, sc); err != nil {
				return dst[:start], err
			}
		}
		if len(dst) > before {
			runsHit++
		}
	}
	if runsHit > 1 {
		slices.SortStableFunc(dst[start:], func(x, y Message) int { return cmp.Compare(x.T, y.T) })
	}
	return dst, nil
}

// slot holds one bucket's matches while a chunk's buckets are merged.
type slot struct {
	b        *bucket
	ta, body []byte
	idx      []int32 // matching record indices, ascending (t order)
	first    int     // index of the record at body[0]
	bodySize int     // of the store's bodies
	ts       []int64 // t of each match, for merging
	pos      int     // merge cursor into idx
}

func (s *Store) chunkMessages(dst []Message, c *chunkMeta, q *query, sc *queryScratch) ([]Message, error) {
	used := 0
	for i := range c.buckets {
		b := &c.buckets[i]
		if b.aMax < q.aMin || b.aMin > q.aMax || b.tMax < q.tMin || b.tMin > q.tMax {
			continue
		}
		if used == len(sc.slots) {
			sc.slots = append(sc.slots, &slot{})
		}
		sl := sc.slots[used]
		ok, err := s.gather(b, q, sl)
		if err != nil {
			return dst, err
		}
		if ok {
			used++
		}
	}
	slots := sc.slots[:used]
	total := 0
	for _, sl := range slots {
		total += len(sl.idx)
	}
	base := len(dst)
	dst = slices.Grow(dst, total)[:base+total]
	out := dst[base:]
	ordered := true
	for k := 1; k < len(slots); k++ {
		if slots[k-1].ts[len(slots[k-1].ts)-1] > slots[k].ts[0] {
			ordered = false
			break
		}
	}
	if ordered { // buckets cover disjoint t (a follows t): concatenate
		o := 0
		for _, sl := range slots {
			sl.fill(out[o : o+len(sl.idx)])
			o += len(sl.idx)
		}
		return dst, nil
	}
	// k-way merge by t; k is small (the buckets the a window overlaps).
	for _, sl := range slots {
		sl.pos = 0
	}
	for o := range out {
		best := 0
		bt := int64(maxT)
		for k, sl := range slots {
			if sl.pos < len(sl.ts) && sl.ts[sl.pos] <= bt {
				best, bt = k, sl.ts[sl.pos]
			}
		}
		sl := slots[best]
		sl.fill1(&out[o], sl.pos)
		sl.pos++
	}
	return dst, nil
}

// fill writes the slot's matches, in order, to out.
func (sl *slot) fill(out []Message) {
	b := sl.b
	acol := sl.ta[int(b.count)*int(b.tWidth):]
	aw, amask := b.aWidth, maskFor(b.aWidth)
	for j, i := range sl.idx {
		m := &out[j]
		m.T = sl.ts[j]
		m.A = b.aMin + int64(load(acol, int(i), aw, amask))
		m.Body = sl.bodyAt(int(i) - sl.first)
	}
}

// fill1 writes the slot's j-th match to m.
func (sl *slot) fill1(m *Message, j int) {
	b := sl.b
	i := int(sl.idx[j])
	m.T = sl.ts[j]
	m.A = b.aMin + int64(load(sl.ta[int(b.count)*int(b.tWidth):], i, b.aWidth, maskFor(b.aWidth)))
	m.Body = sl.bodyAt(i - sl.first)
}

// bodyAt is the i-th body read, zero-padded when the store's bodies are
// shorter than BodySize (a store of an earlier version).
func (sl *slot) bodyAt(i int) (out [BodySize]byte) {
	if sl.bodySize == BodySize {
		return [BodySize]byte(sl.body[i*BodySize:])
	}
	copy(out[:], sl.body[i*sl.bodySize:(i+1)*sl.bodySize])
	return out
}

// gather finds a bucket's matches and reads their bodies into sl; it
// reports whether there are any.
func (s *Store) gather(b *bucket, q *query, sl *slot) (bool, error) {
	var err error
	if sl.ta, err = s.readTA(b, sl.ta); err != nil {
		return false, err
	}
	ta := sl.ta
	tw, aw := b.tWidth, b.aWidth
	tmask, amask := maskFor(tw), maskFor(aw)
	n := int(b.count)
	acol := ta[n*int(tw):]
	i0, i1 := tRange(b, ta, q)
	sl.b = b
	sl.idx, sl.ts = sl.idx[:0], sl.ts[:0]
	if i0 >= i1 {
		return false, nil
	}
	if b.aMin >= q.aMin && b.aMax <= q.aMax {
		for i := i0; i < i1; i++ {
			sl.idx = append(sl.idx, int32(i))
			sl.ts = append(sl.ts, b.tMin+int64(load(ta, i, tw, tmask)))
		}
	} else {
		lo, width := aFilter(b, q)
		for i := i0; i < i1; i++ {
			if load(acol, i, aw, amask)-lo <= width {
				sl.idx = append(sl.idx, int32(i))
				sl.ts = append(sl.ts, b.tMin+int64(load(ta, i, tw, tmask)))
			}
		}
		if len(sl.idx) == 0 {
			return false, nil
		}
	}
	sl.first = int(sl.idx[0])
	sl.bodySize = s.bodySize
	nb := (int(sl.idx[len(sl.idx)-1]) - sl.first + 1) * s.bodySize
	sl.body = slices.Grow(sl.body[:0], nb)[:nb]
	if _, err := s.bodyF.ReadAt(sl.body, int64(b.bodyOff)+int64(sl.first*s.bodySize)); err != nil {
		return false, fmt.Errorf("callstore: read: %w", err)
	}
	return true, nil
}

// readTA reads and checks a bucket's t and a columns into sc.ta, with 8
// bytes of slack for load.
func (s *Store) readTA(b *bucket, buf []byte) ([]byte, error) {
	n := int(b.count) * int(b.tWidth+b.aWidth)
	buf = slices.Grow(buf[:0], n+8)[:n+8]
	if _, err := s.taF.ReadAt(buf[:n], int64(b.taOff)); err != nil {
		return buf, fmt.Errorf("callstore: read: %w", err)
	}
	if crc32.Checksum(buf[:n], castagnoli) != b.crcTA {
		return buf, fmt.Errorf("%w: bucket at %d: checksum mismatch", ErrCorrupt, b.taOff)
	}
	return buf, nil
}

// tRange returns the index range [i0, i1) of the bucket's records with t in
// the query's window, by binary search on the t column.
func tRange(b *bucket, tcol []byte, q *query) (int, int) {
	n := int(b.count)
	w, mask := b.tWidth, maskFor(b.tWidth)
	i0, i1 := 0, n
	if b.tMin < q.tMin {
		d := uint64(q.tMin) - uint64(b.tMin)
		i0 = sort.Search(n, func(i int) bool { return load(tcol, i, w, mask) >= d })
	}
	if b.tMax > q.tMax {
		d := uint64(q.tMax) - uint64(b.tMin)
		i1 = i0 + sort.Search(n-i0, func(i int) bool { return load(tcol, i0+i, w, mask) > d })
	}
	return i0, i1
}

// aFilter returns the bucket's a-delta window for the query: a matches iff
// delta-lo <= width (unsigned).
func aFilter(b *bucket, q *query) (lo, width uint64) {
	lo = uint64(max(q.aMin, b.aMin)) - uint64(b.aMin)
	hi := uint64(min(q.aMax, b.aMax)) - uint64(b.aMin)
	return lo, hi - lo
}

// AvgValue returns the integer part (truncated toward zero) of the mean a of
// the records Messages would return, or 0 if there are none. Buckets inside
// the window are averaged from the index without reading them.
func (s *Store) AvgValue(aMin, aMax, tMin, tMax int64) (int64, error) {
	n, sum, err := s.sumValue(aMin, aMax, tMin, tMax)
	if err != nil || n == 0 {
		return 0, err
	}
	return sum.quo(n), nil
}

// sumValue returns how many records match and the exact sum of their a:
// the parts of AvgValue.
func (s *Store) sumValue(aMin, aMax, tMin, tMax int64) (uint64, int128, error) {
	var sum int128
	if err := s.begin(aMin, aMax, tMin, tMax); err != nil {
		return 0, sum, err
	}
	defer s.closeMu.RUnlock()
	q := query{aMin: aMin, aMax: aMax, tMin: tMin, tMax: tMax}
	sc := s.getScratch()
	defer s.scratch.Put(sc)
	var count uint64
	for _, r := range s.view.Load().runs {
		if r.hi < tMin || r.lo > tMax {
			continue
		}
		i := sort.Search(len(r.chunks), func(i int) bool { return r.chunks[i].hi >= tMin })
		for ; i < len(r.chunks) && r.chunks[i].lo <= tMax; i++ {
			for j := range r.chunks[i].buckets {
				b := &r.chunks[i].buckets[j]
				if b.aMax < aMin || b.aMin > aMax || b.tMax < tMin || b.tMin > tMax {
					continue
				}
				if b.aMin >= aMin && b.aMax <= aMax && b.tMin >= tMin && b.tMax <= tMax {
					count += uint64(b.count)
					sum = sum.add(b.sum)
					continue
				}
				c, bs, err := s.bucketSum(b, &q, sc)
				if err != nil {
					return 0, sum, err
				}
				count += c
				sum = sum.add(bs)
			}
		}
	}
	return count, sum, nil
}

// bucketSum counts and sums the matching records of a partly covered
// bucket.
func (s *Store) bucketSum(b *bucket, q *query, sc *queryScratch) (uint64, int128, error) {
	ta, err := s.readTA(b, sc.ta)
	sc.ta = ta
	if err != nil {
		return 0, int128{}, err
	}
	n := int(b.count)
	aw := b.aWidth
	amask := maskFor(aw)
	acol := ta[n*int(b.tWidth):]
	i0, i1 := tRange(b, ta, q)
	if i0 >= i1 {
		return 0, int128{}, nil
	}
	lo, width := aFilter(b, q)
	var count uint64
	var sum int128
	if int(aw)*8+bits.Len(uint(n)) <= 64 { // deltas cannot overflow a uint64 sum
		var sd uint64
		for i := i0; i < i1; i++ {
			d := load(acol, i, aw, amask)
			if d-lo <= width {
				sd += d
				count++
			}
		}
		sum = sum.addUint64(sd)
	} else {
		for i := i0; i < i1; i++ {
			d := load(acol, i, aw, amask)
			if d-lo <= width {
				sum = sum.addUint64(d)
				count++
			}
		}
	}
	return count, sum.add(mulInt64(b.aMin, count)), nil
}

// Len returns the number of records queries can see.
func (s *Store) Len() uint64 { return s.view.Load().records }

// Stats describes the index snapshot queries currently see.
type Stats struct {
	Records uint64 // records visible to queries
	Runs    int    // t-ordered runs; more than one means some writer fell behind a flush
	Chunks  int
	Buckets int
}

// Stats returns the shape of the current index snapshot.
func (s *Store) Stats() Stats {
	v := s.view.Load()
	st := Stats{Records: v.records, Runs: len(v.runs)}
	for _, r := range v.runs {
		st.Chunks += len(r.chunks)
		for _, c := range r.chunks {
			st.Buckets += len(c.buckets)
		}
	}
	return st
}
