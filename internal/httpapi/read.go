package httpapi

import (
	"bufio"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

const (
	defaultWait  = 30 * time.Second
	maxWait      = 5 * time.Minute
	defaultLimit = 1000
	maxLimit     = 10000
)

func (a *API) getInstance(w http.ResponseWriter, r *http.Request, reg *backend) error {
	id := r.PathValue("id")
	if !instance.ValidID(id) {
		return badRequest("id", "%q is not a valid id: 1..128 chars of [A-Za-z0-9._:-]", id)
	}
	rev := reg.Catalog().Revision()
	in := reg.inst.Instances().Get(id)
	if in == nil {
		return &apiError{http.StatusNotFound, "not_found", "instance " + strconv.Quote(id) + " not found", "id"}
	}
	if err := acl.Require(r, instancesRead(in.Namespace)); err != nil {
		return err
	}
	writeJSON(w, rev, in.AppendJSON)
	return nil
}

// query holds the common parameters of instance queries.
type query struct {
	sel         label.Selector
	healthyOnly bool
}

func parseQuery(v url.Values) (query, error) {
	var q query
	if s := v.Get("selector"); s != "" {
		sel, err := label.Parse(s)
		if err != nil {
			return q, badRequest("selector", "%s", strings.TrimPrefix(err.Error(), "label: "))
		}
		q.sel = sel
	}
	if s := v.Get("healthy_only"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return q, badRequest("healthy_only", "%q is not a boolean (true or false)", s)
		}
		q.healthyOnly = b
	}
	return q, nil
}

func checkName(field, s string) error {
	if !naming.ValidName(s) {
		return badRequest(field, "%q is not a valid name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", s)
	}
	return nil
}

func appendInstances(b []byte, ins []*instance.Instance) []byte {
	b = append(b, `"instances":[`...)
	for i, in := range ins {
		if i > 0 {
			b = append(b, ',')
		}
		b = in.AppendJSON(b)
	}
	return append(b, ']')
}

func (a *API) queryService(w http.ResponseWriter, r *http.Request, reg *backend) error {
	key := naming.ServiceKey{Namespace: r.PathValue("ns"), Name: r.PathValue("service")}
	if err := checkName("namespace", key.Namespace); err != nil {
		return err
	}
	if err := checkName("service", key.Name); err != nil {
		return err
	}
	if err := acl.Require(r, instancesRead(key.Namespace)); err != nil {
		return err
	}
	v := r.URL.Query() // parsed once: ~4% of a query's CPU
	q, err := parseQuery(v)
	if err != nil {
		return err
	}
	cat := reg.inst.Instances()
	svc := cat.Lookup(key)
	if s := v.Get("index"); s != "" {
		index, err := strconv.ParseInt(s, 10, 64)
		if err != nil || index < 0 {
			return badRequest("index", "%q is not a revision (a non-negative integer)", s)
		}
		wait := defaultWait
		if s := v.Get("wait"); s != "" {
			if wait, err = time.ParseDuration(s); err != nil || wait < 0 || wait > maxWait {
				return badRequest("wait", "%q is not a duration between 0s and %v", s, maxWait)
			}
		}
		if svc == nil || svc.Revision <= index {
			if n := a.waiting.Add(1); n > a.opts.MaxWaiting {
				a.waiting.Add(-1)
				return &apiError{http.StatusTooManyRequests, "resource_exhausted",
					"too many blocking queries are waiting; retry later", ""}
			}
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			release := context.AfterFunc(a.stopping, cancel)
			svc = cat.Wait(ctx, key, index)
			release()
			cancel()
			a.waiting.Add(-1)
			// The token may have been revoked while the query waited.
			if err := acl.Require(r, instancesRead(key.Namespace)); err != nil {
				return err
			}
		}
		if svc == nil || svc.Revision < index {
			// Older than what the caller saw: say whether this server has
			// applied that much (the service shrank, or restarted without
			// its deleted instances) or is behind another one it asked.
			w.Header()[AppliedHeader] = []string{strconv.FormatInt(reg.Catalog().Revision(), 10)}
		}
	}
	if svc == nil {
		writeJSON(w, 0, func(b []byte) []byte { return append(b, `{"revision":0,"instances":[]}`...) })
		return nil
	}
	// The answer depends only on the service version and the query: encode
	// it once for every reader of this version.
	memoKey := q.sel.String()
	if q.healthyOnly {
		memoKey = "h:" + memoKey
	}
	plain := func() []byte {
		return svc.Memo(memoKey, func() []byte {
			ins := svc.Select(q.sel, q.healthyOnly)
			b := make([]byte, 0, 64+512*len(ins))
			b = append(b, `{"revision":`...)
			b = strconv.AppendInt(b, svc.Revision, 10)
			b = append(b, ',')
			b = appendInstances(b, ins)
			return append(b, "}\n"...)
		})
	}
	if acceptsGzip(r.Header) {
		// Compressed once per version too: the compressor costs far more
		// than the query, so it must not run per reader. A small answer
		// is sent as it is (the gzip entry is then empty).
		gz := svc.Memo("z:"+memoKey, func() []byte {
			b := plain()
			if len(b) < minGzip {
				return nil
			}
			return gzipBytes(b)
		})
		if gz != nil {
			w.Header()["Content-Encoding"] = contentEncodingGzip
			w.Header()["Vary"] = varyAcceptEncoding
			writeBody(w, svc.Revision, gz)
			return nil
		}
	}
	writeBody(w, svc.Revision, plain())
	return nil
}

