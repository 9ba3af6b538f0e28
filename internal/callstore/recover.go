package callstore

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// recover loads the index, checks the tail written after the last completed
// Sync against the data checksums, cuts what is torn, and publishes the
// chunks. It runs in Open, before the goroutines start.
func (s *Store) recover() error {
	s.view.Store(&view{})
	idx, err := io.ReadAll(io.NewSectionReader(s.idxF, 0, 1<<62))
	if err != nil {
		return fmt.Errorf("callstore: read index: %w", err)
	}
	if len(idx) < headerSize {
		// New store, or a crash while creating it: nothing was ever indexed.
		return s.initFiles()
	}
	if s.bodySize, err = checkHeader(idx); err != nil {
		return err
	}
	taSize, err := fileSize(s.taF)
	if err != nil {
		return err
	}
	bodySize, err := fileSize(s.bodyF)
	if err != nil {
		return err
	}
	entries, err := parseIndex(idx[headerSize:], s.bodySize)
	if err != nil {
		return err
	}
	lastSync := -1
	for i, en := range entries {
		if en.kind == kindSync {
			lastSync = i
		}
	}
	// Entries up to the last sync describe fsynced data: it must all be there.
	for _, en := range entries[:lastSync+1] {
		if en.taOff+en.taLen() > taSize || en.bodyOff+en.bodyLen(s.bodySize) > bodySize {
			return fmt.Errorf("%w: synced data missing from data files", ErrCorrupt)
		}
	}
	// The tail after it may describe data that never reached the disk.
	keep := lastSync + 1
	var buf []byte
	for _, en := range entries[lastSync+1:] {
		if en.kind == kindBucket && !s.checkData(&en, taSize, bodySize, &buf) {
			break
		}
		keep++
	}
	// Cut a partly written chunk.
	for keep > 0 && entries[keep-1].kind == kindBucket && entries[keep-1].flags&flagChunkEnd == 0 {
		keep--
	}
	if keep < len(entries) || int64(len(idx)) != headerSize+int64(len(entries))*entrySize {
		s.log.Warn("callstore: cut torn tail", "dir", s.dir, "entries", len(entries), "kept", keep)
	}
	entries = entries[:keep]

	e := &s.enc
	e.idxOff = headerSize + int64(len(entries))*entrySize
	var c *chunkMeta
	var records uint64
	for _, en := range entries {
		if en.kind == kindSync {
			continue
		}
		if c == nil {
			c = &chunkMeta{lo: en.tMin, hi: en.tMax}
		}
		c.lo, c.hi = min(c.lo, en.tMin), max(c.hi, en.tMax)
		c.buckets = append(c.buckets, bucket{tMin: en.tMin, tMax: en.tMax, aMin: en.aMin, aMax: en.aMax,
			sum: en.sum, count: en.count, tWidth: en.tWidth, aWidth: en.aWidth, crcTA: en.crcTA,
			taOff: en.taOff, bodyOff: en.bodyOff})
		e.taOff = en.taOff + en.taLen()
		e.bodyOff = en.bodyOff + en.bodyLen(s.bodySize)
		e.nextChunk = en.chunk + 1
		records += uint64(en.count)
		if en.flags&flagChunkEnd != 0 {
			s.publish(c, 0)
			c = nil
		}
	}
	v := *s.view.Load()
	v.records = records
	s.view.Store(&v)
	return s.truncate(e.idxOff, int64(e.taOff), int64(e.bodyOff), int64(len(idx)), int64(taSize), int64(bodySize))
}

