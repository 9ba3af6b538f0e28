package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/store"
)

// DefaultRootNamespace is the namespace whose policies without a selector
// apply to the whole mesh, as Istio's default root namespace.
const DefaultRootNamespace = "istio-system"

// The attributes an AuthorizationPolicy's when[].key may name: the ones
// proxyless gRPC's RBAC (and the gateway) can evaluate, and the request.auth
// ones (requestauth.go) the gateway and Envoy evaluate. Istio's others
// (connection.sni, experimental.*) are refused at apply time rather than
// published as something no data plane enforces.
const (
	CondRequestHeader    = "request.headers" // request.headers[NAME]
	CondSourcePrincipal  = "source.principal"
	CondSourceNamespace  = "source.namespace"
	CondSourceIP         = "source.ip"
	CondDestinationPort  = "destination.port"
	supportedConditionsM = "request.headers[NAME], source.principal, source.namespace, source.ip, destination.port, " +
		"request.auth.principal, request.auth.audiences, request.auth.presenters, request.auth.claims[NAME]"
)

// ConditionKey reads a when[].key: the attribute and, for
// request.headers[NAME], the header's name (lower case, as gRPC and HTTP/2
// carry it).
func ConditionKey(key string) (attr, header string, err error) {
	switch key {
	case CondSourcePrincipal, CondSourceNamespace, CondSourceIP, CondDestinationPort,
		CondRequestPrincipal, CondRequestAudiences, CondRequestPresenter:
		return key, "", nil
	}
	if rest, ok := strings.CutPrefix(key, CondRequestClaims+"["); ok {
		name, ok := claimKey(rest)
		if !ok {
			return "", "", fmt.Errorf("%q: want request.auth.claims[NAME] or request.auth.claims[A][B] with non-empty claim names", key)
		}
		return CondRequestClaims, name, nil
	}
	if rest, ok := strings.CutPrefix(key, CondRequestHeader+"["); ok && strings.HasSuffix(rest, "]") {
		name := strings.ToLower(strings.TrimSuffix(rest, "]"))
		if name == "" || strings.ContainsAny(name, " \t[]") {
			return "", "", fmt.Errorf("%q: want request.headers[NAME] with a header name", key)
		}
		// grpc-go refuses (NACKs) RBAC header matchers on these; Envoy
		// ignores :scheme too: a rule on them could never be enforced.
		if strings.HasPrefix(name, "grpc-") || name == ":scheme" {
			return "", "", fmt.Errorf("%q: header %q cannot be matched (gRPC's RBAC refuses grpc-* headers and :scheme)", key, name)
		}
		return CondRequestHeader, name, nil
	}
	return "", "", fmt.Errorf("%q: not supported (supported keys: %s)", key, supportedConditionsM)
}

func validateSelector(c errs, path string, sel map[string]string) {
	for k, v := range sel {
		if !label.ValidKey(k) {
			c.add(mapKey(path, k), ErrInvalid, "not a label key: 1..128 of [A-Za-z0-9._/-]")
		}
		if len(v) > 4096 {
			c.add(mapKey(path, k), ErrInvalid, "value longer than 4096 bytes")
		}
	}
}

func validatePeerAuthentication(c errs, path string, o *Object) {
	pa := o.PeerAuthentication
	validateSelector(c, join(path, "selector.matchLabels"), pa.GetSelector().GetMatchLabels())
	if len(pa.PortLevelMtls) > 0 && len(pa.GetSelector().GetMatchLabels()) == 0 {
		c.add(join(path, "portLevelMtls"), ErrInvalid, "needs a selector: port-level modes apply to the workloads a policy selects (as in Istio)")
	}
	for port, m := range pa.PortLevelMtls {
		p := mapKey(join(path, "portLevelMtls"), strconv.FormatUint(uint64(port), 10))
		if port == 0 || port > 65535 {
			c.add(p, ErrInvalid, "%d: want a port 1..65535", port)
		}
		if m == nil {
			c.add(join(p, "mode"), ErrInvalid, "required")
		}
	}
}

