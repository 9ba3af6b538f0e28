// Package subset owns Sextant's subset load balancer (Envoy's and MOSN's
// semantics): it groups a cluster's hosts by the values of configured
// metadata keys, finds the group a request's metadata names, applies the
// configured fallbacks, and lets a balancer.Policy pick inside the group.
// Subsets are built from the label package's inverted index, updated per
// changed host, and read lock-free from immutable snapshots. It does not own
// discovery, health checking or the policies themselves (internal/balancer).
//
// Concurrency: one writer (the owner of the host set, e.g. the watch loop of
// a gateway cluster) calls Upsert, Remove, SetHealth and SetWeight; they are
// serialized by a mutex, so concurrent calls are safe but wait for each
// other. Pick and Result.Done may be called from any goroutine at any time.
// See docs/subset.md for the selection rules.
package subset

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Host is one endpoint of the cluster with its metadata. The balancer keeps
// a pointer to it: do not modify a Host after passing it in.
type Host struct {
	ID     string // stable, unique identity; Upsert and Remove find hosts by it
	Addr   string // host:port
	Weight uint32 // initial weight; SetWeight changes it
	// Labels are the host's single-valued metadata, the project's one
	// metadata type: a registry instance's Metadata is used as is.
	Labels label.Labels
	// Lists are list-valued metadata (see Config.ListAsAny). A key must not
	// be in both Labels and Lists.
	Lists map[string][]string
}

var (
	// ErrNoSubset: no subset matched the request and no fallback applied.
	ErrNoSubset = errors.New("subset: no subset for the request and no fallback")
	// ErrNoHealthyHost: the chosen subset (and, with panic mode, the whole
	// cluster) has no healthy host.
	ErrNoHealthyHost = errors.New("subset: no healthy host in the chosen subset")
	// ErrUnknownHost: SetHealth or SetWeight named a host that is not there.
	ErrUnknownHost = errors.New("subset: unknown host")
	// ErrInvalidHost wraps problems with a host's fields.
	ErrInvalidHost = errors.New("subset: invalid host")
)

// LB is a subset load balancer over one cluster's hosts.
type LB struct {
	cfg    *compiled
	policy balancer.Policy
	seed   maphash.Seed
	snap   atomic.Pointer[snapshot]

	// mu serializes writers; picks never take it.
	mu sync.Mutex
	// Writer-owned, built on the first update so that New pays no hashing
	// of ids: id -> slot, and slots free for reuse.
	ids  map[string]uint32
	free []uint32
	gen  uint64 // generation of the snapshot being edited
	// added is the next slotRec.added; New numbers its hosts 0..n-1.
	added uint32
	// Writer scratch: value tuples a host leaves and enters, values.
	olds, news, vs   []string
	oldVals, newVals hostVals

	// buildMu serializes policy.Build (the Policy contract allows one call
	// at a time) on the cold path of a pick: the first pick from a subset
	// changed since its child picker was last built. mu and buildMu are
	// never held together.
	buildMu sync.Mutex
}

// chunkSize slots share one copy-on-write record block.
const chunkSize = 64

type slotRec struct {
	host   *Host // nil: free slot
	weight uint32
	// state is added<<1 | unhealthy, 16 bytes a record in all. added
	// orders hosts by when they joined (a relabel keeps it): a
	// single_host_per_subset subset is its earliest-added member, so a
	// duplicate joining later does not take its traffic.
	state uint32
}

func (r slotRec) healthy() bool { return r.state&1 == 0 }
func (r slotRec) added() uint32 { return r.state >> 1 }

func (r *slotRec) setHealthy(ok bool) {
	r.state &^= 1
	if !ok {
		r.state |= 1
	}
}

// maxAdded bounds slotRec.added; reaching it renumbers the hosts.
const maxAdded = 1<<31 - 1

// chunk holds the records of chunkSize slots. A chunk New built that no
// edit has copied yet keeps no records: they follow from its hosts (base:
// the host, its Weight, healthy, joined in slot order), so New writes no
// record per host and the GC has none to scan.
type chunk struct {
	gen  uint64
	base []Host              // while recs is nil: New's hosts of these slots
	recs *[chunkSize]slotRec // nil until an edit
}

// snapshot is one immutable version of the subsets. Only entry.child is
// written after publication, once, by CAS.
type snapshot struct {
	gen    uint64
	index  *label.Postings
	chunks []*chunk
	slots  uint32 // slots below it may be used
	live   int
	table  table
	any    *entry // all hosts
	def    *entry // Config.DefaultSubset
}

