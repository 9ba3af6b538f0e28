package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
)

// sealContext binds a sealed key to its record: moved to another one, it
// does not open.
func sealContext(namespace, name string) string { return "secret/" + namespace + "/" + name }

// encodeSealed returns the secret's stored form with its private key
// sealed with keys' sealing key (plain when keys has none), and the id of
// that key.
func (s *Secret) encodeSealed(keys *seal.Keyring) ([]byte, string) {
	id := keys.ID()
	if id == "" || len(s.Key) == 0 {
		return s.Encode(), ""
	}
	b, _ := json.Marshal(record{Namespace: s.Namespace, Name: s.Name, Type: s.Type, Cert: string(s.Cert), CA: string(s.CA),
		KeySealed: keys.Seal(s.Key, sealContext(s.Namespace, s.Name))})
	return b, id
}

// SealedWith is the id of the key the stored secret's private key is
// sealed with, "" when it is stored plain (or has none).
func (s *Secret) SealedWith() string { return s.sealedWith }

// needsReseal reports whether the stored secret's key is not sealed with
// keys' sealing key. A secret without a key (a ca secret) never does.
func (s *Secret) needsReseal(keys *seal.Keyring) bool {
	return len(s.Key) > 0 && keys.ID() != "" && s.sealedWith != keys.ID()
}

// ResealWrite stores secret ID again, unchanged, its key sealed with Keys'
// sealing key, if it is not already: so that records written plain, or
// sealed with a key being retired, are sealed with the current one.
type ResealWrite struct {
	ID   string
	Keys *seal.Keyring
	// Resealed is set by Plan: the secret was written again.
	Resealed bool
}

func (w *ResealWrite) Plan(tx *commit.Tx) error {
	w.Resealed = false
	v, rev := tx.Get(store.Secrets, w.ID)
	s, ok := v.(*Secret)
	if !ok || !s.needsReseal(w.Keys) {
		return nil // deleted meanwhile, or sealed by a write since
	}
	n := *s // the catalog's value is shared: a copy takes the new key id
	b, id := n.encodeSealed(w.Keys)
	n.sealedWith = id
	tx.PutIf(store.Secrets, w.ID, b, &n, rev)
	w.Resealed = true
	return nil
}

// Submitter is the write engine as Reseal uses it. Called from the
// caller's goroutine; it blocks until the write is applied.
type Submitter interface {
	SubmitChecked(ctx context.Context, w commit.Write) (int64, error)
}

// Reseal writes again, through eng, every secret of t whose private key is
// not sealed with t's sealing key, and returns how many it wrote. A
// secret another server changes meanwhile is planned again on its new
// version (which that server sealed). Nothing is written when t has no
// sealing key.
func Reseal(ctx context.Context, eng Submitter, t *Table) (int, error) {
	if t.keys.ID() == "" {
		return 0, nil
	}
	n := 0
	var errs []error
	for _, s := range t.List("") {
		if !s.needsReseal(t.keys) {
			continue
		}
		w := &ResealWrite{ID: s.ID(), Keys: t.keys}
		if _, err := eng.SubmitChecked(ctx, w); err != nil {
			errs = append(errs, fmt.Errorf("secret: reseal %s: %w", s.ID(), err))
			continue
		}
		if w.Resealed {
			n++
		}
	}
	return n, errors.Join(errs...)
}
