package jwt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParse: a token or a JWKS from outside never panics the parser, and
// a token parsed against a set parsed verifies or fails cleanly.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.token")
	for _, p := range seeds {
		tok, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		ks, err := os.ReadFile(strings.TrimSuffix(p, ".token") + ".jwks")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(tok), ks)
	}
	f.Fuzz(func(t *testing.T, token string, jwks []byte) {
		ks, kerr := ParseKeySet(jwks)
		if kerr == nil && ks.Len() == 0 {
			t.Fatal("a set without keys was accepted")
		}
		tok, err := Parse(token)
		if err != nil {
			return
		}
		if err := tok.Verify(ks, time.Unix(1_700_000_000, 0), time.Minute, []string{"a"}); err == nil && kerr != nil {
			t.Fatal("verified without keys")
		}
	})
}
