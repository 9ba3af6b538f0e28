package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// A token's secret reads sxt_<accessor>_<secret>: the accessor (12 random
// bytes, hex) names the token in lists, logs and deletes and is not
// secret; the secret is 32 random bytes, hex. The server keeps only
// SHA-256 of the secret bytes: 256 random bits need no slow hash (nothing
// to guess), and the check costs one SHA-256 of 32 bytes per request.
const (
	secretPrefix = "sxt_"
	accessorLen  = 24 // hex chars
	secretLen    = 64 // hex chars
	tokenLen     = len(secretPrefix) + accessorLen + 1 + secretLen
)

// Token is a stored token: never its secret, only the secret's hash.
type Token struct {
	AccessorID  string    `json:"accessor_id"`
	Description string    `json:"description,omitempty"`
	Policies    []string  `json:"policies"`
	CreatedAt   time.Time `json:"created_at"`
	Revision    int64     `json:"revision,omitempty"`

	hash [sha256.Size]byte
}

// ValidAccessor reports whether s has the shape of an accessor id.
func ValidAccessor(s string) bool {
	if len(s) != accessorLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHexLower(s[i]) {
			return false
		}
	}
	return true
}

func isHexLower(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// newToken makes a token with a fresh accessor and secret. The secret is
// returned once and never stored.
func newToken(description string, policies []string, now time.Time) (*Token, string, error) {
	var raw [accessorLen/2 + secretLen/2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, "", fmt.Errorf("acl: random token: %w", err)
	}
	acc := hex.EncodeToString(raw[:accessorLen/2])
	sec := raw[accessorLen/2:]
	t := &Token{AccessorID: acc, Description: description, Policies: policies, CreatedAt: now.UTC(), hash: sha256.Sum256(sec)}
	return t, secretPrefix + acc + "_" + hex.EncodeToString(sec), nil
}

// errMalformed never quotes what it was given: it may be a secret.
var errMalformed = errors.New("acl: malformed token: want sxt_<24 hex accessor>_<64 hex secret>")

// ParseSecret splits a token's secret string into its accessor (a
// substring of s) and its secret bytes. It does not allocate, and its
// error never includes s.
func ParseSecret(s string) (accessor string, secret [secretLen / 2]byte, err error) {
	if len(s) != tokenLen || !strings.HasPrefix(s, secretPrefix) || s[len(secretPrefix)+accessorLen] != '_' {
		return "", secret, errMalformed
	}
	accessor = s[len(secretPrefix) : len(secretPrefix)+accessorLen]
	if !ValidAccessor(accessor) {
		return "", secret, errMalformed
	}
	hexSecret := s[len(secretPrefix)+accessorLen+1:]
	for i := range secret {
		hi, ok1 := unhex(hexSecret[2*i])
		lo, ok2 := unhex(hexSecret[2*i+1])
		if !ok1 || !ok2 {
			return "", secret, errMalformed
		}
		secret[i] = hi<<4 | lo
	}
	return accessor, secret, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// matches reports in constant time whether secret is the token's.
func (t *Token) matches(secret *[secretLen / 2]byte) bool {
	h := sha256.Sum256(secret[:])
	return subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1
}

// ParseBearer returns the token of an Authorization header value
// "Bearer <token>" (the scheme is case-insensitive), or false.
func ParseBearer(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	return tok, tok != ""
}

// TokenRequest is the body of a token create.
type TokenRequest struct {
	Description string   `json:"description"`
	Policies    []string `json:"policies"`
}

// ParseTokenRequest decodes and validates a token create body strictly.
func ParseTokenRequest(b []byte) (*TokenRequest, error) {
	var req TokenRequest
	if err := strictJSON(b, &req); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// Validate checks the request's shape (not that its policies exist).
func (r *TokenRequest) Validate() error {
	if len(r.Description) > MaxDescriptionLen || !utf8.ValidString(r.Description) {
		return fieldErr("description", "at most %d bytes of UTF-8", MaxDescriptionLen)
	}
	if len(r.Policies) == 0 {
		return fieldErr("policies", "a token needs at least one policy (%q grants everything)", BuiltinAdmin)
	}
	if len(r.Policies) > MaxPolicies {
		return fieldErr("policies", "%d policies, at most %d", len(r.Policies), MaxPolicies)
	}
	seen := make(map[string]bool, len(r.Policies))
	for i, p := range r.Policies {
		if !naming.ValidName(p) {
			return fieldErr(fmt.Sprintf("policies[%d]", i), "%q is not a policy name", p)
		}
		if seen[p] {
			return fieldErr(fmt.Sprintf("policies[%d]", i), "policy %q is listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// storedToken is the stored form's JSON, after a version byte.
type storedToken struct {
	AccessorID  string    `json:"accessor_id"`
	Description string    `json:"description,omitempty"`
	Policies    []string  `json:"policies"`
	CreatedAt   time.Time `json:"created_at"`
	Hash        string    `json:"sha256"`
}

func encodeToken(t *Token) []byte {
	b, err := json.Marshal(storedToken{t.AccessorID, t.Description, t.Policies, t.CreatedAt, hex.EncodeToString(t.hash[:])})
	if err != nil {
		panic("acl: encode token: " + err.Error()) // strings and a time: cannot fail
	}
	return append([]byte{recordVersion}, b...)
}

func decodeToken(b []byte, rev int64) (*Token, error) {
	if len(b) == 0 || b[0] != recordVersion {
		return nil, errors.New("acl: token record: unknown version")
	}
	var s storedToken
	if err := json.Unmarshal(b[1:], &s); err != nil {
		return nil, fmt.Errorf("acl: token record: %w", err)
	}
	t := &Token{AccessorID: s.AccessorID, Description: s.Description, Policies: s.Policies, CreatedAt: s.CreatedAt, Revision: rev}
	if n, err := hex.Decode(t.hash[:], []byte(s.Hash)); err != nil || n != sha256.Size || len(s.Hash) != 2*sha256.Size {
		return nil, errors.New("acl: token record: bad hash")
	}
	if !ValidAccessor(t.AccessorID) {
		return nil, errors.New("acl: token record: bad accessor")
	}
	return t, nil
}
