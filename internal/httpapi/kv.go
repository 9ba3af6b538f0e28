package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/store"
)

// Consul's KV store in Sextant's own terms (docs/api.md, "KV"): the same
// entries the Consul-compatible API serves, by namespace, with Sextant's
// revisions, and the history of a key by revision that the table keeps
// (kv/history.go). The console's KV page reads and writes through these.
// Guarded as the Consul API's KV: kv:read and kv:write of the namespace.

// KVStore is the KV kind (*kv.Store) as this API uses it.
type KVStore interface {
	Table() *kv.Table
	Put(ctx context.Context, p kv.Put) (bool, int64, error)
	Delete(ctx context.Context, ns, key string, recurse bool, cas *int64) (bool, int64, error)
}

// SetKV serves the KV kind at /v1/namespaces/{ns}/kv. Before SetRegistry.
func (a *API) SetKV(k KVStore) { a.kv.Store(&k) }

func (a *API) kvRoutes() {
	a.handle("GET", "/v1/namespaces/{ns}/kv", a.kvList)
	a.handle("GET", "/v1/namespaces/{ns}/kv/{key...}", a.kvGet)
	a.handle("PUT", "/v1/namespaces/{ns}/kv/{key...}", a.kvPut)
	a.handle("DELETE", "/v1/namespaces/{ns}/kv/{key...}", a.kvDelete)
	a.handle("GET", "/v1/namespaces/{ns}/kv-history/{key...}", a.kvHistory)
}

func (a *API) kvStore() (KVStore, error) {
	k := a.kv.Load()
	if k == nil {
		return nil, &apiError{http.StatusNotFound, "not_found", "this server serves no KV store", ""}
	}
	return *k, nil
}

// kvTarget checks the namespace, the key (when the route has one) and the
// token's access to the namespace's keys.
func kvTarget(r *http.Request, access acl.Access, withKey bool) (ns, key string, err error) {
	ns = r.PathValue("ns")
	if err := checkName("namespace", ns); err != nil {
		return "", "", err
	}
	if withKey {
		key = r.PathValue("key")
		if err := kv.CheckKey(key); err != nil {
			return "", "", badRequest("key", "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), "kv: "), "invalid: "))
		}
	}
	return ns, key, acl.Require(r, acl.Permission{Resource: acl.KV, Access: access, Namespace: ns})
}

// kvEntry is an entry as answered: the value in base64 (JSON has no
// bytes), with its size.
type kvEntry struct {
	Key            string `json:"key"`
	Value          []byte `json:"value,omitempty"`
	Size           int    `json:"size"`
	Flags          uint64 `json:"flags"`
	Session        string `json:"session,omitempty"`
	LockIndex      uint64 `json:"lock_index"`
	CreateRevision int64  `json:"create_revision"`
	ModifyRevision int64  `json:"modify_revision"`
}

func answerEntry(e *kv.Entry, value bool) kvEntry {
	out := kvEntry{Key: e.Key, Size: len(e.Value), Flags: e.Flags, Session: e.Session, LockIndex: e.LockIndex,
		CreateRevision: e.CreateIndex, ModifyRevision: e.ModifyIndex}
	if value {
		out.Value = e.Value
	}
	return out
}

// kvList lists the keys of a namespace under ?prefix, without their
// values, a page at a time (?limit, ?page_token: the last key of the
// previous page). With ?index=N it first waits (?wait, 30 s by default)
// until a key under the prefix changes after revision N.
func (a *API) kvList(w http.ResponseWriter, r *http.Request, reg *backend) error {
	k, err := a.kvStore()
	if err != nil {
		return err
	}
	ns, _, err := kvTarget(r, acl.Read, false)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	prefix, after := q.Get("prefix"), q.Get("page_token")
	limit := defaultLimit
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxLimit {
			return badRequest("limit", "%q is not a number between 1 and %d", s, maxLimit)
		}
	}
	rev := k.Table().Revision()
	if s := q.Get("index"); s != "" {
		index, err := strconv.ParseInt(s, 10, 64)
		if err != nil || index < 0 {
			return badRequest("index", "%q is not a revision (a non-negative integer)", s)
		}
		wait := defaultWait
		if s := q.Get("wait"); s != "" {
			if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > maxWait {
				return badRequest("wait", "%q is not a duration between 0s and %v", s, maxWait)
			}
		}
		if rev, err = a.kvWait(r, reg, ns, prefix, index, wait); err != nil {
			return err
		}
		if err := acl.Require(r, acl.Permission{Resource: acl.KV, Access: acl.Read, Namespace: ns}); err != nil {
			return err // revoked while it waited
		}
	}
	type page struct {
		Revision int64     `json:"revision"`
		Entries  []kvEntry `json:"entries"`
		Next     string    `json:"next_page_token,omitempty"`
	}
	out := page{Revision: rev, Entries: []kvEntry{}}
	k.Table().List(ns, prefix, func(e *kv.Entry) bool {
		if after != "" && e.Key <= after {
			return true
		}
		if len(out.Entries) == limit {
			out.Next = out.Entries[limit-1].Key
			return false
		}
		out.Entries = append(out.Entries, answerEntry(e, false))
		return true
	})
	return writeValue(w, rev, out)
}

