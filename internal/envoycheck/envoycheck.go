// Package envoycheck checks what an xDS server serves one node against
// the rules Envoy (and proxyless gRPC) apply when they take a resource:
// go-control-plane's generated validation (ValidateAll, the API's
// protoc-gen-validate rules) of every resource and of every typed_config
// inside it, reference integrity (every cluster a route or a TCP proxy
// names, every EDS, RDS and SDS name a resource names, is served), and
// rules of Envoy's own code that no schema carries. No Envoy binary can
// run on the machines that build Sextant (no Debian package, no
// downloads), so each such rule is encoded here with the Envoy source it
// comes from. A test or a command fills a Served and calls Check.
package envoycheck

import (
	"fmt"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// The typed configs Sextant's resources carry, registered so that
	// their contents are validated too.
	_ "github.com/cncf/xds/go/xds/type/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// TLSInspector is the name of Envoy's TLS inspector listener filter.
const TLSInspector = "envoy.filters.listener.tls_inspector"

// Served is what one node was served, by resource name.
type Served struct {
	Clusters  map[string]*clusterv3.Cluster
	Endpoints map[string]*endpointv3.ClusterLoadAssignment
	Listeners map[string]*listenerv3.Listener
	Routes    map[string]*routev3.RouteConfiguration
	Secrets   map[string]*tlsv3.Secret
}

// NewServed returns an empty Served.
func NewServed() *Served {
	return &Served{Clusters: map[string]*clusterv3.Cluster{}, Endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		Listeners: map[string]*listenerv3.Listener{}, Routes: map[string]*routev3.RouteConfiguration{}, Secrets: map[string]*tlsv3.Secret{}}
}

// Add files a decoded resource under its name; other types are refused.
func (s *Served) Add(m proto.Message) error {
	switch r := m.(type) {
	case *clusterv3.Cluster:
		s.Clusters[r.Name] = r
	case *endpointv3.ClusterLoadAssignment:
		s.Endpoints[r.ClusterName] = r
	case *listenerv3.Listener:
		s.Listeners[r.Name] = r
	case *routev3.RouteConfiguration:
		s.Routes[r.Name] = r
	case *tlsv3.Secret:
		s.Secrets[r.Name] = r
	default:
		return fmt.Errorf("envoycheck: %T is not an xDS resource type it checks", m)
	}
	return nil
}

// Refs are the names resources refer to, by type: what a client asks
// for next.
type Refs struct {
	Clusters, Endpoints, Routes, Secrets []string
}

// Rules says which of Envoy's own rules apply: Envoy's for an Envoy node;
// for proxyless gRPC only the schema, references and the TLS inspector
// wherever server_names are matched (a gateway's listeners).
type Rules struct {
	Envoy bool
	// AgentCluster is the bootstrap cluster of the node's local SDS agent
	// ("sds-grpc"), "" when it has none: secrets from it are the agent's.
	AgentCluster string
}

// Check returns every violation in s, each naming the resource, what is
// wrong and the rule's source; nil when there are none.
func Check(s *Served, rules Rules) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, m := range s.all() {
		for _, err := range validateDeep(m.msg, m.what) {
			bad("%s", err)
		}
	}
	refs := s.References()
	for _, n := range refs.Clusters {
		if s.Clusters[n] == nil {
			bad("cluster %q is named (a route or TCP proxy) but not served", n)
		}
	}
	for _, n := range refs.Endpoints {
		if s.Endpoints[n] == nil {
			bad("endpoints %q are named by an EDS cluster but not served", n)
		}
	}
	for _, n := range refs.Routes {
		if s.Routes[n] == nil {
			bad("route configuration %q is named by a listener (RDS) but not served", n)
		}
	}
	for _, n := range refs.Secrets {
		if s.Secrets[n] == nil {
			bad("secret %q is named (SDS) but not served", n)
		}
	}
	for _, name := range sorted(s.Listeners) {
		l := s.Listeners[name]
		if needsInspector(l, rules.Envoy) && !hasInspector(l) {
			// Envoy selects a chain by server_names, application_protocols
			// or transport_protocol "tls" only from what the TLS inspector
			// read; it once added the inspector itself
			// (source/server/listener_impl.cc, needTlsInspector) and no
			// longer does (envoy.reloadable_features.disable_tls_inspector_injection,
			// then removed): without it such a chain is never chosen.
			bad("listener %q matches server_names/transport_protocol tls without %s", name, TLSInspector)
		}
	}
	for _, tc := range s.tlsContexts() {
		out = append(out, checkTLS(s, tc, rules)...)
	}
	return out
}

