package catalog

import (
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// TestIDIndexShrinks: after most ids are deleted the shards are rebuilt
// to their size, and every id still answers as before.
func TestIDIndexShrinks(t *testing.T) {
	if s := unsafe.Sizeof(idShard[*instance.Instance]{}); s%64 != 0 {
		t.Fatalf("idShard is %d bytes, want whole cache lines of 64", s)
	}
	x := newIDIndex[*instance.Instance]()
	const n = 100_000
	ins := make([]*instance.Instance, n)
	for i := range ins {
		ins[i] = &instance.Instance{ID: fmt.Sprintf("id-%06d", i)}
		x.store(ins[i].ID, ins[i])
	}
	x.deleteIf(ins[0].ID, ins[1]) // not the current version: kept
	for i := 1; i < n; i++ {
		if i%10 != 0 {
			x.deleteIf(ins[i].ID, ins[i])
		}
	}
	for i, in := range ins {
		got := x.get(in.ID)
		if keep := i%10 == 0; keep != (got == in) || !keep && got != nil {
			t.Fatalf("%s: got %v, kept %v", in.ID, got, keep)
		}
	}
	for i := range x.shards {
		if s := &x.shards[i]; int(s.peak) > 2*len(s.m)+1024 {
			t.Fatalf("shard %d: %d entries, still sized for %d", i, len(s.m), s.peak)
		}
	}
}

// TestIDIndexCollisions: with a hash that gives most ids the same value the
// index still answers every id as a plain map would, through stores,
// updates, stale and current deletes, and a reset.
func TestIDIndexCollisions(t *testing.T) {
	x := newIDIndex[*instance.Instance]()
	x.hash = func(_ maphash.Seed, id string) uint64 { return uint64(len(id)) % 3 }
	want := map[string]*instance.Instance{}
	check := func(step string) {
		t.Helper()
		for id, in := range want {
			if got := x.get(id); got != in {
				t.Fatalf("%s: get(%s) = %p, want %p", step, id, got, in)
			}
		}
		for _, id := range []string{"", "absent", "id-absent-9999"} {
			if got := x.get(id); got != nil {
				t.Fatalf("%s: get(%q) = %v, want nil", step, id, got)
			}
		}
	}
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = "id-" + strings.Repeat("x", i%5) + strconv.Itoa(i)
	}
	for _, id := range ids {
		in := &instance.Instance{ID: id}
		x.store(id, in)
		want[id] = in
	}
	check("stored")
	for i, id := range ids {
		if i%4 == 0 { // a new version of the same id
			in := &instance.Instance{ID: id}
			x.store(id, in)
			stale := want[id]
			want[id] = in
			x.deleteIf(id, stale) // not the current version: kept
		}
	}
	check("updated")
	// Delete the ids the hash slots hold first, so that others move up.
	for i, id := range ids {
		if i%3 != 0 {
			x.deleteIf(id, want[id])
			delete(want, id)
		}
	}
	check("deleted")
	var all []any
	for _, in := range want {
		all = append(all, in)
	}
	x.reset(all)
	check("reset")
	for id, in := range want {
		x.deleteIf(id, in)
	}
	want = map[string]*instance.Instance{}
	check("emptied")
	for i := range x.shards {
		if s := &x.shards[i]; len(s.m) != 0 || len(s.over) != 0 {
			t.Fatalf("shard %d keeps %d + %d entries after every id was deleted", i, len(s.m), len(s.over))
		}
	}
}

// TestIDIndexFilter: under churn (ids registered and deleted in a sliding
// window) every held id is found, the filter holds a bit for each, and the
// bits of deleted ids are dropped by rebuilds instead of filling it.
func TestIDIndexFilter(t *testing.T) {
	x := newIDIndex[*instance.Instance]()
	const total, window = 60_000, 3_000
	ins := make([]*instance.Instance, total)
	for i := range ins {
		ins[i] = &instance.Instance{ID: "churn-" + strconv.Itoa(i)}
		x.store(ins[i].ID, ins[i])
		if i >= window {
			old := ins[i-window]
			x.deleteIf(old.ID, old)
		}
		if i%997 == 0 {
			for j := max(0, i-window+1); j <= i; j += 7 {
				if got := x.get(ins[j].ID); got != ins[j] {
					t.Fatalf("after %d stores: get(%s) = %v", i+1, ins[j].ID, got)
				}
			}
		}
	}
	for i := 0; i < total-window; i += 11 {
		if got := x.get(ins[i].ID); got != nil {
			t.Fatalf("deleted %s still found", ins[i].ID)
		}
	}
	for i := range x.shards {
		s := &x.shards[i]
		bits := len(s.filter) * 64
		if int(s.set)*filterStale > bits || filterBits*len(s.m) > bits {
			t.Fatalf("shard %d: %d bits set of %d for %d ids", i, s.set, bits, len(s.m))
		}
		for h := range s.m {
			if w, m := s.bit(h); s.filter[w]&m == 0 {
				t.Fatalf("shard %d: no filter bit for a held hash", i)
			}
		}
	}
}
