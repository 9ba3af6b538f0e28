package commit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sextant-mesh/sextant/internal/store"
)

// Write is one write request of any kind. Each kind has its appliers: Write
// implementations that turn a request into store ops (the instance kind's in internal/registry;
// other kinds in their own files or packages). A new kind adds a Write, not
// a branch in the committer.
type Write interface {
	// Plan adds the write's ops to tx, reading what it depends on through
	// tx, which sees the catalog plus the batch's earlier writes. Called on
	// the committer goroutine, in request order; it must not block. An
	// error fails this write alone: its ops are dropped and the batch's
	// view forgets them.
	Plan(tx *Tx) error
}

// Finisher is a Write that holds state of its own across the Plans of a
// batch (a scheduler's tentative decisions, which later writes of the same
// batch must see). The committer calls Finish on every write of the batch
// once the store commit has returned, successfully or not, and before the
// follower applies it: the write then drops its tentative state, and the
// committed records reach its table through the store's stream like any
// other change. Called on the committer goroutine; must not block.
type Finisher interface {
	Finish()
}

// commitLoop owns the write path. It takes every request queued while the
// previous commit ran and writes them as one durable commit: no timer holds
// a lone request back, and concurrent requests share one fsync.
func (e *Engine) commitLoop(ctx context.Context) {
	batch := make([]*request, 0, e.opts.MaxCommit)
	var carried []*request
	for {
		// Requests carried from the last batch go first, and need no wait.
		batch = append(batch[:0], carried...)
		if len(batch) == 0 {
			select {
			case req := <-e.reqs:
				batch = append(batch, req)
			case <-ctx.Done():
				e.failQueued()
				return
			}
		} else if ctx.Err() != nil {
			for _, req := range batch {
				req.err = ErrClosed
				close(req.done)
			}
			e.failQueued()
			return
		}
	drain:
		for len(batch) < e.opts.MaxCommit {
			select {
			case req := <-e.reqs:
				batch = append(batch, req)
			default:
				break drain
			}
		}
		carried = e.commit(ctx, batch)
	}
}

func (e *Engine) failQueued() {
	close(e.stopped)
	for {
		select {
		case req := <-e.reqs:
			req.err = ErrClosed
			close(req.done)
		default:
			return
		}
	}
}

