//lint:file-ignore SA1019 deprecated Envoy fields are still sent by control planes; the gateway reads them as Envoy does.

package gateway

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// routeConfigSpec is a decoded RouteConfiguration.
type routeConfigSpec struct {
	name   string
	vhosts []*vhostSpec
	raw    proto.Message
}

type vhostSpec struct {
	name    string
	domains []string
	routes  []*routeSpec
	// dropped says which routes the control plane left out and why
	// (xds.DroppedRoutesField), for the "no route" answer.
	dropped string
}

type routeSpec struct {
	name     string
	match    matchSpec
	clusters []clusterWeight // one without weighted_clusters
	timeout  time.Duration   // 0: none
	idle     *time.Duration  // idle_timeout, overriding the listener's stream_idle_timeout; nil: not set
	retry    retrySpec
	md       map[string]string // metadata_match filter_metadata["envoy.lb"]
	rewrite  string            // prefix_rewrite
	direct   *directSpec
	redirect *redirectSpec
	// upgrades are the route's upgrade_configs: each type enabled or
	// disabled here, overriding the listener's (Envoy semantics).
	upgrades map[string]bool
	// bufferLimit is per_request_buffer_limit_bytes (the route's, else its
	// virtual host's, else defaultBufferLimit): a request body up to it is
	// buffered and may be retried; a longer one streams and is not.
	bufferLimit int64
	// rbac are the route's RBAC overrides by filter name (its own
	// typed_per_filter_config over its virtual host's).
	rbac map[string]rbacOverride
	// filters are the route's HTTP filter chain (filter.go); nil: none.
	filters filterChain
	// mirrors are the route action's request_mirror_policies (filter_mirror.go).
	mirrors []mirrorSpec
	// hash is the route action's hash_policy (hash.go); nil: none.
	hash []hashSpec
}

// redirectSpec is a route's redirect action.
type redirectSpec struct {
	status       int
	scheme, host string
	port         uint32
	path, prefix string // path_redirect, or prefix_rewrite of the matched prefix
	stripQuery   bool
	requestPort  bool // Istio's derivePort FROM_REQUEST_PORT (redirectKeepsPort)
}

type directSpec struct {
	status int
	body   string
}

type clusterWeight struct {
	name   string
	weight uint32
	md     map[string]string // the route's, overlaid with the ClusterWeight's
}

type matchKind uint8

const (
	matchPrefix matchKind = iota
	matchPath
	matchRegex
)

type matchSpec struct {
	kind       matchKind
	value      string
	re         *regexp.Regexp
	ignoreCase bool
	headers    []headerMatch
	query      []headerMatch // query_parameters, matched on the decoded values
}

type headerMatch struct {
	name       string
	kind       strKind
	value      string
	re         *regexp.Regexp
	ignoreCase bool
	invert     bool
	pseudo     pseudoHeader // a route's :method, :authority, :scheme or :path (table.go)
}

// pseudoHeader is which of HTTP/2's pseudo-headers a route's header
// matcher reads, as Envoy reads them from any request (HTTP/1.1's too).
type pseudoHeader uint8

const (
	notPseudo pseudoHeader = iota
	pseudoMethod
	pseudoAuthority
	pseudoScheme
	pseudoPath
)

var pseudoHeaders = map[string]pseudoHeader{":method": pseudoMethod, ":authority": pseudoAuthority, ":scheme": pseudoScheme, ":path": pseudoPath}

type strKind uint8

const (
	strExact strKind = iota
	strPrefix
	strSuffix
	strContains
	strRegex
	strPresent
)

// retryOn is a set of Envoy retry_on conditions.
type retryOn uint16

const (
	retry5xx retryOn = 1 << iota
	retryGatewayError
	retryConnectFailure
	retryReset
	retryRetriableCodes
	retryRetriable4xx  // 409
	retryRefusedStream // an HTTP/2 stream the endpoint did not process
	// gRPC conditions: the grpc-status of an answer's headers (a
	// trailers-only answer, as Envoy reads it).
	retryCancelled         // 1
	retryDeadlineExceeded  // 4
	retryResourceExhausted // 8
	retryInternal          // 13
	retryUnavailable       // 14
)

