package catalog

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Instances is the instance table: services and their instances, each
// service an immutable version with a label index.
type Instances struct {
	c    *Catalog
	root atomic.Pointer[root]
	ids  *idIndex // the current version of each instance
}

// root is one immutable version of the whole table.
type root struct {
	rev       int64
	services  map[naming.ServiceKey]*Service // includes emptied services, so their revision survives
	keys      []naming.ServiceKey            // sorted
	instances int
}

// Service is an immutable version of one service: its instances (a Set),
// its revision, and the answers encoded from this version.
type Service struct {
	Key      naming.ServiceKey
	Revision int64 // the last revision that changed any of its instances
	Set[*instance.Instance]

	memo Memo
}

// Memo returns the answer stored under key for this version, building it
// once with build (see Memo.Get).
func (s *Service) Memo(key string, build func() []byte) []byte { return s.memo.Get(key, build) }

// Instances returns the instances sorted by id.
func (s *Service) Instances() []*instance.Instance { return s.Items() }

// HealthyLen is the number of healthy, non-isolated instances.
func (s *Service) HealthyLen() int { return s.ReadyLen() }

func newInstances(c *Catalog) *Instances {
	t := &Instances{c: c, ids: newIDIndex()}
	t.root.Store(&root{services: map[naming.ServiceKey]*Service{}})
	return t
}

var _ Table = (*Instances)(nil)

// Decode implements Table.
func (t *Instances) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	in, err := instance.Decode(rec.Value, rec.Revision)
	if err != nil {
		return nil, naming.ServiceKey{}, err
	}
	if in.ID != rec.Key {
		return nil, naming.ServiceKey{}, fmt.Errorf("%w: record %q holds instance %q", instance.ErrCorrupt, rec.Key, in.ID)
	}
	return in, in.Key(), nil
}

// Adopt implements Table.
func (t *Instances) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	in, ok := obj.(*instance.Instance)
	if !ok {
		return naming.ServiceKey{}, fmt.Errorf("catalog: instance record carries a %T", obj)
	}
	in.Revision = rev
	return in.Key(), nil
}

// Group implements Table.
func (t *Instances) Group(id string) (naming.ServiceKey, bool) {
	if in := t.Get(id); in != nil {
		return in.Key(), true
	}
	return naming.ServiceKey{}, false
}

// Record implements Table.
func (t *Instances) Record(id string) (any, int64, bool) {
	if in := t.Get(id); in != nil {
		return in, in.Revision, true
	}
	return nil, 0, false
}

// Load implements Table: it replaces every instance, building services on
// every core.
func (t *Instances) Load(rev int64, values []any) {
	byService := map[naming.ServiceKey][]*instance.Instance{}
	for _, v := range values {
		in := v.(*instance.Instance)
		if !t.c.opts.KeepHealthAtLoad {
			in.Healthy = true
		}
		byService[in.Key()] = append(byService[in.Key()], in)
	}
	t.ids.reset(values)
	keys := slices.Collect(maps.Keys(byService))
	built := make([]*Service, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(keys); i = int(next.Add(1) - 1) {
				built[i] = &Service{Key: keys[i], Revision: rev, Set: buildSet(byService[keys[i]])}
			}
		}()
	}
	wg.Wait()
	services := make(map[naming.ServiceKey]*Service, len(byService))
	for i, k := range keys {
		services[k] = built[i]
	}
	t.root.Store(&root{rev: rev, services: services, keys: slices.SortedFunc(maps.Keys(services), naming.ServiceKey.Compare), instances: len(values)})
}

// Apply implements Table.
func (t *Instances) Apply(rev int64, changes []Change) {
	old := t.root.Load()
	edits := make(map[naming.ServiceKey]*setEdit[*instance.Instance])
	revs := make(map[naming.ServiceKey]int64)
	count := old.instances
	for _, ch := range changes {
		e := edits[ch.Key]
		if e == nil {
			s := old.services[ch.Key]
			if s == nil {
				s = &Service{Key: ch.Key, Set: emptySet[*instance.Instance]()}
			}
			e = s.edit()
			edits[ch.Key] = e
		}
		revs[ch.Key] = ch.Revision
		if in := ch.Instance(); in != nil {
			switch {
			case ch.Created:
				count++
				e.insert(in)
			case e.get(ch.ID) == nil:
				count++
				e.upsert(in)
			default:
				e.upsert(in)
			}
			t.ids.store(ch.ID, in)
		} else if prev := e.get(ch.ID); prev != nil {
			e.remove(ch.ID)
			count--
			t.ids.deleteIf(ch.ID, prev)
		}
	}
	n := &root{rev: rev, services: maps.Clone(old.services), keys: old.keys, instances: count}
	added := false
	for k, e := range edits {
		if _, ok := n.services[k]; !ok {
			added = true
		}
		n.services[k] = &Service{Key: k, Revision: revs[k], Set: e.finish()}
	}
	if added {
		n.keys = slices.SortedFunc(maps.Keys(n.services), naming.ServiceKey.Compare)
	}
	t.root.Store(n)
}

// Len is the number of instances.
func (t *Instances) Len() int { return t.root.Load().instances }

// Get returns the current version of instance id, or nil.
func (t *Instances) Get(id string) *instance.Instance {
	return t.ids.get(id)
}

// Service returns the current version of a service, or nil if it never had
// an instance. An emptied service stays, with no instances.
func (t *Instances) Service(k naming.ServiceKey) *Service { return t.root.Load().services[k] }

// Wait blocks until service k's revision is greater than index or ctx ends,
// and returns the service as it then is (nil if it never existed).
func (t *Instances) Wait(ctx context.Context, k naming.ServiceKey, index int64) *Service {
	var s *Service
	t.c.WaitGroup(ctx, store.Instances, k, func() bool {
		s = t.Service(k)
		return s != nil && s.Revision > index
	})
	return s
}

// Snapshot is a consistent view of every service for multi-service reads.
type Snapshot struct{ r *root }

// Snapshot returns the current version of every service.
func (t *Instances) Snapshot() Snapshot { return Snapshot{t.root.Load()} }

// Revision is the snapshot's revision.
func (s Snapshot) Revision() int64 { return s.r.rev }

// Services returns the services with instances in namespace ns ("" for all),
// sorted by namespace then name.
func (s Snapshot) Services(ns string) []*Service {
	keys := s.r.keys
	if ns != "" {
		lo, _ := slices.BinarySearchFunc(keys, naming.ServiceKey{Namespace: ns}, naming.ServiceKey.Compare)
		hi := lo
		for hi < len(keys) && keys[hi].Namespace == ns {
			hi++
		}
		keys = keys[lo:hi]
	}
	out := make([]*Service, 0, len(keys))
	for _, k := range keys {
		if svc := s.r.services[k]; svc.Len() > 0 {
			out = append(out, svc)
		}
	}
	return out
}

// ServicesFrom returns the services with instances, in order, starting at
// the first key >= from, in namespace ns ("" for all). For paging.
func (s Snapshot) ServicesFrom(ns string, from naming.ServiceKey) []*Service {
	all := s.Services(ns)
	i, _ := slices.BinarySearchFunc(all, from, func(svc *Service, k naming.ServiceKey) int { return svc.Key.Compare(k) })
	return all[i:]
}

// Namespaces lists the namespaces with at least one instance, sorted.
func (s Snapshot) Namespaces() []string {
	var out []string
	for _, k := range s.r.keys {
		if s.r.services[k].Len() == 0 {
			continue
		}
		if n := len(out); n == 0 || out[n-1] != k.Namespace {
			out = append(out, k.Namespace)
		}
	}
	return out
}
