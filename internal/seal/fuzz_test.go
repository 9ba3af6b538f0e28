package seal

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzOpen feeds stored bytes (outside input: whoever can write the
// database writes them) to the envelope's parser and opener: they refuse
// with ErrEnvelope, ErrUnknownKey or ErrOpen, never panic, and what
// parses prints back to itself.
func FuzzOpen(f *testing.F) {
	kr, err := New(testKey(1), testKey(2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(kr.Seal([]byte("-----BEGIN PRIVATE KEY-----\n"), "ca"))
	f.Add("sx1:00000000:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("-----BEGIN EC PRIVATE KEY-----")
	f.Fuzz(func(t *testing.T, in string) {
		e, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrEnvelope) {
				t.Fatalf("refusal is not ErrEnvelope: %v", err)
			}
			return
		}
		if e.String() != in {
			t.Fatalf("parsed %q prints as %q", in, e.String())
		}
		plain, err := kr.Open(in, "ca")
		if err != nil {
			if !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrOpen) && !errors.Is(err, ErrEnvelope) {
				t.Fatalf("refusal: %v", err)
			}
			return
		}
		if !bytes.HasPrefix(plain, []byte("-----BEGIN")) {
			t.Fatalf("opened forged bytes %q", plain)
		}
	})
}
