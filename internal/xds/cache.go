package xds

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/proto"

	topo "github.com/sextant-mesh/sextant/internal/locality"
)

// Resource is one resource to publish.
type Resource struct {
	// Name is the resource's name as clients see it.
	Name string
	// Key identifies it in the cache when two resources share a name (the
	// on-demand listeners, per client namespace); "" means Name.
	Key string
	// Version is what clients see as its version.
	Version string
	// Message is the resource; Apply encodes it once.
	Message proto.Message
	// Value is the resource already encoded (Message is then ignored).
	Value []byte
	// Locality is an EDS resource's localityLbSetting, nil for Istio's
	// defaults (localityeds.go).
	Locality *topo.Rules
	// Hidden resources go only to clients that name them, never to
	// wildcard subscriptions.
	Hidden bool
}

// entry is one version of one resource, encoded once and shared by every
// subscriber: value is the resource, anyField the same wrapped in an Any as
// a DiscoveryResponse.resources element, resField as a
// DeltaDiscoveryResponse.resources element. Entries are immutable.
type entry struct {
	name, version string
	id            uint32
	seq           uint64 // global change sequence; a delta subscriber remembers the seq it has
	value         []byte
	hash          uint64 // of value: the version's suffix (contentVersion)
	anyField      []byte
	resField      []byte
	origin        time.Time // commit time of the oldest change this version reflects
	hidden        bool
	rules         *topo.Rules // Resource.Locality
	bySource      bool        // routes matched by source: per subscriber (sourcematch.go)
	// variants are what nodes of the other flavours get (envoy.go), by
	// flavour: same name, id, seq, origin and hidden; nil when they get
	// this one.
	variants [numFlavours]*entry
}

// of returns the variant of e nodes of flavour f get (nil for nil).
func (e *entry) of(f Flavour) *entry {
	if e != nil && e.variants[f] != nil {
		return e.variants[f]
	}
	return e
}

// variantValue is the encoding of e's variant for f, nil when there is none.
func (e *entry) variantValue(f Flavour) []byte {
	if e.variants[f] == nil {
		return nil
	}
	return e.variants[f].value
}

// typeCache holds the current version of every resource of one type.
type typeCache struct {
	typ Type

	mu      sync.RWMutex
	ids     map[string]uint32 // key -> id; ids are never reused
	names   []string          // id -> name last published, or the key's (for delta removals)
	entries []*entry          // id -> current entry, nil when absent
	live    int               // non-nil entries
	visible int               // non-nil, non-hidden entries
	gen     uint64            // bumped by every change
	version string            // version of the last change
	lastSeq uint64            // seq of the last change (a removal takes one too)

	memoMu sync.Mutex
	memo   [numFlavours]atomic.Pointer[fullBody]
}

// fullBody is every visible resource of a type encoded as DiscoveryResponse
// resources, built once per generation and shared by every wildcard
// state-of-the-world subscriber.
type fullBody struct {
	gen     uint64
	body    []byte
	count   int
	version string
}

func (tc *typeCache) intern(key string) uint32 {
	if id, ok := tc.ids[key]; ok {
		return id
	}
	id := uint32(len(tc.entries))
	tc.ids[key] = id
	tc.entries = append(tc.entries, nil)
	// The name the key stands for until one is published: a delta client
	// may hold (initial_resource_versions) or name what was never here.
	name, _, _ := strings.Cut(key, "\x00")
	tc.names = append(tc.names, name)
	return id
}

