package callstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// On-disk layout (docs/callstore.md has the user view):
//
//	index.dat  header, then fixed-size entries: one per bucket, plus a sync
//	           entry after every completed Sync.
//	ta.dat     per bucket: n t-deltas (tWidth bytes each, from tMin), then
//	           n a-deltas (aWidth bytes each, from aMin), little endian.
//	body.dat   per bucket: n bodies of the header's body size, in the same order.
//
// The header (16 bytes): magic "SXCALLS2", the entry size (uint16), the body
// size (uint16), a CRC-32C of the 12 bytes before it. A store of the first
// version has magic "SXCALLS1", the entry size as a uint32 and 34-byte
// bodies (v1Body); it is read and written as it is, never rewritten.
//
// Data files are only appended; an entry is written after the data it
// describes. Entries before the last sync entry describe fsynced data; the
// tail after it is checked against the data checksums on Open and cut at the
// first mismatch.
const (
	indexName = "index.dat"
	taName    = "ta.dat"
	bodyName  = "body.dat"

	headerSize = 16
	entrySize  = 96

	kindBucket = 1
	kindSync   = 2

	flagChunkEnd = 1
)

// v1Body is the body size of stores with the first header.
const v1Body = 34

var (
	headerMagicV1 = [8]byte{'S', 'X', 'C', 'A', 'L', 'L', 'S', '1'}
	headerMagic   = [8]byte{'S', 'X', 'C', 'A', 'L', 'L', 'S', '2'}
	castagnoli    = crc32.MakeTable(crc32.Castagnoli)
)

// entry is one index entry. For kindSync only taOff and bodyOff (the data
// file sizes at the sync) and chunk (the last chunk) are set.
type entry struct {
	kind    uint8
	flags   uint8
	tWidth  uint8
	aWidth  uint8
	count   uint32
	tMin    int64
	tMax    int64
	aMin    int64
	aMax    int64
	sum     int128
	taOff   uint64
	bodyOff uint64
	crcTA   uint32
	crcBody uint32
	chunk   uint64
}

func (e *entry) taLen() uint64               { return uint64(e.count) * uint64(e.tWidth+e.aWidth) }
func (e *entry) bodyLen(bodySize int) uint64 { return uint64(e.count) * uint64(bodySize) }

// encodeHeader writes the current header, for bodies of bodySize bytes.
func encodeHeader(b []byte, bodySize int) {
	copy(b, headerMagic[:])
	binary.LittleEndian.PutUint16(b[8:], entrySize)
	binary.LittleEndian.PutUint16(b[10:], uint16(bodySize))
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
}

// encodeHeaderV1 writes the first version's header (tests make old stores
// with it).
func encodeHeaderV1(b []byte) {
	copy(b, headerMagicV1[:])
	binary.LittleEndian.PutUint32(b[8:], entrySize)
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], castagnoli))
}

// checkHeader checks either header version and returns the body size.
func checkHeader(b []byte) (int, error) {
	if len(b) < headerSize {
		return 0, fmt.Errorf("%w: bad index header", ErrCorrupt)
	}
	v1 := [8]byte(b[:8]) == headerMagicV1
	if !v1 && [8]byte(b[:8]) != headerMagic {
		return 0, fmt.Errorf("%w: bad index header", ErrCorrupt)
	}
	if binary.LittleEndian.Uint32(b[12:]) != crc32.Checksum(b[:12], castagnoli) {
		return 0, fmt.Errorf("%w: index header checksum", ErrCorrupt)
	}
	if v1 {
		if n := binary.LittleEndian.Uint32(b[8:]); n != entrySize {
			return 0, fmt.Errorf("%w: index entry size %d, want %d", ErrCorrupt, n, entrySize)
		}
		return v1Body, nil
	}
	if n := binary.LittleEndian.Uint16(b[8:]); n != entrySize {
		return 0, fmt.Errorf("%w: index entry size %d, want %d", ErrCorrupt, n, entrySize)
	}
	bs := int(binary.LittleEndian.Uint16(b[10:]))
	if bs < 1 || bs > BodySize {
		// A later version's larger bodies would be cut: refuse, never
		// silently drop their tails.
		return 0, fmt.Errorf("%w: body size %d, this version reads 1..%d", ErrCorrupt, bs, BodySize)
	}
	return bs, nil
}

