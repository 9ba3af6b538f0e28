package config

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
)

// HTTPMatchRequest beyond uri, headers and method: the request's scheme
// and authority, query parameters, headers it must not have, a path match
// in any case, and the port and gateways a match applies on.
func init() {
	allow(&networking.HTTPMatchRequest{}, "scheme", "authority", "port", "query_params", "without_headers",
		"ignore_uri_case", "gateways")
}

// validateMatches checks the fields above of route r's matches; gateways
// are those of the VirtualService (a match's gateways narrow them).
func validateMatches(c errs, path, ns string, r *networking.HTTPRoute, gateways []string) {
	for i, m := range r.Match {
		p := index(join(path, "match"), i)
		if m.Scheme != nil {
			validateStringMatch(c, join(p, "scheme"), m.Scheme, false)
		}
		if m.Authority != nil {
			validateStringMatch(c, join(p, "authority"), m.Authority, false)
		}
		if m.Port > 65535 {
			c.add(join(p, "port"), ErrInvalid, "%d: want 1..65535", m.Port)
		}
		for name, sm := range m.QueryParams {
			qp := mapKey(join(p, "queryParams"), name)
			if name == "" {
				c.add(qp, ErrInvalid, "a query parameter's name is required")
			}
			if sm == nil || sm.MatchType == nil {
				c.add(qp, ErrInvalid, "one of exact, prefix or regex is required")
				continue
			}
			validateStringMatch(c, qp, sm, false)
		}
		for name, sm := range m.WithoutHeaders {
			hp := mapKey(join(p, "withoutHeaders"), name)
			if name == "" || name != strings.ToLower(name) || strings.ContainsAny(name, " \t:") {
				c.add(hp, ErrInvalid, "header names are lower case, without spaces or colons")
			}
			// {} (no match type): the header must be absent.
			if sm != nil && sm.MatchType != nil {
				validateStringMatch(c, hp, sm, false)
			}
		}
		validateSourceMatch(c, p, m)
		validateGatewayRefs(c, join(p, "gateways"), m.Gateways)
		for j, g := range m.Gateways {
			if !slices.ContainsFunc(vsGatewaysOrMesh(gateways), func(v string) bool { return sameGateway(v, g, ns) }) {
				c.add(index(join(p, "gateways"), j), ErrInvalid, "%q is not one of the VirtualService's gateways %v: a match applies only where its VirtualService does", g, vsGatewaysOrMesh(gateways))
			}
		}
	}
}

// sameGateway reports whether two gateway references of namespace ns name
// the same Gateway ("edge" and "default/edge"), or both the mesh.
func sameGateway(a, b, ns string) bool {
	if a == MeshGateway || b == MeshGateway {
		return a == b
	}
	ka, oka := GatewayRef(a, ns)
	kb, okb := GatewayRef(b, ns)
	return oka && okb && ka == kb
}

func vsGatewaysOrMesh(g []string) []string {
	if len(g) == 0 {
		return []string{MeshGateway}
	}
	return g
}

// MatchAppliesOn reports whether match m applies on gateway gw (a Gateway's
// key, or ok false for the mesh) of a VirtualService in namespace ns: it
// names no gateways, or names this one.
func MatchAppliesOn(m *networking.HTTPMatchRequest, ns string, gw Key, mesh bool) bool {
	if m == nil || len(m.Gateways) == 0 {
		return true
	}
	for _, ref := range m.Gateways {
		if ref == MeshGateway {
			if mesh {
				return true
			}
			continue
		}
		if k, ok := GatewayRef(ref, ns); ok && !mesh && k == gw {
			return true
		}
	}
	return false
}

// OnGateway returns VirtualService vs as it routes on a port of the
// gateways gws (the ones of the port it is bound to): each route keeps
// the matches that apply there, by gateways (MatchAppliesOn) and port,
// with those two cleared; a route none of whose matches applies is left
// out, as Istio builds a gateway's routes per server port. vs itself is
// returned when nothing narrows it.
func OnGateway(vs *Object, gws []Key, port uint32) *Object {
	narrows := false
	for _, r := range vs.VirtualService.Http {
		for _, m := range r.Match {
			narrows = narrows || len(m.Gateways) > 0 || m.Port != 0
		}
	}
	if !narrows {
		return vs
	}
	out := *vs
	out.VirtualService = proto.Clone(vs.VirtualService).(*networking.VirtualService)
	var routes []*networking.HTTPRoute
	for _, r := range out.VirtualService.Http {
		if len(r.Match) == 0 {
			routes = append(routes, r)
			continue
		}
		var kept []*networking.HTTPMatchRequest
		for _, m := range r.Match {
			if m.Port != 0 && m.Port != port {
				continue
			}
			if !slices.ContainsFunc(gws, func(gw Key) bool { return MatchAppliesOn(m, vs.Namespace, gw, false) }) {
				continue
			}
			m.Gateways, m.Port = nil, 0
			kept = append(kept, m)
		}
		if len(kept) > 0 {
			r.Match = kept
			routes = append(routes, r)
		}
	}
	out.VirtualService.Http = routes
	return &out
}