// commit plans every request of batch, commits their ops as one store
// commit, waits until the follower has applied it to the catalog, and
// answers. A failed commit fails every request of the batch, and nothing of
// it reaches the catalog. It returns the requests carried to the next
// batch, unanswered (see plan).
func (e *Engine) commit(ctx context.Context, batch []*request) (carried []*request) {
	handed := false
	planned := batch // every request, carried ones included, for finish
	defer func() {
		e.commitSize.Observe(float64(len(batch)))
		if !handed {
			for _, req := range batch {
				close(req.done)
			}
		}
	}()
	e.pruneInFlight()
	tx := newTx(e, e.opts.Now())
	tx.inflight = true
	if n := batchRecords(batch); n > bigBatch {
		// Sized once (grown step by step they were rehashed and copied ~10
		// times), or taken from a batch the catalog holds.
		if tx.over = e.spare.view(); tx.over == nil {
			tx.over = make(map[recKey]pending, n)
		}
		if tx.undo = e.spare.undoFor(n); tx.undo == nil {
			tx.undo = make([]undoEntry, 0, n)
		}
		defer func() { e.spare.keepUndo(tx.undo) }()
	}
	var (
		txns   []store.Txn
		owners []*request
		sync   bool
	)
	var idle []*request // answered without a write, from what the catalog holds
	plan := func(req *request) {
		tx.begin()
		req.later = nil // of an earlier plan of it, if any
		err := req.w.Plan(tx)
		if tx.dep {
			// Decided on an earlier write of this batch, whose condition
			// may fail at commit: planned again first in the next batch,
			// on what this one committed.
			tx.rollback()
			carried = append(carried, req)
			return
		}
		if err != nil {
			tx.rollback()
			req.err = err
			return
		}
		ops, answer, later, volatile := tx.end()
		if len(ops) == 0 {
			req.rev, req.later = answer, later
			idle = append(idle, req)
			return
		}
		sync = sync || !volatile
		txns = append(txns, store.Txn{Ops: ops})
		owners = append(owners, req)
	}
	// Every plan below reads the catalog at this revision or later.
	seen := e.cat.Revision()
	for _, req := range batch {
		plan(req)
	}
	if e.shared && len(idle) > 0 {
		// Another server may have changed what these decided on (an
		// instance deregistered there, re-registered here unchanged): plan
		// them again once the catalog has every commit up to now.
		// Without knowing the catalog is current their answers may be
		// stale (acknowledged, not written): they fail instead.
		again := idle
		idle = nil
		// The scheduler's batch transaction is let go first: the follower
		// needs it to apply node and placement changes, and the ops this
		// batch planned are conditional on what they decided on.
		finish(planned)
		moved, err := e.catchUp(ctx, 5*time.Second) // the committer waits meanwhile
		// The follower may have applied what they rest on between their
		// plans and the catch-up, which then found nothing new: a
		// register planned "unchanged" just before another server's
		// delete was applied here was acknowledged, not written (seen
		// under load: TestClusterServersAgree).
		moved = moved || e.cat.Revision() > seen
		for _, req := range again {
			if _, ok := req.w.(Finisher); ok {
				continue
			}
			switch {
			case err != nil:
				req.rev, req.err = 0, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
			case moved:
				req.rev = 0
				plan(req)
			}
		}
	}
	if len(carried) > 0 {
		batch = slices.DeleteFunc(slices.Clone(batch), func(req *request) bool { return slices.Contains(carried, req) })
	}
	if len(txns) == 0 {
		finish(planned)
		if answered := e.answeredSeq.Load(); answered < e.handedSeq {
			// Batches handed to the answerer are committed but may not be
			// durable or applied yet, and these answers may rest on them
			// (an instance another request is deleting is "not found"):
			// they are sent after those, never before. One load: from and
			// rev must describe the same batches.
			e.answerq <- answers{batch: slices.Clone(batch), rev: e.handedRev, from: answered + 1, idle: true, onDisk: noWait}
			handed = true
			if e.opts.IdleHanded != nil {
				e.opts.IdleHanded()
			}
		}
		return
	}
	start := time.Now()
	results, durable, err := e.storeCommit(txns, sync)
	finish(planned)
	e.noteSpace(err)
	if err != nil {
		e.logCommitErr(len(batch), err)
		for _, req := range batch {
			req.rev, req.err = 0, fmt.Errorf("commit: commit: %w", err)
		}
		return
	}
	onDisk := func() error {
		err := durable()
		e.commitLatency.Observe(time.Since(start).Seconds())
		if err != nil {
			e.log.Error("commit failed", "requests", len(batch), "err", err)
			return fmt.Errorf("commit: commit: %w", err)
		}
		return nil
	}
	var last int64
	for i, res := range results {
		owners[i].rev, owners[i].err = res.Revision, res.Err
		last = max(last, res.Revision)
	}
	if last == 0 {
		_ = onDisk() // nothing written (every write conflicted); a failure is logged
		return
	}
	if f := e.pipelined(txns, results, last, tx); f != nil {
		e.inflight = append(e.inflight, f)
		e.handedSeq++
		e.handedRev = last
		e.answerq <- answers{batch: slices.Clone(batch), owners: owners, rev: last, seq: e.handedSeq, onDisk: onDisk} // the loop reuses batch
		handed = true
		return
	}
	// Read-your-writes: answer once the catalog holds the commit.
	err = onDisk()
	if err == nil {
		err = e.WaitApplied(ctx, last)
	}
	if err != nil {
		for _, req := range owners {
			if req.err == nil {
				req.err = err
			}
		}
	}
	return carried
}

// asyncStore is a Store whose commit returns before its fsync; durable
// waits for it. The committer plans the next batch meanwhile.
type asyncStore interface {
	CommitAsync(txns []store.Txn, sync bool) ([]store.Result, func() error, error)
}

func noWait() error { return nil }

// storeCommit commits txns, asynchronously when the store can.
func (e *Engine) storeCommit(txns []store.Txn, sync bool) ([]store.Result, func() error, error) {
	if a, ok := e.st.(asyncStore); ok {
		return a.CommitAsync(txns, sync)
	}
	res, err := e.st.Commit(txns, sync)
	return res, noWait, err
}

// DryRun plans w against the current state, as the committer would, and
// commits nothing. It answers the catalog's revision. For writes whose Plan
// has no effect but its ops, or whose Finish undoes it; called from any
// goroutine, so a Finisher's Plan must serialise itself against the
// committer's.
func (e *Engine) DryRun(w Write) (int64, error) {
	tx := newTx(e, e.opts.Now())
	tx.begin()
	err := w.Plan(tx)
	if f, ok := w.(Finisher); ok {
		f.Finish()
	}
	if err != nil {
		return 0, err
	}
	return e.cat.Revision(), nil
}

// recordCounter is a Write that knows how many records it will write.
type recordCounter interface{ records() int }

