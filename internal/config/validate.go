package config

import (
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// AnnotationLoadBalancer chooses one of Sextant's own load-balancing
// policies for a DestinationRule, since Istio's simple enum has no value for
// them: "adaptive" or "peak_ewma" (internal/balancer), or "round_robin",
// "least_request", "random". It applies to the rule's clusters and to every
// subset that sets no loadBalancer of its own, and may not be combined with
// spec.trafficPolicy.loadBalancer.
const AnnotationLoadBalancer = "sextant.io/load-balancer"

// LB policy names, as internal/balancer names them.
const (
	PolicyRoundRobin   = "round_robin"
	PolicyLeastRequest = "least_request"
	PolicyRandom       = "random"
	PolicyAdaptive     = "adaptive"
	PolicyPeakEWMA     = "peak_ewma"
)

var annotationPolicies = map[string]bool{
	PolicyRoundRobin: true, PolicyLeastRequest: true, PolicyRandom: true, PolicyAdaptive: true, PolicyPeakEWMA: true,
}

// Validate checks a decoded object's values (Decode already calls it): hosts
// name registry services, lists are not empty where Istio requires entries,
// numbers are in range, regular expressions compile, subset names are unique.
func Validate(o *Object) error {
	var list Errors
	validate(errs{list: &list}, "", o)
	if len(list) > 0 {
		for _, e := range list {
			e.Docs = 1
		}
		return list
	}
	return nil
}

func validate(c errs, path string, o *Object) {
	if o.Name == "" {
		return // reported by decodeMeta
	}
	for k, v := range o.Annotations {
		if rest, ok := strings.CutPrefix(k, "sextant.io/"); ok {
			p := join(path, "metadata.annotations") + "[" + k + "]"
			switch {
			case k == AnnotationLoadBalancer && o.Kind == KindDestinationRule:
				if !annotationPolicies[v] {
					c.add(p, ErrInvalid, "%q: want adaptive, peak_ewma, round_robin, least_request or random", v)
				}
			case k == AnnotationOwner:
				if !naming.ValidName(v) {
					c.add(p, ErrInvalid, "%q: want the name of the system the object is synced from", v)
				}
			case k == AnnotationHealthCheck && o.Kind == KindDestinationRule:
				if _, err := ParseHealthCheck(v); err != nil {
					msg := err.Error()
					var he *HealthCheckError
					if errors.As(err, &he) {
						if he.Field != "" {
							p += "." + he.Field
						}
						msg = he.Msg
					}
					c.add(p, ErrInvalid, "%s", msg)
				}
			default:
				c.add(p, ErrUnknownField, "unknown Sextant annotation %q", rest)
			}
		}
	}
	spec := join(path, "spec")
	switch {
	case o.VirtualService != nil:
		validateVS(c, spec, o.Namespace, o.VirtualService)
	case o.Gateway != nil:
		validateGateway(c, spec, o.Gateway)
	case o.ServiceEntry != nil:
		validateServiceEntry(c, spec, o)
	case o.WorkloadEntry != nil:
		validateWorkloadEntry(c, spec, o)
	case o.Sidecar != nil:
		validateSidecar(c, spec, o)
	case o.PeerAuthentication != nil:
		validatePeerAuthentication(c, spec, o)
	case o.AuthorizationPolicy != nil:
		validateAuthorizationPolicy(c, spec, o)
	case o.RequestAuthentication != nil:
		validateRequestAuthentication(c, spec, o)
	case o.Telemetry != nil:
		validateTelemetry(c, spec, o)
	default:
		validateDR(c, spec, o)
	}
}

func validateVS(c errs, path, ns string, vs *networking.VirtualService) {
	gateways := vs.Gateways
	if IsDelegate(vs) {
		// No hosts: a delegate, reached through a root's delegate route.
		validateDelegateVS(c, path, vs)
	}
	validateGatewayRefs(c, join(path, "gateways"), vs.Gateways)
	if !InMesh(vs) {
		// Bound to gateways only: hosts are the names clients use at the
		// gateway (shop.example.com), not registry services.
		validateGatewayHosts(c, join(path, "hosts"), vs.Hosts)
		for i, r := range vs.Tls {
			validateTLSRoute(c, index(join(path, "tls"), i), ns, r, vs.Hosts)
		}
		for i, r := range vs.Tcp {
			validateTCPRoute(c, index(join(path, "tcp"), i), ns, r)
		}
		vs = &networking.VirtualService{Http: vs.Http, Tls: vs.Tls, Tcp: vs.Tcp}
	} else {
		if len(vs.Tls) > 0 {
			c.add(join(path, "tls"), ErrNotSupported, "TLS routes are served by gateways only: bind the VirtualService to Gateways (gateways:, without mesh)")
		}
		if len(vs.Tcp) > 0 {
			c.add(join(path, "tcp"), ErrNotSupported, "TCP routes are served by gateways only: bind the VirtualService to Gateways (gateways:, without mesh)")
		}
	}
	seen := map[naming.ServiceKey]string{}
	for i, h := range vs.Hosts {
		p := index(join(path, "hosts"), i)
		k, err := ResolveHost(h, ns)
		if err != nil {
			c.add(p, ErrInvalid, "%v", strings.TrimPrefix(err.Error(), "config: "))
			continue
		}
		if prev, dup := seen[k]; dup {
			c.add(p, ErrInvalid, "%q and %q both name service %s", prev, h, k)
		}
		seen[k] = h
	}
	if len(vs.Http) == 0 && len(vs.Tls) == 0 && len(vs.Tcp) == 0 {
		c.add(join(path, "http"), ErrInvalid, "at least one route is required")
	}
	for i, r := range vs.Http {
		validateRoute(c, index(join(path, "http"), i), ns, r)
		validateMatches(c, index(join(path, "http"), i), ns, r, gateways)
	}
}

func validateRoute(c errs, path, ns string, r *networking.HTTPRoute) {
	for i, m := range r.Match {
		p := index(join(path, "match"), i)
		if m.Uri != nil {
			validateStringMatch(c, join(p, "uri"), m.Uri, true)
		}
		if m.Method != nil {
			validateStringMatch(c, join(p, "method"), m.Method, false)
			if e, ok := m.Method.MatchType.(*networking.StringMatch_Exact); ok && !methods[e.Exact] {
				c.add(join(p, "method.exact"), ErrInvalid, "%q is not an HTTP method (upper case, e.g. GET)", e.Exact)
			}
		}
		for name, sm := range m.Headers {
			hp := mapKey(join(p, "headers"), name)
			if name == "" || name != strings.ToLower(name) || strings.ContainsAny(name, " \t:") {
				c.add(hp, ErrInvalid, "header names are lower case, without spaces or colons")
			}
			if sm == nil {
				c.add(hp, ErrInvalid, "one of exact, prefix or regex is required")
				continue
			}
			validateStringMatch(c, hp, sm, false)
		}
	}
	switch {
	case r.Delegate != nil:
		validateDelegateRoute(c, path, r)
	case r.Redirect != nil:
		validateRedirect(c, join(path, "redirect"), r)
	case r.DirectResponse != nil:
		validateDirectResponse(c, path, r)
	case len(r.Route) == 0:
		c.add(join(path, "route"), ErrInvalid, "at least one destination is required (or a directResponse or redirect)")
	}
	if r.Fault != nil {
		validateFault(c, join(path, "fault"), r.Fault)
	}
	if r.Headers != nil {
		validateHeaders(c, join(path, "headers"), r.Headers)
	}
	if r.Rewrite != nil {
		validateRewrite(c, join(path, "rewrite"), r)
	}
	if r.CorsPolicy != nil {
		validateCORS(c, join(path, "corsPolicy"), r.CorsPolicy)
	}
	validateMirror(c, path, ns, r)
	total := int64(0)
	for i, d := range r.Route {
		p := index(join(path, "route"), i)
		if d.Weight < 0 {
			c.add(join(p, "weight"), ErrInvalid, "%d: must not be negative", d.Weight)
		}
		total += int64(d.Weight)
		validateDestination(c, join(p, "destination"), ns, d.Destination)
		if d.Headers != nil {
			validateHeaders(c, join(p, "headers"), d.Headers)
		}
	}
	if len(r.Route) > 1 && total == 0 {
		c.add(join(path, "route"), ErrInvalid, "with several destinations, weights must add up to more than 0")
	}
	if r.Timeout != nil {
		validateDuration(c, join(path, "timeout"), r.Timeout, false)
	}
	if rt := r.Retries; rt != nil {
		p := join(path, "retries")
		if rt.Attempts < 0 {
			c.add(join(p, "attempts"), ErrInvalid, "%d: must not be negative", rt.Attempts)
		}
		if rt.PerTryTimeout != nil {
			validateDuration(c, join(p, "perTryTimeout"), rt.PerTryTimeout, true)
		}
		validateRetryExtras(c, p, rt)
		for _, cond := range strings.Split(rt.RetryOn, ",") {
			cond = strings.TrimSpace(cond)
			if rt.RetryOn != "" && (cond == "" || strings.Trim(cond, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "") {
				c.add(join(p, "retryOn"), ErrInvalid, "%q: want a comma-separated list of conditions such as 5xx,connect-failure,unavailable", rt.RetryOn)
				break
			}
		}
	}
}

func validateDestination(c errs, dp, ns string, d *networking.Destination) {
	if d == nil {
		c.add(dp, ErrInvalid, "required")
		return
	}
	if _, err := ResolveHost(d.Host, ns); err != nil {
		c.add(join(dp, "host"), ErrInvalid, "%v", strings.TrimPrefix(err.Error(), "config: "))
	}
	if s := d.Subset; s != "" && !naming.ValidLabel(s) {
		c.add(join(dp, "subset"), ErrInvalid, "%q: want a DNS label (1..63 of [a-z0-9-])", s)
	}
	if port := d.Port; port != nil && (port.Number == 0 || port.Number > 65535) {
		c.add(join(dp, "port.number"), ErrInvalid, "%d: want 1..65535", port.Number)
	}
}

// validateTLSRoute checks a TLS route of a VirtualService bound to
// Gateways: the server names it matches (each one of the VirtualService's
// hosts, as Istio requires) and its weighted destinations, to which a
// PASSTHROUGH server forwards the TLS unopened.
func validateTLSRoute(c errs, path, ns string, r *networking.TLSRoute, hosts []string) {
	if len(r.Match) == 0 {
		c.add(join(path, "match"), ErrInvalid, "at least one match with sniHosts is required")
	}
	for i, m := range r.Match {
		p := index(join(path, "match"), i)
		if len(m.SniHosts) == 0 {
			c.add(join(p, "sniHosts"), ErrInvalid, "at least one server name is required")
		}
		for j, h := range m.SniHosts {
			hp := index(join(p, "sniHosts"), j)
			if !validHostName(h) {
				c.add(hp, ErrInvalid, "%q: want a lower-case host name, *.suffix or *", h)
				continue
			}
			if !slices.ContainsFunc(hosts, func(vh string) bool { return MatchHost(vh, h) }) {
				c.add(hp, ErrInvalid, "%q is not one of the VirtualService's hosts %v", h, hosts)
			}
		}
		if m.Port > 65535 {
			c.add(join(p, "port"), ErrInvalid, "%d: want 1..65535", m.Port)
		}
	}
	if len(r.Route) == 0 {
		c.add(join(path, "route"), ErrInvalid, "at least one destination is required")
	}
	total := int64(0)
	for i, d := range r.Route {
		p := index(join(path, "route"), i)
		if d.Weight < 0 {
			c.add(join(p, "weight"), ErrInvalid, "%d: must not be negative", d.Weight)
		}
		total += int64(d.Weight)
		validateDestination(c, join(p, "destination"), ns, d.Destination)
	}
	if len(r.Route) > 1 && total == 0 {
		c.add(join(path, "route"), ErrInvalid, "with several destinations, weights must add up to more than 0")
	}
}

func validateStringMatch(c errs, path string, sm *networking.StringMatch, isPath bool) {
	switch m := sm.MatchType.(type) {
	case nil:
		c.add(path, ErrInvalid, "one of exact, prefix or regex is required")
	case *networking.StringMatch_Exact:
		if isPath && !strings.HasPrefix(m.Exact, "/") {
			c.add(join(path, "exact"), ErrInvalid, "%q: a path starts with /", m.Exact)
		}
	case *networking.StringMatch_Prefix:
		if isPath && !strings.HasPrefix(m.Prefix, "/") {
			c.add(join(path, "prefix"), ErrInvalid, "%q: a path starts with /", m.Prefix)
		}
	case *networking.StringMatch_Regex:
		// Envoy and grpc-go both run RE2, which is Go's syntax.
		if _, err := regexp.Compile(m.Regex); err != nil {
			c.add(join(path, "regex"), ErrInvalid, "%q: %v", m.Regex, err)
		}
	}
}

func validateDuration(c errs, path string, d *durationpb.Duration, positive bool) {
	if err := d.CheckValid(); err != nil {
		c.add(path, ErrInvalid, "%v", err)
		return
	}
	if positive && d.AsDuration() <= 0 {
		c.add(path, ErrInvalid, "must be more than 0")
	}
}

func validateDR(c errs, path string, o *Object) {
	dr := o.DestinationRule
	if _, err := ResolveHost(dr.Host, o.Namespace); err != nil {
		c.add(join(path, "host"), ErrInvalid, "%v", strings.TrimPrefix(err.Error(), "config: "))
	}
	if _, ok := o.Annotations[AnnotationLoadBalancer]; ok && dr.TrafficPolicy.GetLoadBalancer() != nil {
		c.add(join(path, "trafficPolicy.loadBalancer"), ErrInvalid,
			"may not be set together with the %s annotation", AnnotationLoadBalancer)
	}
	if dr.TrafficPolicy != nil {
		validatePolicy(c, join(path, "trafficPolicy"), dr.TrafficPolicy)
	}
	names := map[string]bool{}
	for i, s := range dr.Subsets {
		p := index(join(path, "subsets"), i)
		if !naming.ValidLabel(s.Name) {
			c.add(join(p, "name"), ErrInvalid, "%q: want a DNS label (1..63 of [a-z0-9-])", s.Name)
		} else if names[s.Name] {
			c.add(join(p, "name"), ErrInvalid, "%q: another subset has this name", s.Name)
		}
		names[s.Name] = true
		for k, v := range s.Labels {
			if !label.ValidKey(k) {
				c.add(mapKey(join(p, "labels"), k), ErrInvalid, "not a metadata key: 1..128 of [A-Za-z0-9._/-]")
			}
			if len(v) > 4096 {
				c.add(mapKey(join(p, "labels"), k), ErrInvalid, "value longer than 4096 bytes")
			}
		}
		if s.TrafficPolicy != nil {
			validatePolicy(c, join(p, "trafficPolicy"), s.TrafficPolicy)
		}
	}
}

func validatePolicy(c errs, path string, tp *networking.TrafficPolicy) {
	validatePortLevel(c, path, tp)
	if ll := tp.LoadBalancer.GetLocalityLbSetting(); ll != nil {
		validateLocalityLb(c, join(path, "loadBalancer.localityLbSetting"), ll)
	}
	if ch := tp.LoadBalancer.GetConsistentHash(); ch != nil {
		validateHash(c, join(path, "loadBalancer.consistentHash"), ch)
	} else if lb := tp.LoadBalancer; lb != nil {
		switch lb.GetSimple() {
		case networking.LoadBalancerSettings_UNSPECIFIED, networking.LoadBalancerSettings_ROUND_ROBIN,
			networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN,
			networking.LoadBalancerSettings_RANDOM:
		default:
			c.add(join(path, "loadBalancer.simple"), ErrNotSupported, "%s: not supported (ROUND_ROBIN, LEAST_REQUEST, RANDOM)", lb.GetSimple())
		}
	}
	if cp := tp.ConnectionPool; cp != nil {
		if d := cp.GetTcp().GetConnectTimeout(); d != nil {
			validateDuration(c, join(path, "connectionPool.tcp.connectTimeout"), d, true)
		}
		if d := cp.GetTcp().GetIdleTimeout(); d != nil {
			validateDuration(c, join(path, "connectionPool.tcp.idleTimeout"), d, true)
		}
		if d := cp.GetHttp().GetIdleTimeout(); d != nil {
			validateDuration(c, join(path, "connectionPool.http.idleTimeout"), d, true)
		}
		validateConnPool(c, join(path, "connectionPool"), cp)
	}
	if rb := tp.RetryBudget; rb != nil {
		validateRetryBudget(c, join(path, "retryBudget"), rb)
	}
	if t := tp.Tls; t != nil {
		validateClientTLS(c, join(path, "tls"), t)
	}
	if od := tp.OutlierDetection; od != nil {
		p := join(path, "outlierDetection")
		if od.Interval != nil {
			validateDuration(c, join(p, "interval"), od.Interval, true)
		}
		if od.BaseEjectionTime != nil {
			validateDuration(c, join(p, "baseEjectionTime"), od.BaseEjectionTime, true)
		}
		if od.MaxEjectionPercent < 0 || od.MaxEjectionPercent > 100 {
			c.add(join(p, "maxEjectionPercent"), ErrInvalid, "%d: want 0..100", od.MaxEjectionPercent)
		}
	}
}

// validateClientTLS accepts the mesh's mutual TLS (ISTIO_MUTUAL, with
// optional subjectAltNames: SPIFFE IDs of the servers to accept), TLS to
// the endpoints with a CA from a secret (SIMPLE) and with a client
// certificate from a secret (MUTUAL, credentialName), and DISABLE; what it
// cannot publish is refused, never ignored: a client told to use TLS must
// not silently send plaintext.
func validateClientTLS(c errs, path string, t *networking.ClientTLSSettings) {
	type field struct {
		name string
		set  bool
	}
	files := []field{{"clientCertificate", t.ClientCertificate != ""}, {"privateKey", t.PrivateKey != ""},
		{"caCertificates", t.CaCertificates != ""}, {"caCrl", t.CaCrl != ""}}
	switch t.Mode {
	case networking.ClientTLSSettings_DISABLE:
		return
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		for i, san := range t.SubjectAltNames {
			if !strings.HasPrefix(san, "spiffe://") {
				c.add(index(join(path, "subjectAltNames"), i), ErrInvalid, "%q: want a SPIFFE ID (spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME)", san)
			}
		}
		for _, f := range append(files, field{"credentialName", t.CredentialName != ""}, field{"sni", t.Sni != ""},
			field{"insecureSkipVerify", t.InsecureSkipVerify.GetValue()}) {
			if f.set {
				c.add(join(path, f.name), ErrNotSupported, "not used with ISTIO_MUTUAL: the mesh's certificates and roots come from its certificate authority (docs/security.md)")
			}
		}
		return
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
	default:
		c.add(join(path, "mode"), ErrNotSupported, "%s: not supported (SIMPLE, MUTUAL, ISTIO_MUTUAL, DISABLE)", t.Mode)
		return
	}
	if t.CredentialName != "" && !naming.ValidName(t.CredentialName) {
		c.add(join(path, "credentialName"), ErrInvalid, "%q is not a secret name", t.CredentialName)
	}
	if t.Mode == networking.ClientTLSSettings_MUTUAL && t.CredentialName == "" {
		c.add(join(path, "credentialName"), ErrInvalid, "required with MUTUAL: a TLS secret with the client certificate and key (sextant secret create tls NAME --cert F --key F [--ca F])")
	}
	for i, san := range t.SubjectAltNames {
		if san == "" {
			c.add(index(join(path, "subjectAltNames"), i), ErrInvalid, "empty")
		}
	}
}

// methods Envoy and gRPC see in :method; a method match outside them can
// never match and is refused as a typo.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}
