package consulapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store"
)

// A transaction with node, service and check operations: one write of
// the engine plans them with its KV operations (kv.TxnPlan), on the
// state each earlier operation left, and writes the node records (the
// KV kind's, with their checks), the instances (the registry's) and the
// keys in one commit, or nothing if any operation fails.

// txnPlanner is the registry's side: instance writes planned inside
// another write, and the engine that commits it.
type txnPlanner interface {
	PlanRegister(tx *commit.Tx, ins []*instance.Instance, guard registry.Guard) error
	PlanDeregister(tx *commit.Tx, ids []string, guard registry.Guard) error
	Engine() *commit.Engine
}

// kvPlanner is the KV kind's side (*kv.Store).
type kvPlanner interface {
	PlanTxn(ns string, ops []kv.TxnOp) *kv.TxnPlan
}

// catalogTxn runs ops, some on nodes, services or checks.
func (a *API) catalogTxn(w http.ResponseWriter, r *http.Request, ops []TxnOp) error {
	rp, ok1 := a.reg.(txnPlanner)
	kp, ok2 := a.opts.KV.(kvPlanner)
	if !ok1 || !ok2 || a.nodeStore() == nil {
		return &httpError{http.StatusNotImplemented, "Sextant's Consul-compatible API does not serve node, service and check transactions without its KV store"}
	}
	var kvOps []kv.TxnOp
	for _, op := range ops {
		if op.KV != nil {
			kvOps = append(kvOps, *op.KV)
		}
	}
	tw := &catalogTxnWrite{a: a, r: r, ns: a.opts.Namespace, ops: ops, rp: rp, kvPlan: kp.PlanTxn(a.opts.Namespace, kvOps)}
	rev, err := rp.Engine().SubmitChecked(r.Context(), tw)
	if err != nil {
		return sessionError(nodeError(kvError(err)))
	}
	a.setMeta(w, rev)
	if len(tw.errs) > 0 {
		return writeTxnErrors(w, tw.errs)
	}
	kvResults := tw.kvPlan.Results()
	out := []byte(`{"Results":[`)
	first := true
	comma := func() {
		if !first {
			out = append(out, ',')
		}
		first = false
	}
	for i, op := range ops {
		if op.KV != nil {
			for _, res := range kvResults {
				if res.Op == tw.kvIndex[i] {
					comma()
					out = appendKVResult(out, res)
				}
			}
			continue
		}
		if res := tw.results[i]; res != nil {
			b, err := json.Marshal(res())
			if err != nil {
				return err
			}
			comma()
			out = append(out, b...)
		}
	}
	out = append(out, `],"Errors":null}`...)
	return writeBytes(w, out)
}

// txnNodeState is a node as the transaction has left it so far.
type txnNodeState struct {
	cur     *kv.Node // nil: none
	orig    *kv.Node
	rev     int64
	touched bool
}

// txnServiceState is an instance as the transaction has left it so far.
type txnServiceState struct {
	cur     *instance.Instance // nil: none
	existed bool
	touched bool
}

type catalogTxnWrite struct {
	a      *API
	r      *http.Request
	ns     string
	ops    []TxnOp
	rp     txnPlanner
	kvPlan *kv.TxnPlan

	// Set by Plan: the refusals, the index of each KV operation among
	// the KV ones, and what each catalog operation answers once applied.
	errs    []kv.TxnError
	kvIndex []int
	results []func() any
}

