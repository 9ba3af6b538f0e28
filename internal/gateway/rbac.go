package gateway

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// RBAC: Envoy's envoy.filters.http.rbac, compiled once per config into
// matcher trees and evaluated per call on the call's goroutine with no
// allocation (BenchmarkRBAC). What the gateway cannot evaluate is refused
// at config time, never treated as a match or a miss.

const (
	rbacFilterName  = "envoy.filters.http.rbac"
	rbacTypeURL     = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
	rbacRouteURL    = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute"
	filterConfigURL = "type.googleapis.com/envoy.config.route.v3.FilterConfig"
	// rbacDeniedBody is Envoy's answer to a denied call.
	rbacDeniedBody = "RBAC: access denied"
	reasonRBAC     = "rbac_denied"
)

type rbacAction uint8

const (
	rbacAllow rbacAction = iota
	rbacDeny
	rbacLog
)

// rbacFilter is one RBAC filter of an HTTP connection manager (or a
// route's override of it).
type rbacFilter struct {
	name string // the filter's name: the key of per-route overrides
	// disabled: the HCM filter's disabled, so only routes that configure
	// it (typed_per_filter_config) run it.
	disabled bool
	rules    *rbacEngine // nil: nothing enforced
	shadow   *rbacEngine // nil: none; evaluated, counted, never enforced
	// jwt is set (and rules and shadow nil) for the JWT authentication
	// filter (jwtauthn.go), which runs in the same chain, before RBAC.
	jwt *jwtAuthn
}

// rbacEngine is one compiled config.rbac.v3.RBAC.
type rbacEngine struct {
	action   rbacAction
	policies []rbacPolicy // by name, as Envoy's map is ordered
}

type rbacPolicy struct {
	name       string
	perms      []rbacMatcher // any of them
	principals []rbacMatcher // any of them
}

// rbacReq is what matchers read of a call.
type rbacReq struct {
	h      *fasthttp.RequestHeader
	path   []byte // without the query
	peer   netip.Addr
	local  netip.AddrPort
	tls    *tls.ConnectionState // nil: plaintext
	scheme []byte
	names  *peerNames // of tls's peer certificate
	// jwtKey and jwtPayload are the JWT filter's metadata: a verified
	// token's payload under its payload_in_metadata key (jwtauthn.go).
	jwtKey     string
	jwtPayload map[string]any
	// rp is set when the request is a call record replayed by a dry run
	// (dryrun.go): matchers reading what the record does not keep say so
	// there instead of matching. nil on the data path.
	rp *replay
}

// peerNames are the names Envoy matches an authenticated principal
// against, as strings once per connection (not per call): the peer
// certificate's URI SANs, DNS SANs and subject (RFC 2253).
type peerNames struct {
	ok            bool // a peer certificate was presented
	uris, dnsSANs []string
	subject       string
}

func peerNamesOf(st *tls.ConnectionState) peerNames {
	if st == nil || len(st.PeerCertificates) == 0 {
		return peerNames{}
	}
	c := st.PeerCertificates[0]
	n := peerNames{ok: true, dnsSANs: c.DNSNames, subject: c.Subject.String()}
	for _, u := range c.URIs {
		n.uris = append(n.uris, u.String())
	}
	return n
}

var schemeHTTP, schemeHTTPS = []byte("http"), []byte("https")

// rbacMatcher is a compiled permission or principal.
type rbacMatcher interface {
	match(r *rbacReq) bool
}

// evaluate returns whether the call is allowed and the policy that decided
// it ("" when an ALLOW engine matched none).
func (e *rbacEngine) evaluate(r *rbacReq) (allowed bool, policy string) {
	for i := range e.policies {
		p := &e.policies[i]
		if anyMatch(p.perms, r) && anyMatch(p.principals, r) {
			return e.action != rbacDeny, p.name
		}
	}
	return e.action != rbacAllow, ""
}

func anyMatch(ms []rbacMatcher, r *rbacReq) bool {
	for _, m := range ms {
		if m.match(r) {
			return true
		}
	}
	return false
}

// The matchers.

