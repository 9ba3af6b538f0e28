package kv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Consul's sessions are kept in the KV kind's own table, under namespaces
// no Sextant namespace can be named (a name starts with a letter or
// digit), so they are durable, shared by the servers of a cluster over the
// same store, and an acquire or an invalidation decides on the session and
// the keys it holds in one conditional transaction:
//   - sessionNS/<namespace>/<id>: the session (its JSON in the entry's
//     value), of the namespace whose keys it locks;
//   - lockDelayNS/<hash of namespace/key>: the time until which a key
//     whose holder was invalidated cannot be acquired (8 bytes, Unix ns).
const (
	sessionNS   = "~session"
	lockDelayNS = "~lockdelay"
)

// Session limits, as Consul's defaults.
const (
	// MinSessionTTL is Consul's default session_ttl_min; FloorSessionTTL
	// the least a server may be configured to take (CheckSession's minTTL).
	MinSessionTTL    = 10 * time.Second
	FloorSessionTTL  = time.Second
	MaxSessionTTL    = 86400 * time.Second
	DefaultLockDelay = 15 * time.Second
	// MaxLockDelay is Consul's bound on a session's lock delay.
	MaxLockDelay = 60 * time.Second
	// ttlMultiplier: Consul invalidates a session not renewed within
	// twice its TTL.
	ttlMultiplier = 2
)

// Session behaviours on invalidation.
const (
	BehaviorRelease = "release"
	BehaviorDelete  = "delete"
)

var (
	// ErrNoSession is wrapped by the error of an acquire or release naming
	// a session that does not exist or has expired.
	ErrNoSession = errors.New("kv: no such session")
	// errBusy: the session was written earlier in the batch; its
	// invalidation is decided again once that write is applied.
	errBusy = errors.New("kv: session written in this batch")
)

// Session is one Consul session.
type Session struct {
	Namespace string `json:"-"`
	ID        string `json:"-"`
	Name      string
	Node      string
	Behavior  string
	TTL       time.Duration // 0: no TTL (invalidated only by destroy)
	// TTLText is the TTL as the client wrote it, which Consul answers.
	TTLText       string `json:",omitempty"`
	LockDelay     time.Duration
	NodeChecks    []string `json:",omitempty"`
	ServiceChecks []string `json:",omitempty"`
	// Expires is when it is invalidated unless renewed (Unix ns; 0 with no
	// TTL): twice its TTL after its creation or last renewal.
	Expires int64

	CreateIndex int64 `json:"-"`
	ModifyIndex int64 `json:"-"`
}

func (s *Session) entry() *Entry {
	v, _ := json.Marshal(s) // plain fields: cannot fail
	return &Entry{Namespace: sessionNS, Key: sessionKey(s.Namespace, s.ID), Value: v, created: s.CreateIndex}
}

// sessionKey is the key, in sessionNS, of session id of namespace ns.
func sessionKey(ns, id string) string { return ns + "/" + id }

// SessionsWatch is where the sessions of namespace ns are in the table:
// the namespace and key prefix a watch of them follows.
func SessionsWatch(ns string) (tableNS, prefix string) { return sessionNS, ns + "/" }

// sessionRecord is the record id of session id of namespace ns.
func sessionRecord(ns, id string) string {
	return ID(sessionNS, sessionKey(ns, id))
}

// sessionOf decodes the session record e, nil if it is not one.
func sessionOf(v any) *Session {
	e, ok := v.(*Entry)
	if !ok || e == nil || e.Namespace != sessionNS {
		return nil
	}
	ns, id, ok := strings.Cut(e.Key, "/")
	s := &Session{}
	if !ok || json.Unmarshal(e.Value, s) != nil {
		return nil
	}
	s.Namespace, s.ID, s.CreateIndex, s.ModifyIndex = ns, id, e.CreateIndex, e.ModifyIndex
	return s
}

// expired reports whether s is past its deadline at now.
func (s *Session) expired(now time.Time) bool { return s.Expires != 0 && now.UnixNano() >= s.Expires }

func newSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// CheckSession reports why s cannot be created with a TTL of at least
// minTTL (MinSessionTTL if 0; never under FloorSessionTTL), or nil.
func CheckSession(s *Session, minTTL time.Duration) error {
	if minTTL == 0 {
		minTTL = MinSessionTTL
	}
	minTTL = max(minTTL, FloorSessionTTL)
	switch {
	case s.TTL != 0 && (s.TTL < minTTL || s.TTL > MaxSessionTTL):
		return fmt.Errorf("%w: session TTL %v: must be between %v and %v", ErrInvalid, s.TTL, minTTL, MaxSessionTTL)
	case s.Behavior != BehaviorRelease && s.Behavior != BehaviorDelete:
		return fmt.Errorf("%w: session behavior %q: must be %q or %q", ErrInvalid, s.Behavior, BehaviorRelease, BehaviorDelete)
	case s.LockDelay < 0 || s.LockDelay > MaxLockDelay:
		return fmt.Errorf("%w: session lock delay %v: must be between 0 and %v", ErrInvalid, s.LockDelay, MaxLockDelay)
	case len(s.Name) > 1024 || len(s.Node) > 1024:
		return fmt.Errorf("%w: session name or node over 1024 bytes", ErrInvalid)
	}
	return nil
}