// lookup returns the id of key, interning it. Subscribers intern the names
// they ask for, so that a resource created later reaches them by id.
func (tc *typeCache) lookup(key string) uint32 {
	tc.mu.RLock()
	id, ok := tc.ids[key]
	tc.mu.RUnlock()
	if ok {
		return id
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.intern(key)
}

// full returns the memoised encoding of every visible entry, as nodes of
// flavour f get them. Called with tc.mu read-locked.
func (tc *typeCache) full(f Flavour) *fullBody {
	memo := &tc.memo[f]
	if m := memo.Load(); m != nil && m.gen == tc.gen {
		return m
	}
	tc.memoMu.Lock()
	defer tc.memoMu.Unlock()
	if m := memo.Load(); m != nil && m.gen == tc.gen {
		return m
	}
	size := 0
	for _, e := range tc.entries {
		if e != nil && !e.hidden {
			size += len(e.of(f).anyField)
		}
	}
	m := &fullBody{gen: tc.gen, body: make([]byte, 0, size), version: tc.version}
	for _, e := range tc.entries {
		if e != nil && !e.hidden {
			m.body = append(m.body, e.of(f).anyField...)
			m.count++
		}
	}
	memo.Store(m)
	return m
}

// Cache holds the current resources of every type and the subscribers
// that receive them. Apply may be called from several goroutines at once
// (the push engine's endpoint and config workers); it never blocks on a
// subscriber.
type Cache struct {
	types [numTypes]*typeCache
	seq   atomic.Uint64

	subsMu sync.Mutex
	subs   atomic.Pointer[[]*subscriber]

	// listenerFor builds an on-demand listener; see SetListenerFunc.
	listenerFor atomic.Pointer[ListenerFunc]
	// noVariants: Apply makes no Envoy variant, as before Sextant served
	// Envoy (BenchmarkApplyVariants compares the two in one run).
	noVariants bool

	// epMu guards the subscribers with an endpoint change to send
	// (epWaiting) and epIdle, closed while there are none: every
	// subscriber's send loop holds its config responses back while another
	// has endpoints to send (Server.sendLoop), so that endpoint responses go
	// out first across subscribers, not only within each one.
	epMu      sync.Mutex
	epWaiting int
	epIdle    chan struct{}

	// side is the Sidecars in force (sidecarscope.go).
	side sidecarState
}

// ListenerFunc returns the listener a client in namespace ns gets for the
// name it asked for, or false when the name means nothing.
type ListenerFunc func(name, ns string) (Resource, bool)

// NewCache returns an empty cache.
func NewCache() *Cache {
	c := &Cache{}
	for t := range c.types {
		c.types[t] = &typeCache{typ: Type(t), ids: map[string]uint32{}}
	}
	c.subs.Store(&[]*subscriber{})
	c.epIdle = make(chan struct{})
	close(c.epIdle)
	return c
}

// endpointQueued counts a subscriber that has an endpoint change to send.
func (c *Cache) endpointQueued() {
	c.epMu.Lock()
	if c.epWaiting == 0 {
		c.epIdle = make(chan struct{})
	}
	c.epWaiting++
	c.epMu.Unlock()
}

// endpointServed uncounts it once its send loop has sent its endpoints
// (or found them waiting for the client's answer).
func (c *Cache) endpointServed() {
	c.epMu.Lock()
	if c.epWaiting--; c.epWaiting == 0 {
		close(c.epIdle)
	}
	c.epMu.Unlock()
}

// endpointsIdle returns a channel closed when no subscriber has an
// endpoint change to send.
func (c *Cache) endpointsIdle() <-chan struct{} {
	c.epMu.Lock()
	defer c.epMu.Unlock()
	return c.epIdle
}

// SetListenerFunc installs how listeners a client names but nobody
// published are made (proxyless gRPC asks for its dial target).
func (c *Cache) SetListenerFunc(f ListenerFunc) { c.listenerFor.Store(&f) }

var marshal = proto.MarshalOptions{Deterministic: true}

// encodeMessage marshals with the generated vtprotobuf code of Envoy's
// types when the binary is built with -tags vtprotobuf (go-control-plane
// compiles it only then), else with the deterministic proto marshaller.
// The resources translate.go builds hold no maps, so field order alone
// makes the vtprotobuf encoding deterministic.
func encodeMessage(m proto.Message) ([]byte, error) {
	return Encode(m)
}

// Encode is the encoding Apply gives a Resource's Message, for callers
// that encode on their own goroutines and publish Resource.Value (the push
// engine's config workers, within their CPU budget).
func Encode(m proto.Message) ([]byte, error) {
	if vt, ok := m.(interface{ MarshalVTStrict() ([]byte, error) }); ok {
		return vt.MarshalVTStrict()
	}
	return marshal.Marshal(m)
}

// errgroup runs functions concurrently and keeps the first error.
type errgroup struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (g *errgroup) do(f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.mu.Lock()
			if g.err == nil {
				g.err = err
			}
			g.mu.Unlock()
		}
	}()
}

func (g *errgroup) wait() error {
	g.wg.Wait()
	return g.err
}