func (w *catalogTxnWrite) Plan(tx *commit.Tx) error {
	a, ns := w.a, w.ns
	w.errs, w.kvIndex, w.results = nil, make([]int, len(w.ops)), make([]func() any, len(w.ops))
	var kvMap []int // KV index -> op index
	for i, op := range w.ops {
		if op.KV != nil {
			w.kvIndex[i] = len(kvMap)
			kvMap = append(kvMap, i)
		}
	}
	for _, e := range w.kvPlan.Decide(tx) {
		w.errs = append(w.errs, kv.TxnError{OpIndex: kvMap[e.OpIndex], What: e.What})
	}
	fail := func(i int, format string, args ...any) {
		w.errs = append(w.errs, kv.TxnError{OpIndex: i, What: fmt.Sprintf(format, args...)})
	}

	nodes := map[string]*txnNodeState{}
	var nodeOrder []string
	var planErr error
	node := func(name string) *txnNodeState {
		if st, ok := nodes[name]; ok {
			return st
		}
		cur, rev, err := kv.TxNode(tx, ns, name)
		if err != nil && planErr == nil {
			planErr = err
		}
		st := &txnNodeState{cur: cur, orig: cur, rev: rev}
		nodes[name] = st
		nodeOrder = append(nodeOrder, name)
		return st
	}
	// nodeExists: a record, the agent's node, or one an instance names.
	nodeExists := func(name string) bool {
		st := node(name)
		if st.cur != nil || name == a.opts.Node {
			return true
		}
		if st.touched {
			return false // deleted by this transaction
		}
		_, ok := a.nodeNamed(name)
		return ok
	}
	services := map[string]*txnServiceState{}
	var serviceOrder []string
	service := func(nodeName, id string) *txnServiceState {
		iid := a.serviceInstanceID(nodeName, id)
		if st, ok := services[iid]; ok {
			return st
		}
		v, _ := tx.Get(store.Instances, iid)
		cur, _ := v.(*instance.Instance)
		if cur != nil && (cur.Namespace != ns || a.nodeOf(cur) != nodeName) {
			cur = nil
		}
		st := &txnServiceState{cur: cur, existed: cur != nil}
		services[iid] = st
		serviceOrder = append(serviceOrder, iid)
		return st
	}
	// editNode returns the node's record to change (a copy, made once).
	editNode := func(name string) *kv.Node {
		st := node(name)
		if !st.touched || st.cur == st.orig {
			next := &kv.Node{}
			if st.cur != nil {
				*next = *st.cur
				next.Checks = slices.Clone(st.cur.Checks)
			}
			st.cur = next
		}
		st.touched = true
		return st.cur
	}
	nodeIndex := func(st *txnNodeState) int64 {
		if st.cur == nil || st.touched {
			return -1 // none, or changed by this transaction: no index to hold
		}
		return st.cur.Index()
	}

	for i, op := range w.ops {
		switch {
		case op.Node != nil:
			n := op.Node.Node
			if n.Node == a.opts.Node && op.Node.Verb != txnGet {
				fail(i, "node %q is this server's own: its address and meta are its flags'", n.Node)
				continue
			}
			st := node(n.Node)
			switch op.Node.Verb {
			case txnGet:
				if n.Node == a.opts.Node {
					self := a.selfNode()
					w.results[i] = func() any { return map[string]any{"Node": self} }
					continue
				}
				if !nodeExists(n.Node) {
					fail(i, "node %q doesn't exist", n.Node)
					continue
				}
				w.results[i] = w.nodeResult(n.Node, st)
			case txnSet, txnCAS:
				if op.Node.Verb == txnCAS && (n.ModifyIndex == 0 && st.cur != nil || n.ModifyIndex != 0 && nodeIndex(st) != int64(n.ModifyIndex)) {
					fail(i, "failed to set node %q, index is stale", n.Node)
					continue
				}
				prev := st.cur
				next := editNode(n.Node)
				next.ID, next.Address, next.TaggedAddresses, next.Meta, next.Locality = n.ID, n.Address, n.TaggedAddresses, n.Meta, n.Locality
				keepNodeIndex(prev, next)
				w.results[i] = w.nodeResult(n.Node, st)
			case txnDelete, txnDeleteCAS:
				if op.Node.Verb == txnDeleteCAS && (st.cur == nil || nodeIndex(st) != int64(n.ModifyIndex)) {
					fail(i, "failed to delete node %q, index is stale", n.Node)
					continue
				}
				// Its services go with it, as in Consul.
				for _, in := range a.nodeServices(n.Node) {
					service(n.Node, consulServiceID(in))
				}
				for _, iid := range serviceOrder {
					if s := services[iid]; s.cur != nil && a.nodeOf(s.cur) == n.Node {
						s.cur, s.touched = nil, true
					}
				}
				st.cur, st.touched = nil, true
			}
		case op.Service != nil:
			o := op.Service
			id := o.Service.ID
			if id == "" {
				id = o.Service.Service
			}
			st := service(o.Node, id)
			switch o.Verb {
			case txnGet:
				if st.cur == nil {
					fail(i, "service %q on node %q doesn't exist", id, o.Node)
					continue
				}
				w.results[i] = w.serviceResult(st)
			case txnSet, txnCAS:
				if !nodeExists(o.Node) {
					fail(i, "node %q doesn't exist", o.Node)
					continue
				}
				if o.Verb == txnCAS && (o.Service.ModifyIndex == 0 && st.cur != nil ||
					o.Service.ModifyIndex != 0 && (st.cur == nil || st.touched || st.cur.Revision != int64(o.Service.ModifyIndex))) {
					fail(i, "failed to set service %q on node %q, index is stale", id, o.Node)
					continue
				}
				reg := &CatalogRegistration{Node: o.Node, Service: &o.Service}
				if ns := node(o.Node).cur; ns != nil {
					reg.Address = ns.Address
				} else if o.Node == a.opts.Node {
					reg.Address = a.selfNode().Address
				}
				in, err := a.catalogInstance(reg)
				if err != nil {
					fail(i, "service %q on node %q: %v", id, o.Node, err)
					continue
				}
				st.cur, st.touched = in, true
				w.results[i] = w.serviceResult(st)
			case txnDelete, txnDeleteCAS:
				if o.Verb == txnDeleteCAS && (st.cur == nil || st.touched || st.cur.Revision != int64(o.Service.ModifyIndex)) {
					fail(i, "failed to delete service %q on node %q, index is stale", id, o.Node)
					continue
				}
				if st.cur != nil {
					st.cur, st.touched = nil, true
				}
				// Its checks go with it, as in Consul.
				if ns := node(o.Node); ns.cur != nil && slices.ContainsFunc(ns.cur.Checks, func(c kv.Check) bool { return c.ServiceID == id }) {
					n := editNode(o.Node)
					n.Checks = slices.DeleteFunc(n.Checks, func(c kv.Check) bool { return c.ServiceID == id })
				}
			}
		case op.Check != nil:
			c := &op.Check.Check
			checkID := c.CheckID
			if checkID == "" {
				checkID = c.Name
			}
			st := node(c.Node)
			var cur *kv.Check
			if st.cur != nil {
				if j := slices.IndexFunc(st.cur.Checks, func(x kv.Check) bool { return x.CheckID == checkID }); j >= 0 {
					cur = &st.cur.Checks[j]
				}
			}
			checkIndex := int64(-1)
			if cur != nil && !st.touched {
				checkIndex = st.cur.ModifyIndex
			}
			switch op.Check.Verb {
			case txnGet:
				if cur == nil {
					fail(i, "check %q on node %q doesn't exist", checkID, c.Node)
					continue
				}
				w.results[i] = w.checkResult(c.Node, checkID, st)
			case txnSet, txnCAS:
				if !nodeExists(c.Node) {
					fail(i, "node %q doesn't exist", c.Node)
					continue
				}
				if op.Check.Verb == txnCAS && (c.ModifyIndex == 0 && cur != nil || c.ModifyIndex != 0 && checkIndex != int64(c.ModifyIndex)) {
					fail(i, "failed to set check %q on node %q, index is stale", checkID, c.Node)
					continue
				}
				if c.ServiceID != "" {
					if s := service(c.Node, c.ServiceID); s.cur == nil {
						fail(i, "check %q on node %q: service %q doesn't exist", checkID, c.Node, c.ServiceID)
						continue
					}
				}
				kc, err := kvCheck(c, "Check")
				if err != nil {
					fail(i, "check %q on node %q: %v", checkID, c.Node, err)
					continue
				}
				prev := st.cur
				n := editNode(c.Node)
				setCheck(n, kc)
				keepNodeIndex(prev, n)
				w.results[i] = w.checkResult(c.Node, checkID, st)
			case txnDelete, txnDeleteCAS:
				if op.Check.Verb == txnDeleteCAS && (cur == nil || checkIndex != int64(c.ModifyIndex)) {
					fail(i, "failed to delete check %q on node %q, index is stale", checkID, c.Node)
					continue
				}
				if cur != nil {
					prev := st.cur
					n := editNode(c.Node)
					n.Checks = slices.DeleteFunc(n.Checks, func(x kv.Check) bool { return x.CheckID == checkID })
					keepNodeIndex(prev, n)
				}
			}
		}
	}
	if planErr != nil {
		return planErr
	}
	tx.Answer(tx.Revision())
	if len(w.errs) > 0 {
		return nil
	}
	if err := w.kvPlan.Write(tx); err != nil {
		return err
	}
	for _, name := range nodeOrder {
		st := nodes[name]
		if st.touched {
			if err := kv.PutTxNode(tx, ns, name, st.orig, st.cur, st.rev); err != nil {
				return err
			}
		}
	}
	var put []*instance.Instance
	var del []string
	for _, iid := range serviceOrder {
		st := services[iid]
		switch {
		case !st.touched:
		case st.cur != nil:
			put = append(put, st.cur)
		case st.existed:
			del = append(del, iid)
		}
	}
	guard := func(cur *instance.Instance) error { return a.sameNamespace(w.r, cur.ID)(cur) }
	if len(del) > 0 {
		if err := w.rp.PlanDeregister(tx, del, guard); err != nil {
			return err
		}
	}
	if len(put) > 0 {
		if err := w.rp.PlanRegister(tx, put, guard); err != nil {
			return err
		}
	}
	tx.Answer(tx.Revision())
	return nil
}