func validateAuthorizationPolicy(c errs, path string, o *Object) {
	ap := o.AuthorizationPolicy
	validateSelector(c, join(path, "selector.matchLabels"), ap.GetSelector().GetMatchLabels())
	if ap.Action == security.AuthorizationPolicy_CUSTOM {
		c.add(join(path, "action"), ErrNotSupported, "CUSTOM: not supported (ALLOW, DENY, AUDIT)")
	}
	for i, r := range ap.Rules {
		rp := index(join(path, "rules"), i)
		if r == nil {
			c.add(rp, ErrInvalid, "want an object, got null")
			continue
		}
		for j, f := range r.From {
			p := index(join(rp, "from"), j)
			if f.GetSource() == nil {
				c.add(join(p, "source"), ErrInvalid, "required")
				continue
			}
			validateSource(c, join(p, "source"), f.Source)
		}
		for j, t := range r.To {
			p := index(join(rp, "to"), j)
			if t.GetOperation() == nil {
				c.add(join(p, "operation"), ErrInvalid, "required")
				continue
			}
			validateOperation(c, join(p, "operation"), t.Operation)
		}
		for j, w := range r.When {
			p := index(join(rp, "when"), j)
			if w == nil {
				c.add(p, ErrInvalid, "want an object, got null")
				continue
			}
			attr, _, err := ConditionKey(w.Key)
			if err != nil {
				sentinel := ErrNotSupported
				if w.Key == "" || strings.HasPrefix(w.Key, CondRequestHeader+"[") || strings.HasPrefix(w.Key, CondRequestClaims+"[") {
					sentinel = ErrInvalid
				}
				c.add(join(p, "key"), sentinel, "%v", err)
				continue
			}
			if len(w.Values) == 0 && len(w.NotValues) == 0 {
				c.add(p, ErrInvalid, "values or notValues is required")
			}
			for _, f := range []struct {
				name string
				vals []string
			}{{"values", w.Values}, {"notValues", w.NotValues}} {
				for k, v := range f.vals {
					vp := index(join(p, f.name), k)
					switch attr {
					case CondSourceIP:
						validateIPBlock(c, vp, v)
					case CondDestinationPort:
						validatePort(c, vp, v)
					default:
						validateWildcard(c, vp, v)
					}
				}
			}
		}
	}
}

func validateSource(c errs, path string, s *security.Source) {
	if len(s.Principals)+len(s.NotPrincipals)+len(s.Namespaces)+len(s.NotNamespaces)+len(s.IpBlocks)+len(s.NotIpBlocks)+
		len(s.RequestPrincipals)+len(s.NotRequestPrincipals) == 0 {
		c.add(path, ErrInvalid, "must set at least one of principals, notPrincipals, requestPrincipals, notRequestPrincipals, namespaces, notNamespaces, ipBlocks, notIpBlocks")
	}
	for _, f := range []struct {
		name string
		vals []string
		ip   bool
	}{{"principals", s.Principals, false}, {"notPrincipals", s.NotPrincipals, false}, {"namespaces", s.Namespaces, false},
		{"notNamespaces", s.NotNamespaces, false}, {"ipBlocks", s.IpBlocks, true}, {"notIpBlocks", s.NotIpBlocks, true},
		{"requestPrincipals", s.RequestPrincipals, false}, {"notRequestPrincipals", s.NotRequestPrincipals, false}} {
		for i, v := range f.vals {
			if f.ip {
				validateIPBlock(c, index(join(path, f.name), i), v)
			} else {
				validateWildcard(c, index(join(path, f.name), i), v)
			}
		}
	}
}

func validateOperation(c errs, path string, op *security.Operation) {
	if len(op.Hosts)+len(op.NotHosts)+len(op.Ports)+len(op.NotPorts)+len(op.Methods)+len(op.NotMethods)+len(op.Paths)+len(op.NotPaths) == 0 {
		c.add(path, ErrInvalid, "must set at least one of hosts, notHosts, ports, notPorts, methods, notMethods, paths, notPaths")
	}
	for _, f := range []struct {
		name string
		vals []string
	}{{"hosts", op.Hosts}, {"notHosts", op.NotHosts}, {"methods", op.Methods}, {"notMethods", op.NotMethods}} {
		for i, v := range f.vals {
			validateWildcard(c, index(join(path, f.name), i), v)
		}
	}
	for _, f := range []struct {
		name string
		vals []string
	}{{"paths", op.Paths}, {"notPaths", op.NotPaths}} {
		for i, v := range f.vals {
			p := index(join(path, f.name), i)
			if strings.ContainsAny(v, "{}") {
				c.add(p, ErrNotSupported, "%q: path templates ({*}, {**}) are not supported; use a prefix (/pkg.Service/*) or an exact path", v)
				continue
			}
			validateWildcard(c, p, v)
			if v != "*" && !strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "*") {
				c.add(p, ErrInvalid, "%q: a path starts with / (gRPC: /package.Service/Method)", v)
			}
		}
	}
	for _, f := range []struct {
		name string
		vals []string
	}{{"ports", op.Ports}, {"notPorts", op.NotPorts}} {
		for i, v := range f.vals {
			validatePort(c, index(join(path, f.name), i), v)
		}
	}
}