// batchRecords is how many records batch writes, as far as known.
func batchRecords(batch []*request) int {
	n := 0
	for _, req := range batch {
		if c, ok := req.w.(recordCounter); ok {
			n += c.records()
		}
	}
	return n
}

func finish(batch []*request) {
	for _, req := range batch {
		if f, ok := req.w.(Finisher); ok {
			f.Finish()
		}
	}
}

// WaitApplied blocks until the follower has applied revision rev.
// It fails when the follower fails after the wait began (an error from
// before it, such as a store outage the commit itself outlived, does not
// count).
func (e *Engine) WaitApplied(ctx context.Context, rev int64) error {
	e.appliedMu.Lock()
	errs0 := e.followErrs
	e.appliedMu.Unlock()
	for {
		e.appliedMu.Lock()
		ch, ferr, errs, done := e.appliedCh, e.followErr, e.followErrs, e.followDone
		e.appliedMu.Unlock()
		if e.cat.Revision() >= rev {
			return nil
		}
		if ferr != nil && errs != errs0 {
			return fmt.Errorf("commit: revision %d committed but not applied: %w", rev, ferr)
		}
		if done {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			// Closing: the follower may be gone. The write is durable.
			return ErrClosed
		}
	}
}

// Tx is the view and the ops of one batch as its writes are planned. Get
// sees the catalog plus the batch's earlier writes; Put and Delete add ops
// to the current write. Used on the committer goroutine only.
type Tx struct {
	e   *Engine
	now time.Time

	over     map[recKey]pending // the batch's writes so far
	inflight bool               // also sees the committer's in-flight overlays
	undo     []undoEntry        // the current write's changes to over
	ops      []store.Op         // the current write's ops
	buf      []byte             // encodings of the batch, shared
	chunks   [][]byte           // every chunk buf has been

	answer   int64
	later    func() int64
	volatile bool
	cur      int32 // the current write's number in the batch
	dep      bool  // the current write read an earlier write's record (cluster)
	reserve  int   // ops the current write may add (Reserve)
}

type recKey struct {
	kind store.Kind
	id   string
}

type pending struct {
	value any   // nil: deleted earlier in the batch
	by    int32 // the write of the batch that wrote it (Tx.cur)
}

type undoEntry struct {
	k   recKey
	had bool
	p   pending
}

func newTx(e *Engine, now time.Time) *Tx {
	return &Tx{e: e, now: now, over: make(map[recKey]pending)}
}

// bigBatch is how many records make a batch big: its view and undo log are
// sized up front and kept for the next big batch (spares).
const bigBatch = 64

func (t *Tx) begin() {
	t.undo, t.ops, t.answer, t.later, t.volatile, t.reserve = t.undo[:0], nil, 0, nil, false, 0
	t.cur++
	t.dep = false
}

func (t *Tx) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		if u.had {
			t.over[u.k] = u.p
		} else {
			delete(t.over, u.k)
		}
	}
	t.undo, t.ops = t.undo[:0], nil
}

func (t *Tx) end() ([]store.Op, int64, func() int64, bool) {
	return t.ops, t.answer, t.later, t.volatile
}

// Reserve says the current write may add up to n ops, so that the first
// one makes room for all (a write that adds none allocates nothing).
func (t *Tx) Reserve(n int) { t.reserve = n }

// add appends op to the current write and notes it in the batch's view.
func (t *Tx) add(op store.Op, obj any) {
	if t.ops == nil && t.reserve > 0 {
		if t.ops = t.spare().opsFor(t.reserve); t.ops == nil {
			t.ops = make([]store.Op, 0, t.reserve)
		}
	}
	t.ops = append(t.ops, op)
	t.note(op.Kind, op.Key, obj)
}

// spare is the registry's spare memory for a batch the committer plans
// (the committer's goroutine owns it), and none for any other Tx (DryRun).
func (t *Tx) spare() *spares {
	if t.inflight {
		return &t.e.spare
	}
	return &spares{}
}

// Now is the time the batch is planned at.
func (t *Tx) Now() time.Time { return t.now }

// Pending is the revision Get reports for a record written earlier in the
// batch: it has none yet. A condition on Pending is met by construction
// (the batch commits in order), so it is dropped.
const Pending int64 = -1