type retrySpec struct {
	on      retryOn
	num     int
	perTry  time.Duration
	codes   []int
	defined bool
	// otherHost: a retry picks again while it picks a host already tried,
	// at most hostPicks more times (Envoy's previous_hosts predicate and
	// host_selection_retry_max_attempts).
	otherHost bool
	hostPicks int
	// otherLevel: with Envoy's previous_priorities retry priority, every
	// otherLevel-th attempt on (update_frequency) a retry's pick leaves out
	// the priority levels (localities) the call tried, and the attempts
	// until the next such one keep that; 0: no retry priority.
	otherLevel int
	// backoffBase, backoffMax: the wait before a retry (retry_back_off,
	// retry_backoff.go).
	backoffBase, backoffMax time.Duration
}

// grpcConditions are Envoy's retry_on conditions on a gRPC status.
var grpcConditions = map[string]retryOn{"cancelled": retryCancelled, "deadline-exceeded": retryDeadlineExceeded,
	"resource-exhausted": retryResourceExhausted, "internal": retryInternal, "unavailable": retryUnavailable}

// Envoy's retry host predicate that avoids the hosts a call already tried,
// by name or by type; other predicates are ignored.
const (
	previousHostsName = "envoy.retry_host_predicates.previous_hosts"
	previousHostsType = "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
)

// Envoy's retry priority that takes the priorities a call tried out of a
// retry's priority load (Istio's retryRemoteLocalities), by name or type.
const (
	previousPrioritiesName = "envoy.retry_priorities.previous_priorities"
	previousPrioritiesType = "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig"
)

func decodeRouteAny(a *anypb.Any) (string, any, error) {
	rc := new(route.RouteConfiguration)
	if err := a.UnmarshalTo(rc); err != nil {
		return "", nil, fmt.Errorf("decode: %w", err)
	}
	s, err := decodeRouteConfig(rc)
	if err != nil {
		return rc.GetName(), nil, err
	}
	if s.name == "" {
		return "", nil, fieldErr("name", "empty")
	}
	return s.name, s, nil
}

func decodeRouteConfig(rc *route.RouteConfiguration) (*routeConfigSpec, error) {
	s := &routeConfigSpec{name: rc.GetName(), raw: rc}
	for i, vh := range rc.GetVirtualHosts() {
		path := fmt.Sprintf("virtual_hosts[%d]", i)
		v := &vhostSpec{name: vh.GetName()}
		if len(vh.GetDomains()) == 0 {
			return nil, fieldErr(path+".domains", "empty")
		}
		for j, d := range vh.GetDomains() {
			if d == "" || strings.Count(d, "*") > 1 || (strings.Contains(d, "*") && d != "*" && !strings.HasPrefix(d, "*") && !strings.HasSuffix(d, "*")) {
				return nil, fieldErr(fmt.Sprintf("%s.domains[%d]", path, j), "bad domain %q (exact, *suffix, prefix* or *)", d)
			}
			v.domains = append(v.domains, strings.ToLower(d))
		}
		var dropped []string
		for _, d := range vh.GetMetadata().GetFilterMetadata()[SextantMetadataKey].GetFields()[DroppedRoutesField].GetListValue().GetValues() {
			dropped = append(dropped, d.GetStringValue())
		}
		v.dropped = strings.Join(dropped, "; ")
		vhRetry, err := decodeRetry(vh.GetRetryPolicy(), path+".retry_policy")
		if err != nil {
			return nil, err
		}
		vhLimit := bufferLimit(vh.GetRequestBodyBufferLimit(), vh.GetPerRequestBufferLimitBytes(), defaultBufferLimit)
		vhRBAC, err := decodeRBACOverrides(vh.GetTypedPerFilterConfig(), path)
		if err != nil {
			return nil, err
		}
		for j, r := range vh.GetRoutes() {
			rs, err := decodeRoute(r, fmt.Sprintf("%s.routes[%d]", path, j), vhRetry)
			if err != nil {
				return nil, err
			}
			if rs.rbac, err = decodeRBACOverrides(r.GetTypedPerFilterConfig(), fmt.Sprintf("%s.routes[%d]", path, j)); err != nil {
				return nil, err
			}
			for name, o := range vhRBAC {
				if _, own := rs.rbac[name]; !own {
					if rs.rbac == nil {
						rs.rbac = map[string]rbacOverride{}
					}
					rs.rbac[name] = o
				}
			}
			rs.bufferLimit = bufferLimit(r.GetRequestBodyBufferLimit(), r.GetPerRequestBufferLimitBytes(), vhLimit)
			v.routes = append(v.routes, rs)
		}
		s.vhosts = append(s.vhosts, v)
	}
	return s, nil
}

