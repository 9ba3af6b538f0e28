package config

import (
	"errors"
	"fmt"
)

// Owned objects are read from another system (Istio's CRDs in a
// Kubernetes cluster), not written through Sextant's APIs: their
// annotations hold AnnotationOwner, and only a write with that Owner
// replaces or deletes them. Writes through the APIs to them are refused
// with an *OwnedError naming the owner, so that a user learns where to
// change them; a sync does not replace an object written through the APIs
// either.

// AnnotationOwner names the system an object is synced from (as
// instance.OwnerLabel does for instances); the server sets it, a user may
// not.
const AnnotationOwner = "sextant.io/owner"

// OwnedError refuses a write through Sextant's APIs to an object a sync
// owns.
type OwnedError struct {
	Key   Key
	Owner string // e.g. "kubernetes"
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("config: %s is owned by %s (annotation %s): it is read-only through Sextant's APIs; change it at its source", e.Key, e.Owner, AnnotationOwner)
}

// Owner is the owner of o, "" for objects written through the APIs.
func (o *Object) Owner() string { return o.Annotations[AnnotationOwner] }

// checkOwner refuses a write by owner ("" for the APIs) of o over cur
// (nil: absent).
func checkOwner(owner string, o *Object, cur *Object) error {
	if got := o.Owner(); got != owner {
		if owner == "" {
			return fmt.Errorf("%w: %s: metadata.annotations[%s] is set by the server on the objects it syncs (%q here): leave it out", ErrInvalid, o.Key, AnnotationOwner, got)
		}
		return fmt.Errorf("config: sync by %s gives %s the owner %q", owner, o.Key, got)
	}
	return checkOwnerOf(owner, o.Key, cur)
}

func checkOwnerOf(owner string, k Key, cur *Object) error {
	if cur == nil {
		return nil
	}
	if got := cur.Owner(); got != owner {
		if got == "" {
			return fmt.Errorf("%w: %s was written through Sextant's APIs, not synced from %s: delete it there first (sextant config delete)", ErrConflict, k, owner)
		}
		return &OwnedError{Key: k, Owner: got}
	}
	return nil
}

// ErrConflict is wrapped when a sync finds an object of the same key
// written through the APIs.
var ErrConflict = errors.New("config: conflict")
