package subset

import (
	"strings"
	"unsafe"

	"github.com/bits-and-blooms/bitset"
	"github.com/sextant-mesh/sextant/internal/label"
)

// index builds the inverted index of the configured keys over hosts (slot i
// is hosts[i]) in one pass over the hosts, which also checks them. It bounds
// New: see docs/perf/subset.md for what it costs and why.
func (lb *LB) index(hosts []Host) (*label.Postings, error) {
	c := lb.cfg
	t := newPairTable(&c.kt, uint32(len(hosts)))
	for i := range hosts {
		h := &hosts[i]
		slot := uint32(i)
	pairs:
		for it := h.Labels.Pairs(); ; {
			kv, klen, next, ok := it.Next()
			if !ok {
				break
			}
			it = next
			if t.keyLens&lenBit(klen) == 0 {
				continue
			}
			// A hit is one probe and no call.
			lo, hi := fingerprint(kv)
			for ti := pairHash(lo, hi, len(kv), klen) & t.mask; ; ti = (ti + 1) & t.mask {
				e := t.slots[ti]
				if e == 0 {
					t.insert(kv, klen, lo, hi, ti, slot)
					continue pairs
				}
				p := &t.pairs[e-1]
				if p.lo == lo && p.hi == hi && int(p.n) == len(kv) && int(p.klen) == klen &&
					(len(kv) <= shortMax || p.kv == kv) {
					if p.words != nil {
						p.words[slot>>6] |= 1 << (slot & 63)
					} else {
						t.appendSlot(p, slot)
					}
					continue pairs
				}
			}
		}
		if len(h.Lists) == 0 {
			continue
		}
		if err := checkHost(h); err != nil {
			return nil, err
		}
		if c.listAny {
			for k, vs := range h.Lists {
				if id := c.kt.id(k); id >= 0 {
					for _, v := range vs {
						t.addList(id, k, v, slot)
					}
				}
			}
		}
	}
	b := label.NewPostingsBuilder(uint32(len(hosts)))
	kh := make([]int, len(c.keys))
	for i, k := range c.keys {
		kh[i] = b.Key(k)
	}
	// The lists the index keeps go into one array of their exact size; the
	// growing ones are garbage.
	total := 0
	for pi := range t.pairs {
		total += len(t.pairs[pi].list)
	}
	lists := make([]uint32, 0, total)
	for pi := range t.pairs {
		p := &t.pairs[pi]
		if p.words != nil {
			b.AddBits(kh[p.id], p.value(), bitset.From(p.words))
			continue
		}
		start := len(lists)
		lists = append(lists, p.list...)
		b.AddPosting(kh[p.id], p.value(), lists[start:len(lists):len(lists)])
	}
	return b.Build(), nil
}

// lenBit is the bit of keyLens for a key of n bytes (the last bit stands for
// every length from 63 on).
func lenBit(n int) uint64 { return 1 << min(n, 63) }

// pairTable numbers a build's distinct (configured key, value) pairs and
// gathers each one's slots: a list, then a bitset once the value is dense.
// Labels are found by their pair string (key then value, how label.Labels
// stores them) with one fingerprint probe: no map lookup, no memequal for
// pairs of up to 16 bytes, a single hit branch. A pair is new the first time
// it is seen; keys no selector uses are mostly skipped by their length
// (keyLens) before that.
type pairTable struct {
	kt       *keyTable
	keyLens  uint64 // lenBit of each configured key
	universe uint32
	dense    int // list length from which a value's slots are a bitset

	slots []int32 // index+1 into pairs; 0: empty
	mask  uint64
	pairs []pairSlots
	buf   []byte // a list value's pair string, being looked up
}

type pairSlots struct {
	lo, hi uint64 // fingerprint of kv
	n      int32  // len(kv)
	klen   int32
	id     int32  // key id
	last   uint32 // the last slot added from a list, +1
	kv     string
	list   []uint32 // ascending, until the value is dense
	words  []uint64 // then a bitset of the universe
}

