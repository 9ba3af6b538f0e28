package catalog

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bits-and-blooms/bitset"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Change is one committed change: an upsert (Instance set) or a delete.
type Change struct {
	Revision int64
	Key      ServiceKey
	ID       string
	Instance *Instance // nil for a delete
}

// Catalog is the in-memory registry state.
//
// Writes: Apply and Load are called by one goroutine at a time (the
// registry's committer). Reads: every other method, from any goroutine,
// without locks on the write path; a read sees whole Apply calls only.
type Catalog struct {
	root    atomic.Pointer[root]
	ids     sync.Map // id -> *Instance, the current version
	log     changeLog
	waiters waiters
}

// root is one immutable version of the whole catalog.
type root struct {
	rev       int64
	services  map[ServiceKey]*Service // includes emptied services, so their revision survives
	keys      []ServiceKey            // sorted
	instances int
}

// Options tune the catalog. Zero values are sensible defaults.
type Options struct {
	// LogSize is how many changes the change log keeps before compacting
	// the oldest (default 262144).
	LogSize int
}

// New returns an empty catalog at revision 0.
func New(opts Options) *Catalog {
	if opts.LogSize <= 0 {
		opts.LogSize = 1 << 18
	}
	c := &Catalog{}
	c.root.Store(&root{services: map[ServiceKey]*Service{}})
	c.log.init(opts.LogSize)
	c.waiters.m = make(map[ServiceKey]chan struct{})
	return c
}

// Load replaces the whole state with instances at revision rev, as after a
// restart: history before rev is compacted and every service carries rev,
// so a blocking query from before the restart wakes. Writer only.
func (c *Catalog) Load(rev int64, instances []*Instance) {
	c.ids.Clear()
	byService := map[ServiceKey][]*Instance{}
	for _, in := range instances {
		byService[in.Key()] = append(byService[in.Key()], in)
		c.ids.Store(in.ID, in)
	}
	// Services are independent: build them on every core.
	keys := slices.Collect(maps.Keys(byService))
	built := make([]*Service, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(keys); i = int(next.Add(1) - 1) {
				built[i] = loadService(keys[i], rev, byService[keys[i]])
			}
		}()
	}
	wg.Wait()
	services := make(map[ServiceKey]*Service, len(byService))
	for i, k := range keys {
		services[k] = built[i]
	}
	c.root.Store(&root{rev: rev, services: services, keys: slices.SortedFunc(maps.Keys(services), cmpKey), instances: len(instances)})
	c.log.reset(rev)
	c.waiters.notifyAll()
}

// loadService builds a service version in one pass: slot i is the i-th
// instance by id, and the label index is built in bulk.
func loadService(k ServiceKey, rev int64, ins []*Instance) *Service {
	slices.SortFunc(ins, func(a, b *Instance) int { return strings.Compare(a.ID, b.ID) })
	n := uint(len(ins))
	slots := slotsOf(ins)
	s := &Service{Key: k, Revision: rev, slots: slots, byID: make([]uint32, n),
		all: bitset.New(n), healthy: bitset.New(n), dirty: bitset.New(n), baseSlots: slots}
	b := label.NewPostingsBuilder(uint32(n))
	handles := map[string]int{}
	for i, in := range ins {
		s.byID[i] = uint32(i)
		s.all.Set(uint(i))
		if in.Healthy && !in.Isolated {
			s.healthy.Set(uint(i))
		}
		for key, v := range in.Metadata.All() {
			h, ok := handles[key]
			if !ok {
				h = b.Key(key)
				handles[key] = h
			}
			b.AppendSlot(h, v, uint32(i))
		}
	}
	s.base = b.Build()
	return s
}

func cmpKey(a, b ServiceKey) int {
	if a.less(b) {
		return -1
	}
	if b.less(a) {
		return 1
	}
	return 0
}

