package config

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Actions an apply reports per object, as kubectl does.
const (
	Created    = "created"
	Configured = "configured"
	Unchanged  = "unchanged"
	Deleted    = "deleted"
)

// Result is what an apply did (or, dry, would do) to one object.
type Result struct {
	Key      Key
	Action   string
	Revision int64 // the object's revision after the apply
	Warnings []string
}

// ErrNotFound is wrapped by the error of a delete of an absent object.
var ErrNotFound = errors.New("config: not found")

// ErrStale is wrapped when an object is not at the revision a write
// required.
var ErrStale = errors.New("config: revision mismatch")

// ApplyWrite creates or replaces objects, atomically and idempotently: an
// object whose canonical encoding is already stored is unchanged and
// written not at all. With IfRevision set (single object), the stored
// object must be at that revision (0: absent). It is a commit.Write.
type ApplyWrite struct {
	Objects    []*Object
	IfRevision *int64
	Table      *Table
	DryRun     bool
	// Registered, when set, reports whether the registry has instances of
	// a service; a host naming a service it has none of gets a warning.
	// Called from Plan (the write engine's committer, or a dry run's caller):
	// it must not block.
	Registered func(naming.ServiceKey) bool
	// Owner is the sync writing ("" for Sextant's APIs): each object
	// must carry it as AnnotationOwner, and a stored object of the same
	// key must be its own (owner.go).
	Owner string

	Results []Result // filled by Plan
}

// Plan implements commit.Write.
func (w *ApplyWrite) Plan(tx *commit.Tx) error {
	w.Results = w.Results[:0]
	seen := map[Key]bool{}
	var gws map[Key]*Object // every Gateway as planned so far; read once one is applied
	for i, o := range w.Objects {
		if seen[o.Key] {
			return fmt.Errorf("%w: documents[%d]: %s appears twice", ErrInvalid, i, o.Key)
		}
		seen[o.Key] = true
		enc := o.Encode()
		cur, rev := tx.Get(store.Config, o.Key.String())
		var curObj *Object
		if cur != nil {
			curObj = cur.(*Entry).Object
		}
		if err := checkOwner(w.Owner, o, curObj); err != nil {
			return err
		}
		if w.IfRevision != nil && rev != *w.IfRevision && rev != commit.Pending {
			return fmt.Errorf("%w: %s is at revision %d, not %d", ErrStale, o.Key, rev, *w.IfRevision)
		}
		res := Result{Key: o.Key, Action: Created, Revision: rev, Warnings: w.Table.Warnings(o, w.Objects...)}
		if w.Registered != nil {
			res.Warnings = append(res.Warnings, unregisteredHosts(o, w.hasEndpoints())...)
		}
		if cur != nil {
			res.Action = Configured
			if bytes.Equal(cur.(*Entry).Encoded, enc) {
				res.Action = Unchanged
				w.Results = append(w.Results, res)
				continue
			}
		}
		if o.Gateway != nil {
			// Checked against every Gateway as this plan sees it (the
			// batch's earlier writes too): of two applies claiming one
			// port and host, the one planned first wins.
			if gws == nil {
				gws = planGateways(tx, w.Table)
			}
			if err := checkClaims(o, i, len(w.Objects), gws); err != nil {
				return err
			}
			gws[o.Key] = o
		}
		if o.WorkloadEntry != nil {
			// The object and its instance in one commit (workloadentry.go).
			if err := planWorkloadInstance(tx, o, w.DryRun); err != nil {
				return err
			}
		}
		if !w.DryRun {
			tx.PutIf(store.Config, o.Key.String(), enc, &Entry{Object: o, Encoded: enc}, rev)
		}
		w.Results = append(w.Results, res)
	}
	tx.Answer(tx.Revision())
	return nil
}

// hasEndpoints reports whether a service has registered instances or a
// ServiceEntry (stored, or applied with this write) names it.
func (w *ApplyWrite) hasEndpoints() func(naming.ServiceKey) bool {
	return func(k naming.ServiceKey) bool {
		if w.Registered(k) {
			return true
		}
		for _, o := range w.Objects {
			if slices.Contains(EntryHosts(o), k) {
				return true
			}
		}
		if w.Table != nil {
			entries, _ := w.Table.List(KindServiceEntry, "")
			for _, e := range entries {
				if slices.Contains(EntryHosts(e.Object), k) {
					return true
				}
			}
		}
		return false
	}
}

// unregisteredHosts warns about each host of o that names a service with no
// instances: a typo, or a service not registered yet. Either way nothing
// routes there until it has instances (docs/controlplane.md).
func unregisteredHosts(o *Object, registered func(naming.ServiceKey) bool) []string {
	var out []string
	check := func(path, host string) {
		k, err := ResolveHost(host, o.Namespace)
		if err == nil && !registered(k) {
			out = append(out, fmt.Sprintf("%s: %q names service %s, which has no registered instances (a typo? calls to it fail until it has some)", path, host, k))
		}
	}
	if vs := o.VirtualService; vs != nil {
		for i, h := range vs.Hosts {
			if InMesh(vs) { // a gateway's hosts are names at the gateway
				check(index("spec.hosts", i), h)
			}
		}
		for i, r := range vs.Http {
			for j, d := range r.Route {
				if h := d.GetDestination().GetHost(); h != "" {
					check(fmt.Sprintf("spec.http[%d].route[%d].destination.host", i, j), h)
				}
			}
		}
	}
	if dr := o.DestinationRule; dr != nil {
		check("spec.host", dr.Host)
	}
	return out
}

// DeleteWrite deletes one object; ErrNotFound if it is absent. With
// IfRevision set, the stored object must be at that revision.
type DeleteWrite struct {
	Key        Key
	IfRevision *int64
	// Owner is the sync deleting ("" for Sextant's APIs); the stored
	// object must be its own.
	Owner string
}

// Plan implements commit.Write.
func (w *DeleteWrite) Plan(tx *commit.Tx) error {
	cur, rev := tx.Get(store.Config, w.Key.String())
	if cur == nil {
		return fmt.Errorf("%w: %s", ErrNotFound, w.Key)
	}
	if err := checkOwnerOf(w.Owner, w.Key, cur.(*Entry).Object); err != nil {
		return err
	}
	if w.IfRevision != nil && rev != *w.IfRevision && rev != commit.Pending {
		return fmt.Errorf("%w: %s is at revision %d, not %d", ErrStale, w.Key, rev, *w.IfRevision)
	}
	tx.DeleteIf(store.Config, w.Key.String(), rev)
	if w.Key.Kind == KindWorkloadEntry {
		planWorkloadDelete(tx, w.Key)
	}
	return nil
}
