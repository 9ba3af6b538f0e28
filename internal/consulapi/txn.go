package consulapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// Consul's transactions (PUT /v1/txn): a list of operations on keys,
// nodes, services and checks run all or nothing in one store write. KV
// operations alone go to kv.Store.Txn; with catalog operations among
// them, txncatalog.go plans them all in one write.

// MaxTxnBody bounds a transaction's body: Consul's default
// txn_max_req_len (512 KiB) plus the base64 of values.
const MaxTxnBody = 2 << 20

// txnKVOp is Consul's KVTxnOp.
type txnKVOp struct {
	Verb      string
	Key       string
	Value     []byte // base64 in JSON, as Consul's
	Flags     uint64
	Index     uint64
	Session   string
	Namespace string
	Partition string
}

// TxnOp is one decoded operation of a transaction: exactly one member set.
type TxnOp struct {
	KV      *kv.TxnOp
	Node    *txnNodeOp
	Service *txnServiceOp
	Check   *txnCheckOp
}

// txnNodeOp is Consul's NodeTxnOp.
type txnNodeOp struct {
	Verb string
	Node txnNode
}

// txnNode is Consul's Node in a transaction.
type txnNode struct {
	ID              string
	Node            string
	Address         string
	Datacenter      string
	TaggedAddresses map[string]string
	Meta            map[string]string
	CreateIndex     uint64
	ModifyIndex     uint64
	Partition       string
	PeerName        string
	Locality        *kv.Locality
}

// txnServiceOp is Consul's ServiceTxnOp.
type txnServiceOp struct {
	Verb    string
	Node    string
	Service catalogServiceDef
}

// txnCheckOp is Consul's CheckTxnOp.
type txnCheckOp struct {
	Verb  string
	Check catalogCheck
}

// Verbs of Consul's node, service and check operations.
const (
	txnSet       = "set"
	txnCAS       = "cas"
	txnGet       = "get"
	txnDelete    = "delete"
	txnDeleteCAS = "delete-cas"
)

// DecodeTxn decodes a /v1/txn body strictly: a JSON array of operations,
// each an object with one member KV, Node, Service or Check (Session
// operations are not served); unknown members, a key given twice and
// trailing data are 400s naming them.
func DecodeTxn(body []byte) ([]TxnOp, error) {
	var raw []map[string]json.RawMessage
	if err := strictJSON(body, &raw); err != nil {
		return nil, err
	}
	if len(raw) > kv.MaxTxnOps {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("Transaction contains too many operations (%d > %d)", len(raw), kv.MaxTxnOps)}
	}
	ops := make([]TxnOp, 0, len(raw))
	var kvOps []kv.TxnOp
	for i, m := range raw {
		// consul/api sends the other kinds of operation as null members.
		for k, v := range m {
			if isNull(v) {
				delete(m, k)
			}
		}
		if len(m) != 1 {
			return nil, badRequest(fmt.Sprintf("[%d]: an operation is an object with one non-null member (KV, Node, Service or Check), got %d", i, len(m)))
		}
		for k, v := range m {
			prefix := func(err error) error {
				var he *httpError
				if errors.As(err, &he) {
					he.msg = fmt.Sprintf("[%d].%s: %s", i, k, he.msg)
				}
				return err
			}
			var op TxnOp
			switch normalize(k) {
			case "kv":
				var o txnKVOp
				if err := strictJSON(v, &o); err != nil {
					return nil, prefix(err)
				}
				if o.Namespace != "" && o.Namespace != "default" || o.Partition != "" && o.Partition != "default" {
					return nil, badRequest(fmt.Sprintf("[%d].KV: Consul Enterprise namespaces and partitions are not supported", i))
				}
				if o.Index > 1<<62 {
					return nil, badRequest(fmt.Sprintf("[%d].KV.Index: %d is out of range", i, o.Index))
				}
				op.KV = &kv.TxnOp{Verb: o.Verb, Key: o.Key, Value: o.Value, Flags: o.Flags, Index: int64(o.Index), Session: o.Session}
				kvOps = append(kvOps, *op.KV)
			case "node":
				op.Node = &txnNodeOp{}
				if err := strictJSON(v, op.Node); err != nil {
					return nil, prefix(err)
				}
				if err := checkTxnNode(op.Node); err != nil {
					return nil, prefix(err)
				}
			case "service":
				op.Service = &txnServiceOp{}
				if err := strictJSON(v, op.Service); err != nil {
					return nil, prefix(err)
				}
				if err := checkTxnService(op.Service); err != nil {
					return nil, prefix(err)
				}
			case "check":
				op.Check = &txnCheckOp{}
				if err := strictJSON(v, op.Check); err != nil {
					return nil, prefix(err)
				}
				if err := checkTxnCheck(op.Check); err != nil {
					return nil, prefix(err)
				}
			case "session":
				return nil, badRequest(fmt.Sprintf("[%d].%s: transactions on sessions are not supported", i, k))
			default:
				return nil, badRequest(fmt.Sprintf("[%d]: unknown operation %q", i, k))
			}
			ops = append(ops, op)
		}
	}
	if err := kv.CheckTxn(kvOps); err != nil {
		return nil, kvError(err)
	}
	return ops, nil
}