// CreateSession stores s (its ID is set here) and returns it.
func (st *Store) CreateSession(ctx context.Context, s Session) (*Session, error) {
	if st.eng == nil {
		return nil, ErrNotStarted
	}
	if s.Behavior == "" {
		s.Behavior = BehaviorRelease
	}
	// The API checked the TTL against its own minimum.
	if err := CheckSession(&s, FloorSessionTTL); err != nil {
		return nil, err
	}
	s.ID = newSessionID()
	w := &sessionWrite{fn: func(tx *commit.Tx) error {
		if s.TTL != 0 {
			s.Expires = tx.Now().Add(ttlMultiplier * s.TTL).UnixNano()
		}
		e := s.entry()
		tx.PutIf(store.KV, e.ID(), e.encode(), e, 0)
		return nil
	}}
	if _, err := st.eng.SubmitChecked(ctx, w); err != nil {
		return nil, err
	}
	return st.Session(s.Namespace, s.ID), nil
}

// sessionWrite is a write planned by fn.
type sessionWrite struct{ fn func(tx *commit.Tx) error }

func (w *sessionWrite) Plan(tx *commit.Tx) error { return w.fn(tx) }

// Session returns session id of namespace ns, or nil.
func (st *Store) Session(ns, id string) *Session {
	return sessionOf(st.t.Get(sessionNS, sessionKey(ns, id)))
}

// Sessions calls fn for each session of namespace ns (every namespace's
// if ns is ""), in ID order.
func (st *Store) Sessions(ns string, fn func(*Session) bool) {
	prefix := ""
	if ns != "" {
		prefix = ns + "/"
	}
	st.t.List(sessionNS, prefix, func(e *Entry) bool {
		if s := sessionOf(e); s != nil {
			return fn(s)
		}
		return true
	})
}

// RenewSession moves session id's deadline to twice its TTL from now and
// returns it, or nil if it does not exist (or has expired).
func (st *Store) RenewSession(ctx context.Context, ns, id string) (*Session, error) {
	if st.eng == nil {
		return nil, ErrNotStarted
	}
	found := false
	w := &sessionWrite{fn: func(tx *commit.Tx) error {
		found = false
		tx.Answer(tx.Revision())
		v, rev := tx.Get(store.KV, sessionRecord(ns, id))
		s := sessionOf(v)
		if s == nil || s.expired(tx.Now()) {
			return nil
		}
		found = true
		if s.TTL == 0 {
			return nil
		}
		s.Expires = tx.Now().Add(ttlMultiplier * s.TTL).UnixNano()
		e := s.entry()
		e.created = createdOf(v, rev)
		tx.PutIf(store.KV, e.ID(), e.encode(), e, rev)
		return nil
	}}
	if _, err := st.eng.SubmitChecked(ctx, w); err != nil || !found {
		return nil, err
	}
	return st.Session(ns, id), nil
}

// createdOf is the create index to store for a rewrite of v (read at rev).
func createdOf(v any, rev int64) int64 {
	e := v.(*Entry)
	if rev == commit.Pending {
		return e.created
	}
	return e.CreateIndex
}

// DestroySession invalidates session id: its keys are released or deleted
// (its Behavior) and cannot be acquired for its LockDelay. It reports
// whether the session existed.
func (st *Store) DestroySession(ctx context.Context, ns, id string) (bool, error) {
	return st.invalidate(ctx, ns, id, false)
}

func (st *Store) invalidate(ctx context.Context, ns, id string, onlyExpired bool) (bool, error) {
	if st.eng == nil {
		return false, ErrNotStarted
	}
	// A session written in the batch being planned is decided once that
	// batch is applied: a few tries, each after a commit.
	for try := 0; ; try++ {
		w := &invalidateWrite{t: st.t, ns: ns, id: id, onlyExpired: onlyExpired}
		_, err := st.eng.SubmitChecked(ctx, w)
		if errors.Is(err, errBusy) && try < 20 {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(time.Duration(try+1) * 5 * time.Millisecond):
			}
			continue
		}
		return w.found, err
	}
}

