package push

import (
	"context"
	"fmt"
)

// A config write is answered once the control plane has published it, so
// that a subscriber connecting after the answer gets that config or newer
// (docs/controlplane.md, "Applied means published"). The follower records
// the revision up to which every change is queued to a path (handed); the
// config queue counts what was queued (queued) and what rounds have
// published (done). A revision is published when it was handed on and
// every config item queued by then is done.

// WaitPublished waits until every change up to revision rev has been
// published into the xDS cache, or ctx ends: the config path's clusters,
// routes and listeners, then the endpoint sets those rounds asked for (a
// new subset's cluster and its endpoints). It only waits; the endpoint
// path never waits for config work. Safe from any goroutine.
func (e *Engine) WaitPublished(ctx context.Context, rev int64) error {
	e.waiters.Add(1)
	defer e.waiters.Add(-1)
	var want, epWant uint64
	handed, configDone := false, false
	for {
		// Loaded before the checks: an advance after them closes it.
		ch := *e.progress.Load()
		if !handed && e.handed.Load() >= rev {
			handed, want = true, e.cfg.queuedCount()
		}
		if handed && !configDone && e.cfg.done.Load() >= want {
			// The rounds marked the services whose clusters changed.
			configDone, epWant = true, e.ep.markCount()
		}
		if configDone && e.ep.doneThrough() >= epWant {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("push: revision %d not published yet: %w", rev, ctx.Err())
		}
	}
}

// advanced wakes the waiters of WaitPublished, if any.
func (e *Engine) advanced() {
	if e.waiters.Load() == 0 {
		return
	}
	ch := make(chan struct{})
	close(*e.progress.Swap(&ch))
}