// newChunk returns an edit's chunk with records, in one allocation.
func newChunk(gen uint64) *chunk {
	c := &struct {
		chunk
		recs [chunkSize]slotRec
	}{}
	c.gen, c.chunk.recs = gen, &c.recs
	return &c.chunk
}

func (s *snapshot) rec(slot uint32) slotRec {
	return s.chunks[slot/chunkSize].rec(slot)
}

func (c *chunk) rec(slot uint32) slotRec {
	i := slot % chunkSize
	if c.recs != nil {
		return c.recs[i]
	}
	if int(i) < len(c.base) {
		h := &c.base[i]
		return slotRec{host: h, weight: h.Weight, state: slot << 1}
	}
	return slotRec{}
}

// entry is one subset: a selector and one value per key. count (members,
// healthy or not) is kept for updates; the child picker is built on first
// use and reset by making a new entry.
type entry struct {
	gen    uint64
	hash   uint64
	sel    int32 // index in compiled.sels, or selAny / selDefault
	count  int32
	values []string // one per selector key, in csel.ids order
	child  atomic.Pointer[child]
}

const (
	selAny     = -1
	selDefault = -2
)

// child is an entry's picker over its healthy members.
type child struct {
	picker balancer.Picker // nil: no healthy member
	hosts  []*Host         // the picker's index -> host
}

// New validates cfg and hosts and builds the balancer; hosts[i] gets slot i.
// policy picks inside each subset (e.g. balancer.NewRoundRobin()). Every
// host starts healthy with its Weight. The balancer keeps pointers into
// hosts: do not modify the slice afterwards.
func New(cfg Config, policy balancer.Policy, hosts []Host) (*LB, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if policy == nil {
		return nil, fmt.Errorf("%w: nil child policy", ErrInvalidConfig)
	}
	if len(hosts) > maxAdded {
		return nil, fmt.Errorf("%w: %d hosts, at most %d", ErrInvalidHost, len(hosts), maxAdded)
	}
	lb := &LB{cfg: compile(cfg), policy: policy, seed: maphash.MakeSeed()}
	lb.gen = 1
	lb.added = uint32(len(hosts))
	s, err := lb.build(hosts) // checks each host as it reads it
	if err != nil {
		return nil, err
	}
	lb.snap.Store(s)
	return lb, nil
}

func checkHost(h *Host) error {
	if len(h.Lists) == 0 {
		return nil
	}
	for k := range h.Lists {
		if _, ok := h.Labels.Get(k); ok {
			return fmt.Errorf("%w %q: key %q is both a label and a list", ErrInvalidHost, h.ID, k)
		}
	}
	return nil
}

// appendValues appends the values host h has under key: its label, or with
// list_as_any the elements of its list (possibly repeated).
func (c *compiled) appendValues(dst []string, h *Host, key string) []string {
	if v, ok := h.Labels.Get(key); ok {
		return append(dst, v)
	}
	if c.listAny && len(h.Lists) > 0 {
		return append(dst, h.Lists[key]...)
	}
	return dst
}

// hasValue reports whether host h has value v under key.
func (c *compiled) hasValue(h *Host, key, v string) bool {
	if x, ok := h.Labels.Get(key); ok {
		return x == v
	}
	return c.listAny && slices.Contains(h.Lists[key], v)
}

// inDefault reports whether h belongs to the default subset.
func (c *compiled) inDefault(h *Host) bool {
	for i, k := range c.defKeys {
		if !c.hasValue(h, k, c.defVals[i]) {
			return false
		}
	}
	return true
}

// hash is the table key of (selector, values); Pick computes the same from
// the request's strings without allocating.
func (lb *LB) hashStart(sel int) uint64 { return uint64(sel+3) * 0x9E3779B97F4A7C15 }

func (lb *LB) hashNext(h uint64, v string) uint64 {
	return (h * 0x100000001B3) ^ maphash.String(lb.seed, v)
}

func (lb *LB) hashValues(sel int, vals []string) uint64 {
	h := lb.hashStart(sel)
	for _, v := range vals {
		h = lb.hashNext(h, v)
	}
	return h
}

// Len returns the number of hosts.
func (lb *LB) Len() int { return lb.snap.Load().live }

// NumSubsets returns the number of non-empty selector subsets.
func (lb *LB) NumSubsets() int { return lb.snap.Load().table.n }
