package jwt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// signer signs tokens with a fresh key; its JWKS is the public half.
type signer struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func newSigner(t testing.TB, alg jose.SignatureAlgorithm, kid string) *signer {
	t.Helper()
	var k crypto.Signer
	var err error
	if alg == jose.ES256 {
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	} else {
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &signer{kid: kid, alg: alg, priv: k}
}

func (s *signer) jwks(t testing.TB) []byte {
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: s.priv.Public(), KeyID: s.kid, Algorithm: string(s.alg), Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (s *signer) token(t testing.TB, claims map[string]any) string {
	sg, err := jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: jose.JSONWebKey{Key: s.priv, KeyID: s.kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	obj, err := sg.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestVerify(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256} {
		t.Run(string(alg), func(t *testing.T) {
			s, other := newSigner(t, alg, "k1"), newSigner(t, alg, "k2")
			ks, err := ParseKeySet(s.jwks(t))
			if err != nil || ks.Len() != 1 {
				t.Fatal(ks, err)
			}
			base := func() map[string]any {
				return map[string]any{"iss": "issuer", "sub": "alice", "aud": []string{"a", "b"}, "azp": "web", "exp": now.Unix() + 60, "groups": []string{"g1"}}
			}
			with := func(k string, v any) map[string]any { c := base(); c[k] = v; return c }
			for _, c := range []struct {
				name string
				tok  string
				aud  []string
				want error
			}{
				{"good", s.token(t, base()), []string{"b"}, nil},
				{"any audience", s.token(t, with("aud", "x")), nil, nil},
				{"expired", s.token(t, with("exp", now.Unix()-120)), nil, ErrExpired},
				{"within leeway", s.token(t, with("exp", now.Unix()-30)), nil, nil},
				{"not yet", s.token(t, with("nbf", now.Unix()+120)), nil, ErrNotYetValid},
				{"audience", s.token(t, base()), []string{"c"}, ErrAudience},
				{"other kid", other.token(t, base()), nil, ErrNoKey},
				{"other key same kid", newSigner(t, alg, "k1").token(t, base()), nil, ErrSignature},
			} {
				tok, err := Parse(c.tok)
				if err != nil {
					t.Fatalf("%s: parse: %v", c.name, err)
				}
				if err := tok.Verify(ks, now, time.Minute, c.aud); !errors.Is(err, c.want) {
					t.Errorf("%s: got %v, want %v", c.name, err, c.want)
				}
			}
			tok, _ := Parse(s.token(t, base()))
			if tok.Claims.Issuer != "issuer" || tok.Claims.Subject != "alice" || tok.Claims.Presenter != "web" || len(tok.Claims.Audiences) != 2 {
				t.Errorf("claims %+v", tok.Claims)
			}
			if err := tok.Verify(nil, now, 0, nil); !errors.Is(err, ErrNoKeys) {
				t.Errorf("no keys: %v", err)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, raw := range []string{"", "a.b", "a.b.c", "eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.",
		// alg none, HS256: refused (a JWKS holds public keys).
		"eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln"} {
		if _, err := Parse(raw); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadClaims) {
			t.Errorf("%q: %v", raw, err)
		}
	}
	for _, doc := range []string{``, `[]`, `{}`, `{"keys":[]}`, `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`} {
		if _, err := ParseKeySet([]byte(doc)); err == nil {
			t.Errorf("%q: accepted", doc)
		}
	}
}

// BenchmarkVerify is the cost of one call's token check: parse and
// verify (RS256 2048-bit and ES256).
func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256} {
		s := newSigner(b, alg, "k1")
		ks, _ := ParseKeySet(s.jwks(b))
		raw := s.token(b, map[string]any{"iss": "issuer", "sub": "alice", "exp": now.Unix() + 3600})
		b.Run(string(alg), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tok, err := Parse(raw)
				if err != nil {
					b.Fatal(err)
				}
				if err := tok.Verify(ks, now, 0, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
