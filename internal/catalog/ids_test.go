package catalog

import (
	"fmt"
	"testing"
	"unsafe"
)

// TestIDIndexShrinks: after most ids are deleted the shards are rebuilt
// to their size, and every id still answers as before.
func TestIDIndexShrinks(t *testing.T) {
	if s := unsafe.Sizeof(idShard{}); s != 64 {
		t.Fatalf("idShard is %d bytes, want 64 (one cache line)", s)
	}
	x := newIDIndex()
	const n = 100_000
	ins := make([]*Instance, n)
	for i := range ins {
		ins[i] = &Instance{ID: fmt.Sprintf("id-%06d", i)}
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
		if s := &x.shards[i]; s.peak > 2*len(s.m)+1024 {
			t.Fatalf("shard %d: %d entries, still sized for %d", i, len(s.m), s.peak)
		}
	}
}
