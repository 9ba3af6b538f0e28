package ca

import (
	"encoding/pem"
	"errors"
	"testing"
)

// FuzzSign feeds outside bytes to the CSR path, raw and as a PEM
// CERTIFICATE REQUEST: Sign either issues a certificate carrying the
// authorised identity alone or refuses with ErrInvalid, never panics.
func FuzzSign(f *testing.F) {
	a, err := Generate(Options{TrustDomain: "cluster.local"})
	if err != nil {
		f.Fatal(err)
	}
	id := ID{TrustDomain: "cluster.local", Namespace: "orders", Account: "api"}
	good := csrFor(f, p256(f), id.String())
	blk, _ := pem.Decode(good)
	f.Add(good)
	f.Add(blk.Bytes)
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, csr := range [][]byte{in, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: in})} {
			is, err := a.Sign(csr, id, 0)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("refusal is not ErrInvalid: %v", err)
				}
				continue
			}
			if len(is.Leaf.URIs) != 1 || is.Leaf.URIs[0].String() != id.String() {
				t.Fatalf("issued URIs %v", is.Leaf.URIs)
			}
		}
	})
}
