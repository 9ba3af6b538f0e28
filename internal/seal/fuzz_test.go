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

// FuzzParseKey feeds a key file's or variable's text to ParseKey: it
// returns KeySize bytes that New accepts, or refuses, never panics.
func FuzzParseKey(f *testing.F) {
	f.Add([]byte("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"))
	f.Add([]byte("AQEBAQEBAQEBAQEBAQEBAQ==")) // 16 bytes
	f.Add([]byte("not a key"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		k, err := ParseKey(in)
		if err != nil {
			return
		}
		if len(k) != KeySize {
			t.Fatalf("a key of %d bytes", len(k))
		}
		if _, err := New(k); err != nil {
			t.Fatal(err)
		}
	})
}
