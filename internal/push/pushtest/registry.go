// Package pushtest provides an in-memory registry implementing
// push.Source, for tests and the push benchmark, until the catalog
// implements it. It keeps instances and config objects in maps, one
// revision per change, and a bounded change log; selectors are evaluated
// by scanning a service's instances (the catalog answers them from its
// label index).
package pushtest

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/push"
)

// Registry is an in-memory push.Source. Safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	rev      int64
	services map[naming.ServiceKey]map[string]*instance.Instance
	configs  map[config.Key]*config.Object
	log      []push.Change // changes after logStart
	logStart int64         // revision before log[0]
	logSize  int
	changed  chan struct{} // closed at every commit
}

// New returns an empty registry at revision 0 keeping the last logSize
// changes (default 1<<16).
func New(logSize int) *Registry {
	if logSize <= 0 {
		logSize = 1 << 16
	}
	return &Registry{
		services: map[naming.ServiceKey]map[string]*instance.Instance{},
		configs:  map[config.Key]*config.Object{},
		logSize:  logSize, changed: make(chan struct{}),
	}
}

// commit appends a change at the next revision. Called with mu held.
func (r *Registry) commit(ch push.Change) int64 {
	r.rev++
	ch.Revision = r.rev
	if ch.Committed.IsZero() {
		ch.Committed = time.Now()
	}
	r.log = append(r.log, ch)
	if len(r.log) > r.logSize {
		drop := len(r.log) - r.logSize/2
		r.log = slices.Clone(r.log[drop:])
		r.logStart += int64(drop)
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return r.rev
}

// Upsert registers or replaces instances, one revision each, and returns
// the last revision.
func (r *Registry) Upsert(ins ...*instance.Instance) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range ins {
		k := naming.ServiceKey{Namespace: in.Namespace, Name: in.Service}
		m := r.services[k]
		if m == nil {
			m = map[string]*instance.Instance{}
			r.services[k] = m
		}
		c := in.Clone() // fresh: an instance's cached labels are its own
		m[in.ID] = c
		r.commit(push.Change{Op: push.InstanceUpsert, Service: k, ID: in.ID})
	}
	return r.rev
}

// Delete removes an instance; it returns the revision, or 0 if there was
// no such instance.
func (r *Registry) Delete(svc naming.ServiceKey, id string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.services[svc][id]; !ok {
		return 0
	}
	delete(r.services[svc], id)
	return r.commit(push.Change{Op: push.InstanceDelete, Service: svc, ID: id})
}

// ApplyConfig creates or replaces a config object.
func (r *Registry) ApplyConfig(o *config.Object) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.configs[o.Key] = o
	return r.commit(push.Change{Op: push.ConfigUpsert, ConfigKey: o.Key, Config: o})
}

// DeleteConfig deletes a config object; 0 if there was none.
func (r *Registry) DeleteConfig(k config.Key) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.configs[k]; !ok {
		return 0
	}
	delete(r.configs, k)
	return r.commit(push.Change{Op: push.ConfigDelete, ConfigKey: k})
}

// Revision returns the last revision.
func (r *Registry) Revision() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.rev
}

// Snapshot implements push.Source.
func (r *Registry) Snapshot(context.Context) (push.Snapshot, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := push.Snapshot{Revision: r.rev}
	for k, m := range r.services {
		if len(m) > 0 {
			s.Services = append(s.Services, k)
		}
	}
	slices.SortFunc(s.Services, naming.ServiceKey.Compare)
	for _, o := range r.configs {
		s.Configs = append(s.Configs, o)
	}
	slices.SortFunc(s.Configs, func(a, b *config.Object) int { return a.Key.Compare(b.Key) })
	return s, nil
}

// Follow implements push.Source.
func (r *Registry) Follow(_ context.Context, since int64) (push.Changes, error) {
	return &follower{r: r, at: since}, nil
}

// Instances implements push.Source.
func (r *Registry) Instances(svc naming.ServiceKey, sel label.Selector, fn func(*instance.Instance)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, in := range r.services[svc] {
		if len(sel) == 0 || sel.Matches(in.Labels()) {
			fn(in)
		}
	}
}

// InstancesIn implements push.Source.
func (r *Registry) InstancesIn(ns string, sel label.Selector, fn func(*instance.Instance)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, ins := range r.services {
		if k.Namespace != ns {
			continue
		}
		for _, in := range ins {
			if len(sel) == 0 || sel.Matches(in.Labels()) {
				fn(in)
			}
		}
	}
}

type follower struct {
	r  *Registry
	at int64
}

const batch = 1024

func (f *follower) Next(ctx context.Context) ([]push.Change, error) {
	for {
		f.r.mu.RLock()
		if f.at < f.r.logStart {
			f.r.mu.RUnlock()
			return nil, push.ErrCompacted
		}
		if f.at < f.r.rev {
			from := int(f.at - f.r.logStart)
			to := min(len(f.r.log), from+batch)
			out := slices.Clone(f.r.log[from:to])
			f.r.mu.RUnlock()
			f.at = out[len(out)-1].Revision
			return out, nil
		}
		wait := f.r.changed
		f.r.mu.RUnlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

var _ push.Source = (*Registry)(nil)

// InstanceAt implements push.AddressFinder.
func (r *Registry) InstanceAt(ap netip.AddrPort) *instance.Instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, svc := range r.services {
		for _, in := range svc {
			if in.Port != int(ap.Port()) {
				continue
			}
			if a, err := netip.ParseAddr(in.Host); err == nil && a.Unmap() == ap.Addr().Unmap() {
				return in
			}
		}
	}
	return nil
}
