package callstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// bucket is the in-memory index entry of one bucket: enough to prune it,
// to average it without reading it, and to find its data.
type bucket struct {
	tMin, tMax     int64
	aMin, aMax     int64
	sum            int128
	count          uint32
	tWidth, aWidth uint8
	crcTA          uint32
	taOff, bodyOff uint64
}

// chunkMeta is one chunk: buckets partition its records by a; each bucket
// is in t order. lo and hi bound the chunk's t.
type chunkMeta struct {
	lo, hi  int64
	buckets []bucket
}

// run is a sequence of chunks in t order: chunks[i].hi <= chunks[i+1].lo.
type run struct {
	lo, hi int64
	chunks []*chunkMeta
}

// view is an immutable snapshot of the index. Publishing a chunk makes a
// new view; slices are only appended past the length older views see.
type view struct {
	runs    []run
	records uint64
}

// encoder owns the append offsets and the scratch space of the encoder
// goroutine (and of recovery, before it starts).
type encoder struct {
	taOff, bodyOff uint64
	idxOff         int64
	nextChunk      uint64

	perm     []int32
	bucketOf []uint16
	sample   []int64
	splits   []int64
	ta       []byte
	body     []byte
	idx      []byte
}

func (s *Store) encodeLoop() {
	defer s.wg.Done()
	for {
		select {
		case job := <-s.jobs:
			s.runJob(job)
		case <-s.done:
			return
		}
	}
}

func (s *Store) runJob(job chunkJob) {
	var err error
	if len(job.recs) > 0 {
		if err = s.failure(); err == nil {
			if err = s.writeChunk(job.recs); err != nil {
				s.fail(err)
			}
		}
		s.putChunk(job.recs)
	}
	if job.req != nil {
		if err == nil {
			err = s.failure()
		}
		if err == nil && !job.req.visibleOnly {
			if err = s.syncFiles(); err != nil {
				s.fail(err)
			}
		}
		job.req.done <- err
	}
}

// syncFiles makes the data durable, then records that in a sync entry.
func (s *Store) syncFiles() error {
	e := &s.enc
	if err := s.taF.Sync(); err != nil {
		return fmt.Errorf("callstore: sync: %w", err)
	}
	if err := s.bodyF.Sync(); err != nil {
		return fmt.Errorf("callstore: sync: %w", err)
	}
	var b [entrySize]byte
	se := entry{kind: kindSync, taOff: e.taOff, bodyOff: e.bodyOff, chunk: e.nextChunk}
	se.encode(b[:])
	if _, err := s.idxF.WriteAt(b[:], e.idxOff); err != nil {
		return fmt.Errorf("callstore: sync: %w", err)
	}
	e.idxOff += entrySize
	if err := s.idxF.Sync(); err != nil {
		return fmt.Errorf("callstore: sync: %w", err)
	}
	return nil
}

