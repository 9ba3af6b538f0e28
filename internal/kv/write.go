package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
)

// ErrNotStarted is returned by writes before Start.
var ErrNotStarted = errors.New("kv: not started")

// Store is the KV kind: its table, and its writes through the write engine.
type Store struct {
	t   *Table
	eng *commit.Engine
}

// New returns the kind with an empty table: register Table() with the
// write engine, then Start the kind with it.
func New() *Store { return &Store{t: NewTable()} }

// Table is the kind's catalog table.
func (s *Store) Table() *Table { return s.t }

// Start gives the kind the engine it writes through (opened with Table).
func (s *Store) Start(eng *commit.Engine) { s.eng = eng }

// Engine is the write engine (for its catalog's waiters and change log).
func (s *Store) Engine() *commit.Engine { return s.eng }

// Put is one write of a key.
type Put struct {
	Namespace string
	Key       string
	Value     []byte
	Flags     uint64
	// CAS, when set, makes the put conditional on the key's ModifyIndex:
	// 0 means the key must not exist (Consul's ?cas=0).
	CAS *int64
	// Acquire, when set, is the session that locks the key with this put
	// (Consul's ?acquire): written only if the key is free or held by that
	// session already, the session is valid and the key's lock delay is
	// over. Release is the session that unlocks it (?release): written
	// only if it holds the key.
	Acquire, Release string
}

// Put writes p and reports whether it was written (false: its CAS did
// not hold) and the revision the answer reflects.
func (s *Store) Put(ctx context.Context, p Put) (bool, int64, error) {
	if s.eng == nil {
		return false, 0, ErrNotStarted
	}
	if err := CheckKey(p.Key); err != nil {
		return false, 0, err
	}
	if err := CheckValue(p.Value); err != nil {
		return false, 0, err
	}
	w := &putWrite{p: p}
	rev, err := s.eng.SubmitChecked(ctx, w)
	return w.ok, rev, err
}

// putWrite plans a Put: conditional on the revision it read, so that in a
// cluster another server's write in between fails it and SubmitChecked
// decides it again on what is stored.
type putWrite struct {
	p  Put
	ok bool
}

func (w *putWrite) Plan(tx *commit.Tx) error {
	w.ok = false
	id := ID(w.p.Namespace, w.p.Key)
	v, rev := tx.Get(store.KV, id)
	old, _ := v.(*Entry)
	if w.p.CAS != nil {
		// A key written earlier in this batch (or one in flight) has no
		// index yet: no index a client holds names it.
		held := *w.p.CAS != 0 && old != nil && rev != commit.Pending && rev == *w.p.CAS
		if *w.p.CAS == 0 {
			held = old == nil
		}
		if !held {
			tx.Answer(tx.Revision())
			return nil
		}
	}
	e := &Entry{Namespace: w.p.Namespace, Key: w.p.Key, Value: w.p.Value, Flags: w.p.Flags}
	if old != nil {
		// Locks are kept across a plain put, as Consul keeps them.
		e.LockIndex, e.Session = old.LockIndex, old.Session
	}
	switch {
	case w.p.Acquire != "":
		sid := w.p.Acquire
		sv, srev := tx.Get(store.KV, sessionRecord(w.p.Namespace, sid))
		s := sessionOf(sv)
		if s == nil || s.expired(tx.Now()) {
			return fmt.Errorf("%w: %q (acquire)", ErrNoSession, sid)
		}
		if (old != nil && old.Session != "" && old.Session != sid) || lockDelayed(tx, w.p.Namespace, w.p.Key, tx.Now()) {
			tx.Answer(tx.Revision())
			return nil
		}
		if e.Session != sid {
			e.Session = sid
			e.LockIndex++
		}
		// The session is rewritten as it is, on condition that it is
		// unchanged: an invalidation committed meanwhile (another server's)
		// fails this acquire, so no key is left held by a session gone.
		se := *sv.(*Entry)
		se.created = createdOf(sv, srev)
		tx.PutIf(store.KV, se.ID(), se.encode(), &se, srev)
	case w.p.Release != "":
		if old == nil || old.Session != w.p.Release {
			tx.Answer(tx.Revision())
			return nil
		}
		e.Session = ""
	}
	if old != nil {
		// An entry not yet applied is still being completed by the
		// follower (Adopt): read only what its writer set.
		e.created = old.created
		if rev != commit.Pending {
			e.created = old.CreateIndex
		}
	}
	tx.PutIf(store.KV, id, e.encode(), e, rev)
	w.ok = true
	return nil
}

// Delete deletes key (every key under it if recurse) of namespace ns;
// with cas, only if the key's ModifyIndex is *cas. It reports whether it
// deleted (a missing key is deleted: true, as Consul answers).
func (s *Store) Delete(ctx context.Context, ns, key string, recurse bool, cas *int64) (bool, int64, error) {
	if s.eng == nil {
		return false, 0, ErrNotStarted
	}
	if !recurse {
		if err := CheckKey(key); err != nil {
			return false, 0, err
		}
	}
	w := &deleteWrite{t: s.t, ns: ns, key: key, recurse: recurse, cas: cas}
	rev, err := s.eng.SubmitChecked(ctx, w)
	return w.ok, rev, err
}

type deleteWrite struct {
	t       *Table
	ns, key string
	recurse bool
	cas     *int64
	ok      bool
}

func (w *deleteWrite) Plan(tx *commit.Tx) error {
	w.ok = false
	tx.Answer(tx.Revision())
	if !w.recurse {
		id := ID(w.ns, w.key)
		v, rev := tx.Get(store.KV, id)
		if w.cas != nil && (v == nil || rev == commit.Pending || rev != *w.cas) {
			// Consul: cas=0 on a missing key deletes nothing and fails.
			return nil
		}
		w.ok = true
		if v != nil {
			tx.DeleteIf(store.KV, id, rev)
		}
		return nil
	}
	// The keys under the prefix as the catalog holds them, each deleted on
	// condition that it is unchanged. Keys created under it by writes of
	// the same batch, planned before this one, are not seen.
	w.ok = true
	var ids []string
	w.t.List(w.ns, w.key, func(e *Entry) bool {
		ids = append(ids, e.ID())
		return true
	})
	if len(ids) > maxDeleteTree {
		return fmt.Errorf("%w: %d keys under %q; a recursive delete takes at most %d at once (delete sub-prefixes first)", ErrInvalid, len(ids), w.key, maxDeleteTree)
	}
	tx.Reserve(len(ids))
	for _, id := range ids {
		if v, rev := tx.Get(store.KV, id); v != nil {
			tx.DeleteIf(store.KV, id, rev)
		}
	}
	return nil
}

// maxDeleteTree bounds a recursive delete: it is one store transaction.
const maxDeleteTree = 100000
