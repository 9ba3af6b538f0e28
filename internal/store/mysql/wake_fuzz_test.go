package mysql

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/sextant-mesh/sextant/internal/store"
)

// FuzzOpenAnnouncement: any datagram sealed with the cluster's key (so
// that the fuzzer reaches the parser behind the MAC) opens without a panic
// or a huge allocation; what opens is consecutive whole revisions of known
// kinds, and sealed again opens the same. The corpus is in
// testdata/fuzz/FuzzOpenAnnouncement.
func FuzzOpenAnnouncement(f *testing.F) {
	w := &waker{key: bytes.Repeat([]byte{7}, 32)}
	body := func(a announcement) []byte {
		m := w.seal(nil, a)
		return m[:len(m)-wakeMACLen]
	}
	f.Add(body(announcement{first: 10, last: 12, time: 99}))
	f.Add(body(announcement{first: 7, last: 8, time: 5, changes: []store.Change{
		{Revision: 7, Time: 5, Ops: []store.Op{{Kind: store.KV, Key: "a/b", Value: []byte("v")}, {Kind: store.KV, Key: "gone"}}},
		{Revision: 8, Time: 5, Ops: []store.Op{{Kind: store.System, Key: "", Value: []byte{}}}},
	}}))
	f.Add(binary.BigEndian.AppendUint64(append([]byte(nil), wakeMagicV1[:]...), 3))
	f.Add([]byte("SXW2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxWakeLen {
			return
		}
		a, ok := w.open(w.mac(bytes.Clone(b)))
		if !ok {
			return
		}
		if a.first <= 0 || a.last < a.first {
			t.Fatalf("opened revisions %d..%d", a.first, a.last)
		}
		if a.changes != nil {
			if int64(len(a.changes)) != a.last-a.first+1 {
				t.Fatalf("%d changes for revisions %d..%d", len(a.changes), a.first, a.last)
			}
			for i, c := range a.changes {
				if c.Revision != a.first+int64(i) || c.Time != a.time || len(c.Ops) == 0 {
					t.Fatalf("change %d: %+v", i, c)
				}
				for _, op := range c.Ops {
					if !op.Kind.Valid() {
						t.Fatalf("op of kind %v", op.Kind)
					}
				}
			}
		}
		again, ok := w.open(w.seal(nil, a))
		if !ok || !reflect.DeepEqual(again, a) {
			t.Fatalf("sealed again: %+v, %v; want %+v", again, ok, a)
		}
	})
}
