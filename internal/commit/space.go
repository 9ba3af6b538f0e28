package commit

import (
	"errors"

	"github.com/sextant-mesh/sextant/internal/store"
)

// A store refuses every write while its disk is full (store.ErrNoSpace):
// the engine logs the first refusal and the first commit after them, not
// each one (the log may be on the same disk). The refusals wrote nothing;
// their requests fail with the store's error, which names the directory.

// noteSpace notes whether a store commit was refused for lack of space.
func (e *Engine) noteSpace(err error) {
	full := errors.Is(err, store.ErrNoSpace)
	switch {
	case full && !e.noSpace:
		e.log.Warn("writes refused: not enough disk space (they resume by themselves once space is freed)", "err", err)
	case !full && err == nil && e.noSpace:
		e.log.Info("writes resumed: the store has room again")
	}
	if full || err == nil {
		e.noSpace = full
	}
}

// logCommitErr logs a failed store commit of n requests, but a refusal
// for lack of space (noteSpace).
func (e *Engine) logCommitErr(n int, err error) {
	if !errors.Is(err, store.ErrNoSpace) {
		e.log.Error("commit failed", "requests", n, "err", err)
	}
}
