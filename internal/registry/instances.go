package registry

import (
	"context"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The appliers of the instance kind: register, deregister and health.

func currentInstance(tx *commit.Tx, id string) (*instance.Instance, int64) {
	v, rev := tx.Get(store.Instances, id)
	if v == nil {
		return nil, 0
	}
	return v.(*instance.Instance), rev
}

// Guard is asked, on the committer goroutine, about the current version
// of every instance a write would replace or delete; an error fails the
// whole write and nothing of it is written. It must not block. Callers use
// it for checks that depend on what is stored (may this caller touch the
// namespace the instance is in now?).
type Guard func(cur *instance.Instance) error

// registerWrite upserts instances (validated with instance.Prepare).
type registerWrite struct {
	r         *Registry
	instances []*instance.Instance
	guard     Guard
	owner     string // "" for the APIs; a sync's owner (owner.go)
}

func (w *registerWrite) records() int { return len(w.instances) }

func (w *registerWrite) Plan(tx *commit.Tx) error {
	now := tx.Now()
	var unchanged int64
	tx.Reserve(len(w.instances))
	for _, in := range w.instances {
		if cur, _ := currentInstance(tx, in.ID); cur != nil {
			if err := checkOwner(w.owner, cur); err != nil {
				return err
			}
			if w.guard != nil {
				if err := w.guard(cur); err != nil {
					return err
				}
			}
		}
	}
	var same []*instance.Instance // unchanged from a version not applied yet
	for _, in := range w.instances {
		cur, rev := currentInstance(tx, in.ID)
		// A pending version (commit.Pending) counts on a single server only: it is
		// committed, or commits with this batch. In a cluster it may be an
		// earlier write of this batch whose condition fails.
		if cur != nil && (rev != commit.Pending || !tx.Shared()) && !cur.TTLExpired && cur.SameSpec(in) {
			// Unchanged: counts as a heartbeat, wakes no one.
			w.r.heartbeat(cur, now)
			if rev == commit.Pending {
				same = append(same, cur) // its revision is set when applied
			} else {
				unchanged = max(unchanged, cur.Revision)
			}
			continue
		}
		// A register is a heartbeat; checks keep the state of their
		// unchanged definitions.
		in.TTLExpired = false
		in.KeepChecks(cur, now)
		in.SetHealthy()
		in.UpdatedAt = now
		in.CreatedAt = now
		if cur != nil {
			in.CreatedAt = cur.CreatedAt
			w.r.heartbeat(in, now) // a register is a heartbeat; new ones start theirs when applied
		}
		if cur == nil {
			tx.PutNew(store.Instances, in.ID, tx.Encode(in.AppendBinary), in)
		} else {
			tx.Put(store.Instances, in.ID, tx.Encode(in.AppendBinary), in)
		}
	}
	tx.Answer(unchanged)
	if len(same) > 0 {
		inst := w.r.table
		tx.AnswerLater(func() int64 {
			var last int64
			for _, in := range same {
				rev := in.Revision
				if rev == 0 {
					// Never adopted: the catalog reloaded its state
					// meanwhile. What it holds now is the answer.
					if cur := inst.Get(in.ID); cur != nil {
						rev = cur.Revision
					}
				}
				last = max(last, rev)
			}
			return last
		})
	}
	return nil
}

// deregisterWrite deletes instances by id; the ones it did not find are
// reported, not an error.
type deregisterWrite struct {
	ids      []string
	notFound []string
	guard    Guard
	owner    string // "" for the APIs; a sync's owner (owner.go)
}

func (w *deregisterWrite) Plan(tx *commit.Tx) error {
	w.notFound = w.notFound[:0]
	tx.Reserve(len(w.ids))
	for _, id := range w.ids {
		cur, rev := currentInstance(tx, id)
		if cur == nil {
			// Deleted by a write not applied yet, if any: then the
			// committer answers this after it (commit).
			w.notFound = append(w.notFound, id)
			continue
		}
		if err := checkOwner(w.owner, cur); err != nil {
			return err
		}
		if w.guard != nil {
			if err := w.guard(cur); err != nil {
				return err
			}
		}
		if tx.Shared() {
			// Another server may have deleted it since this catalog saw it.
			tx.DeleteIf(store.Instances, id, rev)
		} else {
			tx.Delete(store.Instances, id)
		}
	}
	tx.Answer(tx.Revision())
	return nil
}

// flip asks to set one instance's heartbeat liveness (healthy: its TTL
// has not expired), if it is still the version seen.
type flip struct {
	inst    *instance.Instance
	healthy bool
}

// healthWrite flips instances' TTL liveness (and so their health, with
// their checks): each only if it is still the version that was judged,
// and (to expired) only if no heartbeat came since.
type healthWrite struct {
	r     *Registry
	flips []flip
}

func (w *healthWrite) Plan(tx *commit.Tx) error {
	now := tx.Now().UnixNano()
	for _, f := range w.flips {
		cur, rev := currentInstance(tx, f.inst.ID)
		if cur != f.inst || cur.TTLExpired != f.healthy {
			continue // replaced or already flipped since it was seen
		}
		if !f.healthy && cur.TTLSeconds > 0 {
			if v, ok := w.r.live.Load(cur.ID); ok && v.(*liveness).deadline.Load() > now {
				continue // a heartbeat arrived in between
			}
		}
		n := cur.Clone()
		n.TTLExpired = !f.healthy
		n.SetHealthy()
		tx.PutIf(store.Instances, n.ID, tx.Encode(n.AppendBinary), n, rev)
	}
	// Health is judged again after a restart: no fsync for it.
	tx.Volatile()
	return nil
}

// Register upserts instances (validated with instance.Prepare) atomically and
// durably. It answers the request's revision (the instances' current
// revision if nothing changed).
func (r *Registry) Register(ctx context.Context, instances []*instance.Instance) (int64, error) {
	return r.RegisterGuarded(ctx, instances, nil)
}

// RegisterGuarded is Register with guard asked about every instance the
// write would replace, at commit time (see Guard).
func (r *Registry) RegisterGuarded(ctx context.Context, instances []*instance.Instance, guard Guard) (int64, error) {
	if len(instances) == 0 || len(instances) > instance.MaxBatch {
		return 0, instance.NewFieldError(-1, "instances", "%d instances, want 1..%d", len(instances), instance.MaxBatch)
	}
	for i, in := range instances {
		if err := checkClaim(i, "", in); err != nil {
			return 0, err
		}
	}
	// An upsert in a cluster is not conditional: a server whose catalog
	// trails may take an identical re-register for a change and write it
	// again (docs/cluster.md says why).
	return r.submit(ctx, &registerWrite{r: r, instances: instances, guard: guard})
}

// Deregister deletes the instances with ids atomically and durably, and
// returns the ids it did not find.
func (r *Registry) Deregister(ctx context.Context, ids []string) (int64, []string, error) {
	return r.DeregisterGuarded(ctx, ids, nil)
}

// DeregisterGuarded is Deregister with guard asked about every instance
// it would delete, at commit time (see Guard).
func (r *Registry) DeregisterGuarded(ctx context.Context, ids []string, guard Guard) (int64, []string, error) {
	if err := instance.CheckIDs(ids); err != nil {
		return 0, nil, err
	}
	w := &deregisterWrite{ids: ids, guard: guard}
	rev, err := r.submitChecked(ctx, w)
	if err != nil {
		return 0, nil, err
	}
	return rev, w.notFound, nil
}

// Heartbeat renews the TTL of the instances with ids and returns the ids it
// did not find. An instance whose TTL expired turns healthy (unless a
// check is critical), with a new revision.
// Heartbeats are not durable.
func (r *Registry) Heartbeat(ctx context.Context, ids []string) ([]string, error) {
	if err := instance.CheckIDs(ids); err != nil {
		return nil, err
	}
	now := r.opts.Now()
	inst := r.table
	var notFound []string
	var revive []flip
	for _, id := range ids {
		in := inst.Get(id)
		if in == nil {
			notFound = append(notFound, id)
			continue
		}
		r.heartbeat(in, now)
		if in.TTLExpired {
			revive = append(revive, flip{inst: in, healthy: true})
		}
	}
	if len(revive) > 0 {
		if err := r.revive(ctx, revive); err != nil {
			return nil, err
		}
	}
	return notFound, nil
}

// revive turns instances healthy again. In a cluster another server may
// have changed one of them first (the catalog was behind): then it waits
// until the catalog has that change and judges again, a few times.
func (r *Registry) revive(ctx context.Context, flips []flip) error {
	for attempt := 0; ; attempt++ {
		_, err := r.submit(ctx, &healthWrite{r: r, flips: flips})
		have := commit.ConflictRevision(err)
		if err == nil || !r.eng.Shared() || have == 0 || attempt == 3 {
			return err
		}
		if err := r.eng.WaitApplied(ctx, have); err != nil {
			return err
		}
		inst := r.table
		old := flips
		flips = nil
		for _, f := range old {
			if in := inst.Get(f.inst.ID); in != nil && in.TTLExpired {
				flips = append(flips, flip{inst: in, healthy: true})
			}
		}
		if len(flips) == 0 {
			return nil
		}
	}
}

// PlanRegister plans a register of instances inside another write (a
// Consul transaction that mixes them with other kinds' records,
// internal/consulapi): it adds their writes to tx, as Register does. Called
// from that write's Plan, on the committer goroutine; it does not block.
func (r *Registry) PlanRegister(tx *commit.Tx, instances []*instance.Instance, guard Guard) error {
	for i, in := range instances {
		if err := checkClaim(i, "", in); err != nil {
			return err
		}
	}
	return (&registerWrite{r: r, instances: instances, guard: guard}).Plan(tx)
}

// PlanDeregister plans a deregister of the instances with ids inside
// another write, as PlanRegister; ids not found are skipped.
func (r *Registry) PlanDeregister(tx *commit.Tx, ids []string, guard Guard) error {
	if err := instance.CheckIDs(ids); err != nil {
		return err
	}
	return (&deregisterWrite{ids: ids, guard: guard}).Plan(tx)
}