// checkTLS applies Envoy's rules to one TLS context.
func checkTLS(s *Served, tc tlsContext, rules Rules) []string {
	if !rules.Envoy {
		return nil
	}
	var out []string
	c := tc.common
	for _, sc := range c.GetTlsCertificateSdsSecretConfigs() {
		if a := agentSDS(sc); a != "" && a != rules.AgentCluster {
			out = append(out, fmt.Sprintf("%s: certificate by SDS from cluster %q, which the node's bootstrap does not have", tc.where, a))
		}
	}
	if c.GetTlsCertificateProviderInstance() != nil || c.GetTlsCertificateCertificateProvider() != nil {
		// Envoy implements no certificate provider instance (gRFC A29's
		// fields are proxyless gRPC's): such a certificate is absent.
		out = append(out, fmt.Sprintf("%s: names a certificate provider instance, which Envoy does not implement", tc.where))
	}
	if tc.server && len(c.GetTlsCertificates())+len(c.GetTlsCertificateSdsSecretConfigs()) == 0 {
		// source/common/tls/server_context_config_impl.cc:
		// "No TLS certificates found for server context".
		out = append(out, fmt.Sprintf("%s: a server TLS context without a certificate (Envoy: No TLS certificates found for server context)", tc.where))
	}
	vc, trusted := c.GetValidationContext(), false
	if comb := c.GetCombinedValidationContext(); comb != nil {
		vc = comb.GetDefaultValidationContext()
		// Envoy merges the SDS validation context into the default one
		// (source/common/tls/context_config_impl.cc): its trusted_ca counts.
		sc := comb.GetValidationContextSdsSecretConfig()
		if sec := s.Secrets[sc.GetName()]; sec != nil && sec.GetValidationContext().GetTrustedCa() != nil {
			trusted = true
		}
		// From a local agent: its roots are the agent's to serve
		// (TestIdentityAgentServesSDS), out of this check's sight, as long
		// as the node's bootstrap has that cluster (rules.AgentCluster).
		if c := agentSDS(sc); c != "" {
			if c != rules.AgentCluster {
				out = append(out, fmt.Sprintf("%s: roots by SDS from cluster %q, which the node's bootstrap does not have", tc.where, c))
			}
			trusted = true
		}
	}
	if sds := c.GetValidationContextSdsSecretConfig(); sds != nil {
		if sec := s.Secrets[sds.GetName()]; sec != nil {
			vc = sec.GetValidationContext()
		}
	}
	if vc.GetTrustedCa() != nil {
		trusted = true
	}
	if !trusted && (len(vc.GetMatchSubjectAltNames()) > 0 || len(vc.GetMatchTypedSubjectAltNames()) > 0) { //nolint:staticcheck // both fields count
		// source/common/ssl/certificate_validation_context_config_impl.cc:
		// "SAN-based verification of peer certificates without trusted CA
		// is insecure and not allowed".
		out = append(out, fmt.Sprintf("%s: SAN matchers without a trusted CA (Envoy: SAN-based verification of peer certificates without trusted CA is insecure and not allowed)", tc.where))
	}
	if vc.GetCaCertificateProviderInstance() != nil && !trusted {
		out = append(out, fmt.Sprintf("%s: roots from a certificate provider instance, which Envoy does not implement", tc.where))
	}
	return out
}

type named struct {
	what string
	msg  proto.Message
}

