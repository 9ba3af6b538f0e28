package label

import (
	"encoding/binary"
	"iter"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Labels is an immutable set of key/value pairs sorted by key, stored as one
// string and the end offsets of its keys and values: one allocation of about
// the pairs' own bytes, where a map of 16 short pairs costs four times that.
// The zero value is empty.
type Labels struct {
	s    string
	ends []uint32 // ends[2i]: end of key i; ends[2i+1]: end of value i
}

// Getter looks up one label; Selector.Matches takes any.
type Getter interface {
	Get(key string) (value string, ok bool)
}

// Map adapts a plain map to Getter.
type Map map[string]string

// Get returns m[key].
func (m Map) Get(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

// FromMap returns the labels of m.
func FromMap(m map[string]string) Labels {
	if len(m) == 0 {
		return Labels{}
	}
	keys := make([]string, 0, len(m))
	size := 0
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v)
	}
	slices.Sort(keys)
	var b LabelsBuilder
	b.Grow(len(keys), size)
	for _, k := range keys {
		b.Add(k, m[k])
	}
	l, _ := b.Labels()
	return l
}

// Len is the number of pairs.
func (l Labels) Len() int { return len(l.ends) / 2 }

// At returns pair i, in key order.
func (l Labels) At(i int) (key, value string) {
	start := uint32(0)
	if i > 0 {
		start = l.ends[2*i-1]
	}
	k, v := l.ends[2*i], l.ends[2*i+1]
	return l.s[start:k], l.s[k:v]
}

// Get returns the value of key, by binary search.
func (l Labels) Get(key string) (string, bool) {
	lo, hi := 0, l.Len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		k, v := l.At(m)
		switch c := strings.Compare(k, key); {
		case c == 0:
			return v, true
		case c < 0:
			lo = m + 1
		default:
			hi = m
		}
	}
	return "", false
}

// All yields the pairs in key order.
func (l Labels) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := range l.Len() {
			if !yield(l.At(i)) {
				return
			}
		}
	}
}

// AppendLengthPrefixed appends the pairs in key order, each key and value
// after its length as a uvarint: the catalog's record encoding of labels,
// written here in one pass over the offsets.
func (l Labels) AppendLengthPrefixed(b []byte) []byte {
	b = slices.Grow(b, len(l.s)+len(l.ends))
	start := uint32(0)
	for _, end := range l.ends {
		if n := end - start; n < 0x80 {
			b = append(b, byte(n))
		} else {
			b = binary.AppendUvarint(b, uint64(n))
		}
		b = append(b, l.s[start:end]...)
		start = end
	}
	return b
}

// ValidUTF8 reports whether the pairs' bytes, every key and value in one
// string, are valid UTF-8: one pass instead of one call per value. When
// every key is ASCII (ValidKey) no sequence can span a key and a value, so
// that is every value being valid UTF-8.
func (l Labels) ValidUTF8() bool { return utf8.ValidString(l.s) }

// Equal reports whether l and o hold the same pairs.
func (l Labels) Equal(o Labels) bool { return l.s == o.s && slices.Equal(l.ends, o.ends) }

// Map returns the pairs as a new map.
func (l Labels) Map() map[string]string {
	m := make(map[string]string, l.Len())
	for k, v := range l.All() {
		m[k] = v
	}
	return m
}

// LabelsBuilder assembles Labels from pairs given in ascending key order.
type LabelsBuilder struct {
	b    []byte
	ends []uint32
	bad  bool
}

// Grow reserves room for n pairs of size bytes in all.
func (b *LabelsBuilder) Grow(n, size int) {
	if cap(b.b) == 0 && cap(b.ends) == 0 && n > 0 {
		// One allocation for both: the offsets, then the bytes. Labels
		// live as long as their instance, and an object fewer per instance
		// is less for the allocator and for every GC cycle to handle.
		words := make([]uint32, 2*n+(size+3)/4)
		b.ends = words[: 0 : 2*n]
		if size > 0 {
			b.b = unsafe.Slice((*byte)(unsafe.Pointer(&words[2*n])), size)[:0]
		}
		return
	}
	b.b = slices.Grow(b.b, size)
	b.ends = slices.Grow(b.ends, 2*n)
}

// Add appends a pair; keys must be strictly ascending.
func (b *LabelsBuilder) Add(key, value string) {
	if n := len(b.ends); n > 0 {
		start := uint32(0)
		if n > 2 {
			start = b.ends[n-3]
		}
		if key <= string(b.b[start:b.ends[n-2]]) { // compared without a copy
			b.bad = true
		}
	}
	b.b = append(b.b, key...)
	b.ends = append(b.ends, uint32(len(b.b)))
	b.b = append(b.b, value...)
	b.ends = append(b.ends, uint32(len(b.b)))
}

// AddBytes is Add for pairs held in byte slices (decoders): the bytes are
// copied into the builder and nowhere else.
func (b *LabelsBuilder) AddBytes(key, value []byte) {
	if n := len(b.ends); n > 0 {
		start := uint32(0)
		if n > 2 {
			start = b.ends[n-3]
		}
		if string(key) <= string(b.b[start:b.ends[n-2]]) {
			b.bad = true
		}
	}
	b.b = append(b.b, key...)
	b.ends = append(b.ends, uint32(len(b.b)))
	b.b = append(b.b, value...)
	b.ends = append(b.ends, uint32(len(b.b)))
}

// BytePair is a key and its value held in byte slices: a decoder's view of
// its input.
type BytePair struct{ Key, Value []byte }

// FromBytePairs returns the labels of pairs, and false if their keys are
// not strictly ascending (the labels are then unusable, as Labels' are).
// It is LabelsBuilder's Grow, AddBytes and Labels in one loop that writes
// each offset by index: a decoder's 16 pairs cost about half the
// instructions.
func FromBytePairs(pairs []BytePair) (Labels, bool) {
	n, size := len(pairs), 0
	if n == 0 {
		return Labels{}, true
	}
	for _, p := range pairs {
		size += len(p.Key) + len(p.Value)
	}
	words := make([]uint32, 2*n+(size+3)/4) // offsets then bytes, as Grow
	ends := words[: 2*n : 2*n]
	var s string
	ok := true
	if size == 0 {
		for i := range pairs {
			ok = ok && (i == 0 || string(pairs[i].Key) > string(pairs[i-1].Key))
		}
		return Labels{s: s, ends: ends}, ok
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[2*n])), size)
	off := 0
	for i, p := range pairs {
		if i > 0 && string(p.Key) <= string(pairs[i-1].Key) {
			ok = false
		}
		off += copy(buf[off:], p.Key)
		ends[2*i] = uint32(off)
		off += copy(buf[off:], p.Value)
		ends[2*i+1] = uint32(off)
	}
	return Labels{s: unsafe.String(&buf[0], size), ends: ends}, ok
}

// Labels returns the pairs added, and false if keys were not strictly
// ascending (a duplicate or out-of-order key). The labels take over the
// builder's memory without a copy: the builder must not be used again.
func (b *LabelsBuilder) Labels() (Labels, bool) {
	if len(b.ends) == 0 {
		return Labels{}, !b.bad
	}
	buf := slices.Clip(b.b)
	l := Labels{s: unsafe.String(unsafe.SliceData(buf), len(buf)), ends: slices.Clip(b.ends)}
	b.b, b.ends = nil, nil
	return l, !b.bad
}
