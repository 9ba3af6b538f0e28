package ingress

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	security "istio.io/api/security/v1beta1"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// ListenerName names the Listener and RouteConfiguration of a Gateway
// port: "sextant-gateway-8443". A gateway serves it on the flag whose port
// is the port (--listen, or --tls-listen for HTTPS).
func ListenerName(port uint32) string {
	return "sextant-gateway-" + strconv.FormatUint(uint64(port), 10)
}

// SecretName names the SDS Secret of credentialName in namespace ns
// ("default/shop-cert"); its CA, for MUTUAL, is SecretName + "-cacert", as
// Istio names a Kubernetes secret's ca.crt.
func SecretName(ns, credential string) string { return ns + "/" + credential }

// CASuffix ends the name of a credential's CA secret.
const CASuffix = "-cacert"

// server is one Gateway server with what selects and binds it.
type server struct {
	gw    config.Key
	path  string // spec.servers[i] of gw, for warnings
	s     *networking.Server
	hosts []config.ServerHost
}

// port is every server on one port number, of one protocol.
type port struct {
	number  uint32
	tls     bool
	tcp     bool // TCP (MONGO, REDIS, MYSQL): tcp routes, no HTTP
	servers []server
}

var ads = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	ResourceApiVersion: corev3.ApiVersion_V3}

// Build translates Gateways and the VirtualServices bound to them into
// Secrets, Listeners and RouteConfigurations (in that order, name ->
// resource), with a warning for what it left out (a port two Gateways use
// with different protocols, a server name already served on its port, a
// secret that does not exist).
func Build(gws, vss []*config.Entry, secretOf func(ns, name string) *secret.Secret) ([3]map[string]proto.Message, []string) {
	return BuildWithPolicies(gws, vss, nil, nil, secretOf)
}

// BuildWithPolicies is Build with the AuthorizationPolicies of sec (nil:
// none): a port's listener carries the RBAC filters (xds.RBACFilters) of
// the policies that select any Gateway serving on it (a policy selects a
// Gateway when its selector matches the Gateway's spec.selector, the
// labels of the gateway workloads, in the Gateway's namespace or from the
// root namespace), behind the JWT filter (xds.JWTFilter) of the
// RequestAuthentications selecting any of them. The DestinationRules drs give the routes their
// destinations' consistent-hash policies.
func BuildWithPolicies(gws, vss, drs []*config.Entry, sec *config.Security, secretOf func(ns, name string) *secret.Secret) ([3]map[string]proto.Message, []string) {
	return BuildWithServices(gws, vss, drs, sec, secretOf, nil, "")
}

// BuildWithServices is BuildWithPolicies with the registry's services and
// their ports, which AUTO_PASSTHROUGH servers expose (autopass.go): a
// Gateway's own namespace's, or every namespace's for a Gateway of the
// mesh's root namespace root ("": config.DefaultRootNamespace).
func BuildWithServices(gws, vss, drs []*config.Entry, sec *config.Security, secretOf func(ns, name string) *secret.Secret,
	svcs []ServicePorts, root string) ([3]map[string]proto.Message, []string) {
	if root == "" {
		root = config.DefaultRootNamespace
	}
	out := [3]map[string]proto.Message{{}, {}, {}}
	vss = withDelegates(vss)
	ports, order, warns := gatewayPorts(gws)
	hashFor := hashes(drs)
	var tcpDRs *config.Index
	for _, n := range order {
		p := ports[n]
		name := ListenerName(n)
		if p.tcp {
			if tcpDRs == nil {
				tcpDRs = tcpIndex(drs)
			}
			l, w := tcpListener(name, p, vss, tcpDRs)
			out[1][name] = l
			warns = append(warns, w...)
			continue
		}
		var owners map[string]config.Key
		out[2][name], owners = routes(name, p, vss, hashFor)
		var l *listenerv3.Listener
		if !p.tls {
			l = xds.HTTPListener(name, n, name)
		} else {
			var w []string
			l, w = tlsListener(name, p, vss, gatewayMTLS(gws, sec, n), secretOf, out[0], exposed{svcs, root}, drs)
			warns = append(warns, w...)
		}
		filters := portFilters(p, gws, sec, owners)
		if f := xds.JWTFilter(portRequestAuthn(p, gws, sec)); f != nil {
			filters = append([]*hcmv3.HttpFilter{f}, filters...)
		}
		if err := xds.WithHTTPFilters(l, filters); err != nil {
			warns = append(warns, err.Error())
		}
		out[1][name] = l
	}
	return out, warns
}