type invalidateWrite struct {
	t           *Table
	ns, id      string
	onlyExpired bool
	found       bool
}

func (w *invalidateWrite) Plan(tx *commit.Tx) error {
	w.found = false
	tx.Answer(tx.Revision())
	v, rev := tx.Get(store.KV, sessionRecord(w.ns, w.id))
	s := sessionOf(v)
	if s == nil {
		return nil
	}
	if rev == commit.Pending {
		return errBusy
	}
	if w.onlyExpired && !s.expired(tx.Now()) {
		return nil // renewed meanwhile
	}
	w.found = true
	tx.DeleteIf(store.KV, sessionRecord(w.ns, w.id), rev)
	// The keys it holds, as the catalog holds them; an acquire by it in
	// flight rewrote the session on condition, and fails on this delete.
	var held []*Entry
	w.t.Held(w.ns, w.id, func(e *Entry) { held = append(held, e) })
	until := tx.Now().Add(s.LockDelay).UnixNano()
	for _, e := range held {
		cur, crev := tx.Get(store.KV, e.ID())
		ce, _ := cur.(*Entry)
		if ce == nil || ce.Session != w.id {
			continue
		}
		if s.LockDelay > 0 {
			d := lockDelayEntry(e.Namespace, e.Key, until)
			dv, drev := tx.Get(store.KV, d.ID())
			if dv == nil {
				drev = 0
			}
			tx.PutIf(store.KV, d.ID(), d.encode(), d, drev)
		}
		if s.Behavior == BehaviorDelete {
			tx.DeleteIf(store.KV, e.ID(), crev)
			continue
		}
		n := *ce
		n.Session = ""
		n.created = createdOf(cur, crev)
		tx.PutIf(store.KV, n.ID(), n.encode(), &n, crev)
	}
	return nil
}

func lockDelayKey(ns, key string) string {
	h := sha256.Sum256([]byte(ID(ns, key)))
	return hex.EncodeToString(h[:16])
}

func lockDelayEntry(ns, key string, until int64) *Entry {
	return &Entry{Namespace: lockDelayNS, Key: lockDelayKey(ns, key), Value: binary.BigEndian.AppendUint64(nil, uint64(until))}
}

// lockDelayed reports whether key of ns is in a lock delay at now.
func lockDelayed(tx *commit.Tx, ns, key string, now time.Time) bool {
	v, _ := tx.Get(store.KV, ID(lockDelayNS, lockDelayKey(ns, key)))
	e, ok := v.(*Entry)
	return ok && len(e.Value) == 8 && int64(binary.BigEndian.Uint64(e.Value)) > now.UnixNano()
}

// RunSessions invalidates the sessions past their deadline, and forgets
// lock delays past theirs, every tick until ctx ends. Every server of a
// cluster may run it: each invalidation is conditional, so one wins.
func (st *Store) RunSessions(ctx context.Context, tick time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := time.Now()
		var expired []*Session
		st.Sessions("", func(s *Session) bool {
			if s.expired(now) {
				expired = append(expired, s)
			}
			return true
		})
		for _, s := range expired {
			if _, err := st.invalidate(ctx, s.Namespace, s.ID, true); err != nil && ctx.Err() == nil {
				log.Warn("invalidating an expired session", "namespace", s.Namespace, "session", s.ID, "err", err)
			}
		}
		type staleDelay struct {
			key string
			rev int64 // the delay read: a newer one is kept
		}
		var stale []staleDelay
		st.t.List(lockDelayNS, "", func(e *Entry) bool {
			if len(e.Value) != 8 || int64(binary.BigEndian.Uint64(e.Value)) <= now.UnixNano() {
				stale = append(stale, staleDelay{e.Key, e.ModifyIndex})
			}
			return true
		})
		if len(stale) > 0 {
			w := &sessionWrite{fn: func(tx *commit.Tx) error {
				for _, d := range stale {
					// Only the delay listed: an invalidation may have
					// written a fresh one since, which must hold.
					if v, rev := tx.Get(store.KV, ID(lockDelayNS, d.key)); v != nil && rev == d.rev {
						tx.DeleteIf(store.KV, ID(lockDelayNS, d.key), rev)
					}
				}
				return nil
			}}
			// A lost race (another server's delete or a new delay) is
			// decided again next tick.
			st.eng.Submit(ctx, w)
		}
	}
}

// Held calls fn for each entry of namespace ns held by session id. It
// walks the namespace's keys: an invalidation costs O(keys), which a
// per-session index would save.
func (t *Table) Held(ns, id string, fn func(*Entry)) {
	t.List(ns, "", func(e *Entry) bool {
		if e.Session == id {
			fn(e)
		}
		return true
	})
}
