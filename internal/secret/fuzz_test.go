package secret

import (
	"bytes"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/seal"
)

// FuzzDecodeSealed feeds stored bytes (whoever can write the database
// writes them) to a sealed table's record decoder: it refuses, or returns
// a secret that seals and decodes back to itself; never panics.
func FuzzDecodeSealed(f *testing.F) {
	keys, err := seal.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		f.Fatal(err)
	}
	cert, key := pair(f, time.Now().Add(time.Hour), "a.test")
	s, err := New("default", "web", cert, key, nil, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	sealed, _ := s.encodeSealed(keys)
	f.Add(sealed)
	f.Add(s.Encode())
	f.Add([]byte(`{"namespace":"default","name":"web","type":"tls","cert":"","key":"","key_sealed":"sx1:00000000:AAAA"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := decode(in, 1, keys)
		if err != nil {
			return
		}
		if got.sealedWith != "" && got.sealedWith != keys.ID() {
			t.Fatalf("opened under key %q", got.sealedWith)
		}
		// What decodes seals and decodes back to itself.
		b, id := got.encodeSealed(keys)
		back, err := decode(b, 1, keys)
		if err != nil || back.sealedWith != id || !bytes.Equal(back.Encode(), got.Encode()) {
			t.Fatalf("sealed again: %v\n%s\n%s", err, got.Encode(), back.Encode())
		}
	})
}
