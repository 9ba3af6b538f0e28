package registry

import (
	"context"
	"fmt"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
)

// Owned instances are written by a sync from another system (Kubernetes'
// EndpointSlices), not by Sextant's APIs: their metadata holds
// instance.OwnerLabel, and only Sync with that owner replaces or deletes
// them. Register, Deregister and SetCheck refuse them with an *OwnedError
// naming the owner, so a user learns where to change them.

// OwnedError refuses a write through Sextant's APIs to an instance a sync
// owns.
type OwnedError struct {
	ID    string
	Owner string // the value of its instance.OwnerLabel, e.g. "kubernetes"
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("registry: instance %q is owned by %s (metadata %s): it is read-only through Sextant's APIs; change it at its source", e.ID, e.Owner, instance.OwnerLabel)
}

// ownerOf is the owner of in, "" for instances written through the APIs.
func ownerOf(in *instance.Instance) string {
	v, _ := in.Metadata.Get(instance.OwnerLabel)
	return v
}

// checkOwner refuses a write by owner ("" for the APIs) over cur.
func checkOwner(owner string, cur *instance.Instance) error {
	if o := ownerOf(cur); o != owner {
		if o == "" {
			return fmt.Errorf("registry: instance %q is not owned by %s: a sync does not replace instances registered through Sextant's APIs", cur.ID, owner)
		}
		return &OwnedError{ID: cur.ID, Owner: o}
	}
	return nil
}

// checkClaim refuses an instance whose owner label is not the writer's.
func checkClaim(i int, owner string, in *instance.Instance) error {
	if o := ownerOf(in); o != owner {
		if owner == "" {
			return instance.NewFieldError(i, "metadata."+instance.OwnerLabel, "is set by the server on the instances it syncs (%q here): leave it out", o)
		}
		return fmt.Errorf("registry: sync by %s gives instance %q the owner %q", owner, in.ID, o)
	}
	return nil
}

// Sync is a sync's one write for one change at its source: it upserts put
// and deletes del atomically, so that readers never see the instances
// removed before their replacements are there. Every instance it touches
// must be owner's (instance.OwnerLabel); put must have passed
// instance.Prepare. The ids of del it did not find are not an error.
func (r *Registry) Sync(ctx context.Context, owner string, put []*instance.Instance, del []string) (int64, error) {
	if owner == "" {
		return 0, fmt.Errorf("registry: sync without an owner")
	}
	if len(put) == 0 && len(del) == 0 {
		return r.Revision(), nil
	}
	for i, in := range put {
		if err := checkClaim(i, owner, in); err != nil {
			return 0, err
		}
	}
	w := &syncWrite{
		put: registerWrite{r: r, instances: put, owner: owner},
		del: deregisterWrite{ids: del, owner: owner},
	}
	return r.submitChecked(ctx, w)
}

// syncWrite is a register and a deregister in one commit.
type syncWrite struct {
	put registerWrite
	del deregisterWrite
}

func (w *syncWrite) Plan(tx *commit.Tx) error {
	// The owner check first, so that a refusal writes nothing.
	for _, id := range w.del.ids {
		if cur, _ := currentInstance(tx, id); cur != nil {
			if err := checkOwner(w.del.owner, cur); err != nil {
				return err
			}
		}
	}
	if len(w.put.instances) > 0 {
		if err := w.put.Plan(tx); err != nil {
			return err
		}
	}
	if len(w.del.ids) > 0 {
		return w.del.Plan(tx)
	}
	return nil
}
