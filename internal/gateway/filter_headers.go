//lint:file-ignore SA1019 the deprecated HeaderValueOption.append is still sent by control planes; the gateway reads it as Envoy does.

package gateway

import (
	"fmt"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/valyala/fasthttp"
)

// headerAction is how a header is added (Envoy's append_action).
type headerAction uint8

const (
	headerAppend         headerAction = iota // APPEND_IF_EXISTS_OR_ADD: one more value
	headerAddIfAbsent                        // ADD_IF_ABSENT
	headerOverwrite                          // OVERWRITE_IF_EXISTS_OR_ADD: set
	headerOverwriteIfSet                     // OVERWRITE_IF_EXISTS
)

// headerOp is one header to add, its name and value built for the calls
// at decode.
type headerOp struct {
	name   headerName
	value  []byte
	action headerAction
}

func newHeaderOp(name, value string, action headerAction) headerOp {
	return headerOp{name: newHeaderName(name), value: []byte(value), action: action}
}

// headerOps are one level's changes to a header: removals first, then
// additions, as Envoy's header parser applies them.
type headerOps struct {
	remove []headerName
	add    []headerOp
}

func (o *headerOps) empty() bool { return o == nil || len(o.remove) == 0 && len(o.add) == 0 }

// headersFilter changes a route's request and response headers: its
// destination's (the weighted cluster picked) first, then the route's own,
// as Envoy's router does unless most_specific_header_mutations_wins.
type headersFilter struct {
	req, resp         headerOps
	destReq, destResp []headerOps // by destination index; nil: none
}

// buildHeadersFilter reads a route's request_headers_to_add/remove and
// response_headers_to_add/remove, and those of its weighted clusters.
func buildHeadersFilter(r *route.Route, path string) (httpFilter, error) {
	f := &headersFilter{}
	var err error
	if f.req, err = decodeHeaderOps(r.GetRequestHeadersToAdd(), r.GetRequestHeadersToRemove(), path, "request", true); err != nil {
		return nil, err
	}
	if f.resp, err = decodeHeaderOps(r.GetResponseHeadersToAdd(), r.GetResponseHeadersToRemove(), path, "response", false); err != nil {
		return nil, err
	}
	use := !f.req.empty() || !f.resp.empty()
	cws := r.GetRoute().GetWeightedClusters().GetClusters()
	for i, cw := range cws {
		p := fmt.Sprintf("%s.route.weighted_clusters.clusters[%d]", path, i)
		req, err := decodeHeaderOps(cw.GetRequestHeadersToAdd(), cw.GetRequestHeadersToRemove(), p, "request", true)
		if err != nil {
			return nil, err
		}
		resp, err := decodeHeaderOps(cw.GetResponseHeadersToAdd(), cw.GetResponseHeadersToRemove(), p, "response", false)
		if err != nil {
			return nil, err
		}
		if req.empty() && resp.empty() {
			continue
		}
		if f.destReq == nil {
			f.destReq, f.destResp = make([]headerOps, len(cws)), make([]headerOps, len(cws))
		}
		f.destReq[i], f.destResp[i] = req, resp
		use = true
	}
	if !use {
		return nil, nil
	}
	return f, nil
}

func decodeHeaderOps(add []*core.HeaderValueOption, remove []string, path, dir string, request bool) (headerOps, error) {
	var o headerOps
	for i, n := range remove {
		if err := mutableHeader(n, request); err != nil {
			return o, fieldErr(fmt.Sprintf("%s.%s_headers_to_remove[%d]", path, dir, i), "%v", err)
		}
		o.remove = append(o.remove, newHeaderName(n))
	}
	for i, hv := range add {
		p := fmt.Sprintf("%s.%s_headers_to_add[%d]", path, dir, i)
		h := hv.GetHeader()
		if err := mutableHeader(h.GetKey(), request); err != nil {
			return o, fieldErr(p+".header.key", "%v", err)
		}
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		if v == "" && !hv.GetKeepEmptyValue() {
			continue // Envoy adds no empty value unless told to
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return o, fieldErr(p+".header.value", "control characters in %q", v)
		}
		op := newHeaderOp(h.GetKey(), v, headerAppend)
		if ap := hv.GetAppend(); ap != nil {
			if hv.GetAppendAction() != core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
				return o, fieldErr(p, "append and append_action are both set")
			}
			if !ap.GetValue() {
				op.action = headerOverwrite
			}
		} else {
			switch hv.GetAppendAction() {
			case core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			case core.HeaderValueOption_ADD_IF_ABSENT:
				op.action = headerAddIfAbsent
			case core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
				op.action = headerOverwrite
			case core.HeaderValueOption_OVERWRITE_IF_EXISTS:
				op.action = headerOverwriteIfSet
			default:
				return o, fieldErr(p+".append_action", "unknown action %v", hv.GetAppendAction())
			}
		}
		o.add = append(o.add, op)
	}
	return o, nil
}

// mutableHeader refuses what Envoy does not let a route change: empty
// names, pseudo-headers, and a request's Host.
func mutableHeader(name string, request bool) error {
	switch {
	case name == "":
		return fmt.Errorf("empty header name")
	case strings.HasPrefix(name, ":"):
		return fmt.Errorf("%q: pseudo-headers cannot be changed", name)
	case request && strings.EqualFold(name, "host"):
		return fmt.Errorf("%q: the Host header cannot be changed (use a rewrite of the authority)", name)
	case strings.ContainsAny(name, " \t\r\n:"):
		return fmt.Errorf("%q is not a header name", name)
	}
	return nil
}

func (o *headerOps) apply(h responseHeader) {
	for i := range o.remove {
		h.del(&o.remove[i])
	}
	for i := range o.add {
		op := &o.add[i]
		switch op.action {
		case headerAppend:
			h.add(&op.name, op.value)
		case headerOverwrite:
			h.set(&op.name, op.value)
		case headerAddIfAbsent:
			if !h.has(&op.name) {
				h.add(&op.name, op.value)
			}
		case headerOverwriteIfSet:
			if h.has(&op.name) {
				h.set(&op.name, op.value)
			}
		}
	}
}

func (f *headersFilter) request(ctx *fasthttp.RequestCtx, dest int) bool {
	h := reqHeader{&ctx.Request.Header}
	if dest >= 0 && dest < len(f.destReq) {
		f.destReq[dest].apply(h)
	}
	f.req.apply(h)
	return false
}

func (f *headersFilter) response(_ *fasthttp.RequestCtx, h responseHeader, dest int) {
	if dest >= 0 && dest < len(f.destResp) {
		f.destResp[dest].apply(h)
	}
	f.resp.apply(h)
}
