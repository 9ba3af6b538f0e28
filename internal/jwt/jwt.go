// Package jwt verifies JSON Web Tokens (RFC 7519, compact JWS) against the
// public keys of a JSON Web Key Set (RFC 7517), as Envoy's jwt_authn
// filter does for Istio's RequestAuthentication. It owns the parsing of
// both, which is outside input (a request's token, an issuer's JWKS); it
// does not fetch keys or decide what a request may do (the gateway does).
package jwt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// The reasons a token is refused (the gateway answers them in its 401).
var (
	ErrMalformed   = errors.New("jwt: not a compact JWS (header.payload.signature)")
	ErrBadClaims   = errors.New("jwt: payload is not a JSON object with valid registered claims")
	ErrExpired     = errors.New("jwt: expired")
	ErrNotYetValid = errors.New("jwt: not yet valid")
	ErrAudience    = errors.New("jwt: audiences not allowed")
	ErrNoKey       = errors.New("jwt: no key of the JWKS matches the token's kid and alg")
	ErrSignature   = errors.New("jwt: signature verification failed")
	ErrNoKeys      = errors.New("jwt: the issuer's JWKS is not available (yet)")
)

// algorithms are the signature algorithms a token may use: asymmetric
// ones only (a JWKS publishes public keys; "none" and HMAC are refused).
var algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// MaxTokenBytes bounds a token: larger ones are refused unparsed.
const MaxTokenBytes = 16 << 10

// MaxKeySetBytes bounds a JWKS document.
const MaxKeySetBytes = 1 << 20

// KeySet is a parsed JWKS: its usable public signing keys. Immutable.
type KeySet struct {
	keys []jose.JSONWebKey
}

// Len is the number of usable keys.
func (ks *KeySet) Len() int { return len(ks.keys) }

// ParseKeySet reads a JWKS document. Keys it cannot use (symmetric ones,
// unknown types, encryption keys) are skipped, as Envoy skips them; a set
// without one usable key is an error.
func ParseKeySet(b []byte) (*KeySet, error) {
	if len(b) > MaxKeySetBytes {
		return nil, fmt.Errorf("jwt: JWKS of %d bytes: at most %d", len(b), MaxKeySetBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("jwt: JWKS is not a JSON object with keys: %w", err)
	}
	if doc.Keys == nil {
		return nil, errors.New(`jwt: JWKS has no "keys"`)
	}
	ks := &KeySet{}
	var first error
	for i, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			if first == nil {
				first = fmt.Errorf("keys[%d]: %w", i, err)
			}
			continue
		}
		if !k.IsPublic() || (k.Use != "" && k.Use != "sig") {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			ks.keys = append(ks.keys, k)
		}
	}
	if len(ks.keys) == 0 {
		if first != nil {
			return nil, fmt.Errorf("jwt: JWKS has no usable public signing key (%w)", first)
		}
		return nil, errors.New("jwt: JWKS has no usable public signing key (RSA, EC or OKP with use sig)")
	}
	return ks, nil
}

// Token is a parsed, not yet verified, token.
type Token struct {
	sig    *jose.JSONWebSignature
	kid    string
	alg    string
	Claims Claims
	// Payload is the decoded payload (JSON).
	Payload []byte
}

// Claims are the registered claims a provider checks and RBAC matches,
// and all of them, decoded.
type Claims struct {
	Issuer    string
	Subject   string
	Audiences []string
	Presenter string // azp
	Expiry    int64  // exp, Unix seconds; 0: none
	NotBefore int64  // nbf; 0: none
	// All is the payload as decoded JSON (strings, float64s, bools, nested
	// objects and lists).
	All map[string]any
}

// Parse reads a compact JWS token: its header and claims, without
// verifying it (the issuer picks the provider that verifies it).
func Parse(raw string) (*Token, error) {
	if len(raw) > MaxTokenBytes {
		return nil, fmt.Errorf("%w (%d bytes: at most %d)", ErrMalformed, len(raw), MaxTokenBytes)
	}
	if strings.Count(raw, ".") != 2 {
		return nil, ErrMalformed
	}
	sig, err := jose.ParseSignedCompact(raw, algorithms)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(sig.Signatures) != 1 {
		return nil, ErrMalformed
	}
	h := sig.Signatures[0].Header
	t := &Token{sig: sig, kid: h.KeyID, alg: h.Algorithm, Payload: sig.UnsafePayloadWithoutVerification()}
	if err := t.Claims.decode(t.Payload); err != nil {
		return nil, err
	}
	return t, nil
}

func (c *Claims) decode(payload []byte) error {
	d := json.NewDecoder(bytes.NewReader(payload))
	if err := d.Decode(&c.All); err != nil || c.All == nil || d.More() {
		return ErrBadClaims
	}
	str := func(name string, dst *string) bool {
		v, ok := c.All[name]
		if !ok {
			return true
		}
		*dst, ok = v.(string)
		return ok
	}
	num := func(name string, dst *int64) bool {
		v, ok := c.All[name]
		if !ok {
			return true
		}
		f, ok := v.(float64)
		if !ok || f < 0 || f > 1<<53 {
			return false
		}
		*dst = int64(f)
		return true
	}
	if !str("iss", &c.Issuer) || !str("sub", &c.Subject) || !str("azp", &c.Presenter) ||
		!num("exp", &c.Expiry) || !num("nbf", &c.NotBefore) {
		return ErrBadClaims
	}
	switch a := c.All["aud"].(type) {
	case nil:
	case string:
		c.Audiences = []string{a}
	case []any:
		for _, v := range a {
			s, ok := v.(string)
			if !ok {
				return ErrBadClaims
			}
			c.Audiences = append(c.Audiences, s)
		}
	default:
		return ErrBadClaims
	}
	return nil
}

// Verify checks t's signature with a key of ks (by kid when the token
// names one, else each key of a matching algorithm), its time claims
// against now (with skew of leeway), and, when audiences is not empty, that
// it names one of them.
func (t *Token) Verify(ks *KeySet, now time.Time, leeway time.Duration, audiences []string) error {
	if ks == nil || len(ks.keys) == 0 {
		return ErrNoKeys
	}
	sec := now.Unix()
	lw := int64(leeway / time.Second)
	if t.Claims.Expiry != 0 && sec > t.Claims.Expiry+lw {
		return ErrExpired
	}
	if t.Claims.NotBefore != 0 && sec+lw < t.Claims.NotBefore {
		return ErrNotYetValid
	}
	if len(audiences) > 0 && !anyAudience(t.Claims.Audiences, audiences) {
		return ErrAudience
	}
	tried := false
	for i := range ks.keys {
		k := &ks.keys[i]
		if (t.kid != "" && k.KeyID != "" && k.KeyID != t.kid) || (k.Algorithm != "" && k.Algorithm != t.alg) || !fits(k.Key, t.alg) {
			continue
		}
		tried = true
		if _, err := t.sig.Verify(k.Key); err == nil {
			return nil
		}
	}
	if !tried {
		return ErrNoKey
	}
	return ErrSignature
}

// fits reports whether a key of key's type can verify alg.
func fits(key any, alg string) bool {
	switch key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return strings.HasPrefix(alg, "ES")
	case ed25519.PublicKey:
		return alg == string(jose.EdDSA)
	}
	return false
}

func anyAudience(have, want []string) bool {
	for _, h := range have {
		for _, w := range want {
			if h == w || strings.TrimSuffix(h, "/") == strings.TrimSuffix(w, "/") {
				return true
			}
		}
	}
	return false
}
