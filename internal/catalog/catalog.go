// Package catalog owns Sextant's in-memory truth, which every read is served
// from. It is kind-agnostic: the revision, the change log, the waiters of
// blocking reads, subscriptions to every change, and memos of encoded
// answers; and tables that kinds build theirs from: Groups (labelled items
// in groups, each group a Set with a bitmap label index: the instances of
// each service) and Records (a few opaque records: the System kind). Each
// kind registers its table (the instance kind, config, nodes, placements,
// tokens, policies), holding that kind's immutable versions and indexes.
//
// One writer (the write engine's follower of the store) applies committed
// changes in revision order; readers load immutable versions and never wait
// for the writer, and the writer never waits for a reader. The catalog does
// not validate, persist or expire anything: that is the registry's job.
//
// Visibility: the writer publishes a commit's revision N in steps (the
// tables, then the change log, then Revision), and N becomes the catalog's
// Revision last, so whoever waits for Revision to reach N (a writer's
// acknowledgement) sees all of N everywhere. A reader may still see part of
// N while the writer is between steps; Settle, called at the start of every
// request by each front door, waits out such a publication, so that once
// anything of N was visible to anyone, every later request sees all of N.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Change is one committed change of a record of any kind.
type Change struct {
	Revision int64
	Kind     store.Kind
	Key      naming.ServiceKey // the record's group (an instance's service)
	ID       string            // the record's key within its kind
	Value    any               // the new version (the table's decoded record); nil for a delete
	// Committed is when the store committed it, in unix nanoseconds.
	Committed int64
	// Created is set when the record was not in its group before the
	// change, so a table need not look for it (false is always safe).
	Created bool
}

// Table is one kind's in-memory state. The catalog's writer calls every
// method but Record, one call at a time; Record is called by writers
// planning a commit, from any goroutine, and must not block.
type Table interface {
	// Decode builds the value of a stored record (from another process, or
	// at load) and returns it with its group.
	Decode(rec store.Record) (value any, group naming.ServiceKey, err error)
	// Adopt takes a writer's own decoded object (store.Op.Object) committed
	// at rev and returns its group. The object is not shared yet, so the
	// table may complete it (its revision).
	Adopt(obj any, rev int64) (group naming.ServiceKey, err error)
	// Group returns the group of record id as the table now holds it.
	Group(id string) (naming.ServiceKey, bool)
	// Load replaces the table's state with values (from Decode) at rev.
	Load(rev int64, values []any)
	// Apply publishes this kind's changes of one commit batch, in order;
	// rev is the revision of the whole batch.
	Apply(rev int64, changes []Change)
	// Record returns the current version of record id and its revision.
	Record(id string) (value any, rev int64, ok bool)
}

// Elider is a Table whose changes the change log keeps without their
// values: a put's Value there is Elided. A kind of large values (Consul
// KV's, up to 512 KiB each) would otherwise keep the last LogSize of
// them reachable. Its subscribers read what they need from the table.
type Elider interface {
	Table
	ElideInLog()
}

// Elided is the Value, in the change log, of a put of a kind whose table
// is an Elider (a delete's is nil, as for every kind).
var Elided any = elided{}

type elided struct{}

// Catalog is the in-memory state of every kind.
type Catalog struct {
	opts     Options
	rev      atomic.Int64
	tables   map[store.Kind]Table // fixed once loaded
	elide    [256]bool            // kinds whose table is an Elider, fixed once loaded
	log      changeLog
	waiters  waiters
	advanced atomic.Pointer[chan struct{}] // closed at each Apply and Load
	// publishing is odd while the writer publishes a revision, and moves
	// to the next even number once it is whole (Settle).
	publishing atomic.Uint64
	// stepHook, if set, runs after each step of a publication (tests).
	stepHook func(step string)
}

// Options tune the catalog. Zero values are sensible defaults.
type Options struct {
	// LogSize is how many changes the change log keeps before compacting
	// the oldest (default 262144).
	LogSize int
}

// ErrUnknownKind is returned for a change of a kind with no table.
var ErrUnknownKind = errors.New("catalog: no table for kind")

// New returns an empty catalog at revision 0 with the System kind's
// Records table; every other kind registers its own (Register).
func New(opts Options) *Catalog {
	if opts.LogSize <= 0 {
		opts.LogSize = 1 << 18
	}
	c := &Catalog{opts: opts, tables: map[store.Kind]Table{}}
	c.log.init(opts.LogSize)
	c.waiters.m = make(map[waitKey]*waitEntry)
	ch := make(chan struct{})
	c.advanced.Store(&ch)
	c.tables[store.System] = NewRecords()
	return c
}

// Register adds the table of kind k. Before Load or Apply only.
func (c *Catalog) Register(k store.Kind, t Table) {
	if b, ok := t.(binder); ok {
		b.bind(c, k)
	}
	_, c.elide[k] = t.(Elider)
	c.tables[k] = t
}

// binder is a table of this package that waits through the catalog it is
// registered with (Groups).
type binder interface {
	bind(c *Catalog, k store.Kind)
}