func (e *entry) encode(b []byte) {
	_ = b[entrySize-1]
	b[0], b[1], b[2], b[3] = e.kind, e.flags, e.tWidth, e.aWidth
	le := binary.LittleEndian
	le.PutUint32(b[4:], e.count)
	le.PutUint64(b[8:], uint64(e.tMin))
	le.PutUint64(b[16:], uint64(e.tMax))
	le.PutUint64(b[24:], uint64(e.aMin))
	le.PutUint64(b[32:], uint64(e.aMax))
	le.PutUint64(b[40:], e.sum.hi)
	le.PutUint64(b[48:], e.sum.lo)
	le.PutUint64(b[56:], e.taOff)
	le.PutUint64(b[64:], e.bodyOff)
	le.PutUint32(b[72:], e.crcTA)
	le.PutUint32(b[76:], e.crcBody)
	le.PutUint64(b[80:], e.chunk)
	le.PutUint32(b[88:], 0)
	le.PutUint32(b[92:], crc32.Checksum(b[:92], castagnoli))
}

// decodeEntry parses and sanity-checks one entry; any error means the entry
// is torn or corrupt.
func decodeEntry(b []byte) (entry, error) {
	var e entry
	if len(b) < entrySize {
		return e, fmt.Errorf("%w: short entry", ErrCorrupt)
	}
	le := binary.LittleEndian
	if le.Uint32(b[92:]) != crc32.Checksum(b[:92], castagnoli) {
		return e, fmt.Errorf("%w: entry checksum", ErrCorrupt)
	}
	e.kind, e.flags, e.tWidth, e.aWidth = b[0], b[1], b[2], b[3]
	e.count = le.Uint32(b[4:])
	e.tMin = int64(le.Uint64(b[8:]))
	e.tMax = int64(le.Uint64(b[16:]))
	e.aMin = int64(le.Uint64(b[24:]))
	e.aMax = int64(le.Uint64(b[32:]))
	e.sum = int128{hi: le.Uint64(b[40:]), lo: le.Uint64(b[48:])}
	e.taOff = le.Uint64(b[56:])
	e.bodyOff = le.Uint64(b[64:])
	e.crcTA = le.Uint32(b[72:])
	e.crcBody = le.Uint32(b[76:])
	e.chunk = le.Uint64(b[80:])
	switch e.kind {
	case kindSync:
		return e, nil
	case kindBucket:
	default:
		return e, fmt.Errorf("%w: entry kind %d", ErrCorrupt, e.kind)
	}
	switch {
	case e.count == 0 || e.count > 1<<20:
		return e, fmt.Errorf("%w: bucket count %d", ErrCorrupt, e.count)
	case e.tWidth < 1 || e.tWidth > 8 || e.aWidth < 1 || e.aWidth > 8:
		return e, fmt.Errorf("%w: bucket widths %d/%d", ErrCorrupt, e.tWidth, e.aWidth)
	case e.tMin > e.tMax || e.aMin > e.aMax:
		return e, fmt.Errorf("%w: bucket bounds", ErrCorrupt)
	case e.flags&^flagChunkEnd != 0:
		return e, fmt.Errorf("%w: bucket flags %#x", ErrCorrupt, e.flags)
	}
	return e, nil
}

// widthFor is the number of bytes that hold v (at least 1).
func widthFor(v uint64) uint8 {
	w := uint8(1)
	for v >= 1<<8 && w < 8 {
		v >>= 8
		w++
	}
	return w
}

// load reads a w-byte little-endian value at b[i*w:]; b has 8 bytes of slack
// so one unaligned 8-byte load and a mask do for every width.
func load(b []byte, i int, w uint8, mask uint64) uint64 {
	return binary.LittleEndian.Uint64(b[i*int(w):]) & mask
}

func maskFor(w uint8) uint64 {
	if w >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*w) - 1
}
