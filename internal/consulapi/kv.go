package consulapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/jsonstring"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/store"
)

// KV is what the KV endpoints read and write: the KV kind (*kv.Store),
// whose table is part of the catalog Registry.Catalog returns. Its writes
// block until their change is applied.
type KV interface {
	Table() *kv.Table
	Put(ctx context.Context, p kv.Put) (bool, int64, error)
	Delete(ctx context.Context, ns, key string, recurse bool, cas *int64) (bool, int64, error)
	CreateSession(ctx context.Context, s kv.Session) (*kv.Session, error)
	RenewSession(ctx context.Context, ns, id string) (*kv.Session, error)
	DestroySession(ctx context.Context, ns, id string) (bool, error)
	Sessions(ns string, fn func(*kv.Session) bool)
	// Txn runs KV operations all or nothing (txn.go).
	Txn(ctx context.Context, ns string, ops []kv.TxnOp) ([]kv.TxnResult, []kv.TxnError, int64, error)
	// The nodes registered through the catalog (node.go).
	NodeStore
}

// Consul's KV store: the keys of the served namespace (Options.Namespace),
// guarded by the kv resource of that namespace (Consul's key:read and
// key:write; no per-prefix rules yet).
func (a *API) kvRoutes() {
	if a.opts.KV == nil {
		return // unsupported answers 501
	}
	a.handle("GET /v1/kv/{key...}", a.kvGet)
	a.handle("PUT /v1/kv/{key...}", a.kvPut)
	a.handle("DELETE /v1/kv/{key...}", a.kvDelete)
	a.handle("PUT /v1/txn", a.txn)
}

func kvRead(ns string) acl.Permission {
	return acl.Permission{Resource: acl.KV, Access: acl.Read, Namespace: ns}
}

func kvWrite(ns string) acl.Permission {
	return acl.Permission{Resource: acl.KV, Access: acl.Write, Namespace: ns}
}

// kvError turns the kind's refusals into Consul's statuses.
func kvError(err error) error {
	switch {
	case errors.Is(err, kv.ErrTooLarge):
		return &httpError{http.StatusRequestEntityTooLarge, strings.TrimPrefix(err.Error(), "kv: ")}
	case errors.Is(err, kv.ErrInvalid):
		return badRequest(strings.TrimPrefix(err.Error(), "kv: "))
	}
	return err
}

func has(q url.Values, name string) bool { _, ok := q[name]; return ok }

func (a *API) kvGet(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, kvRead(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	key := r.PathValue("key")
	q := r.URL.Query()
	b, err := parseBlocking(q)
	if err != nil {
		return err
	}
	t := a.opts.KV.Table()
	switch {
	case has(q, "keys"):
		index, err := a.kvPrefix(r, key, b)
		if err != nil {
			return err
		}
		sep := q.Get("separator")
		var keys []string
		t.List(ns, key, func(e *kv.Entry) bool {
			k := e.Key
			if sep != "" {
				if i := strings.Index(k[len(key):], sep); i >= 0 {
					k = k[:len(key)+i+len(sep)]
				}
			}
			// Keys are in order, so those cut to one prefix are adjacent.
			if len(keys) == 0 || keys[len(keys)-1] != k {
				keys = append(keys, k)
			}
			return true
		})
		a.setMeta(w, index)
		if len(keys) == 0 && key != "" {
			w.WriteHeader(http.StatusNotFound)
			return nil
		}
		out := []byte{'['}
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			out = jsonstring.Append(out, k)
		}
		return writeBytes(w, append(out, ']'))
	case has(q, "recurse"):
		index, err := a.kvPrefix(r, key, b)
		if err != nil {
			return err
		}
		out := []byte{'['}
		n := 0
		t.List(ns, key, func(e *kv.Entry) bool {
			if n > 0 {
				out = append(out, ',')
			}
			n++
			out = appendEntry(out, e)
			return true
		})
		a.setMeta(w, index)
		if n == 0 {
			w.WriteHeader(http.StatusNotFound)
			return nil
		}
		return writeBytes(w, append(out, ']'))
	}
	if key == "" {
		return badRequest("missing key name (list the root with ?recurse or ?keys)")
	}
	e, index, err := a.kvKey(r, key, b)
	if err != nil {
		return err
	}
	a.setMeta(w, index)
	if e == nil {
		w.WriteHeader(http.StatusNotFound)
		return nil
	}
	if has(q, "raw") {
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Length", strconv.Itoa(len(e.Value)))
		w.WriteHeader(http.StatusOK)
		w.Write(e.Value)
		return nil
	}
	return writeBytes(w, append(appendEntry([]byte{'['}, e), ']'))
}