type (
	matchAny  struct{}
	matchAnd  []rbacMatcher
	matchOr   []rbacMatcher
	matchNot  struct{ m rbacMatcher }
	matchPort struct{ lo, hi uint32 } // [lo, hi]
	matchCIDR struct {
		p      netip.Prefix
		remote bool // the peer's address, else the local (destination) one
	}
	matchHeader struct {
		hm     headerMatch
		pseudo string // ":method", ":path", ":authority", ":scheme"; "" for a header
	}
	matchURLPath   struct{ sm headerMatch }
	matchSNI       struct{ sm headerMatch }
	matchPrincipal struct {
		sm  headerMatch
		any bool // no principal_name: any authenticated peer
	}
)

func (matchAny) match(*rbacReq) bool { return true }

func (m matchAnd) match(r *rbacReq) bool {
	for _, c := range m {
		if !c.match(r) {
			return false
		}
	}
	return true
}

func (m matchOr) match(r *rbacReq) bool { return anyMatch(m, r) }

func (m matchNot) match(r *rbacReq) bool { return !m.m.match(r) }

func (m matchPort) match(r *rbacReq) bool {
	p := uint32(r.local.Port())
	return p >= m.lo && p <= m.hi
}

func (m matchCIDR) match(r *rbacReq) bool {
	if r.rp != nil && !m.remote {
		return r.rp.miss("destination_ip")
	}
	if r.rp != nil && r.rp.peerNotKept {
		return r.rp.miss("source IP (not kept)")
	}
	a := r.local.Addr()
	if m.remote {
		a = r.peer
	}
	return a.IsValid() && m.p.Contains(a.Unmap())
}

func (m *matchHeader) match(r *rbacReq) bool {
	if r.rp != nil && !r.rp.header(m) {
		return false
	}
	var v []byte
	switch m.pseudo {
	case "":
		v = r.h.Peek(m.hm.name)
	case ":method":
		v = r.h.Method()
	case ":path":
		v = r.h.RequestURI()
	case ":authority":
		v = r.h.Host()
	case ":scheme":
		v = r.scheme
	}
	present := v != nil
	if m.pseudo != "" {
		present = len(v) > 0
	}
	var ok bool
	if m.hm.kind == strPresent {
		ok = present
	} else {
		if !present {
			return false // as a route's header matcher: absent never matches
		}
		ok = matchString(&m.hm, v)
	}
	return ok != m.hm.invert
}

func (m *matchURLPath) match(r *rbacReq) bool {
	if r.rp != nil && r.rp.pathNotKept {
		return r.rp.miss("path (not kept)")
	}
	return matchString(&m.sm, r.path)
}

func (m *matchSNI) match(r *rbacReq) bool {
	if r.rp != nil {
		return r.rp.miss("requested_server_name")
	}
	if r.tls == nil {
		return matchString(&m.sm, nil)
	}
	return matchString(&m.sm, []byte(r.tls.ServerName))
}

// match: Envoy's authenticated principal: the peer certificate's URI SANs,
// then its DNS SANs, then its subject (RFC 2253) are matched in turn.
func (m *matchPrincipal) match(r *rbacReq) bool {
	if r.rp != nil {
		return r.rp.principal(m)
	}
	if r.names == nil {
		if r.tls == nil {
			return false
		}
		n := peerNamesOf(r.tls) // an HTTP/2 call: its stream has no cache
		r.names = &n
	}
	n := r.names
	if !n.ok {
		return false
	}
	if m.any {
		return true
	}
	for _, u := range n.uris {
		if matchStr(&m.sm, u) {
			return true
		}
	}
	for _, d := range n.dnsSANs {
		if matchStr(&m.sm, d) {
			return true
		}
	}
	return matchStr(&m.sm, n.subject)
}

// matchStr is matchString of a string, without converting it.
func matchStr(hm *headerMatch, v string) bool {
	if hm.kind == strRegex {
		return hm.re.MatchString(v)
	}
	w := hm.value
	if hm.ignoreCase {
		switch hm.kind {
		case strExact:
			return strings.EqualFold(v, w)
		case strPrefix:
			return len(v) >= len(w) && strings.EqualFold(v[:len(w)], w)
		case strSuffix:
			return len(v) >= len(w) && strings.EqualFold(v[len(v)-len(w):], w)
		case strContains:
			return strings.Contains(strings.ToLower(v), w)
		}
		return false
	}
	switch hm.kind {
	case strExact:
		return v == w
	case strPrefix:
		return strings.HasPrefix(v, w)
	case strSuffix:
		return strings.HasSuffix(v, w)
	case strContains:
		return strings.Contains(v, w)
	}
	return false
}

// Compilation.

