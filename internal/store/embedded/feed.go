package embedded

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/sextant-mesh/sextant/internal/store"
)

// feed keeps committed changes in memory for Follow: only what some open
// follower has not read yet, and never more than maxOps ops (a follower
// further behind gets ErrCompacted). The committer appends; followers read
// under the mutex and wait on wake, which is closed and replaced at each
// append, so the committer never waits for a follower.
type feed struct {
	mu        sync.Mutex
	changes   []store.Change // ascending revisions
	base      int64          // every change with revision > base is held
	rev       int64          // the last revision published
	ops       int            // ops held
	maxOps    int
	wake      chan struct{}
	closed    bool
	followers map[*follower]struct{}
}

func (f *feed) init(rev int64, maxOps int) {
	f.base, f.rev, f.maxOps, f.wake = rev, rev, maxOps, make(chan struct{})
	f.followers = make(map[*follower]struct{})
}

func (f *feed) publish(changes []store.Change) {
	if len(changes) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, changes...)
	for _, c := range changes {
		f.ops += len(c.Ops)
	}
	f.rev = changes[len(changes)-1].Revision
	// Keep what the slowest follower has not read, within the bound.
	keepAfter := f.rev
	for r := range f.followers {
		keepAfter = min(keepAfter, r.pos)
	}
	drop := sort.Search(len(f.changes), func(i int) bool { return f.changes[i].Revision > keepAfter })
	for f.ops > f.maxOps && drop < len(f.changes) {
		drop++
	}
	for _, c := range f.changes[:drop] {
		f.ops -= len(c.Ops)
	}
	if drop > 0 {
		f.base = max(f.base, f.changes[drop-1].Revision)
		// A new array: a follower may still be reading one it was handed,
		// and the dropped records must not stay reachable from this one.
		f.changes = append([]store.Change(nil), f.changes[drop:]...)
	}
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.wake)
	}
}

func (f *feed) follow(since int64) (store.Feed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, store.ErrClosed
	}
	if since < f.base || since > f.rev {
		return nil, compacted(since, f.base, f.rev)
	}
	r := &follower{f: f, pos: since}
	f.followers[r] = struct{}{}
	return r, nil
}

func compacted(since, base, rev int64) error {
	if since > rev {
		return fmt.Errorf("embedded: follow from revision %d: the store is at %d", since, rev)
	}
	return fmt.Errorf("%w: changes after revision %d are no longer held (the feed starts after %d)", store.ErrCompacted, since, base)
}

// follower is one position in the feed.
type follower struct {
	f   *feed
	pos int64
}

func (r *follower) Next(ctx context.Context) ([]store.Change, error) {
	f := r.f
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, store.ErrClosed
		}
		if _, open := f.followers[r]; !open {
			f.mu.Unlock()
			return nil, fmt.Errorf("embedded: feed closed")
		}
		if r.pos < f.base {
			f.mu.Unlock()
			return nil, compacted(r.pos, f.base, f.rev)
		}
		i := sort.Search(len(f.changes), func(i int) bool { return f.changes[i].Revision > r.pos })
		if i < len(f.changes) {
			out := f.changes[i:len(f.changes):len(f.changes)]
			r.pos = out[len(out)-1].Revision
			f.mu.Unlock()
			return out, nil
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *follower) Close() {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	delete(r.f.followers, r)
}