// validateWildcard accepts Istio's string match: exact, or one "*" at the
// start (suffix match) or the end (prefix match), or "*" alone.
func validateWildcard(c errs, path, v string) {
	if v == "" {
		c.add(path, ErrInvalid, "must not be empty")
		return
	}
	if n := strings.Count(v, "*"); n > 1 || (n == 1 && v != "*" && !strings.HasPrefix(v, "*") && !strings.HasSuffix(v, "*")) {
		c.add(path, ErrInvalid, "%q: a \"*\" may only start or end the value (suffix or prefix match), once", v)
	}
}

func validateIPBlock(c errs, path, v string) {
	if _, err := ParseIPBlock(v); err != nil {
		c.add(path, ErrInvalid, "%q: want an IP address or a CIDR block such as 10.0.0.0/8", v)
	}
}

func validatePort(c errs, path, v string) {
	if n, err := strconv.ParseUint(v, 10, 16); err != nil || n == 0 {
		c.add(path, ErrInvalid, "%q: want a port 1..65535", v)
	}
}

// ParseIPBlock reads an address ("10.1.2.3", a /32) or a CIDR block.
func ParseIPBlock(v string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
}

// Workload is what a security policy applies to: a server workload's
// namespace, labels and listening port.
type Workload struct {
	Namespace string
	Labels    label.Labels
	Port      uint32
}

// Security is an immutable view of the security kinds in force, answering
// which PeerAuthentication mode and which AuthorizationPolicies apply to a
// workload. Build it with NewSecurity.
type Security struct {
	root     string
	peer     []*Object // key order
	authz    []*Object // key order
	reqAuthn []*Object // key order
}

// NewSecurity returns the view over objs (other kinds are ignored), with
// root the mesh's root namespace ("" for DefaultRootNamespace).
func NewSecurity(root string, objs []*Object) *Security {
	if root == "" {
		root = DefaultRootNamespace
	}
	s := &Security{root: root}
	for _, o := range objs {
		switch {
		case o.PeerAuthentication != nil:
			s.peer = append(s.peer, o)
		case o.AuthorizationPolicy != nil:
			s.authz = append(s.authz, o)
		case o.RequestAuthentication != nil:
			s.reqAuthn = append(s.reqAuthn, o)
		}
	}
	slices.SortFunc(s.reqAuthn, func(a, b *Object) int { return a.Key.Compare(b.Key) })
	slices.SortFunc(s.peer, func(a, b *Object) int { return a.Key.Compare(b.Key) })
	slices.SortFunc(s.authz, func(a, b *Object) int { return a.Key.Compare(b.Key) })
	return s
}

// Root is the root namespace.
func (s *Security) Root() string { return s.root }

// selects reports whether a policy in namespace ns with selector sel applies
// to w: a policy without a selector applies to every workload of its
// namespace (the root namespace's: of the mesh); with one, to the workloads
// it selects in its namespace (the root namespace's: in every namespace, as
// Istio reads AuthorizationPolicies there).
func (s *Security) selects(ns string, sel map[string]string, w Workload) bool {
	if ns != w.Namespace && ns != s.root {
		return false
	}
	for k, v := range sel {
		if got, ok := w.Labels.Get(k); !ok || got != v {
			return false
		}
	}
	return true
}

// MTLSMode is the PeerAuthentication mode in force for w, as Istio
// resolves it: the workload's own policy (a port-level mode for w.Port
// first), else its namespace's, else the mesh's (the root namespace's
// policy without a selector), else PERMISSIVE; UNSET inherits from the next
// level. Of two policies at one level, the first by name wins (Istio: the
// oldest).
func (s *Security) MTLSMode(w Workload) security.PeerAuthentication_MutualTLS_Mode {
	var workload, namespace, mesh *security.PeerAuthentication
	for _, o := range s.peer {
		pa := o.PeerAuthentication
		sel := pa.GetSelector().GetMatchLabels()
		switch {
		case len(sel) > 0 && o.Namespace == w.Namespace && s.selects(o.Namespace, sel, w):
			if workload == nil {
				workload = pa
			}
		case len(sel) == 0 && o.Namespace == w.Namespace:
			if namespace == nil {
				namespace = pa
			}
		case len(sel) == 0 && o.Namespace == s.root:
			if mesh == nil {
				mesh = pa
			}
		}
	}
	if m := workload.GetPortLevelMtls()[w.Port]; m != nil && m.Mode != security.PeerAuthentication_MutualTLS_UNSET {
		return m.Mode
	}
	for _, pa := range []*security.PeerAuthentication{workload, namespace, mesh} {
		if m := pa.GetMtls().GetMode(); m != security.PeerAuthentication_MutualTLS_UNSET {
			return m
		}
	}
	return security.PeerAuthentication_MutualTLS_PERMISSIVE
}

