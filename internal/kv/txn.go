package kv

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Consul's transaction verbs on keys (PUT /v1/txn).
const (
	VerbSet            = "set"
	VerbCAS            = "cas"
	VerbLock           = "lock"
	VerbUnlock         = "unlock"
	VerbGet            = "get"
	VerbGetTree        = "get-tree"
	VerbCheckIndex     = "check-index"
	VerbCheckSession   = "check-session"
	VerbCheckNotExists = "check-not-exists"
	VerbDelete         = "delete"
	VerbDeleteTree     = "delete-tree"
	VerbDeleteCAS      = "delete-cas"
)

// MaxTxnOps is how many operations one transaction may hold (Consul's
// limit of 128 under its default request size).
const MaxTxnOps = 128

// TxnOp is one operation of a transaction on the keys of one namespace.
type TxnOp struct {
	Verb    string
	Key     string
	Value   []byte
	Flags   uint64
	Index   int64
	Session string
}

// TxnResult is what an operation answers: the entry it read or wrote
// (writes answer it without its value, as Consul does). An entry written
// by the transaction has the transaction's revision as ModifyIndex.
type TxnResult struct {
	Entry *Entry
	// Op is the index, in the transaction's operations, of the one that
	// answered it (get-tree answers several).
	Op int
	// written: the entry is the transaction's write; its indexes are
	// filled in once committed.
	written bool
}

// TxnError is the refusal of one operation: the transaction wrote
// nothing.
type TxnError struct {
	OpIndex int
	What    string
}

// CheckTxn reports why ops cannot be run, or nil: too many, an unknown
// verb, a bad key or value. It is the part of a transaction's checks that
// does not read the store.
func CheckTxn(ops []TxnOp) error {
	if len(ops) > MaxTxnOps {
		return fmt.Errorf("%w: transaction contains too many operations (%d > %d)", ErrInvalid, len(ops), MaxTxnOps)
	}
	for i, op := range ops {
		switch op.Verb {
		case VerbGetTree, VerbDeleteTree:
			if len(op.Key) > MaxKeyLen {
				return fmt.Errorf("%w: operation %d: key is %d bytes; at most %d", ErrInvalid, i, len(op.Key), MaxKeyLen)
			}
		case VerbSet, VerbCAS, VerbLock, VerbUnlock, VerbGet, VerbCheckIndex, VerbCheckSession, VerbCheckNotExists, VerbDelete, VerbDeleteCAS:
			if err := CheckKey(op.Key); err != nil {
				return fmt.Errorf("operation %d: %w", i, err)
			}
		default:
			return fmt.Errorf("%w: operation %d: unknown KV verb %q", ErrInvalid, i, op.Verb)
		}
		if err := CheckValue(op.Value); err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
		if len(op.Session) > MaxSessionLen {
			return fmt.Errorf("%w: operation %d: session of %d bytes", ErrInvalid, i, len(op.Session))
		}
	}
	return nil
}

// Txn runs ops on the keys of namespace ns all or nothing, in one store
// write: every operation is decided on the state the earlier ones left;
// if any fails, nothing is written and every failure is returned (as
// Consul lists them). It returns the results (nil on failure) and the
// revision the answer reflects.
func (st *Store) Txn(ctx context.Context, ns string, ops []TxnOp) ([]TxnResult, []TxnError, int64, error) {
	if st.eng == nil {
		return nil, nil, 0, ErrNotStarted
	}
	if err := CheckTxn(ops); err != nil {
		return nil, nil, 0, err
	}
	w := &txnWrite{t: st.t, ns: ns, ops: ops}
	rev, err := st.eng.SubmitChecked(ctx, w)
	if err != nil {
		return nil, nil, 0, err
	}
	if len(w.errs) > 0 {
		return nil, w.errs, rev, nil
	}
	return w.applied(), nil, rev, nil
}

// applied are the results with the indexes of what the transaction
// wrote, once it is applied.
func (w *txnWrite) applied() []TxnResult {
	for i := range w.results {
		r := &w.results[i]
		if !r.written {
			continue
		}
		e := *r.Entry
		if cur := w.t.Get(w.ns, e.Key); cur != nil {
			e.CreateIndex, e.ModifyIndex = cur.CreateIndex, cur.ModifyIndex
		}
		r.Entry = &e
	}
	return w.results
}

// TxnPlan is a transaction on keys run inside another write: a Consul
// transaction that mixes in catalog operations (internal/consulapi)
// decides its key operations with Decide in its own Plan, writes them
// with Write if nothing of it failed, and reads Results once committed.
// Each method is called from the engine's committer goroutine (Plan) or
// after the write returned; none blocks.
type TxnPlan struct{ w txnWrite }

