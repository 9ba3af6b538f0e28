// Package seal owns encryption at rest: the key-encryption keys the
// operator gives a server (a file or the environment), and the envelope a
// private key is stored in once sealed with one of them (AES-256-GCM, a
// random nonce, the key's id in the clear so that several keys can be
// known at once while one replaces another).
//
// It does not own what is sealed nor when: the record kinds that hold
// private keys (internal/secret, internal/identity) seal them as they
// encode and open them as they decode, and keep them plain in memory.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeySize is the size of a key-encryption key: AES-256.
const KeySize = 32

// MaxEnvelope bounds an envelope's text: far above a sealed 64 KiB PEM.
const MaxEnvelope = 1 << 20

// version is the envelope's first field. A new format takes a new one;
// Parse refuses versions it does not know rather than guess.
const version = "sx1"

// Sentinels the package's errors wrap.
var (
	// ErrUnknownKey: the envelope names a key the keyring does not hold.
	ErrUnknownKey = errors.New("seal: sealed with a key this server was not given")
	// ErrOpen: the envelope does not open with the key it names (altered,
	// moved to another record, or another key with a colliding id).
	ErrOpen = errors.New("seal: the sealed value does not open")
	// ErrEnvelope: not an envelope.
	ErrEnvelope = errors.New("seal: malformed envelope")
)

// Keyring is the keys a server was given: at most one that seals new
// values (and opens them), and any number that only open. Immutable; nil
// is a keyring with no key (it opens nothing and seals nothing).
type Keyring struct {
	enc  *key
	keys map[string]*key
	ids  []string // every key's id, the sealing one first
}

type key struct {
	id   string
	sum  [sha256.Size]byte // tells two keys with one id apart
	aead cipher.AEAD
}