// SelectedMTLSMode is the mode of the PeerAuthentication that selects w
// by its labels (a port-level mode for w.Port first), UNSET when none does:
// what a gateway reads, whose edge listeners namespace- and mesh-wide
// policies do not govern (as in Istio).
func (s *Security) SelectedMTLSMode(w Workload) security.PeerAuthentication_MutualTLS_Mode {
	for _, o := range s.peer {
		pa := o.PeerAuthentication
		sel := pa.GetSelector().GetMatchLabels()
		if len(sel) == 0 || o.Namespace != w.Namespace || !s.selects(o.Namespace, sel, w) {
			continue
		}
		if m := pa.GetPortLevelMtls()[w.Port]; m != nil && m.Mode != security.PeerAuthentication_MutualTLS_UNSET {
			return m.Mode
		}
		return pa.GetMtls().GetMode()
	}
	return security.PeerAuthentication_MutualTLS_UNSET
}

// Authorization returns the AuthorizationPolicies that apply to w, in key
// order.
func (s *Security) Authorization(w Workload) []*Object {
	var out []*Object
	for _, o := range s.authz {
		if s.selects(o.Namespace, o.AuthorizationPolicy.GetSelector().GetMatchLabels(), w) {
			out = append(out, o)
		}
	}
	return out
}

// Principal is the SPIFFE ID a policy's principal names: Istio writes
// "TRUST_DOMAIN/ns/NS/sa/SA"; the "spiffe://" prefix is optional.
func Principal(p string) string {
	if strings.HasPrefix(p, "spiffe://") || p == "*" || strings.HasPrefix(p, "*") {
		return p
	}
	return "spiffe://" + p
}

// SelectedWorkloads returns the addresses (host:port) of the registered
// instances security object o applies to: those its selector matches in
// its namespace (the root namespace's: in every namespace), sorted. The
// dry run of an apply names their server listeners.
func (t *Table) SelectedWorkloads(o *Object) []string {
	var sel map[string]string
	switch {
	case o.PeerAuthentication != nil:
		sel = o.PeerAuthentication.GetSelector().GetMatchLabels()
	case o.AuthorizationPolicy != nil:
		sel = o.AuthorizationPolicy.GetSelector().GetMatchLabels()
	case o.RequestAuthentication != nil:
		sel = o.RequestAuthentication.GetSelector().GetMatchLabels()
	default:
		return nil
	}
	if t.c == nil {
		return nil
	}
	inst, ok := t.c.Table(store.Instances).(*catalog.Groups[*instance.Instance])
	if !ok {
		return nil
	}
	s := NewSecurity(t.RootNamespace(), nil)
	ns := o.Namespace
	if ns == s.root {
		ns = ""
	}
	var out []string
	for _, g := range inst.Snapshot().Groups(ns) {
		for _, in := range g.Items() {
			if s.selects(o.Namespace, sel, Workload{Namespace: in.Namespace, Labels: in.Labels()}) {
				out = append(out, net.JoinHostPort(in.Host, strconv.Itoa(in.Port)))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// securityWarnings warns about a selector that matches no registered
// instance: the policy applies to nothing until one registers (a typo in
// a label?).
func (t *Table) securityWarnings(o *Object) []string {
	if !IsSecurity(o.Kind) || t.c == nil {
		return nil
	}
	var sel map[string]string
	switch {
	case o.PeerAuthentication != nil:
		sel = o.PeerAuthentication.GetSelector().GetMatchLabels()
	case o.RequestAuthentication != nil:
		sel = o.RequestAuthentication.GetSelector().GetMatchLabels()
	default:
		sel = o.AuthorizationPolicy.GetSelector().GetMatchLabels()
	}
	if len(sel) == 0 || len(t.SelectedWorkloads(o)) > 0 {
		return nil
	}
	return []string{fmt.Sprintf("spec.selector: matches no registered instance of namespace %s: the policy applies to no workload until one registers with these labels", o.Namespace)}
}
