package label

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPostingsManyValuesVersions covers a key with thousands of values,
// whose versions share a base map and keep their changes beside it
// (postingKey.next): a line of versions adding new values, emptying
// values (which must then hide the base's), bringing emptied values back,
// and branches from older versions. Every version keeps answering Get,
// NumValues and Values as it did when it was made.
func TestPostingsManyValuesVersions(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	type version struct {
		ix  *Postings
		ref map[string]map[uint32]bool
	}
	check := func(v version, what string) {
		t.Helper()
		checkKey(t, v.ix, v.ref, what)
	}
	var next uint32
	var removed []string // values emptied, to bring back
	edit := func(v version, changes int) version {
		n := version{ix: v.ix.Edit(), ref: cloneRef(v.ref)}
		for range changes {
			switch r := rng.IntN(10); {
			case r < 6: // a new value, as an instance name would be
				val := fmt.Sprint("i-", next)
				n.ix.Add(next, "k", val)
				n.ref[val] = map[uint32]bool{next: true}
				next++
			case r < 9 && len(n.ref) > 0: // empty a value
				var val string
				for val = range n.ref {
					break
				}
				for s := range n.ref[val] {
					n.ix.Remove(s, "k", val)
				}
				delete(n.ref, val)
				removed = append(removed, val)
			case len(removed) > 0: // a value emptied earlier comes back
				val := removed[rng.IntN(len(removed))]
				n.ix.Add(next, "k", val)
				if n.ref[val] == nil {
					n.ref[val] = map[uint32]bool{}
				}
				n.ref[val][next] = true
				next++
			}
		}
		return n
	}
	line := []version{{ix: NewPostings(0), ref: map[string]map[uint32]bool{}}}
	var branches []version
	var shared, hidden, merged int
	for i := range 120 {
		v := edit(line[len(line)-1], 1+rng.IntN(400))
		line = append(line, v)
		if e := v.ix.keys["k"]; e != nil {
			if e.base != nil {
				shared++
				if slices.Contains(slices.Collect(maps.Values(e.values)), nil) {
					hidden++
				}
			} else if prev := line[len(line)-2].ix.keys["k"]; prev != nil && prev.base != nil {
				merged++
			}
		}
		if i%20 == 19 {
			old := line[len(line)-1-rng.IntN(min(len(line), 10))]
			b := edit(old, 300)
			branches = append(branches, b, edit(b, 300))
		}
	}
	for i, v := range line {
		check(v, fmt.Sprintf("version %d", i))
	}
	for i, v := range branches {
		check(v, fmt.Sprintf("branch %d", i))
	}
	if shared == 0 || hidden == 0 || merged == 0 {
		t.Fatalf("versions sharing a base %d, hiding a base value %d, merging their base %d: the test no longer covers each", shared, hidden, merged)
	}
}

// BenchmarkEditManyValues is a fold on a large service with a key of one
// value per instance: each op is one version adding 4,096 new values to a
// key that holds n.
func BenchmarkEditManyValues(b *testing.B) {
	for _, n := range []int{10_000, 250_000} {
		b.Run(fmt.Sprint("values=", n), func(b *testing.B) {
			ix := NewPostings(uint32(n))
			for i := range n {
				ix.Add(uint32(i), "name", fmt.Sprint("i-", i))
			}
			vals := make([]string, 0, 4096*(b.N+1))
			for i := range 4096 * (b.N + 1) {
				vals = append(vals, fmt.Sprint("i-", n+i))
			}
			slot := n
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				ix = ix.Edit()
				for range 4096 {
					ix.Add(uint32(slot), "name", vals[slot-n])
					slot++
				}
			}
		})
	}
}
