package commit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// followLoop is the catalog's only writer: it applies the store's stream of
// committed changes, in order, whoever wrote them, then tells the
// Trackers (the instance kind's TTL state) and wakes the committer. If the
// stream breaks (compacted, or a change it cannot apply) it reloads the
// whole state from the store and follows on from there.
func (e *Engine) followLoop(ctx context.Context, feed store.Feed) {
	defer func() {
		if feed != nil {
			feed.Close()
		}
		e.signalApplied(nil, true)
	}()
	for {
		changes, err := feed.Next(ctx)
		if err == nil {
			if err = e.cat.Apply(changes); err == nil {
				for _, t := range e.opts.Trackers {
					t.Applied(changes)
				}
				e.tracked.Store(changes[len(changes)-1].Revision)
				e.signalApplied(nil, false)
				continue
			}
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return
		}
		if errors.Is(err, store.ErrUnavailable) {
			// A shared store out of reach: keep the position, fail the
			// writes waiting for their revision, and try again.
			if !e.unreachable(ctx, err) {
				return
			}
			continue
		}
		e.log.Error("following the store failed; reloading the catalog", "revision", e.cat.Revision(), "err", err)
		feed.Close()
		feed = nil
		for feed == nil {
			if feed, err = e.reload(); err == nil {
				break
			}
			e.log.Error("reload failed", "err", err)
			e.signalApplied(err, false)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		e.signalApplied(nil, false)
	}
}

// reload loads the whole state from the store and follows on from it.
func (e *Engine) reload() (store.Feed, error) {
	if err := e.cat.Load(e.st); err != nil {
		return nil, err
	}
	e.loaded()
	feed, err := e.st.Follow(e.cat.Revision())
	if err != nil {
		return nil, fmt.Errorf("commit: follow the store: %w", err)
	}
	return feed, nil
}

// signalApplied wakes whoever waits for the catalog to move.
func (e *Engine) signalApplied(err error, done bool) {
	e.appliedMu.Lock()
	e.followErr = err
	if err != nil {
		e.followErrs++
	}
	e.followDone = e.followDone || done
	close(e.appliedCh)
	e.appliedCh = make(chan struct{})
	e.appliedMu.Unlock()
}

// unreachable waits a little after the store could not be reached, once
// signalling the error to writers waiting for their revision. It reports
// false when ctx ended.
func (e *Engine) unreachable(ctx context.Context, err error) bool {
	e.appliedMu.Lock()
	first := e.followErr == nil
	e.appliedMu.Unlock()
	if first {
		e.log.Warn("the store is unreachable; serving the catalog as it is and retrying", "revision", e.cat.Revision(), "err", err)
	}
	e.signalApplied(err, false)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}