// GatewayRBAC is the RBAC HTTP filters BuildWithPolicies puts on each
// Gateway listener, by port (an empty list: none), for a dry run of a
// policy change against the calls the gateways recorded. vss are the
// VirtualServices: a policy of one namespace is scoped to the hosts its
// Gateways route on a port shared with another namespace's (scope.go).
func GatewayRBAC(gws, vss []*config.Entry, sec *config.Security) map[uint32][]*hcmv3.HttpFilter {
	ports, order, _ := gatewayPorts(gws)
	out := make(map[uint32][]*hcmv3.HttpFilter, len(order))
	for _, n := range order {
		if ports[n].tcp {
			continue // no HTTP, no RBAC filters
		}
		_, owners := routes(ListenerName(n), ports[n], vss, nil)
		out[n] = portFilters(ports[n], gws, sec, owners)
	}
	return out
}

// hashes answers the routes' hash policies from the DestinationRules drs
// (nil when there are none), each service's rule chosen as the push
// engine's index chooses it.
func hashes(drs []*config.Entry) xds.HashFor {
	if len(drs) == 0 {
		return nil
	}
	ix := config.NewIndex()
	for _, e := range drs {
		ix.Put(e.Object)
	}
	return func(d config.Destination) config.HashKey {
		return config.HashOf(ix.DestinationRule(d.Service), d.Subset)
	}
}

// gatewayPorts groups the Gateways' servers by port, in port order, with
// a warning for each server left out. The Gateway whose last change is
// older comes first and keeps what two claim (an apply refuses the second
// since config.ErrClaimed; a store written before that, or two servers of
// a cluster in the same instant, may hold both).
func gatewayPorts(gws []*config.Entry) (map[uint32]*port, []uint32, []string) {
	var warns []string
	ports := map[uint32]*port{}
	var order []uint32
	for _, e := range byAge(gws) {
		for i, s := range e.Object.Gateway.Servers {
			n := s.GetPort().GetNumber()
			isTLS := strings.EqualFold(s.GetPort().GetProtocol(), "HTTPS") || strings.EqualFold(s.GetPort().GetProtocol(), "TLS")
			isTCP := config.IsTCPProtocol(s.GetPort().GetProtocol())
			p := ports[n]
			if p == nil {
				p = &port{number: n, tls: isTLS, tcp: isTCP}
				ports[n] = p
				order = append(order, n)
			} else if p.tls != isTLS || p.tcp != isTCP {
				was := map[bool]string{true: "TLS", false: "plaintext"}[p.tls]
				if p.tcp {
					was = "TCP"
				}
				warns = append(warns, fmt.Sprintf("%s spec.servers[%d]: port %d is already %s by an earlier Gateway; server left out", e.Object.Key, i, n, was))
				continue
			}
			sv := server{gw: e.Object.Key, path: fmt.Sprintf("%s spec.servers[%d]", e.Object.Key, i), s: s}
			for _, h := range s.Hosts {
				if sh, ok := config.ParseServerHost(h, e.Object.Namespace); ok {
					sv.hosts = append(sv.hosts, sh)
				}
			}
			p.servers = append(p.servers, sv)
		}
	}
	slices.Sort(order)
	return ports, order, warns
}

// byAge orders Gateways by the revision of their last change, then by key;
// one not stored yet (revision 0: a dry run's candidate) comes last.
func byAge(gws []*config.Entry) []*config.Entry {
	out := slices.Clone(gws)
	age := func(e *config.Entry) int64 {
		if e.Revision == 0 {
			return math.MaxInt64
		}
		return e.Revision
	}
	slices.SortStableFunc(out, func(a, b *config.Entry) int {
		if c := cmp.Compare(age(a), age(b)); c != 0 {
			return c
		}
		return a.Object.Key.Compare(b.Object.Key)
	})
	return out
}