// parseIndex decodes the entries after the header up to the first torn or
// invalid one. Corruption followed by a valid sync entry is not a torn tail
// but damage to synced data: that is an error, not something to cut.
func parseIndex(b []byte, bodySize int) ([]entry, error) {
	var entries []entry
	var taOff, bodyOff, chunk uint64
	chunkOpen := false
	n := len(b) / entrySize
	for i := 0; i < n; i++ {
		en, err := decodeEntry(b[i*entrySize:])
		if err == nil {
			err = checkSequence(&en, taOff, bodyOff, chunk, chunkOpen)
		}
		if err != nil {
			for j := i + 1; j < n; j++ {
				if later, err2 := decodeEntry(b[j*entrySize:]); err2 == nil && later.kind == kindSync {
					return nil, fmt.Errorf("%w: index entry %d: %w", ErrCorrupt, i, err)
				}
			}
			break
		}
		entries = append(entries, en)
		if en.kind == kindBucket {
			taOff, bodyOff = en.taOff+en.taLen(), en.bodyOff+en.bodyLen(bodySize)
			chunk = en.chunk
			chunkOpen = en.flags&flagChunkEnd == 0
			if !chunkOpen {
				chunk++
			}
		}
	}
	return entries, nil
}

// checkSequence checks that en continues the data files and chunk numbers
// exactly where the previous entries left them.
func checkSequence(en *entry, taOff, bodyOff, chunk uint64, chunkOpen bool) error {
	if en.kind == kindSync {
		if chunkOpen || en.taOff != taOff || en.bodyOff != bodyOff || en.chunk != chunk {
			return fmt.Errorf("%w: sync entry out of sequence", ErrCorrupt)
		}
		return nil
	}
	if en.taOff != taOff || en.bodyOff != bodyOff || en.chunk != chunk {
		return fmt.Errorf("%w: bucket entry out of sequence", ErrCorrupt)
	}
	return nil
}

// checkData reports whether the bucket's data is on disk and matches its
// checksums.
func (s *Store) checkData(en *entry, taSize, bodySize uint64, buf *[]byte) bool {
	if en.taOff+en.taLen() > taSize || en.bodyOff+en.bodyLen(s.bodySize) > bodySize {
		return false
	}
	read := func(f *os.File, off, n uint64) []byte {
		if uint64(cap(*buf)) < n {
			*buf = make([]byte, n)
		}
		b := (*buf)[:n]
		if _, err := f.ReadAt(b, int64(off)); err != nil {
			return nil
		}
		return b
	}
	b := read(s.taF, en.taOff, en.taLen())
	if b == nil || crc32.Checksum(b, castagnoli) != en.crcTA {
		return false
	}
	b = read(s.bodyF, en.bodyOff, en.bodyLen(s.bodySize))
	return b != nil && crc32.Checksum(b, castagnoli) == en.crcBody
}

func (s *Store) initFiles() error {
	var h [headerSize]byte
	s.bodySize = BodySize
	encodeHeader(h[:], s.bodySize)
	for _, f := range []*os.File{s.idxF, s.taF, s.bodyF} {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("callstore: init: %w", err)
		}
	}
	if _, err := s.idxF.WriteAt(h[:], 0); err != nil {
		return fmt.Errorf("callstore: init: %w", err)
	}
	s.enc = encoder{idxOff: headerSize}
	for _, f := range []*os.File{s.taF, s.bodyF, s.idxF} {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("callstore: init: %w", err)
		}
	}
	return syncDir(s.dir)
}

// truncate cuts each file to its valid length if it is longer, and makes
// the cut durable.
func (s *Store) truncate(idx, ta, body, idxSize, taSize, bodySize int64) error {
	for _, f := range []struct {
		f          *os.File
		want, have int64
	}{{s.idxF, idx, idxSize}, {s.taF, ta, taSize}, {s.bodyF, body, bodySize}} {
		if f.have == f.want {
			continue
		}
		if err := f.f.Truncate(f.want); err != nil {
			return fmt.Errorf("callstore: cut tail: %w", err)
		}
		if err := f.f.Sync(); err != nil {
			return fmt.Errorf("callstore: cut tail: %w", err)
		}
	}
	return nil
}

func fileSize(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("callstore: stat: %w", err)
	}
	return uint64(st.Size()), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("callstore: sync dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("callstore: sync dir: %w", err)
	}
	return nil
}
