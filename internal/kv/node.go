package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Consul's nodes registered through its catalog (PUT /v1/catalog/register,
// docs/compat.md) are records of this kind too, as sessions are: under
// nodeNS/<namespace>/<node name>, their JSON in the entry's value, durable,
// on the one revision sequence and shared by a cluster's servers. A node
// holds what Consul keeps of a node (address, tagged addresses, meta,
// locality) and the checks registered through the catalog, on the node or
// on one of its services; the services themselves are instances, which
// name their node (internal/consulapi).
const nodeNS = "~node"

// MaxNodeSize bounds a node's record (its checks included).
const MaxNodeSize = 256 * 1024

// Node is one Consul node registered through the catalog.
type Node struct {
	Namespace       string `json:"-"`
	Name            string `json:"-"`
	ID              string `json:",omitempty"`
	Address         string
	TaggedAddresses map[string]string `json:",omitempty"`
	Meta            map[string]string `json:",omitempty"`
	Locality        *Locality         `json:",omitempty"`
	Checks          []Check           `json:",omitempty"`
	// NodeIndex is the revision that last changed the node's own fields,
	// kept when a write changes only its checks (Consul's node index does
	// not move then); 0: the record's ModifyIndex.
	NodeIndex int64 `json:",omitempty"`

	CreateIndex int64 `json:"-"`
	ModifyIndex int64 `json:"-"`
}

// Index is the ModifyIndex of the node itself, its checks aside.
func (n *Node) Index() int64 {
	if n.NodeIndex != 0 {
		return n.NodeIndex
	}
	return n.ModifyIndex
}

// Locality is Consul's region and zone of a node or service.
type Locality struct {
	Region string `json:",omitempty"`
	Zone   string `json:",omitempty"`
}

// Check is a check registered through the catalog: its status is what its
// registrar last wrote (Consul's catalog runs no check), on the node
// (ServiceID empty) or on one of its services.
type Check struct {
	CheckID     string
	Name        string
	Status      string
	Notes       string `json:",omitempty"`
	Output      string `json:",omitempty"`
	ServiceID   string `json:",omitempty"`
	ServiceName string `json:",omitempty"`
	Type        string `json:",omitempty"`
	// Definition is Consul's HealthCheckDefinition as registered (its
	// JSON, normalized by internal/consulapi): kept for display, as
	// Consul's catalog keeps it; nothing runs it.
	Definition json.RawMessage `json:",omitempty"`
	// TTL, for a TTL check registered on the agent's node: the status
	// turns critical once Expires (Unix ns) passes without an update.
	// Read-time: no process runs it.
	TTL     time.Duration `json:",omitempty"`
	Expires int64         `json:",omitempty"`
}

// Current is c's status at now: critical past a TTL's expiry.
func (c Check) Current(now time.Time) (status, output string) {
	if c.TTL > 0 && c.Expires != 0 && now.UnixNano() >= c.Expires {
		return "critical", "TTL expired"
	}
	return c.Status, c.Output
}

// nodeKey is the key, in nodeNS, of node name of namespace ns.
func nodeKey(ns, name string) string { return ns + "/" + name }

// NodesWatch is where the nodes of namespace ns are in the table: the
// namespace and key prefix a blocking read of them follows.
func NodesWatch(ns string) (tableNS, prefix string) { return nodeNS, ns + "/" }

func nodeOf(ns, name string, e *Entry) *Node {
	if e == nil {
		return nil
	}
	n := &Node{}
	if json.Unmarshal(e.Value, n) != nil {
		return nil
	}
	n.Namespace, n.Name, n.CreateIndex, n.ModifyIndex = ns, name, e.CreateIndex, e.ModifyIndex
	return n
}

// Node returns node name of namespace ns, or nil.
func (st *Store) Node(ns, name string) *Node {
	return nodeOf(ns, name, st.t.Get(nodeNS, nodeKey(ns, name)))
}

// Nodes calls fn for each node of namespace ns, in name order, until fn
// returns false.
func (st *Store) Nodes(ns string, fn func(*Node) bool) {
	prefix := ns + "/"
	st.t.List(nodeNS, prefix, func(e *Entry) bool {
		if n := nodeOf(ns, e.Key[len(prefix):], e); n != nil {
			return fn(n)
		}
		return true
	})
}

// UpdateNode changes node name of namespace ns in one conditional write:
// fn gets a copy of the node as stored (nil if there is none) and
// returns the node
// to store (nil: delete it) or an error, which fails the write. It
// returns the revision the answer reflects.
func (st *Store) UpdateNode(ctx context.Context, ns, name string, fn func(cur *Node) (*Node, error)) (int64, error) {
	if st.eng == nil {
		return 0, ErrNotStarted
	}
	w := &sessionWrite{fn: func(tx *commit.Tx) error {
		tx.Answer(tx.Revision())
		cur, rev, err := TxNode(tx, ns, name)
		if err != nil {
			return err
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		return PutTxNode(tx, ns, name, cur, next, rev)
	}}
	return st.eng.SubmitChecked(ctx, w)
}

// TxNode reads node name of namespace ns inside a write (tx): the node
// as the write sees it (nil if there is none) and its record's revision,
// the condition of PutTxNode.
func TxNode(tx *commit.Tx, ns, name string) (*Node, int64, error) {
	v, rev := tx.Get(store.KV, ID(nodeNS, nodeKey(ns, name)))
	e, ok := v.(*Entry)
	if !ok || e == nil {
		return nil, rev, nil
	}
	cur := nodeOf(ns, name, e)
	if cur == nil {
		return nil, rev, fmt.Errorf("kv: node %q: its record does not decode", name)
	}
	return cur, rev, nil
}

// PutTxNode writes next as node name of namespace ns in tx (nil: deletes
// it), on condition that its record is still at rev (TxNode's); cur is
// the node TxNode read.
func PutTxNode(tx *commit.Tx, ns, name string, cur, next *Node, rev int64) error {
	id := ID(nodeNS, nodeKey(ns, name))
	if next == nil {
		if cur != nil {
			tx.DeleteIf(store.KV, id, rev)
		}
		return nil
	}
	b, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("kv: node %q: %w", name, err)
	}
	if len(b) > MaxNodeSize {
		return fmt.Errorf("%w: node %q is %d bytes with its checks; at most %d", ErrTooLarge, name, len(b), MaxNodeSize)
	}
	e := &Entry{Namespace: nodeNS, Key: nodeKey(ns, name), Value: b}
	if cur != nil {
		v, _ := tx.Get(store.KV, id)
		e.created = createdOf(v, rev)
	}
	tx.PutIf(store.KV, id, e.encode(), e, rev)
	return nil
}