// Apply publishes set and removes the resources under the keys in remove,
// all of type t, as one change at version (the version clients see for the
// type) reflecting changes committed at origin. A resource whose encoding
// did not change keeps its old version and wakes nobody. It returns how many
// resources changed. Safe for concurrent use; it never waits for a
// subscriber.
func (c *Cache) Apply(t Type, set []Resource, remove []string, version string, origin time.Time) (int, error) {
	type enc struct {
		r        *Resource
		key      string
		value    []byte
		variants [numFlavours][]byte // by flavour, nil when it gets value
	}
	encs := make([]enc, len(set))
	encode := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			r := &set[i]
			v := r.Value
			if v == nil {
				var err error
				if v, err = encodeMessage(r.Message); err != nil {
					return fmt.Errorf("xds: encode %s %q: %w", t, r.Name, err)
				}
			}
			var variants [numFlavours][]byte
			vary := !c.noVariants && mayVary(t, v)
			for f := FlavourEnvoy; f < numFlavours && vary; f++ {
				b, ok, err := envoyVariant(f, t, v)
				if err != nil {
					return fmt.Errorf("xds: %s %q: %w", t, r.Name, err)
				}
				if ok {
					variants[f] = b
				}
			}
			key := r.Key
			if key == "" {
				key = r.Name
			}
			encs[i] = enc{r, key, v, variants}
		}
		return nil
	}
	// A large batch (a full recomputation) is encoded on every core.
	if n := runtime.GOMAXPROCS(0); len(set) >= 512 && n > 1 {
		var g errgroup
		step := (len(set) + n - 1) / n
		for lo := 0; lo < len(set); lo += step {
			g.do(func() error { return encode(lo, min(lo+step, len(set))) })
		}
		if err := g.wait(); err != nil {
			return 0, err
		}
	} else if err := encode(0, len(set)); err != nil {
		return 0, err
	}
	tc := c.types[t]
	var changed []change
	tc.mu.Lock()
	for _, e := range encs {
		id := tc.intern(e.key)
		old := tc.entries[id]
		if old != nil && old.hidden == e.r.Hidden && old.name == e.r.Name && bytes.Equal(old.value, e.value) && sameVariants(old, e.variants) &&
			old.rules.Equal(e.r.Locality) {
			continue
		}
		ne := newEntry(t, e.r, e.value, id, c.seq.Add(1), origin)
		for f, v := range e.variants {
			switch {
			case v == nil:
			case Flavour(f) > FlavourEnvoy && bytes.Equal(v, e.variants[FlavourEnvoy]):
				ne.variants[f] = ne.variants[FlavourEnvoy] // the same bytes: one entry
			default:
				ne.variants[f] = newEntry(t, e.r, v, id, ne.seq, origin)
			}
		}
		tc.put(id, old, ne)
		tc.lastSeq = ne.seq
		changed = append(changed, change{id: id, seq: ne.seq, hidden: ne.hidden || (old != nil && old.hidden), name: ne.name,
			added: old == nil || old.hidden != ne.hidden})
	}
	for _, key := range remove {
		id, ok := tc.ids[key]
		if !ok || tc.entries[id] == nil {
			continue
		}
		old := tc.entries[id]
		tc.put(id, old, nil)
		tc.lastSeq = c.seq.Add(1)
		changed = append(changed, change{id: id, seq: tc.lastSeq, hidden: old.hidden, name: old.name})
	}
	if len(changed) > 0 {
		tc.gen++
		if version != "" {
			tc.version = version
		}
	}
	tc.mu.Unlock()
	if len(changed) == 0 {
		return 0, nil
	}
	if t == TypeCluster {
		// A changed cluster is followed by its endpoints again: Envoy waits
		// for them to finish warming it (go-control-plane #245).
		te := c.types[TypeEndpoint]
		te.mu.RLock()
		for i := range changed {
			changed[i].eds = noEDS
			if id, ok := te.ids[tc.names[changed[i].id]]; ok && te.entries[id] != nil {
				changed[i].eds = id
			}
		}
		te.mu.RUnlock()
	}
	for _, s := range *c.subs.Load() {
		s.notify(t, changed, origin)
	}
	return len(changed), nil
}

// sameVariants reports whether e holds the variants vs.
func sameVariants(e *entry, vs [numFlavours][]byte) bool {
	for f, v := range vs {
		if !bytes.Equal(e.variantValue(Flavour(f)), v) {
			return false
		}
	}
	return true
}