// Get returns the current value of record id of kind k and its revision:
// nil and 0 if absent; Pending if written earlier in this batch or in one
// committed but not yet applied (pipeline.go).
func (t *Tx) Get(k store.Kind, id string) (any, int64) {
	p, ok := t.over[recKey{k, id}]
	if ok && p.by != t.cur && t.e.shared {
		// In a cluster an earlier write of the batch may fail its
		// condition at commit: what this write decides on it cannot be
		// known now (see carry).
		t.dep = true
	}
	if !ok && t.inflight {
		p, ok = t.e.lookInFlight(recKey{k, id})
	}
	if ok {
		if p.value == nil {
			return nil, 0
		}
		return p.value, Pending
	}
	tbl := t.e.cat.Table(k)
	if tbl == nil {
		return nil, 0
	}
	v, rev, ok := tbl.Record(id)
	if !ok {
		return nil, 0
	}
	return v, rev
}

func (t *Tx) note(k store.Kind, id string, value any) {
	rk := recKey{k, id}
	old, had := t.over[rk]
	t.undo = append(t.undo, undoEntry{k: rk, had: had, p: old})
	t.over[rk] = pending{value: value, by: t.cur}
}

// Put writes record id of kind k: value is its durable encoding, obj its
// decoded form handed to the catalog (store.Op.Object).
func (t *Tx) Put(k store.Kind, id string, value []byte, obj any) {
	t.add(store.Op{Kind: k, Key: id, Value: value, Object: obj}, obj)
}

// PutNew is Put of a record that Get reported absent. On a single server,
// where the committer is the only writer and Get sees every earlier commit,
// the catalog is told so and does not look for it (store.Op.Absent).
func (t *Tx) PutNew(k store.Kind, id string, value []byte, obj any) {
	t.add(store.Op{Kind: k, Key: id, Value: value, Object: obj, Absent: !t.e.shared && t.inflight}, obj)
}

// PutIf is Put on condition that the record's revision is still rev (0:
// absent) when the batch commits.
func (t *Tx) PutIf(k store.Kind, id string, value []byte, obj any, rev int64) {
	t.add(store.Op{Kind: k, Key: id, Value: value, Object: obj, Check: rev != Pending, IfRevision: rev}, obj)
}

// Delete deletes record id of kind k.
func (t *Tx) Delete(k store.Kind, id string) {
	t.add(store.Op{Kind: k, Key: id}, nil)
}

// DeleteIf is Delete on condition that the record's revision is still rev.
func (t *Tx) DeleteIf(k store.Kind, id string, rev int64) {
	t.add(store.Op{Kind: k, Key: id, Check: rev != Pending, IfRevision: rev}, nil)
}

// Encoding buffers: a record goes into the current chunk while encodeSlack
// is left, else into a new one twice as large (up to maxEncodeChunk).
// Encodings need not be contiguous, so a full chunk is never copied.
const (
	encodeSlack    = 4 << 10
	maxEncodeChunk = 256 << 10
)

// Encode appends an encoding with fill to the batch's shared buffer and
// returns it, so a batch of many records allocates a few large buffers.
func (t *Tx) Encode(fill func(b []byte) []byte) []byte {
	if cap(t.buf)-len(t.buf) < encodeSlack {
		size := min(max(2*cap(t.buf), 2*encodeSlack), maxEncodeChunk)
		if t.buf = t.spare().chunk(); t.buf == nil {
			t.buf = make([]byte, 0, size)
		}
		t.chunks = append(t.chunks, t.buf)
	}
	start := len(t.buf)
	t.buf = fill(t.buf)
	return t.buf[start:len(t.buf):len(t.buf)]
}

// Answer sets the revision the write answers if it writes nothing.
func (t *Tx) Answer(rev int64) { t.answer = rev }

// Depend says that the current write decided on what an earlier write of
// the batch did (the scheduler's batch transaction, which the registry
// does not see): in a cluster, where that write may fail its condition,
// it is carried to the next batch (commit). Elsewhere it does nothing.
func (t *Tx) Depend() {
	if t.e.shared {
		t.dep = true
	}
}

// AnswerLater sets a revision the write answers, if it writes nothing,
// that is known only once the writes it rests on are applied: a record
// Get reported Pending gets its revision then. fn runs after the request
// is answered, on the submitter's goroutine; the answer is the larger of
// fn's and Answer's.
func (t *Tx) AnswerLater(fn func() int64) { t.later = fn }

// Volatile marks the current write as not needing an fsync (state that is
// judged again after a crash, such as health).
func (t *Tx) Volatile() { t.volatile = true }

// Revision is the catalog's revision.
func (t *Tx) Revision() int64 { return t.e.cat.Revision() }

// Shared reports whether other servers write the same store (a cluster):
// then what Get reports may be behind what is stored, and a write whose
// outcome depends on it must be conditional (PutIf, DeleteIf) and go
// through SubmitChecked.
func (t *Tx) Shared() bool { return t.e.shared }