func catalogVerb(verb string) error {
	switch verb {
	case txnSet, txnCAS, txnGet, txnDelete, txnDeleteCAS:
		return nil
	}
	return badRequest(fmt.Sprintf("Verb: unknown verb %q (set, cas, get, delete, delete-cas)", verb))
}

func checkTxnNode(op *txnNodeOp) error {
	if err := catalogVerb(op.Verb); err != nil {
		return err
	}
	n := &op.Node
	switch {
	case !validNodeName(n.Node):
		return badRequest(fmt.Sprintf("Node.Node: %q is not a node name Sextant keeps: 1..128 bytes of [A-Za-z0-9._-]", n.Node))
	case n.Partition != "" && n.Partition != "default":
		return badRequest("Node.Partition: admin partitions (Consul Enterprise) are not supported")
	case n.PeerName != "":
		return badRequest("Node.PeerName: cluster peering is not supported")
	case n.ModifyIndex > 1<<62:
		return badRequest(fmt.Sprintf("Node.ModifyIndex: %d is out of range", n.ModifyIndex))
	}
	for k := range n.Meta {
		if strings.HasPrefix(k, reservedPrefix) {
			return badRequest(fmt.Sprintf("Node.Meta: key %q: the prefix %q is reserved for Consul's own", k, reservedPrefix))
		}
	}
	return nil
}

func checkTxnService(op *txnServiceOp) error {
	if err := catalogVerb(op.Verb); err != nil {
		return err
	}
	s := &op.Service
	switch {
	case !validNodeName(op.Node):
		return badRequest(fmt.Sprintf("Node: %q is not a node name Sextant keeps: 1..128 bytes of [A-Za-z0-9._-]", op.Node))
	case s.ID == "" && s.Service == "":
		return badRequest("Service: missing ID (and Service)")
	case s.Namespace != "" && s.Namespace != "default" || s.Partition != "" && s.Partition != "default":
		return badRequest("Service: Consul Enterprise namespaces and partitions are not supported")
	case s.ModifyIndex > 1<<62:
		return badRequest(fmt.Sprintf("Service.ModifyIndex: %d is out of range", s.ModifyIndex))
	}
	if op.Verb == txnSet || op.Verb == txnCAS {
		return checkCatalogService(s)
	}
	return nil
}