func (p *pairSlots) value() string { return p.kv[p.klen:] }

func newPairTable(kt *keyTable, universe uint32) *pairTable {
	// A value switches to a bitset at a quarter of the index's dense size
	// (at most 4x a list's bytes, transiently): setting a bit is cheaper
	// than growing a list; AddBits turns a value that stays small back into
	// a list.
	t := &pairTable{kt: kt, universe: universe, dense: max(64, label.DenseLen(universe)/4),
		slots: make([]int32, 64), mask: 63, pairs: make([]pairSlots, 0, 16)}
	for _, k := range kt.names {
		t.keyLens |= lenBit(len(k))
	}
	return t
}

func pairHash(lo, hi uint64, n, klen int) uint64 {
	return fpHash(lo, hi^uint64(klen)<<56, n)
}

// insert is the index loop's first sight of a pair, which belongs at empty
// table slot i: a new pair if its key is configured.
func (t *pairTable) insert(kv string, klen int, lo, hi uint64, i uint64, slot uint32) {
	id := t.kt.id(kv[:klen])
	if id < 0 {
		return
	}
	t.appendSlot(&t.pairs[t.newPair(id, kv, klen, lo, hi, i)], slot)
}

// addList records that slot has v in its list value of key k (id). It finds
// the pair by its pair string, so that a value met as a label and in a list
// is one pair.
func (t *pairTable) addList(id int, k, v string, slot uint32) {
	t.buf = append(append(t.buf[:0], k...), v...)
	kv := unsafe.String(unsafe.SliceData(t.buf), len(t.buf)) // only compared
	lo, hi := fingerprint(kv)
	i := pairHash(lo, hi, len(kv), len(k)) & t.mask
	pi := int32(-1)
	for ; t.slots[i] != 0; i = (i + 1) & t.mask {
		p := &t.pairs[t.slots[i]-1]
		if p.lo == lo && p.hi == hi && int(p.n) == len(kv) && int(p.klen) == len(k) && p.kv == kv {
			pi = t.slots[i] - 1
			break
		}
	}
	if pi < 0 {
		pi = t.newPair(id, strings.Clone(kv), len(k), lo, hi, i)
	}
	p := &t.pairs[pi]
	if p.last == slot+1 {
		return // the list names v twice
	}
	p.last = slot + 1
	if p.words != nil {
		p.words[slot>>6] |= 1 << (slot & 63)
	} else {
		t.appendSlot(p, slot)
	}
}

// newPair adds pair kv of key id at empty table slot i and returns its index.
func (t *pairTable) newPair(id int, kv string, klen int, lo, hi uint64, i uint64) int32 {
	pi := int32(len(t.pairs))
	t.pairs = append(t.pairs, pairSlots{lo: lo, hi: hi, n: int32(len(kv)), klen: int32(klen), id: int32(id), kv: kv,
		list: make([]uint32, 0, 8)})
	t.slots[i] = pi + 1
	if 2*len(t.pairs) > len(t.slots) {
		t.grow()
	}
	return pi
}

// appendSlot adds slot (greater than p's others) to p's list, and makes p a
// bitset once it is dense.
func (t *pairTable) appendSlot(p *pairSlots, slot uint32) {
	p.list = append(p.list, slot)
	if len(p.list) >= t.dense {
		p.words = make([]uint64, (t.universe+63)/64)
		for _, s := range p.list {
			p.words[s>>6] |= 1 << (s & 63)
		}
		p.list = nil
	}
}

func (t *pairTable) grow() {
	t.slots = make([]int32, 2*len(t.slots))
	t.mask = uint64(len(t.slots) - 1)
	for pi := range t.pairs {
		p := &t.pairs[pi]
		i := pairHash(p.lo, p.hi, int(p.n), int(p.klen)) & t.mask
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = int32(pi + 1)
	}
}