// Table returns the table of kind k, or nil.
func (c *Catalog) Table(k store.Kind) Table { return c.tables[k] }

// Kinds lists the kinds with a table.
func (c *Catalog) Kinds() []store.Kind {
	var out []store.Kind
	for _, k := range store.Kinds() {
		if c.tables[k] != nil {
			out = append(out, k)
		}
	}
	return out
}

// Revision is the revision of the last applied change.
func (c *Catalog) Revision() int64 { return c.rev.Load() }

// Loader reads a consistent snapshot of stored records (a store's Load).
type Loader interface {
	Load(kinds []store.Kind, fn func(store.Record) error) (int64, error)
}

// Load replaces the whole state with what l holds, as after a restart:
// history before the loaded revision is compacted, and every waiter wakes.
// Records are copied in chunks as l yields them and decoded on every core.
// Writer only.
func (c *Catalog) Load(l Loader) error {
	type chunk struct {
		kind store.Kind
		buf  []byte
		ends []int
		recs []store.Record // Value unset: the record's bytes are buf[prev end:end]
		out  []any
		err  error
	}
	const chunkRecords = 4096
	work := make(chan *chunk, 8)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range work {
				t := c.tables[ch.kind]
				ch.out = make([]any, 0, len(ch.ends))
				start := 0
				for i, end := range ch.ends {
					rec := ch.recs[i]
					rec.Value = ch.buf[start:end]
					v, _, err := t.Decode(rec)
					if err != nil {
						ch.err = fmt.Errorf("catalog: load %v %q: %w", rec.Kind, rec.Key, err)
						break
					}
					ch.out = append(ch.out, v)
					start = end
				}
				// Decoded values hold no part of the raw records: let a
				// later chunk reuse their memory rather than fresh pages.
				ch.buf, ch.ends, ch.recs = nil, nil, nil
			}
		}()
	}
	var chunks []*chunk
	var cur *chunk
	flush := func() {
		if cur != nil {
			chunks = append(chunks, cur)
			work <- cur
			cur = nil
		}
	}
	kinds := c.Kinds()
	rev, err := l.Load(kinds, func(rec store.Record) error {
		if cur != nil && cur.kind != rec.Kind {
			flush()
		}
		if cur == nil {
			size := len(rec.Value)
			cur = &chunk{kind: rec.Kind, buf: make([]byte, 0, chunkRecords*(size+size/4)),
				ends: make([]int, 0, chunkRecords), recs: make([]store.Record, 0, chunkRecords)}
		}
		cur.buf = append(cur.buf, rec.Value...)
		cur.ends = append(cur.ends, len(cur.buf))
		cur.recs = append(cur.recs, store.Record{Kind: rec.Kind, Key: rec.Key, Revision: rec.Revision})
		if len(cur.ends) == chunkRecords {
			flush()
		}
		return nil
	})
	flush()
	close(work)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("catalog: load: %w", err)
	}
	byKind := map[store.Kind][]any{}
	for _, ch := range chunks {
		if ch.err != nil {
			return ch.err
		}
		byKind[ch.kind] = append(byKind[ch.kind], ch.out...)
	}
	c.publishing.Add(1)
	for _, k := range kinds {
		c.tables[k].Load(rev, byKind[k])
	}
	c.log.reset(rev)
	c.rev.Store(rev)
	c.publishing.Add(1)
	c.waiters.notifyAll()
	c.advance()
	return nil
}

// advance wakes every subscriber.
func (c *Catalog) advance() {
	ch := make(chan struct{})
	old := c.advanced.Swap(&ch)
	close(*old)
}