// kvWait waits until a key of ns under prefix changes after revision
// index, or wait passes, and returns the revision to answer: the table's,
// or index itself when nothing under the prefix changed.
func (a *API) kvWait(r *http.Request, reg *backend, ns, prefix string, index int64, wait time.Duration) (int64, error) {
	k, _ := a.kvStore()
	sub, err := reg.Catalog().Subscribe(index, store.KV)
	if err != nil {
		// Older than the change log. The catalog applies a change to its
		// tables before it advances its revision, so with no KV change
		// since index (the table's revision not past it) nothing changed
		// up to c, and later changes come by a subscription from c: a
		// registry busier than its KV store must not make every wait
		// answer at once, with the same index, for ever.
		c := reg.Catalog().Revision()
		if rev := k.Table().Revision(); rev > index {
			return rev, nil // something may have changed
		}
		if sub, err = reg.Catalog().Subscribe(c, store.KV); err != nil {
			// Reloaded meanwhile: answer soon, but never spin a client.
			select {
			case <-time.After(min(wait, time.Second)):
			case <-r.Context().Done():
			}
			return k.Table().Revision(), nil
		}
	}
	if n := a.waiting.Add(1); n > a.opts.MaxWaiting {
		a.waiting.Add(-1)
		return 0, &apiError{http.StatusTooManyRequests, "resource_exhausted", "too many blocking queries are waiting; retry later", ""}
	}
	defer a.waiting.Add(-1)
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	defer context.AfterFunc(a.stopping, cancel)()
	for {
		changes, err := sub.Next(ctx, 1024)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return index, nil
			}
			return k.Table().Revision(), nil // compacted meanwhile: something may have changed
		}
		for _, ch := range changes {
			if ch.Key.Namespace == ns && strings.HasPrefix(ch.Key.Name, prefix) {
				return k.Table().Revision(), nil
			}
		}
	}
}

func (a *API) kvGet(w http.ResponseWriter, r *http.Request, reg *backend) error {
	k, err := a.kvStore()
	if err != nil {
		return err
	}
	ns, key, err := kvTarget(r, acl.Read, true)
	if err != nil {
		return err
	}
	rev := k.Table().Revision()
	e := k.Table().Get(ns, key)
	if e == nil {
		return &apiError{http.StatusNotFound, "not_found", "no key " + strconv.Quote(key) + " in namespace " + ns, ""}
	}
	return writeValue(w, max(rev, e.ModifyIndex), answerEntry(e, true))
}

// kvRevision reads ?revision=R: the write's precondition on the key's
// modify revision (0: the key must not exist).
func kvRevision(r *http.Request) (*int64, error) { return optRevision(r) }

// kvConflict is the 409 of a write whose ?revision did not hold, saying
// what the key is now.
func kvConflict(t *kv.Table, ns, key string, want int64) error {
	e := t.Get(ns, key)
	var msg string
	switch {
	case want == 0 && e != nil:
		msg = "key " + strconv.Quote(key) + " already exists (modified at revision " + strconv.FormatInt(e.ModifyIndex, 10) + ")"
	case e == nil:
		msg = "key " + strconv.Quote(key) + " was deleted since revision " + strconv.FormatInt(want, 10)
	default:
		msg = "key " + strconv.Quote(key) + " was written since revision " + strconv.FormatInt(want, 10) +
			" (now at revision " + strconv.FormatInt(e.ModifyIndex, 10) + "); nothing was changed"
	}
	return &apiError{http.StatusConflict, "conflict", msg, "revision"}
}

