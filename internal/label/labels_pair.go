package label

// Pairs is a cursor over a Labels' pairs in key order, each given as one
// string, the key followed by the value (how Labels stores it), and the key's
// length: a caller that recognises whole pairs (the subset balancer's build)
// hashes and compares kv at once instead of the key and then the value. It
// walks the offsets once, about twice as fast as At(i) for each i.
type Pairs struct {
	l     *Labels // small enough for the compiler to keep in registers
	i     uint32  // index into l.ends of the next pair's key end
	start uint32  // offset of the next pair
}

// Pairs returns a cursor at l's first pair; l must not change meanwhile
// (Labels never do).
func (l *Labels) Pairs() Pairs { return Pairs{l: l} }

// Next returns the next pair, the cursor after it and true; or false after
// the last pair. The cursor is a value (use the returned one), so that a
// loop keeps it in registers:
//
//	for it := l.Pairs(); ; {
//		kv, keyLen, next, ok := it.Next()
//		if !ok {
//			break
//		}
//		it = next
//		...
//	}
func (p Pairs) Next() (kv string, keyLen int, next Pairs, ok bool) {
	ends := p.l.ends
	if int(p.i)+1 >= len(ends) {
		return "", 0, p, false
	}
	k, end := ends[p.i], ends[p.i+1]
	return p.l.s[p.start:end], int(k - p.start), Pairs{p.l, p.i + 2, end}, true
}

// DenseLen is how many slots a posting holds from which it is a bitset
// rather than a list, for an index of slots below universe.
func DenseLen(universe uint32) int { return denseAt(universe) }
