package commit

import (
	"context"
	"fmt"

	"github.com/sextant-mesh/sextant/internal/store"
)

// The committer does not wait for the follower after a batch of pipelined
// writes: it hands the batch's answers to the answerer, which sends them
// once the catalog holds the commit (read-your-writes, as before), and plans
// the next batch at once. That batch must see the writes the catalog does
// not hold yet: they stay in an in-flight overlay until it does. The
// overlay's values are the objects the follower adopts (it sets their
// revision), so Get reports them as Pending and appliers read no revision
// from a Pending value. Only batches of Options.Pipelined kinds (instances)
// are pipelined, and only on a single server (in a cluster another server
// may write in between, and the conditions Pending drops would be needed);
// any other batch waits as before.

// maxInFlight bounds the batches committed but not yet answered. It is
// small on purpose: while the committer waits for room, requests queue and
// its next commit takes them all. At 64, single registers were committed
// about 3 to a commit instead of ~30, and every commit costs the catalog a
// version: 86 against 69 us of server CPU per register, batches unchanged
// (docs/perf/registry.md, issue 16 third pass).
const maxInFlight = 2

// inflight is one committed batch's writes, until the catalog applies rev.
type inflight struct {
	rev  int64
	recs map[recKey]pending
	// The batch's memory, spare once the catalog holds rev (spares.go).
	chunks [][]byte
	ops    [][]store.Op
}

// answers is a batch waiting for the follower before its requests are
// answered.
type answers struct {
	batch  []*request
	owners []*request
	rev    int64
	onDisk func() error // waits for the commit's fsync
	seq    int64        // the committer's count of handed batches

	// idle is a batch that wrote nothing, answered after the batches
	// handed before it (from on); it fails if one of those failed.
	idle bool
	from int64
}

// pipelined returns the overlay of a committed batch that may be answered
// without holding the committer, or nil. tx's view of the batch's writes is
// taken as the overlay when every txn committed.
func (e *Engine) pipelined(txns []store.Txn, results []store.Result, last int64, tx *Tx) *inflight {
	if e.shared {
		return nil
	}
	failed := false
	for i, t := range txns {
		failed = failed || results[i].Err != nil
		for _, op := range t.Ops {
			if !e.pipelines[op.Kind] || (op.Value != nil && op.Object == nil) {
				return nil
			}
		}
	}
	f := &inflight{rev: last, recs: tx.over, chunks: tx.chunks, ops: make([][]store.Op, 0, len(txns))}
	for _, t := range txns {
		f.ops = append(f.ops, t.Ops)
	}
	if !failed {
		return f
	}
	f.recs = make(map[recKey]pending)
	for i, t := range txns {
		if results[i].Err != nil {
			continue
		}
		for _, op := range t.Ops {
			f.recs[recKey{op.Kind, op.Key}] = pending{value: op.Object}
		}
	}
	return f
}

// pruneInFlight drops the overlays the catalog now holds, once the
// follower is done with their ops (then their memory is spare).
func (e *Engine) pruneInFlight() {
	applied := min(e.cat.Revision(), e.tracked.Load())
	n := 0
	for n < len(e.inflight) && e.inflight[n].rev <= applied {
		e.spare.keep(e.inflight[n])
		e.inflight[n] = nil
		n++
	}
	e.inflight = e.inflight[n:]
}

// lookInFlight finds record k in the overlays, newest first.
func (e *Engine) lookInFlight(k recKey) (pending, bool) {
	for i := len(e.inflight) - 1; i >= 0; i-- {
		if p, ok := e.inflight[i].recs[k]; ok {
			return p, true
		}
	}
	return pending{}, false
}

// answerLoop answers handed-off batches in commit order, each once it is
// on disk and the follower has applied it. It ends when the committer closes the channel.
func (e *Engine) answerLoop(ctx context.Context) {
	var (
		failedSeq int64 // the last handed batch that failed
		failed    error
	)
	for a := range e.answerq {
		var err error
		owners := a.owners
		if a.idle {
			owners = a.batch
			if failedSeq >= a.from {
				// Its revision may never be applied: do not wait for it.
				err = fmt.Errorf("commit: answered from a commit that failed: %w", failed)
			}
		}
		if err == nil {
			if err = a.onDisk(); err == nil {
				err = e.WaitApplied(ctx, a.rev)
			}
			if err != nil && !a.idle {
				failedSeq, failed = a.seq, err
			}
		}
		if err != nil {
			for _, req := range owners {
				if req.err == nil {
					req.err = err
				}
			}
		}
		for _, req := range a.batch {
			close(req.done)
		}
		if !a.idle {
			e.answeredSeq.Store(a.seq)
		}
	}
}
