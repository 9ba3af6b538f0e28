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
	ta   []byte
	body []byte
	idx  []int32
	segs []int
	tmp  []Message
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

func (s *Store) chunkMessages(dst []Message, c *chunkMeta, q *query, sc *queryScratch) ([]Message, error) {
	start := len(dst)
	sc.segs = sc.segs[:0]
	var err error
	for i := range c.buckets {
		b := &c.buckets[i]
		if b.aMax < q.aMin || b.aMin > q.aMax || b.tMax < q.tMin || b.tMin > q.tMax {
			continue
		}
		before := len(dst)
		if dst, err = s.bucketMessages(dst, b, q, sc); err != nil {
			return dst, err
		}
		if len(dst) > before {
			sc.segs = append(sc.segs, before)
		}
	}
	if len(sc.segs) < 2 {
		return dst, nil
	}
	ordered := true
	for _, seg := range sc.segs[1:] {
		if dst[seg-1].T > dst[seg].T {
			ordered = false
			break
		}
	}
	if ordered { // buckets cover disjoint t (a follows t): already sorted
		return dst, nil
	}
	mergeSegments(dst[start:], sc.segs, start, sc)
	return dst, nil
}

// mergeSegments merges the t-sorted segments of out (segs are their starts,
// offset by base) into one t-sorted sequence.
func mergeSegments(out []Message, segs []int, base int, sc *queryScratch) {
	sc.tmp = append(sc.tmp[:0], out...)
	k := len(segs)
	pos := make([]int, k)
	end := make([]int, k)
	for i := range segs {
		pos[i] = segs[i] - base
		if i+1 < k {
			end[i] = segs[i+1] - base
		} else {
			end[i] = len(out)
		}
	}
	tmp := sc.tmp
	for o := range out {
		best := -1
		for i := range k {
			if pos[i] < end[i] && (best < 0 || tmp[pos[i]].T < tmp[pos[best]].T) {
				best = i
			}
		}
		out[o] = tmp[pos[best]]
		pos[best]++
	}
}

// readTA reads and checks a bucket's t and a columns into sc.ta, with 8
// bytes of slack for load.
func (s *Store) readTA(b *bucket, sc *queryScratch) ([]byte, error) {
	n := int(b.count) * int(b.tWidth+b.aWidth)
	sc.ta = slices.Grow(sc.ta[:0], n+8)[:n+8]
	if _, err := s.taF.ReadAt(sc.ta[:n], int64(b.taOff)); err != nil {
		return nil, fmt.Errorf("callstore: read: %w", err)
	}
	if crc32.Checksum(sc.ta[:n], castagnoli) != b.crcTA {
		return nil, fmt.Errorf("%w: bucket at %d: checksum mismatch", ErrCorrupt, b.taOff)
	}
	return sc.ta, nil
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

func (s *Store) bucketMessages(dst []Message, b *bucket, q *query, sc *queryScratch) ([]Message, error) {
	ta, err := s.readTA(b, sc)
	if err != nil {
		return dst, err
	}
	tw, aw := b.tWidth, b.aWidth
	tmask, amask := maskFor(tw), maskFor(aw)
	n := int(b.count)
	acol := ta[n*int(tw):]
	i0, i1 := tRange(b, ta, q)
	if i0 >= i1 {
		return dst, nil
	}
	idx := sc.idx[:0]
	first, last := i0, i1-1
	fullA := b.aMin >= q.aMin && b.aMax <= q.aMax
	if !fullA {
		lo, width := aFilter(b, q)
		for i := i0; i < i1; i++ {
			if load(acol, i, aw, amask)-lo <= width {
				idx = append(idx, int32(i))
			}
		}
		sc.idx = idx
		if len(idx) == 0 {
			return dst, nil
		}
		first, last = int(idx[0]), int(idx[len(idx)-1])
	}
	nb := (last - first + 1) * BodySize
	sc.body = slices.Grow(sc.body[:0], nb)[:nb]
	if _, err := s.bodyF.ReadAt(sc.body, int64(b.bodyOff)+int64(first*BodySize)); err != nil {
		return dst, fmt.Errorf("callstore: read: %w", err)
	}
	body := sc.body
	emit := func(i int) {
		dst = append(dst, Message{})
		m := &dst[len(dst)-1]
		m.T = b.tMin + int64(load(ta, i, tw, tmask))
		m.A = b.aMin + int64(load(acol, i, aw, amask))
		copy(m.Body[:], body[(i-first)*BodySize:])
	}
	if fullA {
		dst = slices.Grow(dst, i1-i0)
		for i := i0; i < i1; i++ {
			emit(i)
		}
	} else {
		dst = slices.Grow(dst, len(idx))
		for _, i := range idx {
			emit(int(i))
		}
	}
	return dst, nil
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
	ta, err := s.readTA(b, sc)
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
