package label

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// With returns l with key set to value: l itself when it already holds
// that pair, else a new set with the pair inserted in key order, or in
// place of key's other value.
func (l Labels) With(key, value string) Labels {
	lo, hi := 0, l.Len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k, _ := l.At(m); k < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	// lo is where key is or goes.
	replace := false
	if lo < l.Len() {
		k, v := l.At(lo)
		if k == key && v == value {
			return l
		}
		replace = k == key
	}
	n := l.Len() + 1
	if replace {
		n--
	}
	var b LabelsBuilder
	b.Grow(n, len(l.s)+len(key)+len(value))
	for i := range l.Len() {
		if i == lo {
			b.Add(key, value)
			if replace {
				continue
			}
		}
		b.Add(l.At(i))
	}
	if lo == l.Len() {
		b.Add(key, value)
	}
	out, _ := b.Labels()
	return out
}

// withBuckets bounds a WithSets: 8,192 entries (64 KiB of pointers), and
// the sets they hold.
const (
	withBits    = 12
	withBuckets = 1 << withBits
)

// WithSets hands out base.With(key, value) shared for the bases it saw
// lately, keyed by the base's storage and the pair: bases shared through an
// Interner (replicas' equal metadata) then share one derived set too, so
// that a label index adding them recognises it by its storage
// (LabelsCache) and it is built once, not once per instance. Each bucket
// holds two entries, and a base has its way in it by its hash, so two
// bases meeting in a bucket (likely among a few hundred sets) do not evict
// each other; a miss replaces its way. A held entry holds its base, so the
// storage it names is not reused for other bytes while it is held. Safe
// for concurrent use; the zero value is ready.
type WithSets struct {
	buckets [withBuckets][2]atomic.Pointer[withEntry]
}

type withEntry struct {
	base       Labels
	key, value string
	l          Labels
}

var withSeed = maphash.MakeSeed()

// With returns base.With(key, value), shared with the earlier calls for
// the same base (by storage) and pair. The Labels pointed to must not be
// modified.
func (c *WithSets) With(base Labels, key, value string) *Labels {
	// Fibonacci hashing of the storage's address (sets lie a size class
	// apart: their low bits are alike); the top bits pick the bucket, the
	// next one the way.
	h := uint64(uintptr(unsafe.Pointer(unsafe.StringData(base.s))))*0x9E3779B97F4A7C15 ^ maphash.String(withSeed, value)
	b := &c.buckets[h>>(64-withBits)]
	for i := range b {
		if e := b[i].Load(); e != nil && e.base.same(base) && e.key == key && e.value == value {
			return &e.l
		}
	}
	e := &withEntry{base: base, key: key, value: value, l: base.With(key, value)}
	if len(base.s)+len(value) <= maxHeldBytes {
		b[h>>(63-withBits)&1].Store(e)
	}
	return &e.l
}