func checkTxnCheck(op *txnCheckOp) error {
	if err := catalogVerb(op.Verb); err != nil {
		return err
	}
	c := &op.Check
	switch {
	case !validNodeName(c.Node):
		return badRequest(fmt.Sprintf("Check.Node: %q is not a node name Sextant keeps: 1..128 bytes of [A-Za-z0-9._-]", c.Node))
	case c.CheckID == "" && c.Name == "":
		return badRequest("Check: missing CheckID (and Name)")
	case c.Namespace != "" && c.Namespace != "default" || c.Partition != "" && c.Partition != "default":
		return badRequest("Check: Consul Enterprise namespaces and partitions are not supported")
	case c.PeerName != "":
		return badRequest("Check.PeerName: cluster peering is not supported")
	case c.ModifyIndex > 1<<62:
		return badRequest(fmt.Sprintf("Check.ModifyIndex: %d is out of range", c.ModifyIndex))
	}
	if op.Verb == txnSet || op.Verb == txnCAS {
		if _, err := kvCheck(c, "Check"); err != nil {
			return err
		}
	}
	return nil
}

// readOnlyVerbs take read permissions only.
var readOnlyVerbs = map[string]bool{
	kv.VerbGet: true, kv.VerbGetTree: true, kv.VerbCheckIndex: true, kv.VerbCheckSession: true, kv.VerbCheckNotExists: true,
}

// PUT /v1/txn: 200 with the results, or 409 with every operation's
// refusal (nothing written), as Consul answers. KV operations need
// kv:read (kv:write to write), catalog ones instances:read (write).
func (a *API) txn(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := a.checkScope(r); err != nil {
		return err
	}
	body, err := readBody(w, r, MaxTxnBody)
	if err != nil {
		return err
	}
	ops, err := DecodeTxn(body)
	if err != nil {
		return err
	}
	var kvOps []kv.TxnOp
	catalogOps := false
	need := map[acl.Permission]bool{}
	for _, op := range ops {
		if op.KV != nil {
			kvOps = append(kvOps, *op.KV)
			need[kvRead(ns)] = true
			if !readOnlyVerbs[op.KV.Verb] {
				need[kvWrite(ns)] = true
			}
			continue
		}
		catalogOps = true
		need[instancesRead(ns)] = true
		if verb := op.verb(); verb != txnGet {
			need[instancesWrite(ns)] = true
		}
	}
	if len(ops) == 0 {
		need[kvRead(ns)] = true
	}
	for _, p := range []acl.Permission{kvRead(ns), kvWrite(ns), instancesRead(ns), instancesWrite(ns)} {
		if need[p] {
			if err := acl.Require(r, p); err != nil {
				return err
			}
		}
	}
	if catalogOps {
		return a.catalogTxn(w, r, ops)
	}
	results, errs, rev, err := a.opts.KV.Txn(r.Context(), ns, kvOps)
	if err != nil {
		return sessionError(kvError(err))
	}
	a.setMeta(w, rev)
	if len(errs) > 0 {
		return writeTxnErrors(w, errs)
	}
	out := []byte(`{"Results":[`)
	for i, res := range results {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendKVResult(out, res)
	}
	out = append(out, `],"Errors":null}`...)
	return writeBytes(w, out)
}

// verb is the verb of a catalog operation.
func (op TxnOp) verb() string {
	switch {
	case op.Node != nil:
		return op.Node.Verb
	case op.Service != nil:
		return op.Service.Verb
	case op.Check != nil:
		return op.Check.Verb
	}
	return op.KV.Verb
}

func appendKVResult(out []byte, res kv.TxnResult) []byte {
	out = append(out, `{"KV":`...)
	out = appendEntry(out, res.Entry)
	return append(out, '}')
}

// writeTxnErrors answers a failed transaction: 409, every refusal in
// operation order.
func writeTxnErrors(w http.ResponseWriter, errs []kv.TxnError) error {
	slices.SortStableFunc(errs, func(a, b kv.TxnError) int { return a.OpIndex - b.OpIndex })
	var b bytes.Buffer
	b.WriteString(`{"Results":null,"Errors":[`)
	for i, e := range errs {
		if i > 0 {
			b.WriteByte(',')
		}
		what, _ := json.Marshal(e.What)
		fmt.Fprintf(&b, `{"OpIndex":%d,"What":%s}`, e.OpIndex, what)
	}
	b.WriteString("]}")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	_, _ = w.Write(b.Bytes())
	return nil
}