// pageToken is where a listing resumes: after (namespace, service, id).
func encodeToken(in *instance.Instance) string {
	return base64.RawURLEncoding.EncodeToString([]byte(in.Namespace + "\x00" + in.Service + "\x00" + in.ID))
}

func decodeToken(s string) (naming.ServiceKey, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	parts := strings.Split(string(b), "\x00")
	if err != nil || len(parts) != 3 || !naming.ValidName(parts[0]) || !naming.ValidName(parts[1]) || !instance.ValidID(parts[2]) {
		return naming.ServiceKey{}, "", badRequest("page_token", "malformed page token; pass next_page_token from the previous answer unchanged")
	}
	return naming.ServiceKey{Namespace: parts[0], Name: parts[1]}, parts[2], nil
}

// namespaceAndService reads the optional namespace and service parameters
// of a listing.
func namespaceAndService(v url.Values) (ns, name string, err error) {
	ns, name = v.Get("namespace"), v.Get("service")
	if ns != "" {
		if err := checkName("namespace", ns); err != nil {
			return "", "", err
		}
	}
	if name != "" {
		if err := checkName("service", name); err != nil {
			return "", "", err
		}
	}
	return ns, name, nil
}

func (a *API) listInstances(w http.ResponseWriter, r *http.Request, reg *backend) error {
	v := r.URL.Query()
	ns, name, err := namespaceAndService(v)
	if err != nil {
		return err
	}
	q, err := parseQuery(v)
	if err != nil {
		return err
	}
	readable, err := readableFilter(r, acl.Instances, ns)
	if err != nil {
		return err
	}
	limit := defaultLimit
	if s := v.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxLimit {
			return badRequest("limit", "%q is not an integer in 1..%d", s, maxLimit)
		}
	}
	var from naming.ServiceKey
	var afterID string
	if s := v.Get("page_token"); s != "" {
		if from, afterID, err = decodeToken(s); err != nil {
			return err
		}
	}
	snap := reg.inst.Instances().Snapshot()
	var out []*instance.Instance
	next := ""
	for _, svc := range snap.GroupsFrom(ns, from) {
		if name != "" && svc.Key.Name != name {
			continue
		}
		if readable != nil && !readable.Allows(svc.Key.Namespace) {
			continue
		}
		ins := svc.Select(q.sel, q.healthyOnly)
		if svc.Key == from && afterID != "" {
			i := 0
			for i < len(ins) && ins[i].ID <= afterID {
				i++
			}
			ins = ins[i:]
		}
		if room := limit - len(out); len(ins) > room {
			out = append(out, ins[:room]...)
			next = encodeToken(out[len(out)-1])
			break
		}
		out = append(out, ins...)
		if len(out) == limit {
			next = encodeToken(out[len(out)-1]) // may find nothing more; that is fine
			break
		}
	}
	rev := snap.Revision()
	streamJSON(w, rev, func(bw *bufio.Writer) {
		bw.WriteString(`{"revision":`)
		bw.WriteString(strconv.FormatInt(rev, 10))
		bw.WriteString(`,"instances":[`)
		for i, in := range out {
			if i > 0 {
				bw.WriteByte(',')
			}
			bw.Write(in.JSON())
		}
		bw.WriteString(`],"next_page_token":`)
		bw.WriteString(strconv.Quote(next))
		bw.WriteByte('}')
	})
	return nil
}