// writeChunk encodes recs (t-ordered) into buckets, appends data then index
// entries, and publishes the chunk to queries.
func (s *Store) writeChunk(recs []record) error {
	e := &s.enc
	order, bounds := e.partition(recs, s.opts.BucketRecords)
	n := len(recs)
	e.ta = slices.Grow(e.ta[:0], 16*n+8)[:16*n+8]
	bs := s.bodySize
	e.body = slices.Grow(e.body[:0], bs*n)[:bs*n]
	nb := len(bounds) - 1
	e.idx = slices.Grow(e.idx[:0], entrySize*nb)[:entrySize*nb]
	c := &chunkMeta{lo: recs[0].t, hi: recs[n-1].t, buckets: make([]bucket, 0, nb)}
	taPos, bodyPos := 0, 0
	chunk := e.nextChunk
	for k := range nb {
		idx := order[bounds[k]:bounds[k+1]]
		if len(idx) == 0 {
			continue
		}
		b := bucket{tMin: recs[idx[0]].t, tMax: recs[idx[len(idx)-1]].t, aMin: recs[idx[0]].a, aMax: recs[idx[0]].a}
		for _, i := range idx {
			a := recs[i].a
			b.aMin = min(b.aMin, a)
			b.aMax = max(b.aMax, a)
			b.sum = b.sum.add(int128From(a))
		}
		b.count = uint32(len(idx))
		b.tWidth = widthFor(uint64(b.tMax) - uint64(b.tMin))
		b.aWidth = widthFor(uint64(b.aMax) - uint64(b.aMin))
		b.taOff = e.taOff + uint64(taPos)
		b.bodyOff = e.bodyOff + uint64(bodyPos)
		start := taPos
		for _, i := range idx {
			binary.LittleEndian.PutUint64(e.ta[taPos:], uint64(recs[i].t)-uint64(b.tMin))
			taPos += int(b.tWidth)
		}
		for _, i := range idx {
			binary.LittleEndian.PutUint64(e.ta[taPos:], uint64(recs[i].a)-uint64(b.aMin))
			taPos += int(b.aWidth)
		}
		b.crcTA = crc32.Checksum(e.ta[start:taPos], castagnoli)
		bstart := bodyPos
		for _, i := range idx {
			copy(e.body[bodyPos:bodyPos+bs], recs[i].body[:bs])
			bodyPos += bs
		}
		en := entry{kind: kindBucket, tWidth: b.tWidth, aWidth: b.aWidth, count: b.count,
			tMin: b.tMin, tMax: b.tMax, aMin: b.aMin, aMax: b.aMax, sum: b.sum,
			taOff: b.taOff, bodyOff: b.bodyOff, crcTA: b.crcTA,
			crcBody: crc32.Checksum(e.body[bstart:bodyPos], castagnoli), chunk: chunk}
		c.buckets = append(c.buckets, b)
		en.encode(e.idx[entrySize*(len(c.buckets)-1):])
	}
	e.idx = e.idx[:entrySize*len(c.buckets)]
	e.idx[entrySize*(len(c.buckets)-1)+1] |= flagChunkEnd
	// The flag byte changed: re-encode the last entry's checksum.
	last := e.idx[entrySize*(len(c.buckets)-1):]
	binary.LittleEndian.PutUint32(last[92:], crc32.Checksum(last[:92], castagnoli))

	if _, err := s.taF.WriteAt(e.ta[:taPos], int64(e.taOff)); err != nil {
		return fmt.Errorf("callstore: write: %w", err)
	}
	if _, err := s.bodyF.WriteAt(e.body[:bodyPos], int64(e.bodyOff)); err != nil {
		return fmt.Errorf("callstore: write: %w", err)
	}
	if _, err := s.idxF.WriteAt(e.idx, e.idxOff); err != nil {
		return fmt.Errorf("callstore: write: %w", err)
	}
	e.taOff += uint64(taPos)
	e.bodyOff += uint64(bodyPos)
	e.idxOff += int64(len(e.idx))
	e.nextChunk++
	s.publish(c, uint64(n))
	return nil
}

// partition groups recs into about len/target buckets by a. It returns the
// record indices in bucket order (t order inside a bucket) and the bucket
// bounds in that order.
func (e *encoder) partition(recs []record, target int) ([]int32, []int) {
	n := len(recs)
	nb := min(max(n/target, 1), 1<<15)
	e.perm = slices.Grow(e.perm[:0], n)[:n]
	bounds := make([]int, 0, nb+1)
	sortedA := true
	for i := 1; i < n; i++ {
		if recs[i].a < recs[i-1].a {
			sortedA = false
			break
		}
	}
	if nb == 1 || sortedA {
		// a follows t (or one bucket): contiguous slices are the buckets.
		for i := range n {
			e.perm[i] = int32(i)
		}
		for k := 0; k <= nb; k++ {
			bounds = append(bounds, k*n/nb)
		}
		return e.perm, bounds
	}
	// Splitters from an even sample of a: buckets of about equal size
	// without sorting the chunk.
	m := min(n, nb*32)
	e.sample = e.sample[:0]
	for i := range m {
		e.sample = append(e.sample, recs[i*n/m].a)
	}
	slices.Sort(e.sample)
	e.splits = e.splits[:0]
	for k := 1; k < nb; k++ {
		v := e.sample[k*m/nb]
		if len(e.splits) == 0 || v > e.splits[len(e.splits)-1] {
			e.splits = append(e.splits, v)
		}
	}
	nb = len(e.splits) + 1
	counts := make([]int, nb+1)
	e.bucketOf = slices.Grow(e.bucketOf[:0], n)[:n]
	sp := e.splits
	for i := range recs {
		a := recs[i].a
		lo, hi := 0, len(sp) // bucket = number of splitters <= a
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if sp[mid] <= a {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		e.bucketOf[i] = uint16(lo)
		counts[lo+1]++
	}
	for k := 1; k <= nb; k++ {
		counts[k] += counts[k-1]
	}
	bounds = append(bounds, counts...)
	for i := range recs {
		k := e.bucketOf[i]
		e.perm[counts[k]] = int32(i)
		counts[k]++
	}
	return e.perm, bounds
}

// publish appends c to the index snapshot queries read.
func (s *Store) publish(c *chunkMeta, n uint64) {
	old := s.view.Load()
	v := &view{runs: make([]run, len(old.runs), len(old.runs)+1), records: old.records + n}
	copy(v.runs, old.runs)
	if l := len(v.runs) - 1; l >= 0 && c.lo >= v.runs[l].hi {
		r := &v.runs[l]
		r.chunks = append(r.chunks, c)
		r.hi = c.hi
	} else {
		v.runs = append(v.runs, run{lo: c.lo, hi: c.hi, chunks: []*chunkMeta{c}})
	}
	s.view.Store(v)
}