func decodeRoute(r *route.Route, path string, vhRetry retrySpec) (*routeSpec, error) {
	rs := &routeSpec{name: r.GetName()}
	m := r.GetMatch()
	if m == nil {
		return nil, fieldErr(path+".match", "required")
	}
	if cs := m.GetCaseSensitive(); cs != nil && !cs.GetValue() {
		rs.match.ignoreCase = true
	}
	switch p := m.GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix:
		rs.match.kind, rs.match.value = matchPrefix, p.Prefix
	case *route.RouteMatch_Path:
		rs.match.kind, rs.match.value = matchPath, p.Path
	case *route.RouteMatch_SafeRegex:
		re, err := compileRegex(p.SafeRegex.GetRegex(), rs.match.ignoreCase)
		if err != nil {
			return nil, fieldErr(path+".match.safe_regex.regex", "%v", err)
		}
		rs.match.kind, rs.match.re = matchRegex, re
	case *route.RouteMatch_PathSeparatedPrefix:
		rs.match.kind, rs.match.value = matchPrefix, p.PathSeparatedPrefix
	default:
		return nil, fieldErr(path+".match", "path specifier %T: %v (prefix, path, safe_regex)", p, errUnsupported)
	}
	if rs.match.ignoreCase && rs.match.kind != matchRegex {
		rs.match.value = strings.ToLower(rs.match.value)
	}
	for k, h := range m.GetHeaders() {
		hm, err := decodeHeaderMatcher(h, fmt.Sprintf("%s.match.headers[%d]", path, k))
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(hm.name, ":") {
			if hm.pseudo = pseudoHeaders[hm.name]; hm.pseudo == notPseudo {
				return nil, fieldErr(fmt.Sprintf("%s.match.headers[%d].name", path, k), "pseudo-header %q: want :method, :authority, :scheme or :path", hm.name)
			}
		}
		rs.match.headers = append(rs.match.headers, hm)
	}
	for k, q := range m.GetQueryParameters() {
		qp := fmt.Sprintf("%s.match.query_parameters[%d]", path, k)
		qm := headerMatch{name: q.GetName(), kind: strPresent}
		if qm.name == "" {
			return nil, fieldErr(qp+".name", "empty")
		}
		switch x := q.GetQueryParameterMatchSpecifier().(type) {
		case *route.QueryParameterMatcher_PresentMatch:
			if !x.PresentMatch {
				qm.invert = true
			}
		case *route.QueryParameterMatcher_StringMatch:
			hm, err := decodeHeaderMatcher(&route.HeaderMatcher{Name: q.GetName(),
				HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: x.StringMatch}}, qp)
			if err != nil {
				return nil, err
			}
			qm = hm
			qm.name = q.GetName() // query names are case sensitive
		}
		rs.match.query = append(rs.match.query, qm)
	}
	switch a := r.GetAction().(type) {
	case *route.Route_Route:
		if err := decodeRouteAction(rs, a.Route, path+".route", vhRetry); err != nil {
			return nil, err
		}
	case *route.Route_Redirect:
		rd, err := decodeRedirect(a.Redirect, path+".redirect", rs.match.kind == matchPrefix)
		if err != nil {
			return nil, err
		}
		rd.requestPort = redirectKeepsPort(r)
		rs.redirect = rd
	case *route.Route_NonForwardingAction:
		// A workload's inbound route (the server's own handlers): to the
		// app beside a sidecar (inbound.go), or answered 503 elsewhere.
		rs.clusters = []clusterWeight{{name: InboundCluster, weight: 1}}
	case *route.Route_DirectResponse:
		rs.direct = &directSpec{status: int(a.DirectResponse.GetStatus()), body: a.DirectResponse.GetBody().GetInlineString()}
		if b := a.DirectResponse.GetBody().GetInlineBytes(); b != nil {
			rs.direct.body = string(b)
		}
		if rs.direct.status < 200 || rs.direct.status > 599 {
			return nil, fieldErr(path+".direct_response.status", "%d not in [200, 599]", rs.direct.status)
		}
	default:
		return nil, fieldErr(path, "action %T: %v (route, redirect, direct_response, non_forwarding_action)", a, errUnsupported)
	}
	var err error
	if rs.filters, err = buildFilters(r, path); err != nil {
		return nil, err
	}
	return rs, nil
}