// KeyID is a key's id: 8 hex digits of a hash of the key, so that an
// envelope names its key without a name to keep in step with it.
func KeyID(k []byte) string {
	h := sha256.New()
	h.Write([]byte("sextant key-encryption key id\x00"))
	h.Write(k)
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// New returns the keyring of seal (nil: values are not sealed) and open,
// keys that only open (the previous key during a rotation, or the next
// before it seals on every server of a cluster). Each key is KeySize bytes.
func New(seal []byte, open ...[]byte) (*Keyring, error) {
	k := &Keyring{keys: map[string]*key{}}
	add := func(b []byte) (*key, error) {
		if len(b) != KeySize {
			return nil, fmt.Errorf("seal: a key is %d bytes, want %d", len(b), KeySize)
		}
		id, sum := KeyID(b), sha256.Sum256(b)
		if have, ok := k.keys[id]; ok {
			if have.sum != sum {
				return nil, fmt.Errorf("seal: two different keys have the id %s: make another one", id)
			}
			return have, nil // the same key given twice
		}
		blk, err := aes.NewCipher(b)
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		aead, err := cipher.NewGCM(blk)
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		kk := &key{id: id, sum: sum, aead: aead}
		k.keys[id] = kk
		k.ids = append(k.ids, id)
		return kk, nil
	}
	if seal != nil {
		var err error
		if k.enc, err = add(seal); err != nil {
			return nil, err
		}
	}
	for _, b := range open {
		if _, err := add(b); err != nil {
			return nil, err
		}
	}
	if len(k.keys) == 0 {
		return nil, nil
	}
	return k, nil
}

// ID is the id of the key that seals, "" when none does: values are then
// stored plain.
func (k *Keyring) ID() string {
	if k == nil || k.enc == nil {
		return ""
	}
	return k.enc.id
}

// IDs lists every key's id, the sealing one first.
func (k *Keyring) IDs() []string {
	if k == nil {
		return nil
	}
	return slices.Clone(k.ids)
}

// Seal returns plain sealed with the sealing key, bound to context (the
// record it is stored in: the same envelope in another record does not
// open). It panics without a sealing key: callers ask ID first.
func (k *Keyring) Seal(plain []byte, context string) string {
	e := Envelope{KeyID: k.enc.id, Nonce: make([]byte, k.enc.aead.NonceSize())}
	rand.Read(e.Nonce) // never fails (crypto/rand since Go 1.24)
	e.Sealed = k.enc.aead.Seal(nil, e.Nonce, plain, e.aad(context))
	return e.String()
}

// Open parses an envelope and opens it with the key it names, checking
// that it was sealed for context. The error names the key id when the
// keyring lacks it (ErrUnknownKey).
func (k *Keyring) Open(envelope, context string) ([]byte, error) {
	e, err := Parse(envelope)
	if err != nil {
		return nil, err
	}
	var kk *key
	if k != nil {
		kk = k.keys[e.KeyID]
	}
	if kk == nil {
		given := "none"
		if ids := k.IDs(); len(ids) > 0 {
			given = strings.Join(ids, ", ")
		}
		return nil, fmt.Errorf("%w: key %s (keys given: %s)", ErrUnknownKey, e.KeyID, given)
	}
	plain, err := kk.aead.Open(nil, e.Nonce, e.Sealed, e.aad(context))
	if err != nil {
		return nil, fmt.Errorf("%w with key %s (altered, or sealed for another record)", ErrOpen, e.KeyID)
	}
	return plain, nil
}

// Envelope is a sealed value: "sx1:KEYID:BASE64" where BASE64 is the
// nonce followed by the ciphertext and its tag (standard base64, padded).
type Envelope struct {
	KeyID  string
	Nonce  []byte
	Sealed []byte // ciphertext and tag
}

const nonceSize = 12 // cipher.NewGCM's

// aad binds the ciphertext to its version, key id and record.
func (e Envelope) aad(context string) []byte {
	return []byte(version + ":" + e.KeyID + ":" + context)
}

func (e Envelope) String() string {
	b := make([]byte, 0, len(e.Nonce)+len(e.Sealed))
	b = append(append(b, e.Nonce...), e.Sealed...)
	return version + ":" + e.KeyID + ":" + base64.StdEncoding.EncodeToString(b)
}

// Parse reads an envelope (what is stored; outside input), naming what is
// wrong with it. It does not open it.
func Parse(s string) (Envelope, error) {
	if len(s) > MaxEnvelope {
		return Envelope{}, fmt.Errorf("%w: %d bytes, more than %d", ErrEnvelope, len(s), MaxEnvelope)
	}
	ver, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Envelope{}, fmt.Errorf("%w: no version", ErrEnvelope)
	}
	if ver != version {
		return Envelope{}, fmt.Errorf("%w: version %.16q, want %q", ErrEnvelope, ver, version)
	}
	id, payload, ok := strings.Cut(rest, ":")
	if !ok {
		return Envelope{}, fmt.Errorf("%w: no key id", ErrEnvelope)
	}
	if !validID(id) {
		return Envelope{}, fmt.Errorf("%w: key id %.16q is not 8 lowercase hex digits", ErrEnvelope, id)
	}
	// The decoder skips line breaks; a stored envelope has none.
	b, err := base64.StdEncoding.Strict().DecodeString(payload)
	if err != nil || strings.ContainsAny(payload, "\r\n") {
		return Envelope{}, fmt.Errorf("%w: key %s: the sealed value is not base64", ErrEnvelope, id)
	}
	if len(b) < nonceSize+16 {
		return Envelope{}, fmt.Errorf("%w: key %s: %d sealed bytes, fewer than a nonce and a tag", ErrEnvelope, id, len(b))
	}
	return Envelope{KeyID: id, Nonce: b[:nonceSize:nonceSize], Sealed: b[nonceSize:]}, nil
}

func validID(id string) bool {
	if len(id) != 8 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// EnvelopeKeyID is the id of the key envelope names, "" when it is not an
// envelope.
func EnvelopeKeyID(envelope string) string {
	e, err := Parse(envelope)
	if err != nil {
		return ""
	}
	return e.KeyID
}
