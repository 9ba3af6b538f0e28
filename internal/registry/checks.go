package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The state of instances' health checks (instance.Check): SetCheck writes a
// check's status, the runner of active checks (internal/healthcheck) and
// the APIs call it; the deadlines of ttl checks live here, beside the
// instances' heartbeat deadlines, and travel the same way in a cluster.

// ErrNotFound is wrapped by the errors of writes to an instance, or a
// check of an instance, that does not exist.
var ErrNotFound = errors.New("registry: not found")

// SetCheck sets the status (passing, warning or critical) and output of
// check checkID of instance instanceID, durably, and answers the revision
// (the instance's current one if nothing changed). A write happens only
// when the status or output changes; a ttl check's deadline moves on every
// passing or warning update. The write is conditional on the instance
// version it read: a concurrent register is never lost (it is planned
// again on what is stored, in a cluster). Errors wrap ErrNotFound or
// instance.ErrInvalid (an unknown status, named).
func (r *Registry) SetCheck(ctx context.Context, instanceID, checkID, status, output string) (int64, error) {
	switch {
	case !instance.ValidID(instanceID):
		return 0, instance.NewFieldError(-1, "id", "%q is not a valid instance id", instanceID)
	case !instance.ValidID(checkID):
		return 0, instance.NewFieldError(-1, "check_id", "%q is not a valid check id", checkID)
	case !instance.ValidStatus(status):
		return 0, instance.NewFieldError(-1, "status", "unknown check status %q: want passing, warning or critical", status)
	}
	output = instance.TrimOutput(output)
	if in := r.table.Get(instanceID); in != nil && status != instance.StatusCritical {
		if c := in.Check(checkID); c != nil && c.Type == instance.CheckTTL {
			r.passTTL(instanceID, checkID, c.TTL, r.opts.Now())
		}
	}
	return r.submitChecked(ctx, &checkWrite{id: instanceID, check: checkID, status: status, output: output})
}

// checkWrite sets one check's status and output.
type checkWrite struct {
	id, check, status, output string
}

func (w *checkWrite) Plan(tx *commit.Tx) error {
	cur, rev := currentInstance(tx, w.id)
	if cur == nil {
		return fmt.Errorf("%w: instance %q", ErrNotFound, w.id)
	}
	i := checkIndex(cur, w.check)
	if i < 0 {
		return fmt.Errorf("%w: instance %q has no check %q", ErrNotFound, w.id, w.check)
	}
	// An owned instance's check says what its source says; only a
	// critical (a TTL check's expiry) may be set again.
	if o := ownerOf(cur); o != "" && (w.status != instance.StatusCritical || cur.Checks[i].Status != instance.StatusCritical) {
		return &OwnedError{ID: cur.ID, Owner: o}
	}
	if c := &cur.Checks[i]; c.Status == w.status && c.Output == w.output {
		if rev == commit.Pending {
			tx.Answer(tx.Revision())
		} else {
			tx.Answer(cur.Revision)
		}
		return nil
	}
	n := cur.WithCheck(i, w.status, w.output, tx.Now())
	tx.PutIf(store.Instances, n.ID, tx.Encode(n.AppendBinary), n, rev)
	return nil
}

func checkIndex(in *instance.Instance, id string) int {
	for i := range in.Checks {
		if in.Checks[i].ID == id {
			return i
		}
	}
	return -1
}

// RemoveIfUnchanged deregisters instance in if it is still the version
// given (a register or a check's recovery since keeps it): the removal of
// an instance whose check stayed critical past its
// deregister_critical_service_after. It reports whether it removed it.
func (r *Registry) RemoveIfUnchanged(ctx context.Context, in *instance.Instance) (bool, error) {
	w := &removeIfWrite{in: in}
	_, err := r.submit(ctx, w)
	return w.removed, err
}

type removeIfWrite struct {
	in      *instance.Instance
	removed bool
}

func (w *removeIfWrite) Plan(tx *commit.Tx) error {
	cur, rev := currentInstance(tx, w.in.ID)
	w.removed = cur == w.in
	if w.removed {
		tx.DeleteIf(store.Instances, cur.ID, rev)
	}
	return nil
}

// Judges reports whether this server judges instance id's health now (in
// a cluster, exactly one live server does): the number of its unbroken run
// of judging, which changes when it judges again after a time it may not
// have; 0 if another server does. A single server judges everything (1).
// Any goroutine; does not block.
func (r *Registry) Judges(id string) uint64 {
	if r.cluster == nil {
		return 1
	}
	return r.cluster.Judge(id)
}

// checkDeadlines are the deadlines of one instance's ttl checks, in unix
// ns, by check id.
type checkDeadlines struct {
	mu sync.Mutex
	at map[string]int64
}

// TTLDeadline is when ttl check c of instance id turns critical without a
// passing or warning update. A check whose deadline this server never set
// (new, or after a restart or a move of its judgement) gets a full TTL
// from now. Any goroutine.
func (r *Registry) TTLDeadline(id string, c *instance.Check) time.Time {
	v, _ := r.checkTTL.LoadOrStore(id, &checkDeadlines{at: map[string]int64{}})
	cd := v.(*checkDeadlines)
	cd.mu.Lock()
	defer cd.mu.Unlock()
	d, ok := cd.at[c.ID]
	if !ok {
		d = r.opts.Now().Add(c.TTL).UnixNano()
		cd.at[c.ID] = d
	}
	return time.Unix(0, d)
}

// GraceTTL gives ttl check c of instance id a full TTL from now, unless its
// deadline is later: for a server that has just gained the check's
// judgement (updates may have gone to the former judge).
func (r *Registry) GraceTTL(id string, c *instance.Check) {
	r.extendTTL(id, c.ID, r.opts.Now().Add(c.TTL).UnixNano())
}

// passTTL moves the deadline of ttl check checkID of instance id to now +
// ttl, here and, if another server judges the instance, there.
func (r *Registry) passTTL(id, checkID string, ttl time.Duration, now time.Time) {
	r.extendTTL(id, checkID, now.Add(ttl).UnixNano())
	if r.cluster != nil && r.cluster.Judge(id) == 0 {
		r.cluster.Relay(id+checkSep+checkID, now.UnixNano())
	}
}

// checkSep joins an instance id and a check id in a relayed heartbeat (ids
// never hold it): Beat takes it for a ttl check's update.
const checkSep = "\x00"

func (r *Registry) extendTTL(id, checkID string, d int64) {
	v, _ := r.checkTTL.LoadOrStore(id, &checkDeadlines{at: map[string]int64{}})
	cd := v.(*checkDeadlines)
	cd.mu.Lock()
	if cur, ok := cd.at[checkID]; !ok || cur < d {
		cd.at[checkID] = d
	}
	cd.mu.Unlock()
}

// beatCheck is Beat for a relayed ttl check update ("id\x00check").
func (r *Registry) beatCheck(key string, at int64) bool {
	id, checkID, ok := strings.Cut(key, checkSep)
	if !ok {
		return false
	}
	if in := r.table.Get(id); in != nil {
		if c := in.Check(checkID); c != nil && c.Type == instance.CheckTTL {
			r.extendTTL(id, checkID, time.Unix(0, at).Add(c.TTL).UnixNano())
		}
	}
	return true
}

// forgetChecks drops the ttl deadlines of a deleted instance. Follower.
func (r *Registry) forgetChecks(id string) { r.checkTTL.Delete(id) }