// portPolicies are the AuthorizationPolicies selecting a Gateway with a
// server on p, each once, in key order.
func portPolicies(p *port, gws []*config.Entry, sec *config.Security) []*config.Object {
	if sec == nil {
		return nil
	}
	seen := map[config.Key]bool{}
	var out []*config.Object
	for _, sv := range p.servers {
		for _, e := range gws {
			if e.Object.Key != sv.gw {
				continue
			}
			w := config.Workload{Namespace: e.Object.Namespace, Labels: label.FromMap(e.Object.Gateway.Selector), Port: p.number}
			for _, o := range sec.Authorization(w) {
				if !seen[o.Key] {
					seen[o.Key] = true
					out = append(out, o)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *config.Object) int { return a.Key.Compare(b.Key) })
	return out
}

// portRequestAuthn are the RequestAuthentications selecting a Gateway with
// a server on p, each once, in key order: a port is one listener, so the
// port's Gateways share their JWT rules.
func portRequestAuthn(p *port, gws []*config.Entry, sec *config.Security) []*config.Object {
	if sec == nil {
		return nil
	}
	seen := map[config.Key]bool{}
	var out []*config.Object
	for _, sv := range p.servers {
		for _, e := range gws {
			if e.Object.Key != sv.gw {
				continue
			}
			w := config.Workload{Namespace: e.Object.Namespace, Labels: label.FromMap(e.Object.Gateway.Selector), Port: p.number}
			for _, o := range sec.RequestAuthentications(w) {
				if !seen[o.Key] {
					seen[o.Key] = true
					out = append(out, o)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *config.Object) int { return a.Key.Compare(b.Key) })
	return out
}

// bound reports whether VirtualService vs is bound to Gateway gw.
func bound(vs *config.Object, gw config.Key) bool {
	for _, ref := range vs.VirtualService.Gateways {
		if k, ok := config.GatewayRef(ref, vs.Namespace); ok && k == gw {
			return true
		}
	}
	return false
}

// routes builds the port's RouteConfiguration: a virtual host per bound
// VirtualService with the hosts its servers serve, or, for a server with
// httpsRedirect, a redirect to https for the server's hosts; and, for each
// domain of its virtual hosts, the Gateway whose server claimed it.
func routes(name string, p *port, vss []*config.Entry, hashFor xds.HashFor) (*routev3.RouteConfiguration, map[string]config.Key) {
	rc := &routev3.RouteConfiguration{Name: name}
	claimed := map[string]bool{}
	owners := map[string]config.Key{}
	clusterFor := func(d config.Destination) (string, bool) {
		// The push engine publishes every service's cluster and its
		// subsets' (not per-port clusters): the gateway routes by those.
		return xds.ClusterName(d.Service, d.Subset, 0), true
	}
	for _, sv := range p.servers {
		if passthrough(sv) || autoPassthrough(sv) {
			continue // no HTTP: its TLS goes through unopened
		}
		if sv.s.GetTls().GetHttpsRedirect() {
			var domains []string
			for _, h := range sv.hosts {
				if !claimed[h.Host] {
					claimed[h.Host] = true
					owners[h.Host] = sv.gw
					domains = append(domains, h.Host)
				}
			}
			if len(domains) > 0 {
				rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{Name: sv.path + " (https redirect)", Domains: domains,
					Routes: []*routev3.Route{{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
						Action: &routev3.Route_Redirect{Redirect: &routev3.RedirectAction{
							SchemeRewriteSpecifier: &routev3.RedirectAction_HttpsRedirect{HttpsRedirect: true},
							ResponseCode:           routev3.RedirectAction_MOVED_PERMANENTLY}}}}})
			}
		}
	}
	// One virtual host per bound VirtualService, with the hosts of it that
	// the port's servers serve to its namespace (a name claimed once, first
	// server first). A Gateway's own namespace's VirtualServices claim
	// first: a server open to any namespace ("*") lets another namespace's
	// VirtualService bind a host the Gateway's owner does not route, never
	// take one it does.
	domainsOf := map[config.Key][]string{}
	for _, own := range []bool{true, false} {
		for _, e := range vss {
			vs := e.Object
			for _, sv := range p.servers {
				if sv.s.GetTls().GetHttpsRedirect() || passthrough(sv) || autoPassthrough(sv) || !bound(vs, sv.gw) || (sv.gw.Namespace == vs.Namespace) != own {
					continue
				}
				for _, h := range vs.VirtualService.Hosts {
					for _, sh := range sv.hosts {
						if (sh.Namespace == "*" || sh.Namespace == vs.Namespace) && config.MatchHost(sh.Host, h) && !claimed[h] {
							claimed[h] = true
							owners[h] = sv.gw
							domainsOf[vs.Key] = append(domainsOf[vs.Key], h)
						}
					}
				}
			}
		}
	}
	for _, e := range vss {
		vs := e.Object
		if domains := domainsOf[vs.Key]; len(domains) > 0 {
			// A match's gateways and port narrow where it applies (Istio).
			var gws []config.Key
			for _, sv := range p.servers {
				if bound(vs, sv.gw) && !slices.Contains(gws, sv.gw) {
					gws = append(gws, sv.gw)
				}
			}
			on := config.OnGateway(vs, gws, p.number)
			rc.VirtualHosts = append(rc.VirtualHosts, xds.VirtualHost(vs.Key.String(), domains, naming.ServiceKey{Namespace: vs.Namespace}, on, clusterFor, hashFor))
		}
	}
	return rc, owners
}

// tlsListener builds an HTTPS port's listener: one filter chain per server
// (its hosts as server_names, "*" as the chain without any; passthrough
// servers' chains by passthroughChains and autoChains), each
// terminating TLS with the server's credential by SDS, and the secrets it
// names into secrets.
func tlsListener(name string, p *port, vss []*config.Entry, mtls func(config.Key) security.PeerAuthentication_MutualTLS_Mode,
	secretOf func(ns, name string) *secret.Secret, secrets map[string]proto.Message, ex exposed, drs []*config.Entry) (*listenerv3.Listener, []string) {
	var warns []string
	l := &listenerv3.Listener{Name: name, Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: p.number}}}}}
	claimed := map[string]bool{}
	anyClaimed := false
	var subsetsOf func(naming.ServiceKey) []string
	for _, sv := range p.servers {
		if autoPassthrough(sv) {
			if subsetsOf == nil {
				subsetsOf = subsetsFrom(drs)
			}
			chains, w := autoChains(p, sv, ex, subsetsOf, claimed)
			l.FilterChains = append(l.FilterChains, chains...)
			warns = append(warns, w...)
			continue
		}
		if passthrough(sv) {
			chains, w := passthroughChains(p, sv, vss, claimed)
			l.FilterChains = append(l.FilterChains, chains...)
			warns = append(warns, w...)
			continue
		}
		t := sv.s.GetTls()
		var names []string
		catchAll := false
		for _, h := range sv.hosts {
			switch {
			case h.Host == "*":
				catchAll = true
			case claimed[h.Host]:
				warns = append(warns, fmt.Sprintf("%s: host %q is already served on port %d by another server; left out", sv.path, h.Host, p.number))
			default:
				claimed[h.Host] = true
				names = append(names, h.Host)
			}
		}
		if catchAll {
			if anyClaimed {
				warns = append(warns, fmt.Sprintf("%s: host \"*\" is already served on port %d by another server; left out", sv.path, p.number))
				catchAll = false
			}
			anyClaimed = true
			names = nil // any server name
		}
		if len(names) == 0 && !catchAll {
			continue
		}
		if t.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
			l.FilterChains = append(l.FilterChains, meshChain(name, names, t, mtls(sv.gw) != security.PeerAuthentication_MutualTLS_PERMISSIVE))
			continue
		}
		cert := SecretName(sv.gw.Namespace, t.GetCredentialName())
		common := &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsVersion(t.GetMinProtocolVersion(), tlsv3.TlsParameters_TLSv1_2), TlsMaximumProtocolVersion: tlsVersion(t.GetMaxProtocolVersion(), tlsv3.TlsParameters_TLSv1_3)},
			AlpnProtocols:                  []string{"h2", "http/1.1"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: cert, SdsConfig: ads}},
		}
		d := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
		sec := secretOf(sv.gw.Namespace, t.GetCredentialName())
		if sec == nil {
			warns = append(warns, fmt.Sprintf("%s: credentialName %q: no such secret in namespace %s (sextant secret create tls); its handshakes fail until it exists", sv.path, t.GetCredentialName(), sv.gw.Namespace))
		} else if sec.Type != secret.TypeTLS {
			warns = append(warns, fmt.Sprintf("%s: credentialName %q: a %s secret; a server needs a certificate and key (sextant secret create tls); its handshakes fail until it has one", sv.path, t.GetCredentialName(), sec.Type))
		} else {
			secrets[cert] = certSecret(cert, sec)
			if na := sec.Info().NotAfter; time.Now().After(na) {
				warns = append(warns, fmt.Sprintf("%s: the certificate of secret %s expired at %s (rotate it: sextant secret create tls %s --replace)",
					sv.path, cert, na.Format(time.RFC3339), t.GetCredentialName()))
			}
		}
		if mode := t.GetMode(); mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL {
			// OPTIONAL_MUTUAL: a client certificate is verified when given
			// (an RBAC filter may then require a principal).
			d.RequireClientCertificate = wrapperspb.Bool(mode == networking.ServerTLSSettings_MUTUAL)
			common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
					ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: cert + CASuffix, SdsConfig: ads}}}
			// The secret's ca.crt, else the secret NAME-cacert's (Istio's).
			switch ca := caOf(secretOf, sv.gw.Namespace, t.GetCredentialName()); {
			case ca != nil:
				secrets[cert+CASuffix] = caSecret(cert+CASuffix, ca)
			case sec != nil:
				warns = append(warns, fmt.Sprintf("%s: mode %s: secret %s has no CA (create it with --ca, or a ca secret %s%s); its handshakes fail until it has one", sv.path, mode, cert, t.GetCredentialName(), CASuffix))
			}
		}
		l.FilterChains = append(l.FilterChains, terminating(name, names, d))
	}
	if xds.NeedsTLSInspector(l) {
		// Envoy reads SNI (server_names) only with the TLS inspector: without
		// it no chain matching them is ever chosen.
		l.ListenerFilters = []*listenerv3.ListenerFilter{xds.TLSInspectorFilter()}
	}
	return l, warns
}