// decodeHTTPFilters reads an HCM's http_filters: the RBAC filters and the
// JWT authentication filter, in order. The others (the router, and filters Envoy would run) are not the
// gateway's to run; an RBAC filter it cannot read is refused.
func decodeHTTPFilters(fs []*hcm.HttpFilter, path string) ([]*rbacFilter, error) {
	var out []*rbacFilter
	for i, f := range fs {
		p := fmt.Sprintf("%s.http_filters[%d]", path, i)
		a := f.GetTypedConfig()
		if a.GetTypeUrl() == jwtTypeURL || f.GetName() == jwtFilterName {
			jf, err := decodeJWTFilter(f, p)
			if err != nil {
				return nil, err
			}
			out = append(out, jf)
			continue
		}
		if a.GetTypeUrl() != rbacTypeURL && f.GetName() != rbacFilterName {
			continue
		}
		if a != nil && a.GetTypeUrl() != rbacTypeURL {
			// Named RBAC but of another type (a TypedStruct...): refused,
			// never skipped, or its calls would pass unchecked.
			return nil, fieldErr(p+".typed_config", "type %q: the RBAC filter needs %q", a.GetTypeUrl(), rbacTypeURL)
		}
		if f.GetConfigDiscovery() != nil {
			return nil, fieldErr(p+".config_discovery", "the RBAC filter's config must be inline (typed_config)")
		}
		cfg := new(rbachttp.RBAC)
		if a != nil {
			if err := a.UnmarshalTo(cfg); err != nil {
				return nil, fieldErr(p+".typed_config", "%v", err)
			}
		}
		rf, err := compileRBACFilter(f.GetName(), cfg, p+".typed_config")
		if err != nil {
			return nil, err
		}
		rf.disabled = f.GetDisabled()
		out = append(out, rf)
	}
	return out, nil
}