func decodeRouteAction(rs *routeSpec, ra *route.RouteAction, path string, vhRetry retrySpec) error {
	md, err := lbMetadata(ra.GetMetadataMatch(), path+".metadata_match")
	if err != nil {
		return err
	}
	rs.md = md
	switch c := ra.GetClusterSpecifier().(type) {
	case *route.RouteAction_Cluster:
		if c.Cluster == "" {
			return fieldErr(path+".cluster", "empty")
		}
		rs.clusters = []clusterWeight{{name: c.Cluster, weight: 1, md: md}}
	case *route.RouteAction_WeightedClusters:
		var total uint64
		for i, cw := range c.WeightedClusters.GetClusters() {
			p := fmt.Sprintf("%s.weighted_clusters.clusters[%d]", path, i)
			if cw.GetName() == "" {
				return fieldErr(p+".name", "empty")
			}
			w := cw.GetWeight().GetValue()
			cmd, err := lbMetadata(cw.GetMetadataMatch(), p+".metadata_match")
			if err != nil {
				return err
			}
			merged := md
			if len(cmd) > 0 {
				merged = make(map[string]string, len(md)+len(cmd))
				for k, v := range md {
					merged[k] = v
				}
				for k, v := range cmd {
					merged[k] = v
				}
			}
			total += uint64(w)
			rs.clusters = append(rs.clusters, clusterWeight{name: cw.GetName(), weight: w, md: merged})
		}
		if len(rs.clusters) == 0 {
			return fieldErr(path+".weighted_clusters.clusters", "empty")
		}
		if total == 0 || total > math.MaxUint32 {
			return fieldErr(path+".weighted_clusters", "weights sum to %d (want 1..2^32-1)", total)
		}
	default:
		return fieldErr(path, "cluster specifier %T: %v (cluster, weighted_clusters)", c, errUnsupported)
	}
	if d := ra.GetIdleTimeout(); d != nil {
		t, err := duration(d, path+".idle_timeout")
		if err != nil {
			return err
		}
		rs.idle = &t
	}
	if d := ra.GetTimeout(); d != nil {
		t, err := duration(d, path+".timeout")
		if err != nil {
			return err
		}
		rs.timeout = t
	} else {
		rs.timeout = 15 * time.Second // Envoy's default
	}
	rs.retry = vhRetry
	if ra.GetRetryPolicy() != nil {
		if rs.retry, err = decodeRetry(ra.GetRetryPolicy(), path+".retry_policy"); err != nil {
			return err
		}
	}
	for i, uc := range ra.GetUpgradeConfigs() {
		typ := strings.ToLower(uc.GetUpgradeType())
		if typ == "" {
			return fieldErr(fmt.Sprintf("%s.upgrade_configs[%d].upgrade_type", path, i), "empty")
		}
		if uc.GetConnectConfig() != nil || typ == "connect" {
			return fieldErr(fmt.Sprintf("%s.upgrade_configs[%d]", path, i), "CONNECT: %v", errUnsupported)
		}
		if rs.upgrades == nil {
			rs.upgrades = map[string]bool{}
		}
		rs.upgrades[typ] = uc.GetEnabled() == nil || uc.GetEnabled().GetValue()
	}
	rs.rewrite = ra.GetPrefixRewrite()
	if rs.rewrite != "" && rs.match.kind == matchRegex {
		return fieldErr(path+".prefix_rewrite", "only with a prefix or path match")
	}
	if rs.mirrors, err = decodeMirrors(ra, path); err != nil {
		return err
	}
	if rs.hash, err = decodeHashPolicies(ra.GetHashPolicy(), path); err != nil {
		return err
	}
	return nil
}