// nodeResult answers node name: as read now if the transaction does not
// change it, else as stored once applied.
func (w *catalogTxnWrite) nodeResult(name string, st *txnNodeState) func() any {
	if !st.touched && st.cur != nil {
		n := w.a.toNodeOfRecord(st.cur)
		return func() any { return map[string]any{"Node": n} }
	}
	if !st.touched {
		n, _ := w.a.nodeNamed(name)
		return func() any { return map[string]any{"Node": n} }
	}
	return func() any {
		n, _ := w.a.nodeNamed(name)
		return map[string]any{"Node": n}
	}
}

// txnAgentService is a service as a transaction answers it (Consul's
// AgentService of a ServiceNode: no datacenter; empty Proxy and Connect).
func (w *catalogTxnWrite) txnAgentService(in *instance.Instance) map[string]any {
	s := w.a.catalogAgentService(in)
	asNodeService(&s)
	return map[string]any{"Service": s}
}

func (w *catalogTxnWrite) serviceResult(st *txnServiceState) func() any {
	if !st.touched {
		out := w.txnAgentService(st.cur)
		return func() any { return out }
	}
	id := st.cur.ID
	return func() any {
		in := w.a.reg.Instances().Get(id)
		if in == nil {
			return nil
		}
		return w.txnAgentService(in)
	}
}

func (w *catalogTxnWrite) checkResult(nodeName, checkID string, st *txnNodeState) func() any {
	answer := func(n *kv.Node) any {
		if n == nil {
			return nil
		}
		j := slices.IndexFunc(n.Checks, func(x kv.Check) bool { return x.CheckID == checkID })
		if j < 0 {
			return nil
		}
		c := n.Checks[j]
		var tags []string
		if c.ServiceID != "" {
			if in := w.a.reg.Instances().Get(w.a.serviceInstanceID(nodeName, c.ServiceID)); in != nil {
				tags, _ = tagsAndMeta(in)
				c.ServiceName = in.Service
			}
		}
		hc := recordCheck(n, c, tags)
		if len(tags) == 0 {
			hc.ServiceTags = nil // as registered: none
		}
		return map[string]any{"Check": hc}
	}
	if !st.touched {
		out := answer(st.cur)
		return func() any { return out }
	}
	return func() any { return answer(w.a.nodeStore().Node(w.ns, nodeName)) }
}
