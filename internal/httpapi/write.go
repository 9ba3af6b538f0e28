package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// readBody reads a request body of at most MaxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, badRequest("", "reading body: %v", err)
	}
	return body, nil
}

// decode reads a JSON body strictly: unknown fields, trailing data and
// oversized bodies are errors.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeStrict(body, v)
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("", "unexpected data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "unexpected data after the JSON object")
	}
	return duplicateKeys(body)
}

// jsonError turns a decoding error into a 400 naming the field.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return badRequest(te.Field, "%s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return badRequest("", "malformed JSON at byte %d: %v", se.Offset, err)
	case errors.Is(err, io.EOF):
		return badRequest("", "empty body: a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "truncated JSON body")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, `json: unknown field "`); ok {
		f = strings.TrimSuffix(f, `"`)
		return badRequest(f, "unknown field %q", f)
	}
	return badRequest("", "invalid JSON: %s", strings.TrimPrefix(msg, "json: "))
}

func prefixField(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}

// bodyPool holds register bodies: the decoder copies what it keeps, so a
// body's buffer is free once decoded.
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers kept: a 16 MiB batch is not held for the
// next small register.
const maxPooledBody = 1 << 20

// readBodyInto is readBody into *buf, read in one go when the request
// says its length.
func readBodyInto(w http.ResponseWriter, r *http.Request, buf *[]byte) ([]byte, error) {
	if r.ContentLength > MaxBody {
		return nil, &http.MaxBytesError{Limit: MaxBody}
	}
	b := (*buf)[:0]
	if r.ContentLength > 0 {
		b = slices.Grow(b, int(r.ContentLength)+1) // +1: EOF is read into room, not a new buffer
	}
	rd := http.MaxBytesReader(w, r.Body, MaxBody)
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 512)
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*buf = b
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, err
			}
			return nil, badRequest("", "reading body: %v", err)
		}
	}
	*buf = b
	return b, nil
}

func (a *API) register(w http.ResponseWriter, r *http.Request, reg *backend) error {
	buf := bodyPool.Get().(*[]byte)
	body, err := readBodyInto(w, r, buf)
	if err != nil {
		return err
	}
	ins, err := parseRegister(body)
	if cap(*buf) <= maxPooledBody {
		bodyPool.Put(buf)
	}
	if err != nil {
		return err
	}
	last := ""
	for _, in := range ins {
		if in.Namespace != last {
			if err := acl.Require(r, instancesWrite(in.Namespace)); err != nil {
				return err
			}
			last = in.Namespace
		}
	}
	rev, err := reg.inst.RegisterGuarded(r.Context(), ins, a.writeGuard(r))
	if err != nil {
		return err
	}
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		b = append(b, `,"ids":[`...)
		for i, in := range ins {
			if i > 0 {
				b = append(b, ',')
			}
			// Ids are [A-Za-z0-9._:-] (Prepare checked them): nothing to
			// escape, and AppendQuote, rune by rune, was 1.7% of the
			// server's CPU under batch registers.
			b = append(b, '"')
			b = append(b, in.ID...)
			b = append(b, '"')
		}
		return append(b, "]}"...)
	})
	return nil
}

// parseRegister decodes and validates a register body: either
// {"instances": [...]} or one bare instance. Errors are 400s naming the
// field, e.g. instances[3].port.
func parseRegister(raw []byte) ([]*instance.Instance, error) {
	ins, batch, err := instance.DecodeRegister(raw)
	if err != nil {
		var fe *instance.FieldError
		if errors.As(err, &fe) {
			return nil, badRequest(fe.Field, "%s", fe.Msg)
		}
		return nil, err
	}
	if len(ins) == 0 || len(ins) > instance.MaxBatch {
		return nil, badRequest("instances", "%d instances, want 1..%d", len(ins), instance.MaxBatch)
	}
	for i, in := range ins {
		if err := instance.Prepare(i, in); err != nil {
			fe := err.(*instance.FieldError)
			if batch {
				return nil, badRequest(prefixField("instances["+strconv.Itoa(i)+"]", fe.Field), "%s", fe.Msg)
			}
			return nil, badRequest(fe.Field, "%s", fe.Msg)
		}
	}
	return ins, nil
}

type idsBody struct {
	IDs []string `json:"ids"`
}

func appendIDs(b []byte, key string, ids []string) []byte {
	b = append(b, `"`+key+`":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, id)
	}
	return append(b, ']')
}

func (a *API) deregisterBatch(w http.ResponseWriter, r *http.Request, reg *backend) error {
	var body idsBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	rev, notFound, err := reg.inst.DeregisterGuarded(r.Context(), body.IDs, a.writeGuard(r))
	if err != nil {
		return err
	}
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		b = append(b, ',')
		b = appendIDs(b, "not_found", notFound)
		return append(b, '}')
	})
	return nil
}

func (a *API) deregisterOne(w http.ResponseWriter, r *http.Request, reg *backend) error {
	id := r.PathValue("id")
	if !instance.ValidID(id) {
		return badRequest("id", "%q is not a valid id: 1..128 chars of [A-Za-z0-9._:-]", id)
	}
	rev, notFound, err := reg.inst.DeregisterGuarded(r.Context(), []string{id}, a.writeGuard(r))
	if err != nil {
		return err
	}
	if len(notFound) > 0 {
		return &apiError{http.StatusNotFound, "not_found", "instance " + strconv.Quote(id) + " not found", "id"}
	}
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		return append(b, '}')
	})
	return nil
}

func (a *API) heartbeat(w http.ResponseWriter, r *http.Request, reg *backend) error {
	var body idsBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if a.acl.Enabled() {
		// Heartbeats renew the instances as they are now; a change of
		// namespace in between is harmless (a heartbeat writes no record).
		inst := reg.inst.Instances()
		last := ""
		for _, id := range body.IDs {
			if in := inst.Get(id); in != nil && in.Namespace != last {
				if err := acl.Require(r, instancesWrite(in.Namespace)); err != nil {
					return err
				}
				last = in.Namespace
			}
		}
	}
	notFound, err := reg.inst.Heartbeat(r.Context(), body.IDs)
	if err != nil {
		return err
	}
	writeJSON(w, reg.Catalog().Revision(), func(b []byte) []byte {
		b = append(b, '{')
		b = appendIDs(b, "not_found", notFound)
		return append(b, '}')
	})
	return nil
}

func instancesWrite(ns string) acl.Permission {
	return acl.Permission{Resource: acl.Instances, Access: acl.Write, Namespace: ns}
}

func instancesRead(ns string) acl.Permission {
	return acl.Permission{Resource: acl.Instances, Access: acl.Read, Namespace: ns}
}

// writeGuard checks, at commit time, that the caller may write the
// namespace each replaced or deleted instance is in now: an id is global,
// so a register in one namespace can replace an instance of another.
func (a *API) writeGuard(r *http.Request) registry.Guard {
	if !a.acl.Enabled() {
		return nil
	}
	ctx := r.Context()
	return func(cur *instance.Instance) error {
		return acl.RequireContext(ctx, instancesWrite(cur.Namespace))
	}
}