func (s *Served) all() []named {
	var out []named
	for _, n := range sorted(s.Clusters) {
		out = append(out, named{"cluster " + n, s.Clusters[n]})
	}
	for _, n := range sorted(s.Endpoints) {
		out = append(out, named{"endpoints " + n, s.Endpoints[n]})
	}
	for _, n := range sorted(s.Listeners) {
		out = append(out, named{"listener " + n, s.Listeners[n]})
	}
	for _, n := range sorted(s.Routes) {
		out = append(out, named{"route configuration " + n, s.Routes[n]})
	}
	for _, n := range sorted(s.Secrets) {
		out = append(out, named{"secret " + n, s.Secrets[n]})
	}
	return out
}

func sorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Validate runs ValidateAll on m and on every typed_config (Any) inside
// it, and names each failure with where.
func Validate(where string, m proto.Message) []string { return validateDeep(m, where) }

func validateDeep(m proto.Message, where string) []string {
	var out []string
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", where, err))
		}
	}
	walkAny(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			out = append(out, fmt.Sprintf("%s: typed_config %s: %v", where, a.GetTypeUrl(), err))
			return
		}
		out = append(out, validateDeep(inner, where+" > "+strings.TrimPrefix(a.GetTypeUrl(), "type.googleapis.com/"))...)
	})
	return out
}

// walkAny calls f with every Any directly inside m (not inside another
// Any: f's caller recurses).
func walkAny(m protoreflect.Message, f func(*anypb.Any)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		visit := func(x protoreflect.Message) {
			if a, ok := x.Interface().(*anypb.Any); ok {
				f(a)
				return
			}
			walkAny(x, f)
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visit(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(mv.Message())
					return true
				})
			}
		default:
			visit(v.Message())
		}
		return true
	})
}

// References returns the names s's resources refer to, sorted, each once.
func (s *Served) References() Refs {
	set := map[string]map[string]bool{"c": {}, "e": {}, "r": {}, "s": {}}
	for _, c := range s.Clusters {
		if c.GetType() == clusterv3.Cluster_EDS || c.GetEdsClusterConfig() != nil {
			n := c.GetEdsClusterConfig().GetServiceName()
			if n == "" {
				n = c.Name
			}
			set["e"][n] = true
		}
	}
	for _, l := range s.Listeners {
		for _, h := range hcms(l) {
			if rds := h.GetRds(); rds != nil {
				set["r"][rds.GetRouteConfigName()] = true
			}
			if rc := h.GetRouteConfig(); rc != nil {
				routeClusters(rc, set["c"])
			}
		}
		for _, fc := range append(slices.Clone(l.FilterChains), l.DefaultFilterChain) {
			for _, f := range fc.GetFilters() {
				tp := &tcpproxyv3.TcpProxy{}
				if f.GetTypedConfig().MessageIs(tp) && f.GetTypedConfig().UnmarshalTo(tp) == nil {
					if c := tp.GetCluster(); c != "" {
						set["c"][c] = true
					}
					for _, w := range tp.GetWeightedClusters().GetClusters() {
						set["c"][w.GetName()] = true
					}
				}
			}
		}
	}
	for _, rc := range s.Routes {
		routeClusters(rc, set["c"])
	}
	for _, tc := range s.tlsContexts() {
		for _, sc := range tc.common.GetTlsCertificateSdsSecretConfigs() {
			if fromADS(sc) {
				set["s"][sc.GetName()] = true
			}
		}
		if sc := tc.common.GetValidationContextSdsSecretConfig(); sc != nil && fromADS(sc) {
			set["s"][sc.GetName()] = true
		}
		if sc := tc.common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); sc != nil && fromADS(sc) {
			set["s"][sc.GetName()] = true
		}
	}
	list := func(k string) []string { return sorted(set[k]) }
	return Refs{Clusters: list("c"), Endpoints: list("e"), Routes: list("r"), Secrets: list("s")}
}