func compileRBACFilter(name string, cfg *rbachttp.RBAC, path string) (*rbacFilter, error) {
	f := &rbacFilter{name: name}
	switch {
	case cfg.GetMatcher() != nil:
		return nil, fieldErr(path+".matcher", "the matcher API is not supported by the gateway (use rules)")
	case cfg.GetShadowMatcher() != nil:
		return nil, fieldErr(path+".shadow_matcher", "the matcher API is not supported by the gateway (use shadow_rules)")
	}
	var err error
	if r := cfg.GetRules(); r != nil {
		if f.rules, err = compileRBAC(r, path+".rules"); err != nil {
			return nil, err
		}
	}
	if r := cfg.GetShadowRules(); r != nil {
		if f.shadow, err = compileRBAC(r, path+".shadow_rules"); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func compileRBAC(r *rbacpb.RBAC, path string) (*rbacEngine, error) {
	e := &rbacEngine{}
	switch r.GetAction() {
	case rbacpb.RBAC_ALLOW:
		e.action = rbacAllow
	case rbacpb.RBAC_DENY:
		e.action = rbacDeny
	case rbacpb.RBAC_LOG:
		e.action = rbacLog
	default:
		return nil, fieldErr(path+".action", "%v is not supported by the gateway (ALLOW, DENY, LOG)", r.GetAction())
	}
	if r.GetAuditLoggingOptions() != nil {
		return nil, fieldErr(path+".audit_logging_options", "not supported by the gateway (denials are in the call log)")
	}
	names := make([]string, 0, len(r.GetPolicies()))
	for n := range r.GetPolicies() {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := r.GetPolicies()[n]
		pp := fmt.Sprintf("%s.policies[%q]", path, n)
		switch {
		case p.GetCondition() != nil:
			return nil, fieldErr(pp+".condition", "CEL conditions are not supported by the gateway")
		case p.GetCheckedCondition() != nil:
			return nil, fieldErr(pp+".checked_condition", "CEL conditions are not supported by the gateway")
		case len(p.GetPermissions()) == 0:
			return nil, fieldErr(pp+".permissions", "empty")
		case len(p.GetPrincipals()) == 0:
			return nil, fieldErr(pp+".principals", "empty")
		}
		cp := rbacPolicy{name: n}
		for i, perm := range p.GetPermissions() {
			m, err := compilePermission(perm, fmt.Sprintf("%s.permissions[%d]", pp, i), 0)
			if err != nil {
				return nil, err
			}
			cp.perms = append(cp.perms, m)
		}
		for i, pr := range p.GetPrincipals() {
			m, err := compilePrincipal(pr, fmt.Sprintf("%s.principals[%d]", pp, i), 0)
			if err != nil {
				return nil, err
			}
			cp.principals = append(cp.principals, m)
		}
		e.policies = append(e.policies, cp)
	}
	return e, nil
}

// maxRBACDepth bounds and/or/not nesting (a hostile config cannot make
// evaluation recurse without end).
const maxRBACDepth = 32

func compilePermission(p *rbacpb.Permission, path string, depth int) (rbacMatcher, error) {
	if depth > maxRBACDepth {
		return nil, fieldErr(path, "nested deeper than %d", maxRBACDepth)
	}
	set := func(rules []*rbacpb.Permission, field string) ([]rbacMatcher, error) {
		if len(rules) == 0 {
			return nil, fieldErr(path+"."+field+".rules", "empty")
		}
		out := make([]rbacMatcher, 0, len(rules))
		for i, c := range rules {
			m, err := compilePermission(c, fmt.Sprintf("%s.%s.rules[%d]", path, field, i), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_Any:
		if !r.Any {
			return nil, fieldErr(path+".any", "must be true")
		}
		return matchAny{}, nil
	case *rbacpb.Permission_AndRules:
		ms, err := set(r.AndRules.GetRules(), "and_rules")
		return matchAnd(ms), err
	case *rbacpb.Permission_OrRules:
		ms, err := set(r.OrRules.GetRules(), "or_rules")
		return matchOr(ms), err
	case *rbacpb.Permission_NotRule:
		m, err := compilePermission(r.NotRule, path+".not_rule", depth+1)
		return matchNot{m}, err
	case *rbacpb.Permission_Header:
		return compileRBACHeader(r.Header, path+".header")
	case *rbacpb.Permission_UrlPath:
		return compileURLPath(r.UrlPath, path+".url_path")
	case *rbacpb.Permission_DestinationPort:
		if r.DestinationPort > 65535 {
			return nil, fieldErr(path+".destination_port", "%d above 65535", r.DestinationPort)
		}
		return matchPort{r.DestinationPort, r.DestinationPort}, nil
	case *rbacpb.Permission_DestinationPortRange:
		lo, hi := r.DestinationPortRange.GetStart(), r.DestinationPortRange.GetEnd()
		if lo < 0 || hi > 65536 || lo >= hi {
			return nil, fieldErr(path+".destination_port_range", "[%d, %d): want 0 <= start < end <= 65536", lo, hi)
		}
		return matchPort{uint32(lo), uint32(hi - 1)}, nil
	case *rbacpb.Permission_DestinationIp:
		pfx, err := cidr(r.DestinationIp.GetAddressPrefix(), r.DestinationIp.GetPrefixLen().GetValue(), path+".destination_ip")
		return matchCIDR{p: pfx}, err
	case *rbacpb.Permission_RequestedServerName:
		sm, err := decodeStringMatcher(r.RequestedServerName, path+".requested_server_name")
		return &matchSNI{sm}, err
	case *rbacpb.Permission_Metadata:
		return compileMetadata(r.Metadata, path+".metadata")
	case nil:
		return nil, fieldErr(path+".rule", "required")
	default:
		return nil, fieldErr(path+"."+ruleField(p.ProtoReflect()), "not supported by the gateway")
	}
}

func compilePrincipal(p *rbacpb.Principal, path string, depth int) (rbacMatcher, error) {
	if depth > maxRBACDepth {
		return nil, fieldErr(path, "nested deeper than %d", maxRBACDepth)
	}
	set := func(ids []*rbacpb.Principal, field string) ([]rbacMatcher, error) {
		if len(ids) == 0 {
			return nil, fieldErr(path+"."+field+".ids", "empty")
		}
		out := make([]rbacMatcher, 0, len(ids))
		for i, c := range ids {
			m, err := compilePrincipal(c, fmt.Sprintf("%s.%s.ids[%d]", path, field, i), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	remote := func(c interface {
		GetAddressPrefix() string
	}, plen uint32, field string) (rbacMatcher, error) {
		pfx, err := cidr(c.GetAddressPrefix(), plen, path+"."+field)
		return matchCIDR{p: pfx, remote: true}, err
	}
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_Any:
		if !id.Any {
			return nil, fieldErr(path+".any", "must be true")
		}
		return matchAny{}, nil
	case *rbacpb.Principal_AndIds:
		ms, err := set(id.AndIds.GetIds(), "and_ids")
		return matchAnd(ms), err
	case *rbacpb.Principal_OrIds:
		ms, err := set(id.OrIds.GetIds(), "or_ids")
		return matchOr(ms), err
	case *rbacpb.Principal_NotId:
		m, err := compilePrincipal(id.NotId, path+".not_id", depth+1)
		return matchNot{m}, err
	case *rbacpb.Principal_Authenticated_:
		if id.Authenticated.GetPrincipalName() == nil {
			return &matchPrincipal{any: true}, nil
		}
		sm, err := decodeStringMatcher(id.Authenticated.GetPrincipalName(), path+".authenticated.principal_name")
		return &matchPrincipal{sm: sm}, err
	case *rbacpb.Principal_SourceIp:
		return remote(id.SourceIp, id.SourceIp.GetPrefixLen().GetValue(), "source_ip")
	case *rbacpb.Principal_DirectRemoteIp:
		return remote(id.DirectRemoteIp, id.DirectRemoteIp.GetPrefixLen().GetValue(), "direct_remote_ip")
	case *rbacpb.Principal_RemoteIp:
		// The gateway trusts no X-Forwarded-For: the remote address is the
		// peer's, as Envoy's with xff_num_trusted_hops 0.
		return remote(id.RemoteIp, id.RemoteIp.GetPrefixLen().GetValue(), "remote_ip")
	case *rbacpb.Principal_Header:
		return compileRBACHeader(id.Header, path+".header")
	case *rbacpb.Principal_UrlPath:
		return compileURLPath(id.UrlPath, path+".url_path")
	case *rbacpb.Principal_Metadata:
		return compileMetadata(id.Metadata, path+".metadata")
	case nil:
		return nil, fieldErr(path+".identifier", "required")
	default:
		return nil, fieldErr(path+"."+ruleField(p.ProtoReflect()), "not supported by the gateway")
	}
}

func compileRBACHeader(h *route.HeaderMatcher, path string) (rbacMatcher, error) {
	hm, err := decodeHeaderMatcher(h, path)
	if err != nil {
		return nil, err
	}
	m := &matchHeader{hm: hm}
	if strings.HasPrefix(hm.name, ":") {
		switch hm.name {
		case ":method", ":path", ":authority", ":scheme":
			m.pseudo = hm.name
		default:
			return nil, fieldErr(path+".name", "pseudo-header %q: want :method, :path, :authority or :scheme", hm.name)
		}
	} else if hm.name == "host" {
		m.pseudo = ":authority" // Envoy reads Host as :authority
	}
	return m, nil
}

func compileURLPath(p *matcher.PathMatcher, path string) (rbacMatcher, error) {
	sm := p.GetPath()
	if sm == nil {
		return nil, fieldErr(path+".path", "required")
	}
	m, err := decodeStringMatcher(sm, path+".path")
	return &matchURLPath{m}, err
}

// decodeStringMatcher reads an Envoy StringMatcher into a headerMatch's
// string part (matchString evaluates it).
func decodeStringMatcher(sm *matcher.StringMatcher, path string) (headerMatch, error) {
	hm := headerMatch{ignoreCase: sm.GetIgnoreCase()}
	switch p := sm.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		hm.kind, hm.value = strExact, p.Exact
	case *matcher.StringMatcher_Prefix:
		hm.kind, hm.value = strPrefix, p.Prefix
	case *matcher.StringMatcher_Suffix:
		hm.kind, hm.value = strSuffix, p.Suffix
	case *matcher.StringMatcher_Contains:
		hm.kind, hm.value = strContains, p.Contains
	case *matcher.StringMatcher_SafeRegex:
		re, err := compileRegex(p.SafeRegex.GetRegex(), hm.ignoreCase)
		if err != nil {
			return hm, fieldErr(path+".safe_regex.regex", "%v", err)
		}
		hm.kind, hm.re = strRegex, re
	case nil:
		return hm, fieldErr(path+".match_pattern", "required")
	default:
		return hm, fieldErr(path, "pattern %T: %v", p, errUnsupported)
	}
	if hm.ignoreCase {
		hm.value = strings.ToLower(hm.value)
	}
	return hm, nil
}

func cidr(addr string, plen uint32, path string) (netip.Prefix, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fieldErr(path+".address_prefix", "%q is not an IP address", addr)
	}
	a = a.Unmap()
	if int(plen) > a.BitLen() {
		return netip.Prefix{}, fieldErr(path+".prefix_len", "%d longer than the address", plen)
	}
	return netip.PrefixFrom(a, int(plen)).Masked(), nil
}

// ruleField names the oneof member set in a Permission or Principal (for
// the refusal of the ones the gateway does not evaluate).
func ruleField(m protoreflect.Message) string {
	if ods := m.Descriptor().Oneofs(); ods.Len() > 0 {
		if fd := m.WhichOneof(ods.Get(0)); fd != nil {
			return string(fd.Name())
		}
	}
	return "rule"
}

// Per-route overrides.

// rbacOverride is a route's (or virtual host's) typed_per_filter_config
// for an RBAC filter: a replacement filter, or disabled.
type rbacOverride struct {
	filter   *rbacFilter // nil with disabled
	disabled bool
}

// decodeRBACOverrides reads the RBAC entries of a typed_per_filter_config.
// Entries of other filters are ignored: the gateway runs no other filter.
func decodeRBACOverrides(m map[string]*anypb.Any, path string) (map[string]rbacOverride, error) {
	var out map[string]rbacOverride
	for name, a := range m {
		p := fmt.Sprintf("%s.typed_per_filter_config[%q]", path, name)
		disabled := false
		if a.GetTypeUrl() == filterConfigURL {
			fc := new(route.FilterConfig)
			if err := a.UnmarshalTo(fc); err != nil {
				return nil, fieldErr(p, "%v", err)
			}
			disabled, a = fc.GetDisabled(), fc.GetConfig()
			p += ".config"
			if a == nil && !disabled {
				continue
			}
		}
		if a != nil && a.GetTypeUrl() != rbacRouteURL {
			if name == rbacFilterName {
				return nil, fieldErr(p, "type %q: an RBAC override needs %q", a.GetTypeUrl(), rbacRouteURL)
			}
			continue // another filter's: the gateway runs no other
		}
		o := rbacOverride{disabled: disabled}
		if a != nil && !disabled {
			pr := new(rbachttp.RBACPerRoute)
			if err := a.UnmarshalTo(pr); err != nil {
				return nil, fieldErr(p, "%v", err)
			}
			if pr.GetRbac() == nil {
				o.disabled = true // Envoy: an override without rbac disables the filter here
			} else {
				f, err := compileRBACFilter(name, pr.GetRbac(), p+".rbac")
				if err != nil {
					return nil, err
				}
				o.filter = f
			}
		}
		if out == nil {
			out = map[string]rbacOverride{}
		}
		out[name] = o
	}
	return out, nil
}

// Enforcement.

// rbacCheck runs the listener's RBAC filters, with the route's overrides,
// over a call. It returns 403, with the policy that denied it (or why no
// policy allowed it), when a filter denies the call, 401 with why when the
// JWT filter refuses its token, 0 when it passes; shadow names the
// first shadow engine's denial, for the call record. Call's goroutine.
func (g *Gateway) rbacCheck(ctx *fasthttp.RequestCtx, filters []*rbacFilter, r *routeRT) (status int, policy, shadow string) {
	var req rbacReq
	req.of(ctx)
	for _, f := range filters {
		if f = effective(f, r.spec.rbac); f == nil {
			continue
		}
		if f.jwt != nil {
			if err := f.jwt.verify(ctx, &req, g.jwks, time.Now()); err != nil {
				g.metrics.rbac[rbacJWTFailed].Inc()
				return fasthttp.StatusUnauthorized, err.Error(), shadow
			}
			continue
		}
		if e := f.shadow; e != nil {
			allowed, p := e.evaluate(&req)
			if allowed {
				g.metrics.rbac[rbacShadowAllowed].Inc()
			} else {
				g.metrics.rbac[rbacShadowDenied].Inc()
				if shadow == "" {
					shadow = "shadow denied: " + denial(f, p)
				}
			}
		}
		e := f.rules
		if e == nil {
			continue
		}
		allowed, p := e.evaluate(&req)
		switch {
		case e.action == rbacLog:
			if p != "" {
				g.metrics.rbac[rbacLogged].Inc()
			}
		case allowed:
			g.metrics.rbac[rbacAllowed].Inc()
		default:
			g.metrics.rbac[rbacDenied].Inc()
			return fasthttp.StatusForbidden, denial(f, p), shadow
		}
	}
	return 0, "", shadow
}

// of fills r from a call: its header, path and connection. It allocates
// nothing (an HTTP/2 call over TLS has no names yet: matchPrincipal or
// sourceOf derive them).
func (r *rbacReq) of(ctx *fasthttp.RequestCtx) {
	*r = rbacReq{h: &ctx.Request.Header, scheme: schemeHTTP}
	uri := r.h.RequestURI()
	r.path = uri
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		r.path = uri[:i]
	}
	r.peer, r.local = connAddrsOf(ctx)
	if tc, isTLS := ctx.Conn().(*tlsServerConn); isTLS {
		r.tls, r.scheme, r.names = tc.state, schemeHTTPS, &tc.peer
	} else if cs := ctx.TLSConnectionState(); cs != nil {
		r.tls, r.scheme = cs, schemeHTTPS
	}
}

// connAddrsOf is the addresses of the connection ctx's request came on, as
// rbacReq reads them: an HTTP/1.1 connection's kept in its connAddrs, an
// HTTP/2 stream's stand-in's (shared by its streams) read at each call.
func connAddrsOf(ctx *fasthttp.RequestCtx) (netip.Addr, netip.AddrPort) {
	switch c := ctx.Conn().(type) {
	case *lfConn:
		return c.addrs.of(c)
	case *tlsServerConn:
		return c.addrs.of(c)
	}
	return addrsOf(ctx.RemoteAddr(), ctx.LocalAddr())
}

// connAddrs keeps an HTTP/1.1 connection's addresses as rbacReq reads
// them, taken at its first request instead of at each (through the
// connection's wrappers, 2-3% of a request's user CPU, issue 48). Its
// requests are served one after another on its goroutine, which alone
// reads and sets it.
type connAddrs struct {
	read  bool
	peer  netip.Addr
	local netip.AddrPort
}

func (a *connAddrs) of(c net.Conn) (netip.Addr, netip.AddrPort) {
	if !a.read {
		a.peer, a.local = addrsOf(c.RemoteAddr(), c.LocalAddr())
		a.read = true
	}
	return a.peer, a.local
}

// appendPeerIP appends the client's address as X-Forwarded-For carries it
// (an IPv4 one as IPv4, as fasthttp's RemoteIP writes it), from
// connAddrsOf: RemoteIP goes through the connection's wrappers at each
// request.
func appendPeerIP(b []byte, ctx *fasthttp.RequestCtx) []byte {
	p, _ := connAddrsOf(ctx)
	if !p.IsValid() {
		return append(b, "0.0.0.0"...) // RemoteIP's for an address not TCP's
	}
	b, _ = p.Unmap().AppendText(b)
	return b
}

// addrsOf is rbacReq's peer (as it came) and local address (IPv4-mapped
// as IPv4) of a connection's two addresses.
func addrsOf(remote, local net.Addr) (peer netip.Addr, l netip.AddrPort) {
	if ta, isTCP := remote.(*net.TCPAddr); isTCP {
		peer, _ = netip.AddrFromSlice(ta.IP)
	}
	if ta, isTCP := local.(*net.TCPAddr); isTCP {
		a, _ := netip.AddrFromSlice(ta.IP)
		l = netip.AddrPortFrom(a.Unmap(), uint16(ta.Port))
	}
	return peer, l
}

// callSource is what a call record keeps of the request and its
// connection, so that a dry run (dryrun.go) can replay the call against
// another RBAC policy: what rbacReq reads, less the headers.
type callSource struct {
	principal, subject string
	method, path, host string
	port               uint16
	peer               netip.Addr
	conn               calllog.ConnFlags
}

// sourceOf reads a call's source from the request and its connection
// (rbacReq.of, the names RBAC matches); before the request is rewritten
// for the upstream. The method, path and host share one string, interned
// (sourceNames): a source seen before costs no allocation, a new one one.
// Call's goroutine.
func sourceOf(ctx *fasthttp.RequestCtx) callSource {
	var r rbacReq
	r.of(ctx)
	h := r.h
	m, host := h.Method(), h.Host()
	var buf [256]byte
	all := append(append(append(buf[:0], m...), r.path...), host...)
	s := sourceNames.intern(all)
	src := callSource{method: s[:len(m)], path: s[len(m) : len(m)+len(r.path)], host: s[len(m)+len(r.path):],
		port: r.local.Port(), peer: r.peer.Unmap()}
	if r.tls == nil {
		return src
	}
	src.conn |= calllog.ConnTLS
	if r.names == nil {
		n := peerNamesOf(r.tls)
		r.names = &n
	}
	if n := r.names; n.ok {
		src.conn |= calllog.ConnPeerCert
		src.subject = n.subject
		if len(n.uris) > 0 {
			src.principal = n.uris[0]
		}
		if len(n.uris) > 1 || len(n.dnsSANs) > 0 {
			src.conn |= calllog.ConnOtherNames
		}
	}
	return src
}

// effective is the filter f runs as on a route with overrides ov: its
// override, f itself, or nil when the route or the listener disables it.
func effective(f *rbacFilter, ov map[string]rbacOverride) *rbacFilter {
	if o, has := ov[f.name]; has {
		if o.disabled {
			return nil
		}
		if o.filter != nil {
			return o.filter
		}
		return f
	}
	if f.disabled {
		return nil
	}
	return f
}

// denial names what denied a call: the policy, or, for an ALLOW engine
// that matched none, the filter.
func denial(f *rbacFilter, policy string) string {
	if policy != "" {
		return policy
	}
	return f.name + ": no policy allowed the call"
}

// RBAC results counted by metricsSet.rbac.
const (
	rbacAllowed = iota
	rbacDenied
	rbacShadowAllowed
	rbacShadowDenied
	rbacLogged
	rbacJWTFailed
	rbacResults
)

var rbacResultNames = [rbacResults]string{"allowed", "denied", "shadow_allowed", "shadow_denied", "logged", "jwt_failed"}

// rbacShadowKey is the request's user value naming a shadow denial.
const rbacShadowKey = "sextant.rbac.shadow"

// authorize runs the JWT and RBAC filters of t over a call routed to r. A
// denied call is answered 403 "RBAC: access denied" (Envoy's answer) and
// recorded with reason rbac_denied and the policy, a call whose token fails
// 401 (reason jwt_authn_failed, with why); it returns false then. A shadow
// denial is kept for the call's record. Call's goroutine.
func (g *Gateway) authorize(ctx *fasthttp.RequestCtx, t *table, r *routeRT) bool {
	status, policy, shadow := g.rbacCheck(ctx, t.rbac, r)
	if shadow != "" {
		ctx.SetUserValue(rbacShadowKey, shadow)
	}
	if status == 0 {
		return true
	}
	start := time.Now()
	reason, body := reasonRBAC, rbacDeniedBody
	if status == fasthttp.StatusUnauthorized {
		reason, body = reasonJWT, jwtDenied(ctx, policy)
	} else {
		ctx.Response.Reset()
		ctx.SetStatusCode(fasthttp.StatusForbidden)
		ctx.SetContentType("text/plain")
		ctx.Response.Header.Set(ErrorHeader, reasonRBAC)
		ctx.Response.Header.Set("Via", viaValue)
		ctx.SetBodyString(rbacDeniedBody)
	}
	if len(r.targets) == 0 {
		return false
	}
	tg := r.pick()
	if tg.cluster == nil {
		return false
	}
	k := call{c: tg.cluster, status: status, reason: reason, detail: policy, grpc: -1}
	lat := time.Since(start)
	k.c.m.observe(k.status, lat)
	if g.rec != nil {
		k.src = sourceOf(ctx)
		g.recordCall(&k, r, tg.mdKey, start, lat, int64(len(body)))
	}
	return false
}

// rbacShadow is the shadow denial authorize kept for the call ("": none).
func rbacShadow(ctx *fasthttp.RequestCtx) string {
	if v, ok := ctx.UserValue(rbacShadowKey).(string); ok {
		return v
	}
	return ""
}

// sourceNames interns the method+path+host strings of call sources: the
// call record keeps them past the call, and a fresh string per call was
// the HTTP/1.1 path's only allocation. Bounded: past sourceNamesMax
// entries, or for a longer string, a new one is allocated, not kept.
var sourceNames = nameIntern{m: map[string]string{}}

const (
	sourceNamesMax = 4096
	sourceNameMax  = 256
)

// nameIntern is a bounded intern table; any goroutine.
type nameIntern struct {
	mu sync.RWMutex
	m  map[string]string
}

func (n *nameIntern) intern(b []byte) string {
	n.mu.RLock()
	s, ok := n.m[string(b)] // no allocation for the lookup
	n.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	if len(b) <= sourceNameMax {
		n.mu.Lock()
		if len(n.m) < sourceNamesMax {
			n.m[s] = s
		}
		n.mu.Unlock()
	}
	return s
}
