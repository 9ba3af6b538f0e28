package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// followLoop is the catalog's only writer: it applies the store's stream of
// committed changes, in order, whoever wrote them, then updates the TTL
// state of the instances they touched and wakes the committer. If the
// stream breaks (compacted, or a change it cannot apply) it reloads the
// whole state from the store and follows on from there.
func (r *Registry) followLoop(ctx context.Context, feed store.Feed) {
	defer func() {
		if feed != nil {
			feed.Close()
		}
		r.signalApplied(nil, true)
	}()
	for {
		changes, err := feed.Next(ctx)
		if err == nil {
			if err = r.cat.Apply(changes); err == nil {
				r.track(changes)
				r.tracked.Store(changes[len(changes)-1].Revision)
				r.signalApplied(nil, false)
				continue
			}
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return
		}
		if errors.Is(err, store.ErrUnavailable) {
			// A shared store out of reach: keep the position, fail the
			// writes waiting for their revision, and try again.
			if !r.unreachable(ctx, err) {
				return
			}
			continue
		}
		r.log.Error("following the store failed; reloading the catalog", "revision", r.cat.Revision(), "err", err)
		feed.Close()
		feed = nil
		for feed == nil {
			if feed, err = r.reload(); err == nil {
				break
			}
			r.log.Error("reload failed", "err", err)
			r.signalApplied(err, false)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		r.signalApplied(nil, false)
	}
}

// reload loads the whole state from the store and follows on from it.
func (r *Registry) reload() (store.Feed, error) {
	if err := r.cat.Load(r.st); err != nil {
		return nil, err
	}
	r.armAll()
	r.tracked.Store(r.cat.Revision())
	feed, err := r.st.Follow(r.cat.Revision())
	if err != nil {
		return nil, fmt.Errorf("registry: follow the store: %w", err)
	}
	return feed, nil
}

// signalApplied wakes whoever waits for the catalog to move.
func (r *Registry) signalApplied(err error, done bool) {
	r.appliedMu.Lock()
	r.followErr = err
	if err != nil {
		r.followErrs++
	}
	r.followDone = r.followDone || done
	close(r.appliedCh)
	r.appliedCh = make(chan struct{})
	r.appliedMu.Unlock()
}

// unreachable waits a little after the store could not be reached, once
// signalling the error to writers waiting for their revision. It reports
// false when ctx ended.
func (r *Registry) unreachable(ctx context.Context, err error) bool {
	r.appliedMu.Lock()
	first := r.followErr == nil
	r.appliedMu.Unlock()
	if first {
		r.log.Warn("the store is unreachable; serving the catalog as it is and retrying", "revision", r.cat.Revision(), "err", err)
	}
	r.signalApplied(err, false)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}
