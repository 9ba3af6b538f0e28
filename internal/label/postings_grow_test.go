package label

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPostingsGrowingVersions checks the shared-array path (Posting.extend):
// a line of versions that mostly add slots past the end, so lists and
// bitsets are appended in place, with some adds and removes inside the
// shared part, plus branches (a version edited twice) that must copy. Every
// version keeps answering as it did when it was made.
func TestPostingsGrowingVersions(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type version struct {
		ix  *Postings
		ref map[string]map[uint32]bool
	}
	check := func(v version, what string) {
		t.Helper()
		checkKey(t, v.ix, v.ref, what)
	}
	edit := func(v version, next *uint32, changes int) version {
		n := version{ix: v.ix.Edit(), ref: cloneRef(v.ref)}
		for range changes {
			val := fmt.Sprint(rng.IntN(6)) // few values: dense postings as the set grows
			if rng.IntN(3) == 0 {
				val = fmt.Sprint("rare-", rng.IntN(200)) // lists
			}
			s := *next
			switch r := rng.IntN(10); {
			case r < 7: // past the end
				*next++
			case r < 9 && *next > 0: // inside: an add or a remove in the shared part
				s = uint32(rng.IntN(int(*next)))
			default:
				s = uint32(rng.IntN(int(*next) + 1))
				for v := range n.ref {
					if n.ref[v][s] {
						n.ix.Remove(s, "k", v)
						delete(n.ref[v], s)
						if len(n.ref[v]) == 0 {
							delete(n.ref, v)
						}
					}
				}
				continue
			}
			n.ix.Add(s, "k", val)
			if n.ref[val] == nil {
				n.ref[val] = map[uint32]bool{}
			}
			n.ref[val][s] = true
		}
		return n
	}
	var next uint32
	line := []version{{ix: NewPostings(0), ref: map[string]map[uint32]bool{}}}
	var branches []version
	for i := range 300 {
		line = append(line, edit(line[len(line)-1], &next, 1+rng.IntN(200)))
		if i%25 == 24 {
			// A branch from an older version: it edits what the line
			// already appended to, and must copy.
			old := line[len(line)-1-rng.IntN(min(len(line), 10))]
			bnext := next
			b := edit(old, &bnext, 50)
			branches = append(branches, b, edit(b, &bnext, 50))
		}
	}
	for i, v := range line {
		check(v, fmt.Sprintf("version %d", i))
	}
	for i, v := range branches {
		check(v, fmt.Sprintf("branch %d", i))
	}
	var dense, shared int
	for _, v := range line {
		v.ix.Values("k", func(_ string, p *Posting) bool {
			if p.Bits() != nil {
				dense++
			}
			if p.frozen > 0 {
				shared++
			}
			return true
		})
	}
	if dense == 0 || shared == 0 {
		t.Fatalf("the test reached %d dense and %d shared postings: it no longer covers extend", dense, shared)
	}
}

// TestAddLabelsMatchesAdd: AddLabels (keys remembered by position) builds
// the same index as Add pair by pair, also when keys are emptied and come
// back in between and when items have different keys.
func TestAddLabelsMatchesAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	a, b := NewPostings(0), NewPostings(0)
	type rec struct {
		slot uint32
		l    Labels
	}
	var live []rec
	for i := range 3000 {
		m := map[string]string{}
		for _, k := range []string{"a", "b", "c", "d"} {
			if rng.IntN(5) > 0 {
				m[k] = fmt.Sprint(rng.IntN(4))
			}
		}
		if rng.IntN(30) == 0 {
			m["rare"] = "x"
		}
		l := FromMap(m)
		slot := uint32(i)
		a.AddLabels(slot, l)
		for k, v := range l.All() {
			b.Add(slot, k, v)
		}
		live = append(live, rec{slot, l})
		if i%100 == 99 { // a fresh version now and then
			a, b = a.Edit(), b.Edit()
		}
		if i%10 == 9 { // removals that may empty a key, between adds of one version
			for range 4 {
				j := rng.IntN(len(live))
				for k, v := range live[j].l.All() {
					a.Remove(live[j].slot, k, v)
					b.Remove(live[j].slot, k, v)
				}
				live = slices.Delete(live, j, j+1)
			}
		}
	}
	checkSameIndex(t, a, b, "a", "b", "c", "d", "rare")
}
