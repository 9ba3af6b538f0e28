package kv

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// historyCatalog is a catalog holding a fresh KV table, and apply writes
// one change to it: a put of value (nil: a delete) at rev.
func historyCatalog(t testing.TB) (*Table, func(ns, key string, rev int64, value []byte)) {
	c := catalog.New(catalog.Options{})
	tbl := NewTable()
	c.Register(store.KV, tbl)
	return tbl, func(ns, key string, rev int64, value []byte) {
		op := store.Op{Kind: store.KV, Key: ID(ns, key)}
		if value != nil {
			e := &Entry{Namespace: ns, Key: key, Value: value, Flags: uint64(rev)}
			op.Value, op.Object = e.encode(), e
		}
		if err := c.Apply([]store.Change{{Revision: rev, Time: rev * 1000, Ops: []store.Op{op}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func revisions(vs []Version) string {
	s := ""
	for _, v := range vs {
		if v.Entry == nil {
			s += fmt.Sprintf("%d:deleted ", v.Revision)
		} else {
			s += fmt.Sprintf("%d:%s ", v.Revision, v.Entry.Value)
		}
	}
	return s
}

// TestHistory: a key's writes and deletes, newest first, with their
// values, flags and commit times; a key recreated after a delete keeps
// what came before; other keys' and sessions' writes are not in it.
func TestHistory(t *testing.T) {
	tbl, apply := historyCatalog(t)
	apply("shop", "a", 1, []byte("one"))
	apply("shop", "b", 2, []byte("other"))
	apply("shop", "a", 3, []byte("two"))
	apply("shop", "a", 4, nil)
	apply("shop", "a", 5, []byte("three"))
	apply(sessionNS, "shop/s1", 6, []byte("{}"))
	h := tbl.History("shop", "a")
	if got, want := revisions(h), "5:three 4:deleted 3:two 1:one "; got != want {
		t.Fatalf("history %q, want %q", got, want)
	}
	if h[0].Committed != 5000 || h[0].Entry.Flags != 5 || h[2].Entry.Flags != 3 {
		t.Errorf("newest %+v, third %+v: want commit time 5000 and flags 5, flags 3", h[0], h[2].Entry)
	}
	if got := revisions(tbl.History("shop", "b")); got != "2:other " {
		t.Errorf("b's history %q", got)
	}
	if got := tbl.History(sessionNS, "shop/s1"); len(got) != 1 {
		t.Errorf("a session's history: %d versions, want only its current one", len(got))
	}
	if got := tbl.History("shop", "never"); len(got) != 0 {
		t.Errorf("an unknown key's history: %q", revisions(got))
	}
}

// TestHistoryBounds: at most HistoryLen versions of a key, older values
// of at most HistoryBytes (the newest kept whatever its size), and at
// most DeletedHistories deleted keys remembered.
func TestHistoryBounds(t *testing.T) {
	tbl, apply := historyCatalog(t)
	rev := int64(0)
	for i := range HistoryLen + 5 {
		rev++
		apply("ns", "k", rev, []byte(fmt.Sprint(i)))
	}
	h := tbl.History("ns", "k")
	if len(h) != HistoryLen || h[0].Revision != rev || h[HistoryLen-1].Revision != rev-HistoryLen+1 {
		t.Fatalf("after %d writes: %q; want the last %d", rev, revisions(h), HistoryLen)
	}

	big := bytes.Repeat([]byte("v"), MaxValueSize)
	for range 4 {
		rev++
		apply("ns", "big", rev, big)
	}
	h = tbl.History("ns", "big")
	if want := HistoryBytes/MaxValueSize + 1; len(h) != want {
		t.Errorf("4 writes of 512 KiB: %d versions kept, want %d (1 MiB of older values and the newest)", len(h), want)
	}

	for i := range DeletedHistories + 10 {
		key := fmt.Sprint("gone/", i)
		rev++
		apply("ns", key, rev, []byte("x"))
		rev++
		apply("ns", key, rev, nil)
	}
	if got := tbl.History("ns", "gone/0"); len(got) != 0 {
		t.Errorf("the first deleted key still has %q", revisions(got))
	}
	if got := revisions(tbl.History("ns", fmt.Sprint("gone/", DeletedHistories+9))); got != fmt.Sprintf("%d:deleted %d:x ", rev, rev-1) {
		t.Errorf("the last deleted key: %q", got)
	}
	tbl.mu.Lock()
	n := len(tbl.hist)
	tbl.mu.Unlock()
	if n > DeletedHistories+2 {
		t.Errorf("%d histories kept, want at most %d deleted keys' and 2 others", n, DeletedHistories)
	}
}

// TestHistoryTotalBound: the older versions of every key together stay
// under HistoryTotalBytes: those superseded first go first, the current
// version of each key stays.
func TestHistoryTotalBound(t *testing.T) {
	tbl, apply := historyCatalog(t)
	big := bytes.Repeat([]byte("v"), MaxValueSize)
	keys := 2 * HistoryTotalBytes / MaxValueSize
	rev := int64(0)
	for i := range keys {
		for range 2 {
			rev++
			apply("ns", fmt.Sprint("k", i), rev, big)
		}
	}
	if got := tbl.History("ns", "k0"); len(got) != 1 || got[0].Revision != 2 {
		t.Errorf("the first key: %q; want only its current version", revisions(got))
	}
	if got := tbl.History("ns", fmt.Sprint("k", keys-1)); len(got) != 2 {
		t.Errorf("the last key: %d versions, want 2", len(got))
	}
	kept := 0
	for i := range keys {
		kept += len(tbl.History("ns", fmt.Sprint("k", i))) - 1
	}
	if max := HistoryTotalBytes / MaxValueSize; kept > max || kept < max-2 {
		t.Errorf("%d older versions of 512 KiB kept, want about %d (%d MiB)", kept, max, HistoryTotalBytes>>20)
	}
}

// TestHistoryLoad: a load starts history again at what it loaded.
func TestHistoryLoad(t *testing.T) {
	tbl, apply := historyCatalog(t)
	apply("ns", "k", 1, []byte("a"))
	apply("ns", "k", 2, []byte("b"))
	tbl.Load(7, []any{&Entry{Namespace: "ns", Key: "k", Value: []byte("c"), ModifyIndex: 7, CreateIndex: 1}})
	if got := revisions(tbl.History("ns", "k")); got != "7:c " {
		t.Errorf("after a load: %q", got)
	}
}

// BenchmarkTableApplyPut is the table's share of a KV put: the catalog
// applying one change to one of 1,000 keys, after 200,000 (the history's
// cost shows as the difference against the code before it:
// docs/perf/kv-history.md).
func BenchmarkTableApplyPut(b *testing.B) {
	c := catalog.New(catalog.Options{})
	tbl := NewTable()
	c.Register(store.KV, tbl)
	value := bytes.Repeat([]byte("v"), 100)
	rev := int64(0)
	put := func(i int) {
		rev++
		e := &Entry{Namespace: "default", Key: fmt.Sprint("key/", i%1000), Value: value}
		if err := c.Apply([]store.Change{{Revision: rev, Ops: []store.Op{{Kind: store.KV, Key: e.ID(), Value: e.encode(), Object: e}}}}); err != nil {
			b.Fatal(err)
		}
	}
	// Steady state first: every key's history full, and the queue of
	// older versions at its bound (HistoryTotalBytes).
	for i := range 200000 {
		put(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		put(i)
	}
	_ = tbl
}