// bufferLimit is a route's or virtual host's request body buffer limit:
// request_body_buffer_limit, which Envoy prefers, else the older
// per_request_buffer_limit_bytes, else def.
func bufferLimit(body *wrapperspb.UInt64Value, perRequest *wrapperspb.UInt32Value, def int64) int64 {
	switch {
	case body != nil:
		return int64(min(body.GetValue(), 1<<62))
	case perRequest != nil:
		return int64(perRequest.GetValue())
	}
	return def
}

func decodeRetry(rp *route.RetryPolicy, path string) (retrySpec, error) {
	var s retrySpec
	if rp == nil {
		return s, nil
	}
	s.defined = true
	s.num = 1 // Envoy's default num_retries
	if n := rp.GetNumRetries(); n != nil {
		s.num = int(n.GetValue())
	}
	if s.num > 10 {
		return s, fieldErr(path+".num_retries", "%d above 10", s.num)
	}
	if d := rp.GetPerTryTimeout(); d != nil {
		t, err := duration(d, path+".per_try_timeout")
		if err != nil {
			return s, err
		}
		s.perTry = t
	}
	for _, c := range strings.Split(rp.GetRetryOn(), ",") {
		switch strings.TrimSpace(c) {
		case "":
		case "5xx":
			s.on |= retry5xx
		case "gateway-error":
			s.on |= retryGatewayError
		case "connect-failure":
			s.on |= retryConnectFailure
		case "reset", "reset-before-request":
			s.on |= retryReset
		case "retriable-status-codes":
			s.on |= retryRetriableCodes
		case "refused-stream":
			s.on |= retryRefusedStream
		case "retriable-4xx":
			s.on |= retryRetriable4xx
		case "cancelled", "deadline-exceeded", "resource-exhausted", "internal", "unavailable":
			s.on |= grpcConditions[strings.TrimSpace(c)]
		case "retriable-headers", "envoy-ratelimited", "http3-post-connect-failure":
			// Envoy's header-driven conditions: accepted so that a control
			// plane's policy applies; they never match here.
		default:
			return s, fieldErr(path+".retry_on", "unknown condition %q", c)
		}
	}
	for _, p := range rp.GetRetryHostPredicate() {
		if p.GetName() == previousHostsName || p.GetTypedConfig().GetTypeUrl() == previousHostsType {
			s.otherHost = true
		}
	}
	if err := decodeRetryPriority(&s, rp.GetRetryPriority(), path+".retry_priority"); err != nil {
		return s, err
	}
	s.hostPicks = 1 // Envoy's default
	if n := rp.GetHostSelectionRetryMaxAttempts(); n > 0 {
		s.hostPicks = int(min(n, 16))
	}
	for i, c := range rp.GetRetriableStatusCodes() {
		if c < 100 || c > 599 {
			return s, fieldErr(fmt.Sprintf("%s.retriable_status_codes[%d]", path, i), "%d not an HTTP status", c)
		}
		s.codes = append(s.codes, int(c))
	}
	if err := decodeBackoff(&s, rp, path); err != nil {
		return s, err
	}
	return s, nil
}