// Apply publishes committed changes, in revision order, and makes rev the
// catalog's revision. It wakes the waiters of every changed service.
// Writer only.
func (c *Catalog) Apply(rev int64, changes []Change) {
	old := c.root.Load()
	edits := make(map[ServiceKey]*edit)
	count := old.instances
	for _, ch := range changes {
		e := edits[ch.Key]
		if e == nil {
			s := old.services[ch.Key]
			if s == nil {
				s = newService(ch.Key)
			}
			e = s.edit(ch.Revision)
			edits[ch.Key] = e
		}
		e.s.Revision = ch.Revision
		if ch.Instance != nil {
			if e.get(ch.ID) == nil {
				count++
			}
			e.upsert(ch.Instance)
			c.ids.Store(ch.ID, ch.Instance)
		} else if prev := e.get(ch.ID); prev != nil {
			e.remove(ch.ID)
			count--
			c.ids.CompareAndDelete(ch.ID, prev)
		}
	}
	n := &root{rev: rev, services: maps.Clone(old.services), keys: old.keys, instances: count}
	added := false
	for k, e := range edits {
		if _, ok := n.services[k]; !ok {
			added = true
		}
		n.services[k] = e.finish()
	}
	if added {
		n.keys = slices.SortedFunc(maps.Keys(n.services), cmpKey)
	}
	c.root.Store(n)
	c.log.append(rev, changes)
	c.waiters.notify(edits)
}

// Revision is the revision of the last applied change.
func (c *Catalog) Revision() int64 { return c.root.Load().rev }

// Len is the number of instances.
func (c *Catalog) Len() int { return c.root.Load().instances }

// Get returns the current version of instance id, or nil.
func (c *Catalog) Get(id string) *Instance {
	if v, ok := c.ids.Load(id); ok {
		return v.(*Instance)
	}
	return nil
}

// Service returns the current version of a service, or nil if it never had
// an instance. An emptied service stays, with no instances.
func (c *Catalog) Service(k ServiceKey) *Service { return c.root.Load().services[k] }

// Snapshot is a consistent view of the whole catalog for multi-service reads.
type Snapshot struct{ r *root }

// Snapshot returns the current version of the whole catalog.
func (c *Catalog) Snapshot() Snapshot { return Snapshot{c.root.Load()} }

// Revision is the snapshot's revision.
func (s Snapshot) Revision() int64 { return s.r.rev }

// Services returns the services with instances in namespace ns ("" for all),
// sorted by namespace then name.
func (s Snapshot) Services(ns string) []*Service {
	keys := s.r.keys
	if ns != "" {
		lo, _ := slices.BinarySearchFunc(keys, ServiceKey{Namespace: ns}, cmpKey)
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
func (s Snapshot) ServicesFrom(ns string, from ServiceKey) []*Service {
	all := s.Services(ns)
	i, _ := slices.BinarySearchFunc(all, from, func(svc *Service, k ServiceKey) int { return cmpKey(svc.Key, k) })
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

// Changes returns the changes with revision > since, oldest first, whole
// revisions only, up to limit changes (at least one whole revision), the
// revision the caller has then caught up to, and whether more follow.
// ErrCompacted if the log no longer holds everything after since.
func (c *Catalog) Changes(since int64, limit int) ([]Change, int64, bool, error) {
	return c.log.since(since, limit)
}

// Wait blocks until service k's revision is greater than index or ctx ends,
// and returns the service as it then is (nil if it never existed).
func (c *Catalog) Wait(ctx context.Context, k ServiceKey, index int64) *Service {
	c.waiters.active.Add(1)
	defer c.waiters.active.Add(-1)
	for {
		ch := c.waiters.channel(k)
		// Check after registering, so no change between the two is missed.
		s := c.Service(k)
		if s != nil && s.Revision > index {
			return s
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return c.Service(k)
		}
	}
}

// Waiters is the number of blocking queries now waiting.
func (c *Catalog) Waiters() int64 { return c.waiters.active.Load() }

// waiters holds one channel per watched service, closed on its next change.
// Memory is one small entry per watched service, however many wait.
type waiters struct {
	mu     sync.Mutex
	m      map[ServiceKey]chan struct{}
	active atomic.Int64
}

func (w *waiters) channel(k ServiceKey) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.m[k]
	if ch == nil {
		ch = make(chan struct{})
		w.m[k] = ch
	}
	return ch
}

func (w *waiters) notify(changed map[ServiceKey]*edit) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range changed {
		if ch := w.m[k]; ch != nil {
			close(ch)
			delete(w.m, k)
		}
	}
}

func (w *waiters) notifyAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ch := range w.m {
		close(ch)
		delete(w.m, k)
	}
}
