package subset

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// Reading every host's labels bounds the build (docs/perf/subset.md), so the
// two lookups it makes per label, which key and which value, avoid hashing
// whole strings, map lookups and memequal calls, and have few
// data-dependent branches: a string is known by its fingerprint, which for
// up to 16 bytes is the string itself.

// fingerprint returns a string's first and last eight bytes (four, or
// single bytes, when shorter). With the length they determine a string of at
// most 16 bytes, so equal fingerprints of such strings mean equal strings.
func fingerprint(s string) (lo, hi uint64) {
	n := len(s)
	b := unsafe.Slice(unsafe.StringData(s), n)
	switch {
	case n >= 8:
		return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[n-8:])
	case n >= 4:
		return uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[n-4:]))
	case n > 0:
		return uint64(b[0]) | uint64(b[n/2])<<8 | uint64(b[n-1])<<16, 0
	}
	return 0, 0
}

// shortMax is the longest string a fingerprint determines.
const shortMax = 16

// fpHash mixes a fingerprint and length (wyhash's multiply-fold): one
// 64x64->128-bit multiply, whose low bits depend on every input bit.
func fpHash(lo, hi uint64, n int) uint64 {
	h, l := bits.Mul64(lo^0xA0761D6478BD642F^uint64(n)<<56, hi^0xE7037ED1A0B428DB)
	return h ^ l
}

// keyTable numbers the configured keys and recognises them among a host's
// or a request's label keys with one probe of an open-addressed table: keys
// no selector uses (most of a registry instance's metadata) usually cost no
// comparison at all. Immutable once built.
type keyTable struct {
	names []string // by id, ascending
	slots []keySlot
	mask  uint64
}

type keySlot struct {
	lo, hi uint64
	n      int32
	id     int32 // -1: empty
}

func newKeyTable(names []string) keyTable {
	size := 16
	for size < 4*len(names) {
		size *= 2
	}
	t := keyTable{names: names, slots: make([]keySlot, size), mask: uint64(size - 1)}
	for i := range t.slots {
		t.slots[i].id = -1
	}
	for id, k := range names {
		lo, hi := fingerprint(k)
		i := fpHash(lo, hi, len(k)) & t.mask
		for t.slots[i].id >= 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = keySlot{lo: lo, hi: hi, n: int32(len(k)), id: int32(id)}
	}
	return t
}

// id returns the id of key k, or -1 if no selector or default subset uses it.
func (t *keyTable) id(k string) int {
	lo, hi := fingerprint(k)
	for i := fpHash(lo, hi, len(k)) & t.mask; ; i = (i + 1) & t.mask {
		e := &t.slots[i]
		if e.id < 0 {
			return -1
		}
		if e.lo == lo && e.hi == hi && int(e.n) == len(k) && (len(k) <= shortMax || t.names[e.id] == k) {
			return int(e.id)
		}
	}
}