// fromADS reports whether a secret comes on the ADS stream (what a
// Served holds); one from another source (a local agent's socket, by a
// bootstrap cluster) is out of its sight.
func fromADS(sc *tlsv3.SdsSecretConfig) bool {
	return sc.GetSdsConfig() == nil || sc.GetSdsConfig().GetAds() != nil
}

// agentSDS returns the bootstrap cluster a secret comes from when it is
// not ADS ("" when it is).
func agentSDS(sc *tlsv3.SdsSecretConfig) string {
	if fromADS(sc) {
		return ""
	}
	for _, g := range sc.GetSdsConfig().GetApiConfigSource().GetGrpcServices() {
		if c := g.GetEnvoyGrpc().GetClusterName(); c != "" {
			return c
		}
	}
	return "?"
}

func routeClusters(rc *routev3.RouteConfiguration, into map[string]bool) {
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if c := a.GetCluster(); c != "" {
				into[c] = true
			}
			for _, w := range a.GetWeightedClusters().GetClusters() {
				into[w.GetName()] = true
			}
			for _, m := range a.GetRequestMirrorPolicies() {
				into[m.GetCluster()] = true
			}
		}
	}
}

// hcms returns the HTTP connection managers of l: its API listener's and
// its filter chains'.
func hcms(l *listenerv3.Listener) []*hcmv3.HttpConnectionManager {
	var out []*hcmv3.HttpConnectionManager
	add := func(a *anypb.Any) {
		h := &hcmv3.HttpConnectionManager{}
		if a.MessageIs(h) && a.UnmarshalTo(h) == nil {
			out = append(out, h)
		}
	}
	if api := l.GetApiListener().GetApiListener(); api != nil {
		add(api)
	}
	for _, fc := range append(slices.Clone(l.FilterChains), l.DefaultFilterChain) {
		for _, f := range fc.GetFilters() {
			add(f.GetTypedConfig())
		}
	}
	return out
}

func needsInspector(l *listenerv3.Listener, envoy bool) bool {
	for _, fc := range l.FilterChains {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) > 0 {
			return true
		}
		// A proxyless gRPC server reads no listener filter (gRFC A36) and
		// refuses them: its PERMISSIVE chains are Envoy's concern only.
		if envoy && (m.GetTransportProtocol() == "tls" || len(m.GetApplicationProtocols()) > 0) {
			return true
		}
	}
	return false
}

func hasInspector(l *listenerv3.Listener) bool {
	for _, f := range l.ListenerFilters {
		if f.GetName() == TLSInspector {
			return true
		}
	}
	return false
}

type tlsContext struct {
	where  string
	server bool
	common *tlsv3.CommonTlsContext
}

// tlsContexts returns every TLS context of s's clusters and listeners.
func (s *Served) tlsContexts() []tlsContext {
	var out []tlsContext
	add := func(where string, ts *corev3.TransportSocket) {
		a := ts.GetTypedConfig()
		if a == nil {
			return
		}
		up, down := &tlsv3.UpstreamTlsContext{}, &tlsv3.DownstreamTlsContext{}
		switch {
		case a.MessageIs(up) && a.UnmarshalTo(up) == nil:
			out = append(out, tlsContext{where: where, common: up.GetCommonTlsContext()})
		case a.MessageIs(down) && a.UnmarshalTo(down) == nil:
			out = append(out, tlsContext{where: where, server: true, common: down.GetCommonTlsContext()})
		}
	}
	for _, n := range sorted(s.Clusters) {
		c := s.Clusters[n]
		add("cluster "+n, c.TransportSocket)
		for _, m := range c.TransportSocketMatches {
			add("cluster "+n+" match "+m.GetName(), m.TransportSocket)
		}
	}
	for _, n := range sorted(s.Listeners) {
		l := s.Listeners[n]
		for i, fc := range append(slices.Clone(l.FilterChains), l.DefaultFilterChain) {
			if fc != nil {
				add(fmt.Sprintf("listener %s chain %d (%s)", n, i, fc.GetName()), fc.TransportSocket)
			}
		}
	}
	return out
}
