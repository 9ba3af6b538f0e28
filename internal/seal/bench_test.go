package seal

import (
	"bytes"
	"testing"
)

// BenchmarkSealOpen: sealing and opening one PEM private key, what a
// secret's write and a record's load each pay once.
func BenchmarkSealOpen(b *testing.B) {
	kr, err := New(testKey(1), testKey(2))
	if err != nil {
		b.Fatal(err)
	}
	plain := bytes.Repeat([]byte("A"), 241) // an ECDSA P-256 PKCS #8 PEM
	b.ReportAllocs()
	for b.Loop() {
		env := kr.Seal(plain, "secret/default/web")
		if _, err := kr.Open(env, "secret/default/web"); err != nil {
			b.Fatal(err)
		}
	}
}