// kvKey reads key, after waiting, if b asks to, until its index passes
// b.index. A key's index is its ModifyIndex; an absent key's is the
// table's last change (as Consul answers an absent key), so a delete
// wakes whoever waits on the key.
func (a *API) kvKey(r *http.Request, key string, b blocking) (*kv.Entry, int64, error) {
	ns := a.opts.Namespace
	t := a.opts.KV.Table()
	read := func() (*kv.Entry, int64) {
		if e := t.Get(ns, key); e != nil {
			return e, e.ModifyIndex
		}
		return nil, t.Revision()
	}
	e, index := read()
	if b.index == 0 || index > b.index {
		return e, index, nil
	}
	ctx, done, err := a.hold(r, b)
	if err != nil {
		return nil, 0, err
	}
	a.reg.Catalog().WaitGroup(ctx, store.KV, kv.Group(ns, key), func() bool {
		e, index = read()
		return index > b.index
	})
	done()
	// The token may have been revoked while it waited.
	if err := acl.Require(r, kvRead(ns)); err != nil {
		return nil, 0, err
	}
	return e, index, nil
}

// kvPrefix waits, if b asks to, until a key under prefix changes after
// b.index, and returns the index of the answer read next: the table's
// last change, or b.index itself when the wait ended with no change under
// the prefix (the client sees the index it sent: nothing it reads
// changed).
func (a *API) kvPrefix(r *http.Request, prefix string, b blocking) (int64, error) {
	return a.kvPrefixIn(r, a.opts.Namespace, prefix, b)
}

// kvPrefixIn is kvPrefix over the table's namespace ns (the sessions'
// is not a served one).
func (a *API) kvPrefixIn(r *http.Request, ns, prefix string, b blocking) (int64, error) {
	t := a.opts.KV.Table()
	if b.index == 0 {
		return t.Revision(), nil
	}
	sub, err := a.reg.Catalog().Subscribe(b.index, store.KV)
	if err != nil {
		// Older than the change log. The catalog applies a change to its
		// tables before it advances its revision, so with no KV change
		// since b.index (the table's revision not past it) nothing the
		// client saw changed up to c, and later changes come by a
		// subscription from c: a registry busier than its KV store must
		// not make every watch answer at once, with the same index, for
		// ever (the client would spin).
		c := a.reg.Catalog().Revision()
		if rev := t.Revision(); rev > b.index {
			return rev, nil // something may have changed
		}
		if sub, err = a.reg.Catalog().Subscribe(c, store.KV); err != nil {
			return t.Revision(), nil
		}
	}
	ctx, done, err := a.hold(r, b)
	if err != nil {
		return 0, err
	}
	changed := false
	for !changed {
		changes, err := sub.Next(ctx, 1024)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				changed = true // compacted meanwhile: something may have changed
			}
			break
		}
		for _, ch := range changes {
			if ch.Key.Namespace == ns && strings.HasPrefix(ch.Key.Name, prefix) {
				changed = true
				break
			}
		}
	}
	done()
	if err := acl.Require(r, kvRead(a.opts.Namespace)); err != nil {
		return 0, err
	}
	if !changed {
		return b.index, nil
	}
	return t.Revision(), nil
}

