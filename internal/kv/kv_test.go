package kv

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/store"
)

// TestCodecRoundTrip: every field survives encode and decode; a create
// index of 0 is the record's own revision.
func TestCodecRoundTrip(t *testing.T) {
	e := &Entry{Namespace: "shop", Key: "a/b c", Value: []byte{0, 1, 2, 255}, Flags: 1<<64 - 1, LockIndex: 3, Session: "adf4238a-882b-9ddc-4a9d-5b6758e4159e", created: 5}
	got, err := decode(e.ID(), 9, e.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "shop" || got.Key != "a/b c" || !bytes.Equal(got.Value, e.Value) || got.Flags != e.Flags ||
		got.LockIndex != 3 || got.Session != e.Session || got.CreateIndex != 5 || got.ModifyIndex != 9 {
		t.Fatalf("decoded %+v", got)
	}
	fresh := &Entry{Namespace: "default", Key: "k"}
	got, err = decode(fresh.ID(), 4, fresh.encode())
	if err != nil || got.CreateIndex != 4 || got.Value != nil {
		t.Fatalf("a fresh entry: %+v %v; want CreateIndex 4, no value", got, err)
	}
}

// TestDecodeRefuses: corrupt records fail naming the record.
func TestDecodeRefuses(t *testing.T) {
	ok := (&Entry{Namespace: "ns", Key: "k", Session: "s"}).encode()
	for name, tc := range map[string]struct {
		id  string
		rev int64
		b   []byte
	}{
		"no namespace":     {"k", 3, ok},
		"empty":            {"ns/k", 3, nil},
		"unknown version":  {"ns/k", 3, []byte{9}},
		"truncated":        {"ns/k", 3, ok[:3]},
		"created later":    {"ns/k", 3, (&Entry{Namespace: "ns", Key: "k", created: 7}).encode()},
		"session too long": {"ns/k", 3, append([]byte{1, 0, 0, 0, 200, 1}, strings.Repeat("s", 200)...)},
	} {
		if _, err := decode(tc.id, tc.rev, tc.b); err == nil || !strings.HasPrefix(err.Error(), "kv: ") {
			t.Errorf("%s: %v; want a kv error", name, err)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for key, want := range map[string]string{
		"":                               "missing key name",
		strings.Repeat("k", MaxKeyLen+1): "at most 383",
		"bad\xff":                        "UTF-8",
		"nul\x00":                        "NUL",
		"ok/key with spaces/and-ünïcode": "",
		strings.Repeat("k", MaxKeyLen):   "",
	} {
		err := CheckKey(key)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckKey(%.20q): %v; want %q", key, err, want)
		}
	}
}

// FuzzDecode: decoding stored bytes never panics, and what decodes
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add("ns/k", int64(5), (&Entry{Namespace: "ns", Key: "k", Value: []byte("v"), Flags: 3, Session: "s", created: 2}).encode())
	f.Add("ns/", int64(1), []byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, id string, rev int64, b []byte) {
		e, err := decode(id, rev, b)
		if err != nil {
			return
		}
		if again := e.encode(); !bytes.Equal(again, b) {
			// A varint may be written longer than needed: compare what it means.
			e2, err := decode(id, rev, again)
			if err != nil || e2.Flags != e.Flags || e2.Session != e.Session || e2.LockIndex != e.LockIndex ||
				e2.CreateIndex != e.CreateIndex || !bytes.Equal(e2.Value, e.Value) {
				t.Fatalf("round trip of %x: %+v then %+v (%v)", b, e, e2, err)
			}
		}
	})
}

// TestLogElidesValues: the catalog's change log keeps a KV put's key but
// not its value (up to 512 KiB, kept for LogSize changes otherwise); the
// table holds the value, and a delete is still a nil Value.
func TestLogElidesValues(t *testing.T) {
	c := catalog.New(catalog.Options{})
	tbl := NewTable()
	c.Register(store.KV, tbl)
	e := &Entry{Namespace: "default", Key: "a/b", Value: bytes.Repeat([]byte("v"), 1024)}
	if err := c.Apply([]store.Change{
		{Revision: 1, Ops: []store.Op{{Kind: store.KV, Key: e.ID(), Value: e.encode(), Object: e}}},
		{Revision: 2, Ops: []store.Op{{Kind: store.KV, Key: "default/gone", Value: (&Entry{Namespace: "default", Key: "gone"}).encode()}}},
		{Revision: 3, Ops: []store.Op{{Kind: store.KV, Key: "default/gone"}}},
	}); err != nil {
		t.Fatal(err)
	}
	changes, _, _, err := c.Changes(0, 100, store.KV)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 3 {
		t.Fatalf("%d changes, want 3", len(changes))
	}
	for i, want := range []any{catalog.Elided, catalog.Elided, nil} {
		if changes[i].Value != want {
			t.Errorf("change %d (%s) holds %T, want %v", i, changes[i].ID, changes[i].Value, want)
		}
	}
	if changes[0].Key != Group("default", "a/b") {
		t.Errorf("change 0's group %v", changes[0].Key)
	}
	if got := tbl.Get("default", "a/b"); got == nil || !bytes.Equal(got.Value, e.Value) || got.ModifyIndex != 1 {
		t.Errorf("the table: %+v", got)
	}
	if tbl.Get("default", "gone") != nil || tbl.Revision() != 3 {
		t.Errorf("after the delete: %+v, revision %d", tbl.Get("default", "gone"), tbl.Revision())
	}
}