// PlanTxn returns ops, on the keys of namespace ns, to plan inside
// another write; CheckTxn must have accepted them.
func (st *Store) PlanTxn(ns string, ops []TxnOp) *TxnPlan {
	return &TxnPlan{w: txnWrite{t: st.t, ns: ns, ops: ops}}
}

// Decide decides every operation on what tx sees, writing nothing, and
// returns the refusals (OpIndex: the index in ops).
func (p *TxnPlan) Decide(tx *commit.Tx) []TxnError {
	p.w.decide(tx)
	return p.w.errs
}

// Write adds the decided writes to tx.
func (p *TxnPlan) Write(tx *commit.Tx) error { return p.w.write(tx) }

// Results are the operations' results, with their indexes, once the
// write that planned them is applied.
func (p *TxnPlan) Results() []TxnResult { return p.w.applied() }

// txnKey is a key as the transaction has left it so far.
type txnKey struct {
	e       *Entry // nil: absent
	rev     int64  // the stored revision read first (the write's condition)
	touched bool
}

type txnWrite struct {
	t   *Table
	ns  string
	ops []TxnOp

	results []TxnResult
	errs    []TxnError

	// What decide left for write: the keys read or written, in the
	// order first met, and the sessions locks name.
	keys     map[string]*txnKey
	order    []string
	sessions map[string]bool
}

func (w *txnWrite) Plan(tx *commit.Tx) error {
	tx.Answer(tx.Revision())
	w.decide(tx)
	if len(w.errs) > 0 {
		return nil
	}
	return w.write(tx)
}

