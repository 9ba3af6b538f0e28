package commit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// What the engine does when other servers write the same store (Shared):
// a write that lost a race is decided again on what is stored, and a
// write answered from the catalog alone waits until the catalog caught up.

// maxReplans bounds how often a write that lost a race with another
// server is planned again. Each lost race is another server's commit, so
// a write is planned again at most about as often as there are writers
// racing it; past the bound it fails as unavailable (HTTP 503).
const maxReplans = 16

// SubmitChecked is Submit for writes decided on state other servers may
// change. In a cluster, a write whose condition failed (another server
// changed a record since this catalog saw it) is planned again once the
// catalog has caught up with the store, so it is decided on what is
// stored: a delete of what another server deleted is "not found", a
// placement onto a node another server filled meanwhile goes elsewhere.
func (e *Engine) SubmitChecked(ctx context.Context, w Write) (int64, error) {
	for attempt := 0; ; attempt++ {
		rev, err := e.Submit(ctx, w)
		if !e.shared || ConflictRevision(err) == 0 {
			return rev, err
		}
		if attempt == maxReplans {
			// Nothing of it was written: unavailable (503, retry), not a
			// conflict the caller did not ask for.
			return 0, fmt.Errorf("%w: still losing races to other servers after %d tries: %v", store.ErrUnavailable, maxReplans+1, err)
		}
		// The submitter's own goroutine waits: as long as its caller lets
		// it, within a bound.
		if _, cerr := e.catchUp(ctx, 30*time.Second); cerr != nil {
			// Nothing of it was written, and it cannot be decided again
			// now: unavailable (503, retry), not the conflict (409).
			return 0, fmt.Errorf("%w: %w (after %v)", store.ErrUnavailable, cerr, err)
		}
	}
}

// ConflictRevision is the stored revision a conflict found, 0 if err is
// not a conflict.
func ConflictRevision(err error) int64 {
	var ce *store.ConflictError
	if errors.As(err, &ce) {
		return max(ce.Have, 1)
	}
	return 0
}

// Revision is the revision the catalog has applied.
func (e *Engine) Revision() int64 { return e.cat.Revision() }

// headReader is a store shared with other servers: Head is the newest
// revision committed by any of them (the MySQL store).
type headReader interface {
	Head(ctx context.Context, after int64) (head, nextCommitted int64, err error)
}

// catchUp waits until the catalog has applied every revision the store
// had committed when it was called. It reports whether the catalog moved,
// and an error when it cannot tell it is current (the store did not
// answer, or the follower did not get there in time). Called by the
// committer and by submitters re-planning a write (SubmitChecked).
func (e *Engine) catchUp(ctx context.Context, within time.Duration) (bool, error) {
	hr, ok := e.st.(headReader)
	if !ok {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	from := e.cat.Revision()
	head, _, err := hr.Head(cctx, from)
	if err != nil {
		return false, fmt.Errorf("commit: read the store's head: %w", err)
	}
	if head <= from {
		return false, nil
	}
	if err := e.WaitApplied(cctx, head); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("not applied within %v (from %d)", within, from)
		}
		return false, fmt.Errorf("commit: catch up to revision %d: %w", head, err)
	}
	return true, nil
}
