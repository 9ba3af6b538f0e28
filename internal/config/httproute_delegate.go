package config

import (
	"fmt"
	"maps"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// HTTPRoute delegate: VirtualService chaining, as Istio. A root
// VirtualService's route with delegate hands the requests it matches to
// the delegate VirtualService (one without hosts, in any namespace): the
// root route is replaced by the delegate's routes, each with its matches
// merged with the root's (a delegate's match must be a subset of a root
// match; a delegate route whose matches conflict with every root match is
// left out, as Istio leaves it out) and the root route's rewrite, timeout,
// retries, fault, mirror, CORS and headers where it sets none. A delegate
// cannot delegate further. The merge happens where a VirtualService is read
// (Index.VirtualService, MergeDelegates), so xDS carries the merged routes
// as Istio's RDS does.
func init() {
	allow(&networking.HTTPRoute{}, "delegate")
	allow(&networking.Delegate{}, "name", "namespace")
}

// IsDelegate reports whether vs is a delegate VirtualService: one without
// hosts, only reachable through a root's delegate route.
func IsDelegate(vs *networking.VirtualService) bool { return vs != nil && len(vs.Hosts) == 0 }

// validateDelegateVS checks what Istio requires of a delegate
// VirtualService (no hosts): no gateways, no TLS or TCP routes, no
// delegate routes of its own.
func validateDelegateVS(c errs, path string, vs *networking.VirtualService) {
	if len(vs.Gateways) > 0 {
		c.add(join(path, "gateways"), ErrInvalid, "a delegate VirtualService (no hosts) applies where its root does: no gateways")
	}
	if len(vs.Tls) > 0 {
		c.add(join(path, "tls"), ErrInvalid, "a delegate VirtualService (no hosts) holds HTTP routes only")
	}
	if len(vs.Tcp) > 0 {
		c.add(join(path, "tcp"), ErrInvalid, "a delegate VirtualService (no hosts) holds HTTP routes only")
	}
	for i, r := range vs.Http {
		if r.Delegate != nil {
			c.add(join(index(join(path, "http"), i), "delegate"), ErrInvalid, "a delegate VirtualService (no hosts) cannot delegate further: only one level of delegation")
		}
	}
}

// validateDelegateRoute checks a root route's delegate at path (the
// route's): the VirtualService it names, and no route, redirect or
// directResponse beside it.
func validateDelegateRoute(c errs, path string, r *networking.HTTPRoute) {
	d := r.Delegate
	p := join(path, "delegate")
	if !naming.ValidName(d.Name) {
		c.add(join(p, "name"), ErrInvalid, "%q: want the name of a VirtualService without hosts", d.Name)
	}
	if d.Namespace != "" && !naming.ValidName(d.Namespace) {
		c.add(join(p, "namespace"), ErrInvalid, "%q: not a namespace name", d.Namespace)
	}
	if len(r.Route) > 0 {
		c.add(p, ErrInvalid, "may not be set with route: the delegate's routes are the destinations")
	}
	if r.Redirect != nil {
		c.add(p, ErrInvalid, "may not be set with redirect")
	}
	if r.DirectResponse != nil {
		c.add(p, ErrInvalid, "may not be set with directResponse")
	}
}

// DelegateKey is the VirtualService a root route of a VirtualService in
// namespace ns delegates to.
func DelegateKey(d *networking.Delegate, ns string) Key {
	if d.Namespace != "" {
		ns = d.Namespace
	}
	return Key{Kind: KindVirtualService, Namespace: ns, Name: d.Name}
}

// Delegates returns the VirtualServices o's routes delegate to, in order,
// without repeats.
func Delegates(o *Object) []Key {
	if o == nil || o.VirtualService == nil {
		return nil
	}
	var out []Key
	for _, r := range o.VirtualService.Http {
		if r.Delegate == nil {
			continue
		}
		k := DelegateKey(r.Delegate, o.Namespace)
		if !containsKey(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func containsKey(keys []Key, k Key) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// MergeDelegates returns root with every delegate route replaced by the
// routes of the VirtualService it names (get returns it, or nil), merged as
// Istio merges them (mergeHTTPRoutes in istio/pilot/pkg/model): a delegate
// that is absent, has hosts (not a delegate) or delegates itself yields no
// routes, and so does a delegate route none of whose matches fits in a root
// match. The delegate's short destination hosts are read in its own
// namespace. root itself is returned when it has no delegate routes; the
// result is a new object otherwise (root is not changed). The second
// result says, per problem, why routes were left out.
func MergeDelegates(root *Object, get func(Key) *Object) (*Object, []string) {
	if root == nil || root.VirtualService == nil || len(Delegates(root)) == 0 {
		return root, nil
	}
	out := *root
	out.VirtualService = proto.Clone(root.VirtualService).(*networking.VirtualService)
	var (
		routes []*networking.HTTPRoute
		notes  []string
	)
	for i, r := range out.VirtualService.Http {
		if r.Delegate == nil {
			routes = append(routes, r)
			continue
		}
		k := DelegateKey(r.Delegate, root.Namespace)
		d := get(k)
		switch {
		case d == nil || d.VirtualService == nil:
			notes = append(notes, fmt.Sprintf("spec.http[%d].delegate: %s does not exist (yet): the route is left out", i, k))
			continue
		case !IsDelegate(d.VirtualService):
			notes = append(notes, fmt.Sprintf("spec.http[%d].delegate: %s has hosts, so it is no delegate (a delegate VirtualService has none): the route is left out", i, k))
			continue
		}
		sub := proto.Clone(d.VirtualService).(*networking.VirtualService)
		qualifyHosts(sub, d.Namespace)
		for j, dr := range sub.Http {
			if dr.Delegate != nil {
				notes = append(notes, fmt.Sprintf("spec.http[%d].delegate: %s route %d delegates further (one level only): left out", i, k, j))
				continue
			}
			merged, ok := mergeHTTPRoute(r, dr)
			if !ok {
				notes = append(notes, fmt.Sprintf("spec.http[%d].delegate: %s route %d: its matches are not within the root route's: left out", i, k, j))
				continue
			}
			routes = append(routes, merged)
		}
	}
	out.VirtualService.Http = routes
	return &out, notes
}

// qualifyHosts rewrites the short destination hosts of vs's routes and
// mirrors ("orders") to name.namespace, so that they keep naming ns's
// services once merged into a root of another namespace.
func qualifyHosts(vs *networking.VirtualService, ns string) {
	q := func(d *networking.Destination) {
		if d != nil && d.Host != "" && !strings.Contains(d.Host, ".") && !strings.Contains(d.Host, "*") {
			d.Host += "." + ns
		}
	}
	for _, r := range vs.Http {
		for _, d := range r.Route {
			q(d.GetDestination())
		}
		q(r.Mirror)
		for _, m := range r.Mirrors {
			q(m.GetDestination())
		}
	}
}

// mergeHTTPRoute merges delegate route leaf (a copy, changed in place)
// into root route r as Istio's mergeHTTPRoute: false when the matches
// conflict.
func mergeHTTPRoute(r, leaf *networking.HTTPRoute) (*networking.HTTPRoute, bool) {
	m, ok := mergeMatches(r.Match, leaf.Match)
	if !ok {
		return nil, false
	}
	leaf.Match = m
	leaf.Name = delegatedName(r.Name, leaf.Name)
	if leaf.Rewrite == nil {
		leaf.Rewrite = r.Rewrite
	}
	if leaf.Timeout == nil {
		leaf.Timeout = r.Timeout
	}
	if leaf.Retries == nil {
		leaf.Retries = r.Retries
	}
	if leaf.Fault == nil {
		leaf.Fault = r.Fault
	}
	if leaf.Mirror == nil && len(leaf.Mirrors) == 0 {
		leaf.Mirror, leaf.Mirrors = r.Mirror, r.Mirrors
	}
	if leaf.MirrorPercentage == nil {
		leaf.MirrorPercentage = r.MirrorPercentage
	}
	if leaf.CorsPolicy == nil {
		leaf.CorsPolicy = r.CorsPolicy
	}
	if leaf.Headers == nil {
		leaf.Headers = r.Headers
	}
	return leaf, true
}

// delegatedName is Istio's name for a route or match merged from a
// delegate's: ROOT-LEAF, or whichever of the two is set.
func delegatedName(root, leaf string) string {
	switch {
	case leaf == "":
		return root
	case root != "":
		return root + "-" + leaf
	}
	return leaf
}

// mergeMatches is Istio's mergeHTTPMatchRequests: each delegate match is
// merged with every root match it does not conflict with; a delegate match
// that fits none is a conflict.
func mergeMatches(root, leaf []*networking.HTTPMatchRequest) ([]*networking.HTTPMatchRequest, bool) {
	if len(root) == 0 {
		return leaf, true
	}
	if len(leaf) == 0 {
		return root, true
	}
	var out []*networking.HTTPMatchRequest
	for _, l := range leaf {
		found := false
		for _, r := range root {
			if matchConflict(r, l) {
				continue
			}
			out = append(out, mergeMatch(r, l))
			found = true
		}
		if !found {
			return nil, false
		}
	}
	return out, len(out) > 0
}

// mergeMatch is the match of both r and l (l's fields first).
func mergeMatch(r, l *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	out := proto.Clone(l).(*networking.HTTPMatchRequest)
	out.Name = delegatedName(r.Name, out.Name)
	if out.Uri == nil {
		out.Uri = r.Uri
	}
	if out.Scheme == nil {
		out.Scheme = r.Scheme
	}
	if out.Method == nil {
		out.Method = r.Method
	}
	if out.Authority == nil {
		out.Authority = r.Authority
	}
	out.Headers = mergeMaps(r.Headers, l.Headers)
	out.WithoutHeaders = mergeMaps(r.WithoutHeaders, l.WithoutHeaders)
	out.QueryParams = mergeMaps(r.QueryParams, l.QueryParams)
	if out.Port == 0 {
		out.Port = r.Port
	}
	out.SourceLabels = mergeMaps(r.SourceLabels, l.SourceLabels)
	if out.SourceNamespace == "" {
		out.SourceNamespace = r.SourceNamespace
	}
	if len(out.Gateways) == 0 {
		out.Gateways = r.Gateways
	}
	return out
}

// mergeMaps is a copy of a with b's entries over it (nil when both are
// empty).
func mergeMaps[V any](a, b map[string]V) map[string]V {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]V, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

// matchConflict is Istio's hasConflict: whether leaf can match a request
// root cannot.
func matchConflict(root, leaf *networking.HTTPMatchRequest) bool {
	roots := []*networking.StringMatch{root.Uri, root.Scheme, root.Method, root.Authority}
	leaves := []*networking.StringMatch{leaf.Uri, leaf.Scheme, leaf.Method, leaf.Authority}
	for i := range roots {
		if stringMatchConflict(roots[i], leaves[i]) {
			return true
		}
	}
	for k, v := range leaf.Headers {
		if stringMatchConflict(root.Headers[k], v) {
			return true
		}
	}
	for k, v := range leaf.WithoutHeaders {
		if stringMatchConflict(root.WithoutHeaders[k], v) {
			return true
		}
	}
	for k, v := range leaf.QueryParams {
		if stringMatchConflict(root.QueryParams[k], v) {
			return true
		}
	}
	if root.IgnoreUriCase != leaf.IgnoreUriCase {
		return true
	}
	if root.Port > 0 && leaf.Port > 0 && root.Port != leaf.Port {
		return true
	}
	if root.SourceNamespace != "" && leaf.SourceNamespace != root.SourceNamespace {
		return true
	}
	for k, v := range leaf.SourceLabels {
		if rv, ok := root.SourceLabels[k]; ok && rv != v {
			return true
		}
	}
	if len(root.Gateways) > 0 && len(leaf.Gateways) > 0 {
		for _, g := range leaf.Gateways {
			found := false
			for _, rg := range root.Gateways {
				found = found || rg == g
			}
			if !found {
				return true
			}
		}
	}
	return false
}

// stringMatchConflict is Istio's: whether leaf may match a value root does
// not (either unset: no conflict; a regex on either side conflicts with
// any other match; an exact root needs the same exact leaf; a prefix root
// needs a leaf prefix or exact starting with it).
func stringMatchConflict(root, leaf *networking.StringMatch) bool {
	if root == nil || leaf == nil || (root.MatchType == nil && leaf.MatchType == nil) {
		return false
	}
	if root.GetRegex() != "" || leaf.GetRegex() != "" {
		return true
	}
	if exact := root.GetExact(); exact != "" {
		return leaf.GetExact() != exact
	}
	if prefix := root.GetPrefix(); prefix != "" {
		switch {
		case leaf.GetPrefix() != "":
			return !strings.HasPrefix(leaf.GetPrefix(), prefix)
		case leaf.GetExact() != "":
			return !strings.HasPrefix(leaf.GetExact(), prefix)
		}
	}
	return true
}
