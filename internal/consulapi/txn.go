package consulapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// Consul's transactions (PUT /v1/txn) on the KV store: a list of
// operations run all or nothing in one store write (kv.Store.Txn). Only KV
// operations are served; Node, Service and Check operations are refused
// naming them.

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

// DecodeTxn decodes a /v1/txn body strictly: a JSON array of operations,
// each an object with one member KV (Node, Service, Check and Session
// operations are not served); unknown members, a key given twice and
// trailing data are 400s naming them.
func DecodeTxn(body []byte) ([]kv.TxnOp, error) {
	var raw []map[string]json.RawMessage
	if err := strictJSON(body, &raw); err != nil {
		return nil, err
	}
	if len(raw) > kv.MaxTxnOps {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("Transaction contains too many operations (%d > %d)", len(raw), kv.MaxTxnOps)}
	}
	ops := make([]kv.TxnOp, 0, len(raw))
	for i, m := range raw {
		// consul/api sends the other kinds of operation as null members.
		for k, v := range m {
			if isNull(v) {
				delete(m, k)
			}
		}
		if len(m) != 1 {
			return nil, badRequest(fmt.Sprintf("[%d]: an operation is an object with one non-null member (KV), got %d", i, len(m)))
		}
		for k, v := range m {
			switch normalize(k) {
			case "kv":
			case "node", "service", "check", "session":
				return nil, badRequest(fmt.Sprintf("[%d].%s: transactions on %ss are not supported (only KV operations are)", i, k, strings.ToLower(k)))
			default:
				return nil, badRequest(fmt.Sprintf("[%d]: unknown operation %q", i, k))
			}
			var op txnKVOp
			if err := strictJSON(v, &op); err != nil {
				var he *httpError
				if errors.As(err, &he) {
					he.msg = fmt.Sprintf("[%d].KV: %s", i, he.msg)
				}
				return nil, err
			}
			if op.Namespace != "" && op.Namespace != "default" || op.Partition != "" && op.Partition != "default" {
				return nil, badRequest(fmt.Sprintf("[%d].KV: Consul Enterprise namespaces and partitions are not supported", i))
			}
			if op.Index > 1<<62 {
				return nil, badRequest(fmt.Sprintf("[%d].KV.Index: %d is out of range", i, op.Index))
			}
			ops = append(ops, kv.TxnOp{Verb: op.Verb, Key: op.Key, Value: op.Value, Flags: op.Flags, Index: int64(op.Index), Session: op.Session})
		}
	}
	if err := kv.CheckTxn(ops); err != nil {
		return nil, kvError(err)
	}
	return ops, nil
}

// readOnlyVerbs take key:read only.
var readOnlyVerbs = map[string]bool{
	kv.VerbGet: true, kv.VerbGetTree: true, kv.VerbCheckIndex: true, kv.VerbCheckSession: true, kv.VerbCheckNotExists: true,
}

// PUT /v1/txn: 200 with the results, or 409 with every operation's
// refusal (nothing written), as Consul answers.
func (a *API) txn(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, kvRead(ns)); err != nil {
		return err
	}
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
	for _, op := range ops {
		if !readOnlyVerbs[op.Verb] {
			if err := acl.Require(r, kvWrite(ns)); err != nil {
				return err
			}
			break
		}
	}
	results, errs, rev, err := a.opts.KV.Txn(r.Context(), ns, ops)
	if err != nil {
		return sessionError(kvError(err))
	}
	a.setMeta(w, rev)
	var b bytes.Buffer
	if len(errs) > 0 {
		b.WriteString(`{"Results":null,"Errors":[`)
		for i, e := range errs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"OpIndex":%d,"What":%s}`, e.OpIndex, strconv.Quote(e.What))
		}
		b.WriteString("]}")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write(b.Bytes())
		return nil
	}
	out := []byte(`{"Results":[`)
	for i, res := range results {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"KV":`...)
		out = appendEntry(out, res.Entry)
		out = append(out, '}')
	}
	out = append(out, `],"Errors":null}`...)
	return writeBytes(w, out)
}