func (a *API) namespaces(w http.ResponseWriter, r *http.Request, reg *backend) error {
	readable, err := readableFilter(r, acl.Instances, "")
	if err != nil {
		return err
	}
	snap := reg.inst.Instances().Snapshot()
	rev := snap.Revision()
	names := snap.Namespaces()
	if readable != nil {
		names = slices.DeleteFunc(names, func(ns string) bool { return !readable.Allows(ns) })
	}
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		b = append(b, `,"namespaces":[`...)
		for i, n := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, n)
		}
		return append(b, "]}"...)
	})
	return nil
}

func (a *API) services(w http.ResponseWriter, r *http.Request, reg *backend) error {
	ns := r.PathValue("ns")
	if err := checkName("namespace", ns); err != nil {
		return err
	}
	if err := acl.Require(r, instancesRead(ns)); err != nil {
		return err
	}
	snap := reg.inst.Instances().Snapshot()
	rev := snap.Revision()
	svcs := snap.Groups(ns)
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		b = append(b, `,"services":[`...)
		for i, s := range svcs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"namespace":`...)
			b = strconv.AppendQuote(b, s.Key.Namespace)
			b = append(b, `,"name":`...)
			b = strconv.AppendQuote(b, s.Key.Name)
			b = append(b, `,"instances":`...)
			b = strconv.AppendInt(b, int64(s.Len()), 10)
			b = append(b, `,"healthy":`...)
			b = strconv.AppendInt(b, int64(s.ReadyLen()), 10)
			b = append(b, `,"revision":`...)
			b = strconv.AppendInt(b, s.Revision, 10)
			b = append(b, '}')
		}
		return append(b, "]}"...)
	})
	return nil
}

func (a *API) changes(w http.ResponseWriter, r *http.Request, reg *backend) error {
	v := r.URL.Query()
	var since int64
	var err error
	if s := v.Get("since"); s != "" {
		if since, err = strconv.ParseInt(s, 10, 64); err != nil || since < 0 {
			return badRequest("since", "%q is not a revision (a non-negative integer)", s)
		}
	}
	limit := defaultLimit
	if s := v.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxLimit {
			return badRequest("limit", "%q is not an integer in 1..%d", s, maxLimit)
		}
	}
	// ?namespace= asks for one namespace's changes: checked like a read of
	// it (403 without instances:read there), not answered filtered to nothing.
	ns := v.Get("namespace")
	if ns != "" {
		if err := checkName("namespace", ns); err != nil {
			return err
		}
	}
	readable, err := readableFilter(r, acl.Instances, ns)
	if err != nil {
		return err
	}
	changes, rev, more, err := reg.Catalog().Changes(since, limit, store.Instances)
	if err != nil {
		return err
	}
	switch {
	case ns != "":
		changes = slices.DeleteFunc(slices.Clone(changes), func(ch catalog.Change) bool { return ch.Key.Namespace != ns })
	case readable != nil:
		// A caller who may read some namespaces sees their changes only;
		// the revision it has caught up to is the same.
		changes = slices.DeleteFunc(slices.Clone(changes), func(ch catalog.Change) bool { return !readable.Allows(ch.Key.Namespace) })
	}
	streamJSON(w, rev, func(bw *bufio.Writer) {
		var num []byte
		bw.WriteString(`{"revision":`)
		bw.Write(strconv.AppendInt(num[:0], rev, 10))
		bw.WriteString(`,"changes":[`)
		for i, ch := range changes {
			if i > 0 {
				bw.WriteByte(',')
			}
			bw.WriteString(`{"revision":`)
			num = strconv.AppendInt(num[:0], ch.Revision, 10)
			bw.Write(num)
			if in, ok := ch.Value.(*instance.Instance); ok {
				bw.WriteString(`,"op":"upsert","instance":`)
				bw.Write(in.JSON())
			} else {
				bw.WriteString(`,"op":"delete","id":`)
				bw.Write(strconv.AppendQuote(num[:0], ch.ID))
			}
			bw.WriteByte('}')
		}
		bw.WriteString(`],"more":`)
		bw.WriteString(strconv.FormatBool(more))
		bw.WriteByte('}')
	})
	return nil
}

// readableFilter is nil when the caller may read res in namespace ns
// ("" for every namespace), or the filter to apply to a listing across
// namespaces. A caller who may read res in no namespace at all is refused.
func readableFilter(r *http.Request, res acl.Resource, ns string) (*acl.Filter, error) {
	if ns != "" {
		return nil, acl.Require(r, acl.Permission{Resource: res, Access: acl.Read, Namespace: ns})
	}
	f := acl.Readable(r.Context(), res)
	if f.All() {
		return nil, nil
	}
	if !f.Any() {
		return nil, acl.Require(r, acl.Permission{Resource: res, Access: acl.Read})
	}
	return &f, nil
}
