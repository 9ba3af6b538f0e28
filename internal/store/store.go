// Package store defines Sextant's durable records and what every backend
// (embedded/, and MySQL next) guarantees about them. Records live in key
// spaces by kind, like etcd's buckets; every commit, whatever kinds it
// touches, takes revisions from one sequence in the backend's commit order.
// A backend keeps opaque values: it knows nothing of what a record means,
// only its kind, its key, its value and the revision of its last put.
//
// The store is also the one stream of changes: Follow yields every committed
// transaction after a revision, in order, so that a catalog is fed from what
// the store committed (its own writes and, in cluster mode, other servers')
// rather than from the write path.
package store

import (
	"context"
	"errors"
	"fmt"
)

// Kind names a key space. Its byte is the key prefix in the embedded store
// and the kind column of a SQL backend; never renumber a kind.
type Kind byte

// The kinds of record. A new kind adds a constant here, an applier in the
// registry and a table in the catalog (docs/registry.md, "Adding a kind").
const (
	Instances  Kind = 'i' // registry instances, keyed by id
	Config     Kind = 'c' // routing config (VirtualService, DestinationRule)
	Nodes      Kind = 'n' // scheduler nodes, keyed by name
	Placements Kind = 'p' // scheduler placements, keyed by namespace/name
	Tokens     Kind = 't' // ACL tokens, keyed by accessor
	Policies   Kind = 'o' // ACL policies, keyed by name
	System     Kind = 's' // one-off server records (ACL bootstrap, ...)
	Secrets    Kind = 'x' // TLS secrets (internal/secret), keyed by namespace/name
	KV         Kind = 'k' // Consul KV entries (internal/kv), keyed by namespace/key
)

// kindNames is indexed by kind: Valid is asked for every op of a commit.
var kindNames = [256]string{
	Instances: "instances", Config: "config", Nodes: "nodes", Placements: "placements",
	Tokens: "tokens", Policies: "policies", System: "system", Secrets: "secrets", KV: "kv",
}

func (k Kind) String() string {
	if n := kindNames[k]; n != "" {
		return n
	}
	return fmt.Sprintf("kind(%q)", byte(k))
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return kindNames[k] != "" }

// Kinds lists every known kind.
func Kinds() []Kind {
	return []Kind{Instances, Config, Nodes, Placements, Tokens, Policies, System, Secrets, KV}
}

// Op is one change to a record: a put when Value is non-nil, else a delete.
// A backend copies what it keeps of Value before Commit returns, and a
// follower in the writer's process reads Object when it is set and keeps
// nothing of Value past applying the change: the writer may then reuse
// Value's memory (the registry reuses its encoding buffers).
type Op struct {
	Kind  Kind
	Key   string
	Value []byte

	// Check makes the op conditional: its transaction commits only if the
	// record's stored revision is IfRevision at commit time (0: the record
	// must be absent). Writes that depend on what is stored (create only if
	// absent, replace only if unchanged) say so here, so that the store
	// checks them against every writer, not only against one server's view.
	Check      bool
	IfRevision int64

	// Object is the writer's decoded form of Value, handed unchanged to
	// followers in the same process so that they need not decode what was
	// just encoded. It is never stored; followers of other processes see
	// nil and decode Value.
	Object any
	// Absent is the writer's word, with Object, that the record did not
	// exist before this op: it was the only writer and planned against
	// every earlier commit. Followers in the same process may then skip
	// looking for it. Never stored; false is always safe.
	Absent bool
}

// Txn is the ops of one write request: atomic, and given one revision when
// it commits. An empty Txn takes no revision.
type Txn struct {
	Ops []Op
}

// Result is the outcome of one Txn of a commit: its revision, or the
// conflict (wrapping ErrConflict) that kept it out. A Txn that fails its
// checks writes nothing and takes no revision; the others of the commit go
// on, so one request's conflict never fails its neighbours.
type Result struct {
	Revision int64
	Err      error
}

// Record is a stored record: its kind, key, the revision of its last put
// and the value as put.
type Record struct {
	Kind     Kind
	Key      string
	Revision int64
	Value    []byte
}

// Change is one committed transaction as Follow yields it.
type Change struct {
	Revision int64
	Ops      []Op
	// Time is when the backend committed it (unix nanoseconds): push
	// latency is measured from it.
	Time int64
}

// Feed is a position in the store's stream of changes.
type Feed interface {
	// Next returns the next committed changes, in revision order, waiting
	// until there is at least one or ctx ends. ErrCompacted if the store no
	// longer holds the changes after the feed's position: the follower must
	// Load in full and follow again from the revision it loaded. Called from
	// one goroutine at a time.
	Next(ctx context.Context) ([]Change, error)
	// Close releases the feed's position, so the store need not keep what
	// it has not read.
	Close()
}

var (
	// ErrClosed is returned by a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrConflict is wrapped by the error of a Txn whose checks failed.
	ErrConflict = errors.New("store: conflict")
	// ErrCompacted is returned by Follow and Feed.Next for a revision
	// older than the history the store keeps.
	ErrCompacted = errors.New("store: required revision has been compacted")
	// ErrUnavailable is wrapped by the errors of a store that cannot reach
	// its backend (a database over the network): the operation may be
	// retried once it is back. A commit that fails with it was not
	// acknowledged; it may or may not have been written, and followers see
	// it if it was.
	ErrUnavailable = errors.New("store: unavailable")
)

// ConflictError names the op whose check failed.
type ConflictError struct {
	Kind Kind
	Key  string
	Want int64 // the revision the op required (0: absent)
	Have int64 // the revision stored (0: absent)
}

func (e *ConflictError) Error() string {
	switch {
	case e.Want == 0:
		return fmt.Sprintf("store: conflict: %s %q exists (revision %d)", e.Kind, e.Key, e.Have)
	case e.Have == 0:
		return fmt.Sprintf("store: conflict: %s %q does not exist", e.Kind, e.Key)
	}
	return fmt.Sprintf("store: conflict: %s %q is at revision %d, not %d", e.Kind, e.Key, e.Have, e.Want)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }
