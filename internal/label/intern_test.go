package label

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func bytePairs(m map[string]string) []BytePair {
	var ps []BytePair
	for _, k := range slices.Sorted(maps.Keys(m)) {
		ps = append(ps, BytePair{Key: []byte(k), Value: []byte(m[k])})
	}
	return ps
}

// rawOf is an encoding of pairs that determines them, as a decoder's
// input does.
func rawOf(pairs []BytePair) []byte {
	var b []byte
	for _, p := range pairs {
		b = fmt.Appendf(b, "%q:%q,", p.Key, p.Value)
	}
	return b
}

// TestInterner: a set seen twice is held and handed out shared; sets whose
// raws share a slot (more sets than slots) each get their own pairs;
// unordered pairs are reported as FromBytePairs reports them.
func TestInterner(t *testing.T) {
	in := NewInterner()
	a := bytePairs(map[string]string{"app": "web", "zone": "a"})
	l1, ok1 := in.FromBytePairs(rawOf(a), a)
	l2, ok2 := in.FromBytePairs(rawOf(a), a) // second sighting: held from here
	l3, ok3 := in.FromBytePairs(rawOf(a), a)
	if !ok1 || !ok2 || !ok3 || !l1.Equal(l2) || !l1.Equal(l3) {
		t.Fatalf("equal pairs gave %v %v %v (%v %v %v)", l1, l2, l3, ok1, ok2, ok3)
	}
	if !l2.same(l3) {
		t.Error("a set seen twice in a row is not shared on its third sighting")
	}
	for round := range 2 {
		for i := range 3 * internSlots {
			ps := bytePairs(map[string]string{"app": "web", "n": fmt.Sprint(i)})
			l, ok := in.FromBytePairs(rawOf(ps), ps)
			if want, _ := FromBytePairs(ps); !ok || !l.Equal(want) {
				t.Fatalf("round %d, set %d: %v, want %v", round, i, l.Map(), want.Map())
			}
		}
	}
	big := bytePairs(map[string]string{"a": strings.Repeat("v", maxHeldBytes)})
	b1, _ := in.FromBytePairs(rawOf(big), big)
	b2, _ := in.FromBytePairs(rawOf(big), big)
	b3, _ := in.FromBytePairs(rawOf(big), big)
	if want, _ := FromBytePairs(big); !b3.Equal(want) || b2.same(b3) || b1.same(b3) {
		t.Error("a set over maxHeldBytes is held (or built wrong)")
	}
	unordered := []BytePair{{Key: []byte("z"), Value: []byte("1")}, {Key: []byte("a"), Value: []byte("2")}}
	for range 3 {
		if _, ok := in.FromBytePairs(rawOf(unordered), unordered); ok {
			t.Fatal("unordered pairs reported ordered")
		}
	}
	if l, ok := in.FromBytePairs(nil, nil); !ok || l.Len() != 0 {
		t.Errorf("no pairs: %v %v", l, ok)
	}
}

// TestInternerConcurrent: decoders on many goroutines over a few sets each
// get labels equal to their pairs (run with -race).
func TestInternerConcurrent(t *testing.T) {
	in := NewInterner()
	sets := make([][]BytePair, 64)
	for i := range sets {
		sets[i] = bytePairs(map[string]string{"k": fmt.Sprint(i % 7), "n": fmt.Sprint(i)})
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				i := rng.IntN(len(sets))
				l, ok := in.FromBytePairs(rawOf(sets[i]), sets[i])
				if want, _ := FromBytePairs(sets[i]); !ok || !l.Equal(want) {
					t.Errorf("set %d: %v, want %v", i, l.Map(), want.Map())
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestAddLabelsCachedMatchesAdd: adding interned sets through a
// LabelsCache builds the index AddLabels builds, also when removals empty
// a posting the cache remembers and the set is added again, and when the
// cache is moved to another version.
func TestAddLabelsCachedMatchesAdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	in := NewInterner()
	var sets []Labels
	for i := range 40 {
		ps := bytePairs(map[string]string{"a": fmt.Sprint(i % 3), "b": fmt.Sprint(i % 5), "c": fmt.Sprint(i)})
		var l Labels
		for range 3 {
			l, _ = in.FromBytePairs(rawOf(ps), ps)
		}
		sets = append(sets, l)
	}
	a, b := NewPostings(0), NewPostings(0)
	var c LabelsCache
	type rec struct {
		slot uint32
		l    Labels
	}
	var live []rec
	for i := range 4000 {
		l := sets[rng.IntN(len(sets))]
		slot := uint32(i)
		a.AddLabelsCached(slot, l, &c)
		b.AddLabels(slot, l)
		live = append(live, rec{slot, l})
		if i%500 == 499 {
			a, b = a.Edit(), b.Edit()
		}
		if i%7 == 6 { // removals, some emptying the rare values
			j := rng.IntN(len(live))
			for k, v := range live[j].l.All() {
				a.Remove(live[j].slot, k, v)
				b.Remove(live[j].slot, k, v)
			}
			live = slices.Delete(live, j, j+1)
		}
	}
	if c.hits == 0 {
		t.Fatal("the cache never hit: the test no longer covers it")
	}
	checkSameIndex(t, a, b, "a", "b", "c")
}

// TestCheckedSets: a set is remembered from its second Add in a row, and
// only copies of it (its storage) are found; an equal set built apart is
// not.
func TestCheckedSets(t *testing.T) {
	var c CheckedSets
	l := FromMap(map[string]string{"a": "1", "b": "2"})
	if c.Has(l) {
		t.Fatal("found before any Add")
	}
	c.Add(l)
	c.Add(l)
	cp := l
	if !c.Has(cp) {
		t.Fatal("a copy of a set added twice is not found")
	}
	if c.Has(FromMap(map[string]string{"a": "1", "b": "2"})) {
		t.Error("an equal set built apart is found: it was never checked")
	}
	big := FromMap(map[string]string{"a": strings.Repeat("v", maxHeldBytes)})
	c.Add(big)
	c.Add(big)
	if c.Has(big) {
		t.Error("a set over maxHeldBytes is held")
	}
	var empty CheckedSets
	empty.Add(Labels{})
	empty.Add(Labels{})
	if empty.Has(FromMap(map[string]string{"a": "1"})) {
		t.Error("a set is found after only empty sets were added")
	}
}