func certSecret(name string, s *secret.Secret) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: s.Cert}},
		PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: s.Key}},
	}}}
}

// httpFilter is the HTTP connection manager of a Gateway port: routes by
// RDS over ADS, WebSocket upgrades on, the port stripped from Host.
func httpFilter(routeName string) *listenerv3.Filter {
	router, _ := anypb.New(&routerv3.Router{})
	h := &hcmv3.HttpConnectionManager{
		StatPrefix:     routeName,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads, RouteConfigName: routeName}},
		// The fault filter before the router, as Istio's gateways have it.
		HttpFilters:    []*hcmv3.HttpFilter{xds.CORSHTTPFilter(), xds.FaultHTTPFilter(), {Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
		UpgradeConfigs: []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}},
		StripPortMode:  &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true},
	}
	a, _ := anypb.New(h)
	return &listenerv3.Filter{Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}
}

func tlsVersion(v networking.ServerTLSSettings_TLSProtocol, def tlsv3.TlsParameters_TlsProtocol) tlsv3.TlsParameters_TlsProtocol {
	switch v {
	case networking.ServerTLSSettings_TLSV1_0:
		return tlsv3.TlsParameters_TLSv1_0
	case networking.ServerTLSSettings_TLSV1_1:
		return tlsv3.TlsParameters_TLSv1_1
	case networking.ServerTLSSettings_TLSV1_2:
		return tlsv3.TlsParameters_TLSv1_2
	case networking.ServerTLSSettings_TLSV1_3:
		return tlsv3.TlsParameters_TLSv1_3
	}
	return def
}
