package consulapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

// A blocking query (Consul's index and wait parameters) holds its answer
// until what it reads changes after index, or wait passes. Indexes are
// registry revisions: a service's is the revision of its last change
// (health included), a namespace's the revision the answer reflects.
type blocking struct {
	index int64 // 0: answer at once
	wait  time.Duration
}

func parseBlocking(q url.Values) (blocking, error) {
	b := blocking{wait: DefaultWait}
	if s := q.Get("index"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return b, badRequest(fmt.Sprintf("index: %q is not an index (a non-negative integer)", s))
		}
		b.index = int64(min(v, math.MaxInt64))
	}
	if s := q.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return b, badRequest(fmt.Sprintf("wait: %q is not a duration (e.g. \"30s\", \"5m\")", s))
		}
		b.wait = min(d, MaxWait) // as Consul: a longer wait is cut, not refused
	}
	return b, nil
}

// hold bounds a blocking query: the caller's context, its wait, the
// server's shutdown, and the cap on waiting queries. done must be called.
func (a *API) hold(r *http.Request, b blocking) (ctx context.Context, done func(), err error) {
	if n := a.waiting.Add(1); n > a.opts.MaxWaiting {
		a.waiting.Add(-1)
		return nil, nil, &httpError{http.StatusTooManyRequests, "too many blocking queries are waiting; retry later"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), b.wait)
	release := context.AfterFunc(a.stopping, cancel)
	return ctx, func() {
		release()
		cancel()
		a.waiting.Add(-1)
	}, nil
}

// service reads service name of the served namespace, after waiting for a
// change past b.index if it asks to; the caller must be allowed to read
// the namespace (checked again after a wait: the token may have been
// revoked meanwhile).
func (a *API) service(r *http.Request, name string, b blocking) (*registry.Service, error) {
	key := naming.ServiceKey{Namespace: a.opts.Namespace, Name: name}
	inst := a.reg.Instances()
	svc := inst.Lookup(key)
	if b.index == 0 || (svc != nil && svc.Revision > b.index) {
		return svc, nil
	}
	ctx, done, err := a.hold(r, b)
	if err != nil {
		return nil, err
	}
	svc = inst.Wait(ctx, key, b.index)
	done()
	if err := acl.Require(r, instancesRead(a.opts.Namespace)); err != nil {
		return nil, err
	}
	return svc, nil
}

// serviceIndex is the index of an answer about svc: its revision, at
// least 1 (Consul's clients take 0 as "do not block").
func serviceIndex(svc *registry.Service) int64 {
	if svc == nil {
		return 1
	}
	return max(svc.Revision, 1)
}

// namespace waits, if b asks to, until an instance of the served
// namespace changes after b.index, and returns the index the answer read
// next will have: the instance table's revision, or b.index itself when
// the wait ended with no change in the namespace (so that a client sees
// the index it sent: nothing it reads changed).
func (a *API) namespace(r *http.Request, b blocking) (index int64, err error) {
	if b.index == 0 {
		return a.reg.Instances().Snapshot().Revision(), nil
	}
	sub, err := a.reg.Catalog().Subscribe(b.index, store.Instances)
	if err != nil {
		// Older than the change log. With no instance change since
		// b.index, nothing changed up to the catalog's revision c (it
		// advances after its tables apply a change) and later changes
		// come by a subscription from c: other kinds' changes (a busy KV
		// store) must not make every watch answer at once, with the same
		// index, for ever.
		c := a.reg.Catalog().Revision()
		if rev := a.reg.Instances().Snapshot().Revision(); rev > b.index {
			return rev, nil // something may have changed
		}
		if sub, err = a.reg.Catalog().Subscribe(c, store.Instances); err != nil {
			return a.reg.Instances().Snapshot().Revision(), nil
		}
	}
	ctx, done, err := a.hold(r, b)
	if err != nil {
		return 0, err
	}
	changed := false
	for !changed {
		changes, err := sub.Next(ctx, 1024)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				done()
				return a.reg.Instances().Snapshot().Revision(), nil // compacted meanwhile
			}
			break
		}
		for _, ch := range changes {
			if ch.Key.Namespace == a.opts.Namespace {
				changed = true
				break
			}
		}
	}
	done()
	if err := acl.Require(r, instancesRead(a.opts.Namespace)); err != nil {
		return 0, err
	}
	if !changed {
		return b.index, nil
	}
	return a.reg.Instances().Snapshot().Revision(), nil
}

// setMeta sets the headers of Consul's query metadata.
func (a *API) setMeta(w http.ResponseWriter, index int64) {
	h := w.Header()
	h["X-Consul-Index"] = []string{strconv.FormatInt(max(index, 1), 10)}
	known, last := "true", "0"
	if a.opts.Stale != nil {
		if d := a.opts.Stale(); d > 0 {
			known, last = "false", strconv.FormatInt(d.Milliseconds(), 10)
		}
	}
	h["X-Consul-Knownleader"] = []string{known}
	h["X-Consul-Lastcontact"] = []string{last}
}