// decide decides each operation on the state the earlier ones left.
func (w *txnWrite) decide(tx *commit.Tx) {
	w.results, w.errs = nil, nil
	keys := map[string]*txnKey{}
	var order []string
	get := func(key string) *txnKey {
		if k, ok := keys[key]; ok {
			return k
		}
		v, rev := tx.Get(store.KV, ID(w.ns, key))
		e, _ := v.(*Entry)
		k := &txnKey{e: e, rev: rev}
		keys[key] = k
		order = append(order, key)
		return k
	}
	set := func(key string, e *Entry) {
		k := get(key)
		k.e, k.touched = e, true
	}
	// Sessions a lock names are rewritten unchanged on condition that they
	// are, as a single acquire does: an invalidation committed meanwhile
	// fails the transaction.
	sessions := map[string]bool{}
	fail := func(i int, format string, args ...any) {
		w.errs = append(w.errs, TxnError{OpIndex: i, What: fmt.Sprintf(format, args...)})
	}
	noValue := func(e *Entry) TxnResult {
		c := *e
		c.Value = nil
		return TxnResult{Entry: &c, written: true}
	}
	next := func(key string, op TxnOp) *Entry {
		e := &Entry{Namespace: w.ns, Key: key, Value: op.Value, Flags: op.Flags}
		if old := get(key).e; old != nil {
			e.LockIndex, e.Session = old.LockIndex, old.Session
			e.created = old.created
			if k := keys[key]; k.rev != commit.Pending && !k.touched {
				e.created = old.CreateIndex
			}
		}
		return e
	}
	// indexOf is the ModifyIndex a client may hold of a key: none for one
	// written by this transaction or by one not yet applied.
	indexOf := func(key string) int64 {
		k := get(key)
		if k.e == nil || k.touched || k.rev == commit.Pending {
			return -1
		}
		return k.rev
	}
	mark := 0
	tag := func(op int) {
		for ; mark < len(w.results); mark++ {
			w.results[mark].Op = op
		}
	}
	for i, op := range w.ops {
		tag(i - 1)
		key := op.Key
		switch op.Verb {
		case VerbSet:
			e := next(key, op)
			set(key, e)
			w.results = append(w.results, noValue(e))
		case VerbCAS:
			cur := get(key).e
			if op.Index == 0 && cur != nil || op.Index != 0 && indexOf(key) != op.Index {
				fail(i, "failed to set key %q, index is stale", key)
				continue
			}
			e := next(key, op)
			set(key, e)
			w.results = append(w.results, noValue(e))
		case VerbLock:
			if op.Session == "" {
				fail(i, "missing session")
				continue
			}
			sv, _ := tx.Get(store.KV, sessionRecord(w.ns, op.Session))
			if s := sessionOf(sv); s == nil || s.expired(tx.Now()) {
				fail(i, "invalid session %q", op.Session)
				continue
			}
			cur := get(key).e
			if cur != nil && cur.Session != "" && cur.Session != op.Session {
				fail(i, "failed to lock key %q, lock is already held", key)
				continue
			}
			if lockDelayed(tx, w.ns, key, tx.Now()) {
				fail(i, "failed to lock key %q, lock delay is in effect", key)
				continue
			}
			e := next(key, op)
			if e.Session != op.Session {
				e.Session = op.Session
				e.LockIndex++
			}
			set(key, e)
			sessions[op.Session] = true
			w.results = append(w.results, noValue(e))
		case VerbUnlock:
			cur := get(key).e
			if op.Session == "" || cur == nil || cur.Session != op.Session {
				fail(i, "failed to unlock key %q, lock isn't held, or is held by another session", key)
				continue
			}
			e := next(key, op)
			e.Session = ""
			set(key, e)
			w.results = append(w.results, noValue(e))
		case VerbGet:
			cur := get(key).e
			if cur == nil {
				fail(i, "key %q doesn't exist", key)
				continue
			}
			w.results = append(w.results, TxnResult{Entry: cur, written: get(key).touched})
		case VerbGetTree:
			for _, k := range w.tree(key, keys, get) {
				w.results = append(w.results, TxnResult{Entry: keys[k].e, written: keys[k].touched})
			}
		case VerbCheckIndex:
			cur := get(key).e
			switch {
			case cur == nil:
				fail(i, "failed to check index, key %q doesn't exist", key)
			case indexOf(key) != op.Index:
				fail(i, "failed index check for key %q, current modify index %d != %d", key, max(indexOf(key), 0), op.Index)
			default:
				w.results = append(w.results, noValue(cur))
				w.results[len(w.results)-1].written = false
			}
		case VerbCheckSession:
			cur := get(key).e
			switch {
			case cur == nil:
				fail(i, "failed to check session, key %q doesn't exist", key)
			case cur.Session != op.Session:
				fail(i, "failed session check for key %q, current session %q != %q", key, cur.Session, op.Session)
			default:
				w.results = append(w.results, noValue(cur))
				w.results[len(w.results)-1].written = get(key).touched
			}
		case VerbCheckNotExists:
			if get(key).e != nil {
				fail(i, "key %q exists", key)
			}
		case VerbDelete:
			set(key, nil)
		case VerbDeleteCAS:
			if get(key).e == nil || indexOf(key) != op.Index {
				fail(i, "failed to delete key %q, index is stale", key)
				continue
			}
			set(key, nil)
		case VerbDeleteTree:
			for _, k := range w.tree(key, keys, get) {
				set(k, nil)
			}
		}
	}
	tag(len(w.ops) - 1)
	w.keys, w.order, w.sessions = keys, order, sessions
	if len(w.errs) > 0 {
		w.results = nil
	}
}

// write adds decide's writes to tx.
func (w *txnWrite) write(tx *commit.Tx) error {
	keys, order, sessions := w.keys, w.order, w.sessions
	writes := 0
	for _, key := range order {
		if keys[key].touched {
			writes++
		}
	}
	if len(order) > maxDeleteTree {
		return fmt.Errorf("%w: the transaction touches %d keys; at most %d", ErrInvalid, len(order), maxDeleteTree)
	}
	tx.Reserve(writes + len(sessions))
	for _, key := range order {
		k := keys[key]
		if !k.touched {
			continue
		}
		id := ID(w.ns, key)
		switch {
		case k.e == nil && k.rev != 0:
			tx.DeleteIf(store.KV, id, k.rev)
		case k.e != nil:
			tx.PutIf(store.KV, id, k.e.encode(), k.e, k.rev)
		}
	}
	for sid := range sessions {
		sv, srev := tx.Get(store.KV, sessionRecord(w.ns, sid))
		se := *sv.(*Entry)
		se.created = createdOf(sv, srev)
		tx.PutIf(store.KV, se.ID(), se.encode(), &se, srev)
	}
	return nil
}

// tree are the keys under prefix as the transaction sees them: the
// table's and those it created, without those it deleted, in key order.
func (w *txnWrite) tree(prefix string, keys map[string]*txnKey, get func(string) *txnKey) []string {
	var out []string
	w.t.List(w.ns, prefix, func(e *Entry) bool {
		out = append(out, e.Key)
		return true
	})
	for k, st := range keys {
		if st.touched && strings.HasPrefix(k, prefix) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.DeleteFunc(out, func(k string) bool { return get(k).e == nil })
}
