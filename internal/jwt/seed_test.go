package jwt

import (
	"os"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
)

// TestWriteSeeds rewrites the fuzz corpus's token and JWKS pairs
// (SEXTANT_WRITE_SEEDS=1); otherwise it checks they still parse.
func TestWriteSeeds(t *testing.T) {
	if os.Getenv("SEXTANT_WRITE_SEEDS") == "" {
		for _, n := range []string{"rs256", "es256"} {
			tok, err := os.ReadFile("testdata/" + n + ".token")
			if err != nil {
				t.Fatal(err)
			}
			ks, err := os.ReadFile("testdata/" + n + ".jwks")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseKeySet(ks); err != nil {
				t.Fatal(err)
			}
			if _, err := Parse(string(tok)); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for n, alg := range map[string]jose.SignatureAlgorithm{"rs256": jose.RS256, "es256": jose.ES256} {
		s := newSigner(t, alg, n)
		os.WriteFile("testdata/"+n+".jwks", s.jwks(t), 0o644)
		os.WriteFile("testdata/"+n+".token", []byte(s.token(t, map[string]any{"iss": "issuer", "sub": "alice", "aud": "a", "exp": 1_700_000_600, "groups": []string{"g1"}, "nested": map[string]any{"k": "v"}})), 0o644)
	}
}
