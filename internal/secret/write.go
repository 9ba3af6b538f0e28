package secret

import (
	"fmt"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/seal"
	"github.com/sextant-mesh/sextant/internal/store"
)

// PutWrite creates a secret (Create) or replaces one (else), optionally
// only if its revision is still IfRevision: the conditions are checked by
// the store at commit, against every server of a cluster.
type PutWrite struct {
	Secret     *Secret
	Create     bool
	IfRevision *int64
	// Keys seal the private key as it is stored (the table's, Table.Keys;
	// nil: stored plain).
	Keys *seal.Keyring
	// Action is set by Plan: "created", "replaced" or "unchanged".
	Action string
}

func (w *PutWrite) Plan(tx *commit.Tx) error {
	id := w.Secret.ID()
	v, rev := tx.Get(store.Secrets, id)
	switch {
	case w.Create && v != nil:
		return fmt.Errorf("%w: %s (replace it with secret create --replace, or delete it first)", ErrExists, id)
	case w.IfRevision != nil && rev != *w.IfRevision:
		return fmt.Errorf("%w: %s is at revision %d, not %d", ErrStale, id, rev, *w.IfRevision)
	}
	if old, ok := v.(*Secret); ok && string(old.Encode()) == string(w.Secret.Encode()) {
		w.Action = "unchanged" // a write that changes nothing wakes no one
		return nil
	}
	w.Action = "created"
	if v != nil {
		w.Action = "replaced"
	}
	b, sealedWith := w.Secret.encodeSealed(w.Keys)
	w.Secret.sealedWith = sealedWith // not shared before the commit
	tx.PutIf(store.Secrets, id, b, w.Secret, rev)
	return nil
}

// DeleteWrite deletes secret ID ("namespace/name").
type DeleteWrite struct {
	ID string
}

func (w *DeleteWrite) Plan(tx *commit.Tx) error {
	v, rev := tx.Get(store.Secrets, w.ID)
	if v == nil {
		return fmt.Errorf("%w: %s", ErrNotFound, w.ID)
	}
	tx.DeleteIf(store.Secrets, w.ID, rev)
	return nil
}
