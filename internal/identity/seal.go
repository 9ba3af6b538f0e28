package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sextant-mesh/sextant/internal/ca"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
)

// stored is the record's value: the authority's state, its signing key
// sealed (internal/seal) when the server has a sealing key, State.Key then
// empty. Records written before keys were given hold the key plain.
type stored struct {
	ca.State
	KeySealed string `json:"keySealed,omitempty"`
}

// sealContext binds the sealed key to this record.
const sealContext = "system/" + Key

// encode returns st as stored, its key sealed with keys' sealing key if
// it has one, and that key's id ("" when plain).
func encode(st ca.State, keys *seal.Keyring) ([]byte, string, error) {
	v := stored{State: st}
	id := keys.ID()
	if id != "" {
		v.KeySealed = keys.Seal([]byte(st.Key), sealContext)
		v.Key = ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, "", fmt.Errorf("identity: %w", err)
	}
	return b, id, nil
}

// decode reads a stored record, opening its key with keys, and returns the
// state and the id of the key it was sealed with ("" when plain). Its
// errors are the caller's to prefix with the record.
func decode(value []byte, keys *seal.Keyring) (ca.State, string, error) {
	var v stored
	if err := json.Unmarshal(value, &v); err != nil {
		return ca.State{}, "", fmt.Errorf("decode: %w", err)
	}
	if v.KeySealed == "" {
		return v.State, "", nil
	}
	if v.Key != "" {
		return ca.State{}, "", errors.New("both a plain and a sealed key")
	}
	key, err := keys.Open(v.KeySealed, sealContext)
	if err != nil {
		return ca.State{}, "", fmt.Errorf("its signing key: %w", err)
	}
	v.Key = string(key)
	return v.State, seal.EnvelopeKeyID(v.KeySealed), nil
}

// Reseal stores the authority again, unchanged, its key sealed with the
// sealing key, if it is not already (it was stored plain, or under a key
// being retired). It reports whether it wrote. A rotation by another
// server meanwhile wins: that server sealed what it wrote.
func (s *Service) Reseal(ctx context.Context) (bool, error) {
	id := s.opts.Keys.ID()
	l := s.cur.Load()
	if id == "" || l == nil || l.sealedWith == id {
		return false, nil
	}
	if err := s.write(ctx, l.auth, l.rev); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return false, s.reload()
		}
		return false, err
	}
	return true, s.reload()
}