// appendEntry appends e in Consul's JSON (api.KVPair): Value in base64,
// null when empty.
func appendEntry(b []byte, e *kv.Entry) []byte {
	b = append(b, `{"LockIndex":`...)
	b = strconv.AppendUint(b, e.LockIndex, 10)
	b = append(b, `,"Key":`...)
	b = jsonstring.Append(b, e.Key)
	b = append(b, `,"Flags":`...)
	b = strconv.AppendUint(b, e.Flags, 10)
	b = append(b, `,"Value":`...)
	if len(e.Value) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, e.Value)
		b = append(b, '"')
	}
	if e.Session != "" {
		b = append(b, `,"Session":`...)
		b = jsonstring.Append(b, e.Session)
	}
	b = append(b, `,"CreateIndex":`...)
	b = strconv.AppendInt(b, e.CreateIndex, 10)
	b = append(b, `,"ModifyIndex":`...)
	b = strconv.AppendInt(b, e.ModifyIndex, 10)
	return append(b, '}')
}

// parseUintParam reads an optional unsigned integer parameter.
func parseUintParam(q url.Values, name string) (*uint64, error) {
	if !has(q, name) {
		return nil, nil
	}
	s := q.Get(name)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return nil, badRequest(fmt.Sprintf("%s: %q is not a non-negative integer", name, s))
	}
	return &v, nil
}

func casParam(q url.Values) (*int64, error) {
	v, err := parseUintParam(q, "cas")
	if err != nil || v == nil {
		return nil, err
	}
	c := int64(min(*v, 1<<63-1))
	return &c, nil
}

// lockParams reads ?acquire and ?release (one of them, naming a session).
func lockParams(q url.Values, p *kv.Put) error {
	if has(q, "acquire") && has(q, "release") {
		return badRequest("acquire and release: a put takes one of them")
	}
	for _, name := range []string{"acquire", "release"} {
		if !has(q, name) {
			continue
		}
		id := q.Get(name)
		if id == "" || len(id) > kv.MaxSessionLen {
			return badRequest(fmt.Sprintf("%s: %q is not a session id", name, id))
		}
		if name == "acquire" {
			p.Acquire = id
		} else {
			p.Release = id
		}
	}
	return nil
}

func (a *API) kvPut(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, kvWrite(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	q := r.URL.Query()
	key := r.PathValue("key")
	if err := kv.CheckKey(key); err != nil {
		return kvError(err)
	}
	flags, err := parseUintParam(q, "flags")
	if err != nil {
		return err
	}
	cas, err := casParam(q)
	if err != nil {
		return err
	}
	if err := kv.CheckSize(r.ContentLength); err != nil {
		return kvError(err) // refused before reading it
	}
	value, err := io.ReadAll(io.LimitReader(r.Body, kv.MaxValueSize+1))
	if err != nil {
		return badRequest("reading the value: " + err.Error())
	}
	if err := kv.CheckValue(value); err != nil {
		return kvError(err)
	}
	p := kv.Put{Namespace: ns, Key: key, Value: value, CAS: cas}
	if flags != nil {
		p.Flags = *flags
	}
	if err := lockParams(q, &p); err != nil {
		return err
	}
	ok, _, err := a.opts.KV.Put(r.Context(), p)
	if err != nil {
		return sessionError(err)
	}
	return writeValue(w, strconv.FormatBool(ok))
}

func (a *API) kvDelete(w http.ResponseWriter, r *http.Request) error {
	ns := a.opts.Namespace
	if err := acl.Require(r, kvWrite(ns)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	q := r.URL.Query()
	cas, err := casParam(q)
	if err != nil {
		return err
	}
	recurse := has(q, "recurse")
	if recurse && cas != nil {
		return badRequest("cas: a recursive delete takes no cas")
	}
	ok, _, err := a.opts.KV.Delete(r.Context(), ns, r.PathValue("key"), recurse, cas)
	if err != nil {
		return kvError(err)
	}
	return writeValue(w, strconv.FormatBool(ok))
}