// Apply publishes changes committed to the store, in revision order, and
// makes the last one's revision the catalog's. It decodes every op first,
// so a corrupt record fails the whole call and changes nothing. Writer only.
func (c *Catalog) Apply(changes []store.Change) error {
	if len(changes) == 0 {
		return nil
	}
	nops := 0
	for _, sc := range changes {
		nops += len(sc.Ops)
	}
	out := make([]Change, 0, nops)
	// Records created, moved or deleted earlier in this call, for the group
	// of a later change to the same record.
	type pk struct {
		kind store.Kind
		id   string
	}
	type group struct {
		key  naming.ServiceKey
		gone bool
	}
	// It is built from out when first needed: a batch of creations the
	// writer vouched for (Absent) never looks a group up.
	var pending map[pk]group
	groupOf := func(t Table, k store.Kind, id string) (naming.ServiceKey, bool) {
		if pending == nil && len(out) > 0 {
			pending = make(map[pk]group, nops)
			for _, ch := range out {
				pending[pk{ch.Kind, ch.ID}] = group{key: ch.Key, gone: ch.Value == nil}
			}
		}
		if g, ok := pending[pk{k, id}]; ok {
			return g.key, !g.gone
		}
		return t.Group(id)
	}
	note := func(k store.Kind, id string, g group) {
		if pending != nil {
			pending[pk{k, id}] = g
		}
	}
	for _, sc := range changes {
		for _, op := range sc.Ops {
			t := c.tables[op.Kind]
			if t == nil {
				return fmt.Errorf("%w %v (revision %d)", ErrUnknownKind, op.Kind, sc.Revision)
			}
			var prev naming.ServiceKey
			had := false
			if !op.Absent || op.Object == nil {
				prev, had = groupOf(t, op.Kind, op.Key)
			}
			if op.Value == nil {
				if had {
					out = append(out, Change{Revision: sc.Revision, Kind: op.Kind, Key: prev, ID: op.Key, Committed: sc.Time})
					note(op.Kind, op.Key, group{gone: true})
				}
				continue
			}
			var (
				v   any
				g   naming.ServiceKey
				err error
			)
			if op.Object != nil {
				v = op.Object
				g, err = t.Adopt(op.Object, sc.Revision)
			} else {
				v, g, err = t.Decode(store.Record{Kind: op.Kind, Key: op.Key, Revision: sc.Revision, Value: op.Value})
			}
			if err != nil {
				return fmt.Errorf("catalog: apply %v %q at revision %d: %w", op.Kind, op.Key, sc.Revision, err)
			}
			if had && prev != g {
				// Moved to another group: gone from the old one.
				out = append(out, Change{Revision: sc.Revision, Kind: op.Kind, Key: prev, ID: op.Key, Committed: sc.Time})
			}
			out = append(out, Change{Revision: sc.Revision, Kind: op.Kind, Key: g, ID: op.Key, Value: v, Committed: sc.Time,
				Created: !had || prev != g})
			note(op.Kind, op.Key, group{key: g})
		}
	}
	rev := changes[len(changes)-1].Revision
	c.applyChanges(rev, out)
	return nil
}

// applyChanges hands each kind its changes, appends them to the change
// log, and only then makes rev the catalog's revision: a writer answered
// once Revision reaches its revision finds its change in every view.
func (c *Catalog) applyChanges(rev int64, out []Change) {
	c.publishing.Add(1)
	start := 0
	for start < len(out) {
		// Consecutive changes of one kind go together; kinds interleave
		// rarely, and each table sees its own changes in order.
		end := start + 1
		for end < len(out) && out[end].Kind == out[start].Kind {
			end++
		}
		c.tables[out[start].Kind].Apply(rev, out[start:end])
		start = end
	}
	c.step("tables")
	c.log.append(rev, c.elided(out))
	c.step("log")
	c.rev.Store(rev)
	c.step("revision")
	c.publishing.Add(1)
	c.waiters.notify(out)
	c.advance()
}

// elided is out as the change log keeps it: the values of the kinds
// whose table is an Elider left out (a copy, if any is).
func (c *Catalog) elided(out []Change) []Change {
	logged := out
	for i := range out {
		if c.elide[out[i].Kind] && out[i].Value != nil {
			if &logged[0] == &out[0] {
				logged = slices.Clone(out)
			}
			logged[i].Value = Elided
		}
	}
	return logged
}

func (c *Catalog) step(name string) {
	if c.stepHook != nil {
		c.stepHook(name)
	}
}

// Settle waits until a publication under way when it is called is whole,
// so that what the caller reads next holds every revision anyone could
// have seen any part of before. Readers call it at the start of a request;
// it costs an atomic load when the writer is not publishing, and otherwise
// waits for in-memory work only (the writer never blocks while publishing).
func (c *Catalog) Settle() {
	p := c.publishing.Load()
	if p&1 == 0 {
		return
	}
	for {
		wake := *c.advanced.Load()
		if c.publishing.Load() != p {
			return
		}
		<-wake
	}
}

// Changes returns the changes of kinds (all kinds if none) with revision
// > since, oldest first, whole revisions only, up to limit changes (at
// least one whole revision), the revision the caller has then caught up
// to, and whether more follow. ErrCompacted if the log no longer holds
// everything after since.
func (c *Catalog) Changes(since int64, limit int, kinds ...store.Kind) ([]Change, int64, bool, error) {
	return c.log.since(since, limit, newKindSet(kinds))
}

// WaitGroup blocks until ready reports true or ctx ends, checking again
// after every change to group g of kind k. It reports ready's last answer.
func (c *Catalog) WaitGroup(ctx context.Context, k store.Kind, g naming.ServiceKey, ready func() bool) bool {
	c.waiters.active.Add(1)
	defer c.waiters.active.Add(-1)
	wk := waitKey{k, g}
	for {
		ch := c.waiters.acquire(wk)
		// Check after registering, so no change between the two is missed.
		if ready() {
			c.waiters.release(wk, ch)
			return true
		}
		select {
		case <-ch:
			c.waiters.release(wk, ch) // a no-op: the change removed the entry
		case <-ctx.Done():
			c.waiters.release(wk, ch)
			return ready()
		}
	}
}

// Waiters is the number of blocking reads now waiting.
func (c *Catalog) Waiters() int64 { return c.waiters.active.Load() }
