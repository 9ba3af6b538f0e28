// Package robustness checks what the registry promises under concurrent
// clients and faults, as etcd's tests/robustness does for etcd: real
// `sextant server` processes, clients that record every operation with its
// call and return time, fault injectors (kill -9, a database cut or stall
// through a proxy, a slow follower), and a checker that decides whether the
// recorded history is one the documented contract allows
// (docs/robustness.md).
//
// It owns the model of that contract and the checks; it owns no server
// code: everything goes through the HTTP API, as an outside client would.
package robustness

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is what an operation does.
type Kind uint8

const (
	Register   Kind = iota // POST /v1/instances, one instance
	Deregister             // DELETE /v1/instances/{id}
	Get                    // GET /v1/instances/{id}
	List                   // GET /v1/namespaces/default/services/{service}/instances
)

func (k Kind) String() string {
	if k == applied {
		return "applied"
	}
	return [...]string{"register", "deregister", "get", "list"}[k]
}

// Status is how an operation ended.
type Status uint8

const (
	OK       Status = iota // 2xx
	NotFound               // 404
	// Unknown: the answer was lost (a timeout, a killed server, a 503 that
	// says the write may or may not be stored). A write of unknown outcome
	// may take effect at any time after its call, or never.
	Unknown
)

func (s Status) String() string { return [...]string{"ok", "not_found", "unknown"}[s] }

// Seen is one instance as a read answered it.
type Seen struct {
	ID    string
	Value string // the instance's fields, as fingerprinted by the client (metadata "v")
	Rev   int64  // its revision
}

// Op is one recorded operation.
type Op struct {
	Client int
	Server int
	Kind   Kind
	ID     string // register, deregister, get
	// Service is the service of ID (every id belongs to one service for a
	// whole run), or the service listed.
	Service string
	// Value is what a register writes (metadata "v"); Fresh says no register
	// ever wrote it before, so the register changes something by
	// construction.
	Value string
	Fresh bool

	// Call and Return are times since the history's start. Of an operation
	// of unknown outcome, Return is when the client gave up; it bounds the
	// operation only if Bounded.
	Call, Return time.Duration
	Status       Status
	// Bounded: an operation of unknown outcome took effect before Return or
	// never (the connection broke because the server died, and a server on
	// the embedded store writes nothing once dead).
	Bounded bool
	// Inferred: an operation of unknown outcome that the change feed shows
	// took effect, at Rev, before Return (when it was first seen); see
	// settle.
	Inferred bool
	Rev      int64  // a write's answered revision; a list's revision
	Seen     []Seen // get (at most one) and list: what the read found
}

func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "c%d s%d %s", o.Client, o.Server, o.Kind)
	switch o.Kind {
	case applied:
		return fmt.Sprintf("c%d s%d has applied its write of %s at rev %d (answered at %.3fms)", o.Client, o.Server, o.ID, o.Rev, float64(o.Return-1)/1e6)
	case Register:
		fmt.Fprintf(&b, " %s=%s", o.ID, o.Value)
		if !o.Fresh {
			b.WriteString(" (again)")
		}
	case List:
		fmt.Fprintf(&b, " %s", o.Service)
	default:
		fmt.Fprintf(&b, " %s", o.ID)
	}
	ret := "?"
	if o.Status != Unknown || o.Bounded {
		ret = fmt.Sprintf("%.3fms", float64(o.Return)/1e6)
	}
	fmt.Fprintf(&b, " [%.3fms, %s] -> %s", float64(o.Call)/1e6, ret, o.Status)
	if o.Kind == Register || o.Kind == Deregister {
		if o.Status == OK {
			fmt.Fprintf(&b, " rev %d", o.Rev)
		}
		if o.Inferred {
			b.WriteString(" (answer lost; inferred from the change feed)")
		}
	} else if o.Status == OK {
		var seen []string
		for _, s := range o.Seen {
			seen = append(seen, fmt.Sprintf("%s=%s@%d", s.ID, s.Value, s.Rev))
		}
		fmt.Fprintf(&b, " {%s}", strings.Join(seen, " "))
	}
	return b.String()
}

// FeedPage is one answer of GET /v1/changes.
type FeedPage struct {
	Client       int
	Server       int
	Call, Return time.Duration
	Since, Rev   int64 // the request's since; the revision the answer caught up to
	More         bool
	Changes      []Change
	// Reset: the server answered 410 (its history starts later, after a
	// restart): this reader's feed is not whole any more.
	Reset bool
	// Follower: read by a client that follows the feed page after page
	// (Client.Follow), not a single read.
	Follower bool
}

// Change is one entry of the change feed.
type Change struct {
	Rev    int64
	Delete bool
	ID     string
	Value  string // upserts: metadata "v"
}

// History records operations from many goroutines.
type History struct {
	start time.Time

	mu      sync.Mutex
	ops     []Op
	pages   []FeedPage
	outside []string
}

// Outside records an answer the contract does not give to its request.
func (h *History) Outside(what string) {
	h.mu.Lock()
	h.outside = append(h.outside, what)
	h.mu.Unlock()
}

// NewHistory starts the clock of a history.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the history started, on the monotonic clock.
func (h *History) Now() time.Duration { return time.Since(h.start) }

// Add records a finished (or lost) operation.
func (h *History) Add(o Op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// AddPage records an answer of the change feed.
func (h *History) AddPage(p FeedPage) {
	h.mu.Lock()
	h.pages = append(h.pages, p)
	h.mu.Unlock()
}

// Ops is a copy of the operations, by call time.
func (h *History) Ops() []Op {
	h.mu.Lock()
	ops := append([]Op(nil), h.ops...)
	h.mu.Unlock()
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// Pages is a copy of the change feed's answers, by call time.
func (h *History) Pages() []FeedPage {
	h.mu.Lock()
	pages := append([]FeedPage(nil), h.pages...)
	h.mu.Unlock()
	sort.SliceStable(pages, func(i, j int) bool { return pages[i].Call < pages[j].Call })
	return pages
}

// returned is when o returned, or never for an operation of unknown
// outcome that is not bounded (it may take effect after everything else).
func returned(o Op) time.Duration {
	if o.Status == Unknown && !o.Bounded {
		return math.MaxInt64
	}
	return o.Return
}