func kvError(err error) error {
	switch {
	case errors.Is(err, kv.ErrTooLarge):
		return &apiError{http.StatusRequestEntityTooLarge, "payload_too_large", strings.TrimPrefix(err.Error(), "kv: value too large: "), "value"}
	case errors.Is(err, kv.ErrInvalid):
		return badRequest("key", "%s", strings.TrimPrefix(err.Error(), "kv: invalid: "))
	}
	return err
}

// kvPut writes a key: {"value": base64, "flags": n}, with ?revision=R as
// a precondition.
func (a *API) kvPut(w http.ResponseWriter, r *http.Request, reg *backend) error {
	return a.kvWrite(w, r, func(k KVStore, ns, key string, cas *int64) (bool, int64, error) {
		body, err := readBody(w, r)
		if err != nil {
			return false, 0, err
		}
		var in struct {
			Value []byte `json:"value"`
			Flags uint64 `json:"flags"`
		}
		if err := decodeStrict(body, &in); err != nil {
			return false, 0, err
		}
		return k.Put(r.Context(), kv.Put{Namespace: ns, Key: key, Value: in.Value, Flags: in.Flags, CAS: cas})
	})
}

// kvDelete deletes a key, with ?revision=R as a precondition; deleting a
// missing key (without one) is not an error, as in Consul.
func (a *API) kvDelete(w http.ResponseWriter, r *http.Request, reg *backend) error {
	return a.kvWrite(w, r, func(k KVStore, ns, key string, cas *int64) (bool, int64, error) {
		return k.Delete(r.Context(), ns, key, false, cas)
	})
}

// kvWrite runs op, a put or a delete of the request's key under its
// ?revision precondition (nil: none), and answers the new revision, or 409
// naming both revisions when the key moved on.
func (a *API) kvWrite(w http.ResponseWriter, r *http.Request, op func(k KVStore, ns, key string, cas *int64) (bool, int64, error)) error {
	k, err := a.kvStore()
	if err != nil {
		return err
	}
	ns, key, err := kvTarget(r, acl.Write, true)
	if err != nil {
		return err
	}
	cas, err := kvRevision(r)
	if err != nil {
		return err
	}
	ok, rev, err := op(k, ns, key, cas)
	if err != nil {
		return kvError(err)
	}
	if !ok {
		return kvConflict(k.Table(), ns, key, *cas)
	}
	return writeValue(w, rev, struct {
		Revision int64 `json:"revision"`
	}{rev})
}

// kvHistory answers the versions of a key the server keeps, newest first
// (kv.HistoryLen at most; docs/api.md says what is kept and for how
// long).
func (a *API) kvHistory(w http.ResponseWriter, r *http.Request, reg *backend) error {
	k, err := a.kvStore()
	if err != nil {
		return err
	}
	ns, key, err := kvTarget(r, acl.Read, true)
	if err != nil {
		return err
	}
	type version struct {
		Revision  int64      `json:"revision"`
		Committed *time.Time `json:"committed,omitempty"`
		Deleted   bool       `json:"deleted,omitempty"`
		*kvEntry
	}
	rev := k.Table().Revision()
	vs := k.Table().History(ns, key)
	out := struct {
		Revision int64     `json:"revision"`
		Key      string    `json:"key"`
		Versions []version `json:"versions"`
		Kept     int       `json:"kept"`
	}{Revision: rev, Key: key, Versions: make([]version, 0, len(vs)), Kept: kv.HistoryLen}
	for _, v := range vs {
		o := version{Revision: v.Revision, Deleted: v.Entry == nil}
		if v.Committed != 0 {
			t := time.Unix(0, v.Committed).UTC()
			o.Committed = &t
		}
		if v.Entry != nil {
			e := answerEntry(v.Entry, true)
			o.kvEntry = &e
		}
		out.Versions = append(out.Versions, o)
		out.Revision = max(out.Revision, v.Revision)
	}
	if len(vs) == 0 {
		return &apiError{http.StatusNotFound, "not_found", "no key " + strconv.Quote(key) + " in namespace " + ns + ", nor a history of one", ""}
	}
	return writeValue(w, out.Revision, out)
}
