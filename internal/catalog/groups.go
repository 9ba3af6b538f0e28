package catalog

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// GroupItem is an Item that belongs to a group (an instance to its
// service) and carries the revision of its last change.
type GroupItem interface {
	Item
	// ItemGroup is the group the item is in.
	ItemGroup() naming.ServiceKey
	// ItemRevision is the revision of the item's last change.
	ItemRevision() int64
}

// Codec is what a kind tells a Groups table about its records. Its
// functions are called by the catalog's writer (Decode also by the load, on
// every core) and must not block.
type Codec[T GroupItem] struct {
	// Decode builds the item of a stored record at its revision.
	Decode func(rec store.Record) (T, error)
	// Adopt takes a writer's own decoded object (store.Op.Object),
	// committed at rev, and completes it (its revision).
	Adopt func(obj any, rev int64) (T, error)
	// Loaded, if set, sees every item a Load decodes before it is shared
	// (a single server starts every instance healthy after a restart), and
	// reports whether it changed it: its group's revision is then the
	// loaded revision, so that a watcher of the group sees the change.
	Loaded func(T) bool
}

// Groups is a table of labelled items in groups (a kind's records by
// namespace and name, such as the instances of each service): each group
// an immutable version with a label index (Set), and an index by id. The
// kind gives it a Codec; the catalog gives it waiters once registered.
type Groups[T GroupItem] struct {
	codec Codec[T]
	c     *Catalog
	kind  store.Kind
	root  atomic.Pointer[groupsRoot[T]]
	ids   *idIndex[T] // the current version of each item
}

// groupsRoot is one immutable version of the whole table.
type groupsRoot[T GroupItem] struct {
	rev    int64
	groups map[naming.ServiceKey]*Group[T] // includes emptied groups, so their revision survives
	keys   []naming.ServiceKey             // sorted
	items  int
}

// Group is an immutable version of one group: its items (a Set), its
// revision, and the answers encoded from this version.
type Group[T GroupItem] struct {
	Key      naming.ServiceKey
	Revision int64 // the last revision that changed any of its items
	Set[T]

	memo Memo
}

// Memo returns the answer stored under key for this version, building it
// once with build (see Memo.Get).
func (g *Group[T]) Memo(key string, build func() []byte) []byte { return g.memo.Get(key, build) }

// NewGroups returns an empty table of a kind with codec.
func NewGroups[T GroupItem](codec Codec[T]) *Groups[T] {
	t := &Groups[T]{codec: codec, ids: newIDIndex[T]()}
	t.root.Store(&groupsRoot[T]{groups: map[naming.ServiceKey]*Group[T]{}})
	return t
}

// bind implements binder: the table's waits go through c.
func (t *Groups[T]) bind(c *Catalog, k store.Kind) { t.c, t.kind = c, k }

// Decode implements Table.
func (t *Groups[T]) Decode(rec store.Record) (any, naming.ServiceKey, error) {
	it, err := t.codec.Decode(rec)
	if err != nil {
		return nil, naming.ServiceKey{}, err
	}
	if it.ItemID() != rec.Key {
		return nil, naming.ServiceKey{}, fmt.Errorf("catalog: record %q holds %q", rec.Key, it.ItemID())
	}
	return it, it.ItemGroup(), nil
}

// Adopt implements Table.
func (t *Groups[T]) Adopt(obj any, rev int64) (naming.ServiceKey, error) {
	it, err := t.codec.Adopt(obj, rev)
	if err != nil {
		return naming.ServiceKey{}, err
	}
	return it.ItemGroup(), nil
}

// Group implements Table.
func (t *Groups[T]) Group(id string) (naming.ServiceKey, bool) {
	var zero T
	if it := t.Get(id); it != zero {
		return it.ItemGroup(), true
	}
	return naming.ServiceKey{}, false
}

// Record implements Table.
func (t *Groups[T]) Record(id string) (any, int64, bool) {
	var zero T
	if it := t.Get(id); it != zero {
		return it, it.ItemRevision(), true
	}
	return nil, 0, false
}

// Load implements Table: it replaces every item, building groups on
// every core. A group's revision is the highest of its items' (the
// revision of its last stored change), not the loaded revision: a restart
// keeps each group's index, so a blocking query holding it does not wake
// for nothing. A group whose last change was a removal comes back with an
// older revision (removals leave no record), never a newer one. A reload
// of a running table (a follower that fell behind the store's history)
// also compares each group with the version it replaces: one that
// changed, or lost all its items, takes the loaded revision, so that its
// watchers see what they missed.
func (t *Groups[T]) Load(rev int64, values []any) {
	old := t.root.Load()
	byGroup := map[naming.ServiceKey][]T{}
	revs := map[naming.ServiceKey]int64{}
	for _, v := range values {
		it := v.(T)
		k := it.ItemGroup()
		r := it.ItemRevision()
		if t.codec.Loaded != nil && t.codec.Loaded(it) {
			r = rev
		}
		revs[k] = max(revs[k], r)
		byGroup[k] = append(byGroup[k], it)
	}
	t.ids.reset(values)
	keys := slices.Collect(maps.Keys(byGroup))
	built := make([]*Group[T], len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(keys); i = int(next.Add(1) - 1) {
				built[i] = &Group[T]{Key: keys[i], Revision: revs[keys[i]], Set: buildSet(byGroup[keys[i]])}
			}
		}()
	}
	wg.Wait()
	groups := make(map[naming.ServiceKey]*Group[T], len(byGroup))
	for i, k := range keys {
		if og := old.groups[k]; og != nil {
			if sameItems(&og.Set, byGroup[k]) {
				built[i].Revision = max(built[i].Revision, og.Revision)
			} else if built[i].Revision <= og.Revision {
				built[i].Revision = rev
			}
		}
		groups[k] = built[i]
	}
	for k, og := range old.groups {
		switch _, ok := groups[k]; {
		case ok:
		case og.Len() > 0:
			groups[k] = &Group[T]{Key: k, Revision: rev, Set: emptySet[T]()} // emptied meanwhile
		default:
			groups[k] = og // emptied before: its revision survives
		}
	}
	t.root.Store(&groupsRoot[T]{rev: rev, groups: groups, keys: slices.SortedFunc(maps.Keys(groups), naming.ServiceKey.Compare), items: len(values)})
}