// newEntry is version v of r, encoded as value.
func newEntry(t Type, r *Resource, value []byte, id uint32, seq uint64, origin time.Time) *entry {
	h := xxhash.Sum64(value)
	ver := contentVersion(r.Version, h)
	anyField := encodeAny(respResources, t.URL(), value)
	return &entry{
		// The value is kept as the tail of its Any (which ends with it),
		// not as a third copy.
		name: r.Name, version: ver, id: id, seq: seq, value: anyField[len(anyField)-len(value):], hash: h,
		anyField: anyField,
		resField: encodeResource(deltaResources, r.Name, ver, t.URL(), value),
		origin:   origin, hidden: r.Hidden, rules: r.Locality, bySource: mayHaveSource(t, value),
	}
}

// contentVersion is the version clients see: the publisher's version (the
// push engine's revision), '-', and a hash of the resource's encoding in
// base 36. The same bytes carry the same suffix on every server of a
// cluster and after a restart, so a delta client that reconnects elsewhere
// with its initial_resource_versions is not sent again what it holds
// (sameContent); and new bytes always make a new version.
func contentVersion(version string, hash uint64) string {
	return version + "-" + strconv.FormatUint(hash, 36)
}

// sameContent reports whether a client holding version v of a resource
// holds e's bytes: v's hash suffix is e's (v may come from another
// server), or v is e's version exactly.
func (e *entry) sameContent(v string) bool {
	if v == e.version {
		return true
	}
	i := strings.LastIndexByte(v, '-')
	if i < 0 {
		return false
	}
	h, err := strconv.ParseUint(v[i+1:], 36, 64)
	return err == nil && h == e.hash
}

type change struct {
	id     uint32
	seq    uint64 // the change's place in the cache's global order
	hidden bool
	eds    uint32 // a cluster's endpoint resource, or noEDS
	name   string // the resource's, for Sidecar scoping (sidecarscope.go)
	// added: the resource was absent before (or its visibility changed);
	// false for a new version of one clients may hold, and for a removal.
	// Only an added cluster holds routes and listeners back (heldFrom).
	added bool
}

const noEDS = ^uint32(0)

func (tc *typeCache) put(id uint32, old, ne *entry) {
	if old != nil {
		tc.live--
		if !old.hidden {
			tc.visible--
		}
	}
	if ne != nil {
		tc.live++
		if !ne.hidden {
			tc.visible++
		}
		tc.names[id] = ne.name
	}
	tc.entries[id] = ne
}

// Len returns how many resources of type t the cache holds.
func (c *Cache) Len(t Type) int {
	tc := c.types[t]
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	return tc.live
}

// Version returns the version of the last change to type t.
func (c *Cache) Version(t Type) string {
	tc := c.types[t]
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	return tc.version
}

// Get returns the current encoding and version of the resource under key.
func (c *Cache) Get(t Type, key string) (value []byte, version string, ok bool) {
	return c.GetFor(FlavourGRPC, t, key)
}

// GetFor returns the current encoding and version of the resource under
// key as nodes of flavour f get it.
func (c *Cache) GetFor(f Flavour, t Type, key string) (value []byte, version string, ok bool) {
	tc := c.types[t]
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	id, found := tc.ids[key]
	if !found || tc.entries[id] == nil {
		return nil, "", false
	}
	e := tc.entries[id].of(f)
	return e.value, e.version, true
}

// Names returns the keys of every resource of type t.
func (c *Cache) Names(t Type) []string {
	tc := c.types[t]
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	out := make([]string, 0, tc.live)
	for k, id := range tc.ids {
		if tc.entries[id] != nil {
			out = append(out, k)
		}
	}
	return out
}

func (c *Cache) addSubscriber(s *subscriber) {
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	old := *c.subs.Load()
	next := make([]*subscriber, len(old), len(old)+1)
	copy(next, old)
	next = append(next, s)
	c.subs.Store(&next)
}

func (c *Cache) removeSubscriber(s *subscriber) {
	s.endpointsServed()
	c.subsMu.Lock()
	defer c.subsMu.Unlock()
	old := *c.subs.Load()
	next := make([]*subscriber, 0, len(old))
	for _, x := range old {
		if x != s {
			next = append(next, x)
		}
	}
	c.subs.Store(&next)
}

// ensureListener makes the on-demand listener under key if nobody has.
func (c *Cache) ensureListener(name, ns string) string {
	f := c.listenerFor.Load()
	if f == nil {
		return name
	}
	r, ok := (*f)(name, ns)
	if !ok {
		return name
	}
	key := r.Key
	if key == "" {
		key = r.Name
	}
	if _, _, exists := c.Get(TypeListener, key); !exists {
		c.Apply(TypeListener, []Resource{r}, nil, "", time.Now())
	}
	return key
}