// decodeRetryPriority reads a retry policy's retry_priority: Envoy's
// previous_priorities (the only one Envoy has) with its update_frequency,
// which Envoy requires above 0; any other is refused rather than
// ignored.
func decodeRetryPriority(s *retrySpec, p *route.RetryPolicy_RetryPriority, path string) error {
	if p == nil {
		return nil
	}
	tc := p.GetTypedConfig()
	if p.GetName() != previousPrioritiesName && tc.GetTypeUrl() != previousPrioritiesType {
		return fieldErr(path+".name", "%q not supported (only %s)", p.GetName(), previousPrioritiesName)
	}
	var c previouspriorities.PreviousPrioritiesConfig
	if tc != nil {
		if err := tc.UnmarshalTo(&c); err != nil {
			return fieldErr(path+".typed_config", "%v", err)
		}
	}
	if c.GetUpdateFrequency() <= 0 {
		return fieldErr(path+".typed_config.update_frequency", "%d: must be above 0", c.GetUpdateFrequency())
	}
	s.otherLevel = int(c.GetUpdateFrequency())
	return nil
}

func decodeHeaderMatcher(h *route.HeaderMatcher, path string) (headerMatch, error) {
	hm := headerMatch{name: strings.ToLower(h.GetName()), invert: h.GetInvertMatch()}
	if hm.name == "" {
		return hm, fieldErr(path+".name", "empty")
	}
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case nil:
		hm.kind = strPresent
	case *route.HeaderMatcher_PresentMatch:
		hm.kind = strPresent
		if !s.PresentMatch {
			hm.invert = !hm.invert
		}
	case *route.HeaderMatcher_ExactMatch:
		hm.kind, hm.value = strExact, s.ExactMatch
	case *route.HeaderMatcher_PrefixMatch:
		hm.kind, hm.value = strPrefix, s.PrefixMatch
	case *route.HeaderMatcher_SuffixMatch:
		hm.kind, hm.value = strSuffix, s.SuffixMatch
	case *route.HeaderMatcher_ContainsMatch:
		hm.kind, hm.value = strContains, s.ContainsMatch
	case *route.HeaderMatcher_SafeRegexMatch:
		re, err := compileRegex(s.SafeRegexMatch.GetRegex(), false)
		if err != nil {
			return hm, fieldErr(path+".safe_regex_match.regex", "%v", err)
		}
		hm.kind, hm.re = strRegex, re
	case *route.HeaderMatcher_StringMatch:
		sm, err := decodeStringMatcher(s.StringMatch, path+".string_match")
		if err != nil {
			return hm, err
		}
		sm.name, sm.invert = hm.name, hm.invert
		hm = sm
	default:
		return hm, fieldErr(path, "header match %T: %v", s, errUnsupported)
	}
	return hm, nil
}

func decodeRedirect(r *route.RedirectAction, path string, prefixMatch bool) (*redirectSpec, error) {
	rd := &redirectSpec{host: r.GetHostRedirect(), port: r.GetPortRedirect(), stripQuery: r.GetStripQuery()}
	switch r.GetResponseCode() {
	case route.RedirectAction_MOVED_PERMANENTLY:
		rd.status = 301
	case route.RedirectAction_FOUND:
		rd.status = 302
	case route.RedirectAction_SEE_OTHER:
		rd.status = 303
	case route.RedirectAction_TEMPORARY_REDIRECT:
		rd.status = 307
	case route.RedirectAction_PERMANENT_REDIRECT:
		rd.status = 308
	default:
		return nil, fieldErr(path+".response_code", "unknown code %v", r.GetResponseCode())
	}
	switch x := r.GetSchemeRewriteSpecifier().(type) {
	case *route.RedirectAction_HttpsRedirect:
		if x.HttpsRedirect {
			rd.scheme = "https"
		}
	case *route.RedirectAction_SchemeRedirect:
		rd.scheme = strings.ToLower(x.SchemeRedirect)
	}
	if rd.port > 65535 {
		return nil, fieldErr(path+".port_redirect", "%d above 65535", rd.port)
	}
	switch x := r.GetPathRewriteSpecifier().(type) {
	case nil:
	case *route.RedirectAction_PathRedirect:
		rd.path = x.PathRedirect
	case *route.RedirectAction_PrefixRewrite:
		if !prefixMatch {
			return nil, fieldErr(path+".prefix_rewrite", "only with a prefix match")
		}
		rd.prefix = x.PrefixRewrite
	default:
		return nil, fieldErr(path, "path rewrite %T: %v (path_redirect, prefix_rewrite)", x, errUnsupported)
	}
	return rd, nil
}