// sameItems reports whether set holds exactly items, each at its revision.
func sameItems[T GroupItem](set *Set[T], items []T) bool {
	if set.Len() != len(items) {
		return false
	}
	for _, it := range items {
		if cur, ok := set.Get(it.ItemID()); !ok || cur.ItemRevision() != it.ItemRevision() {
			return false
		}
	}
	return true
}

// Apply implements Table.
func (t *Groups[T]) Apply(rev int64, changes []Change) {
	old := t.root.Load()
	edits := make(map[naming.ServiceKey]*setEdit[T])
	revs := make(map[naming.ServiceKey]int64)
	count := old.items
	var zero T
	for _, ch := range changes {
		e := edits[ch.Key]
		if e == nil {
			g := old.groups[ch.Key]
			if g == nil {
				g = &Group[T]{Key: ch.Key, Set: emptySet[T]()}
			}
			e = g.edit()
			edits[ch.Key] = e
		}
		revs[ch.Key] = ch.Revision
		if it, ok := ch.Value.(T); ok && it != zero {
			switch {
			case ch.Created:
				count++
				e.insert(it)
			case e.get(ch.ID) == zero:
				count++
				e.upsert(it)
			default:
				e.upsert(it)
			}
			t.ids.store(ch.ID, it)
		} else if prev := e.get(ch.ID); prev != zero {
			e.remove(ch.ID)
			count--
			t.ids.deleteIf(ch.ID, prev)
		}
	}
	n := &groupsRoot[T]{rev: rev, groups: maps.Clone(old.groups), keys: old.keys, items: count}
	added := false
	for k, e := range edits {
		if _, ok := n.groups[k]; !ok {
			added = true
		}
		n.groups[k] = &Group[T]{Key: k, Revision: revs[k], Set: e.finish()}
	}
	if added {
		n.keys = slices.SortedFunc(maps.Keys(n.groups), naming.ServiceKey.Compare)
	}
	t.root.Store(n)
}

// Len is the number of items.
func (t *Groups[T]) Len() int { return t.root.Load().items }

// Get returns the current version of item id, or the zero T.
func (t *Groups[T]) Get(id string) T {
	return t.ids.get(id)
}

// Lookup returns the current version of group k, or nil if it never had
// an item. An emptied group stays, with no items.
func (t *Groups[T]) Lookup(k naming.ServiceKey) *Group[T] { return t.root.Load().groups[k] }

// Wait blocks until group k's revision is greater than index or ctx ends,
// and returns the group as it then is (nil if it never existed).
func (t *Groups[T]) Wait(ctx context.Context, k naming.ServiceKey, index int64) *Group[T] {
	var g *Group[T]
	t.c.WaitGroup(ctx, t.kind, k, func() bool {
		g = t.Lookup(k)
		return g != nil && g.Revision > index
	})
	return g
}

// Snapshot is a consistent view of every group for multi-group reads.
type Snapshot[T GroupItem] struct{ r *groupsRoot[T] }

// Snapshot returns the current version of every group.
func (t *Groups[T]) Snapshot() Snapshot[T] { return Snapshot[T]{t.root.Load()} }

// Revision is the snapshot's revision.
func (s Snapshot[T]) Revision() int64 { return s.r.rev }

// Groups returns the groups with items in namespace ns ("" for all),
// sorted by namespace then name.
func (s Snapshot[T]) Groups(ns string) []*Group[T] {
	keys := s.r.keys
	if ns != "" {
		lo, _ := slices.BinarySearchFunc(keys, naming.ServiceKey{Namespace: ns}, naming.ServiceKey.Compare)
		hi := lo
		for hi < len(keys) && keys[hi].Namespace == ns {
			hi++
		}
		keys = keys[lo:hi]
	}
	out := make([]*Group[T], 0, len(keys))
	for _, k := range keys {
		if g := s.r.groups[k]; g.Len() > 0 {
			out = append(out, g)
		}
	}
	return out
}

// GroupsFrom returns the groups with items, in order, starting at the
// first key >= from, in namespace ns ("" for all). For paging.
func (s Snapshot[T]) GroupsFrom(ns string, from naming.ServiceKey) []*Group[T] {
	all := s.Groups(ns)
	i, _ := slices.BinarySearchFunc(all, from, func(g *Group[T], k naming.ServiceKey) int { return g.Key.Compare(k) })
	return all[i:]
}

// Namespaces lists the namespaces with at least one item, sorted.
func (s Snapshot[T]) Namespaces() []string {
	var out []string
	for _, k := range s.r.keys {
		if s.r.groups[k].Len() == 0 {
			continue
		}
		if n := len(out); n == 0 || out[n-1] != k.Namespace {
			out = append(out, k.Namespace)
		}
	}
	return out
}
