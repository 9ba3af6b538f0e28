package xds

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	leastrequestv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	randomv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// ClusterName names the cluster of a service ("default/orders"), of one of
// its subsets ("default/orders/v1"), optionally restricted to one port
// ("default/orders/v1:8080"). EDS resources carry the same names.
func ClusterName(svc naming.ServiceKey, subset string, port uint32) string {
	n := svc.Namespace + "/" + svc.Name
	if subset != "" {
		n += "/" + subset
	}
	if port != 0 {
		n += ":" + strconv.FormatUint(uint64(port), 10)
	}
	return n
}

// clusterService returns "namespace/service" and the subset ("" for the
// whole service) of a cluster name.
func clusterService(name string) (service, subset string, ok bool) {
	ns, rest, ok := strings.Cut(name, "/")
	if !ok {
		return "", "", false
	}
	svc, subset, _ := strings.Cut(rest, "/")
	svc, _, _ = strings.Cut(svc, ":")
	subset, _, _ = strings.Cut(subset, ":")
	return ns + "/" + svc, subset, true
}

// RouteName names the route configuration of a service: "default/orders".
func RouteName(svc naming.ServiceKey) string { return svc.Namespace + "/" + svc.Name }

// ProxyName is the name of the HTTP listener and route configuration for a
// proxy (Envoy, Sextant's gateway): one virtual host per service.
const ProxyName = "sextant-http"

// Locality keys read from instance metadata; the Kubernetes topology labels
// are read when the short ones are absent.
const (
	MetaRegion  = "region"
	MetaZone    = "zone"
	MetaSubZone = "subzone"
)

// Endpoint is one registry instance as EDS sees it.
type Endpoint struct {
	ID       string
	Host     string // an IP address; DNS names are skipped (clients need IPs)
	Port     uint32
	Weight   uint32 // 0: never picked, left out
	Healthy  bool
	Isolated bool // kept, marked DRAINING so no new requests go to it
	Metadata label.Labels
}

// Usable reports whether e may be picked: healthy, not isolated, weight > 0,
// an IP address.
func (e *Endpoint) Usable() bool {
	if !e.Healthy || e.Isolated || e.Weight == 0 {
		return false
	}
	_, err := netip.ParseAddr(e.Host)
	return err == nil
}

func locality(md label.Labels) *corev3.Locality {
	get := func(short, long string) string {
		if v, ok := md.Get(short); ok {
			return v
		}
		v, _ := md.Get(long)
		return v
	}
	return &corev3.Locality{
		Region:  get(MetaRegion, "topology.kubernetes.io/region"),
		Zone:    get(MetaZone, "topology.kubernetes.io/zone"),
		SubZone: get(MetaSubZone, "topology.istio.io/subzone"),
	}
}

// LoadAssignment builds the EDS resource of a cluster from its endpoints:
// grouped by locality (every locality weighted by the sum of its endpoints'
// weights, as grpc-go requires a weight), health from the registry (an
// unhealthy instance UNHEALTHY, an isolated one DRAINING), weight from the
// instance. Endpoints of weight 0 or with a DNS name instead of an IP are
// left out, and of two instances at one address the first usable one (by
// id) is kept, since clients reject duplicate addresses.
func LoadAssignment(cluster string, eps []Endpoint) *endpointv3.ClusterLoadAssignment {
	type loc struct {
		key    string
		l      *corev3.Locality
		weight uint64
		lbs    []*endpointv3.LbEndpoint
	}
	slices.SortFunc(eps, func(a, b Endpoint) int {
		if au, bu := a.Usable(), b.Usable(); au != bu {
			if au {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var locs []*loc
	seen := make(map[netip.AddrPort]bool, len(eps))
	for i := range eps {
		e := &eps[i]
		addr, err := netip.ParseAddr(e.Host)
		if err != nil || e.Weight == 0 || e.Port == 0 {
			continue
		}
		ap := netip.AddrPortFrom(addr, uint16(e.Port))
		if seen[ap] {
			continue
		}
		seen[ap] = true
		l := locality(e.Metadata)
		key := l.Region + "\x00" + l.Zone + "\x00" + l.SubZone
		var at *loc
		for _, x := range locs {
			if x.key == key {
				at = x
				break
			}
		}
		if at == nil {
			at = &loc{key: key, l: l}
			locs = append(locs, at)
		}
		health := corev3.HealthStatus_HEALTHY
		switch {
		case e.Isolated:
			health = corev3.HealthStatus_DRAINING
		case !e.Healthy:
			health = corev3.HealthStatus_UNHEALTHY
		}
		at.weight += uint64(e.Weight)
		at.lbs = append(at.lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: addr.String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: e.Port},
				}}},
			}},
			HealthStatus:        health,
			LoadBalancingWeight: wrapperspb.UInt32(e.Weight),
		})
	}
	slices.SortFunc(locs, func(a, b *loc) int { return cmp.Compare(a.key, b.key) })
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: cluster}
	for _, l := range locs {
		cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
			Locality:            l.l,
			LbEndpoints:         l.lbs,
			LoadBalancingWeight: wrapperspb.UInt32(uint32(min(l.weight, 1<<31))),
		})
	}
	return cla
}

var adsSource = &corev3.ConfigSource{
	ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	ResourceApiVersion:    corev3.ApiVersion_V3,
}

func typed(m proto.Message) *corev3.TypedExtensionConfig {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only for registered types
	}
	return &corev3.TypedExtensionConfig{Name: string(m.ProtoReflect().Descriptor().FullName()), TypedConfig: a}
}

func lbPolicy(policies ...*corev3.TypedExtensionConfig) *clusterv3.LoadBalancingPolicy {
	p := &clusterv3.LoadBalancingPolicy{}
	for _, t := range policies {
		p.Policies = append(p.Policies, &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: t})
	}
	return p
}

func wrrLocalityRoundRobin() *corev3.TypedExtensionConfig {
	return typed(&wrrlocalityv3.WrrLocality{EndpointPickingPolicy: lbPolicy(typed(&roundrobinv3.RoundRobin{}))})
}

// HTTPProtocolOptionsKey is the typed_extension_protocol_options key of a
// cluster's upstream HTTP options.
const HTTPProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// http2Options asks for HTTP/2 to a cluster's endpoints.
var http2Options = func() *anypb.Any {
	a, err := anypb.New(&upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
	if err != nil {
		panic(err)
	}
	return a
}()

// Cluster builds the CDS resource of one cluster: endpoints from EDS over
// ADS, the load-balancing policy, connect timeout and outlier detection of p.
func Cluster(name string, p config.Policy) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource, ServiceName: name},
	}
	switch p.LoadBalancer {
	case "", config.PolicyRoundRobin:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	case config.PolicyLeastRequest:
		// Not the legacy lb_policy enum: grpc-js-xds NACKs LEAST_REQUEST
		// there ("load_balancing_policy unset and unsupported lb_policy").
		// In the list, a client without least request skips to round robin.
		c.LoadBalancingPolicy = lbPolicy(typed(&leastrequestv3.LeastRequest{}), wrrLocalityRoundRobin())
	case config.PolicyRingHash:
		c.LoadBalancingPolicy = lbPolicy(typed(ringHash(p.RingSize)))
	case config.PolicyMaglev:
		// grpc-go has no Maglev: it skips to a ring, consistent too.
		c.LoadBalancingPolicy = lbPolicy(typed(maglev(p.RingSize)), typed(ringHash(0)))
	case config.PolicyRandom:
		// grpc-go has no random policy: it skips to round robin.
		c.LoadBalancingPolicy = lbPolicy(typed(&randomv3.Random{}), wrrLocalityRoundRobin())
	default: // adaptive, peak_ewma
		// A TypedStruct naming Sextant's policy (balancer.XDSTypeURL): the
		// gateway and clients that registered "sextant_<name>" use it; other
		// clients skip to round robin over weighted localities.
		c.LoadBalancingPolicy = lbPolicy(typed(&xdstype.TypedStruct{
			TypeUrl: balancer.XDSTypeURL(p.LoadBalancer), Value: &structpb.Struct{},
		}), wrrLocalityRoundRobin())
	}
	if svc, subset, ok := clusterService(name); ok {
		// The service a proxy files its call records under, whatever the
		// subset, and the subset its records name (docs/gateway.md).
		md := &structpb.Struct{Fields: map[string]*structpb.Value{"service": structpb.NewStringValue(svc)}}
		if subset != "" {
			md.Fields["subset"] = structpb.NewStringValue(subset)
		}
		c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"sextant": md}}
	}
	if p.ConnectTimeout > 0 {
		c.ConnectTimeout = durationpb.New(p.ConnectTimeout)
	}
	if o := httpOptions(p); o != nil {
		// Per-connection limits (circuit.go), the idle timeout with them.
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{HTTPProtocolOptionsKey: o}
	} else {
		if p.IdleTimeout > 0 {
			c.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(p.IdleTimeout)}
		}
		if p.HTTP2 {
			// HTTP/2 to the endpoints (gRPC), as Istio publishes h2UpgradePolicy
			// UPGRADE; the gateway and Envoy read it, grpc-go speaks HTTP/2 anyway.
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{HTTPProtocolOptionsKey: http2Options}
		}
	}
	c.CircuitBreakers = circuitBreakers(p.Circuit)
	c.UpstreamConnectionOptions = tcpKeepalive(p.Circuit)
	if p.Locality != nil && len(p.Locality.Distribute) > 0 && c.LoadBalancingPolicy == nil {
		// Envoy follows EDS locality weights with lb_policy only when told
		// (Istio sets it for distribute); load_balancing_policy's
		// wrr_locality follows them anyway.
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{LocalityConfigSpecifier: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
			LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{}}}
	}
	c.OutlierDetection = DefaultOutlierDetection()
	if od := p.Outlier; od != nil {
		c.OutlierDetection = outlier(od)
	}
	setClusterTLS(c, p.TLS, p.TLSNamespace, p.HTTP2)
	c.HealthChecks = healthChecks(p.HealthCheck)
	return c
}

// DefaultOutlierDetection is the outlier detection of a cluster whose
// DestinationRule sets none: eject an endpoint that could not be reached
// (connection refused, connect timeout, reset, timeout) 5 times in a row,
// and never for its answers, whatever their status (Envoy's
// split_external_local_origin_errors with consecutive_local_origin_failure
// only: a 5xx is the application's answer, not proof the endpoint is gone).
// Ejection times and the 10% cap are Envoy's defaults, written out so that
// a config dump shows them. grpc-go and grpc-js-xds read no consecutive
// detector, and success-rate ejection is off, so for them it is a no-op:
// they leave unreachable endpoints by their connectivity state.
func DefaultOutlierDetection() *clusterv3.OutlierDetection {
	return &clusterv3.OutlierDetection{
		SplitExternalLocalOriginErrors:         true,
		ConsecutiveLocalOriginFailure:          wrapperspb.UInt32(5),
		EnforcingConsecutiveLocalOriginFailure: wrapperspb.UInt32(100),
		EnforcingConsecutive_5Xx:               wrapperspb.UInt32(0),
		EnforcingConsecutiveGatewayFailure:     wrapperspb.UInt32(0),
		EnforcingSuccessRate:                   wrapperspb.UInt32(0),
		EnforcingLocalOriginSuccessRate:        wrapperspb.UInt32(0),
		BaseEjectionTime:                       durationpb.New(30 * time.Second),
		MaxEjectionTime:                        durationpb.New(300 * time.Second),
		MaxEjectionPercent:                     wrapperspb.UInt32(10),
	}
}

// outlier maps Istio's outlier detection onto Envoy's as Istio does:
// consecutive errors only, success-rate ejection off.
func outlier(od *networking.OutlierDetection) *clusterv3.OutlierDetection {
	o := &clusterv3.OutlierDetection{
		EnforcingSuccessRate: wrapperspb.UInt32(0),
		Interval:             od.Interval,
		BaseEjectionTime:     od.BaseEjectionTime,
	}
	if v := od.GetConsecutive_5XxErrors(); v != nil {
		o.Consecutive_5Xx = wrapperspb.UInt32(v.GetValue())
		if v.GetValue() == 0 {
			o.EnforcingConsecutive_5Xx = wrapperspb.UInt32(0)
		}
	}
	if v := od.GetConsecutiveGatewayErrors(); v != nil {
		o.ConsecutiveGatewayFailure = wrapperspb.UInt32(v.GetValue())
		o.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(100)
	}
	if od.MaxEjectionPercent > 0 {
		o.MaxEjectionPercent = wrapperspb.UInt32(uint32(od.MaxEjectionPercent))
	}
	if od.SplitExternalLocalOriginErrors {
		// As Istio: local-origin failures counted apart, ejecting when
		// consecutiveLocalOriginFailures is set; their success rate off.
		o.SplitExternalLocalOriginErrors = true
		if v := od.GetConsecutiveLocalOriginFailures().GetValue(); v > 0 {
			o.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(v)
			o.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		o.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	return o
}

// ClusterFor answers, while building routes, which cluster a destination
// goes to, and false when that cluster has no usable endpoint (the route
// then leaves it out; see VirtualHost).
type ClusterFor func(d config.Destination) (name string, ok bool)

// VirtualHost builds the routes of service svc: from its VirtualService vs
// in force, or, when vs is nil, one default route to the whole service.
//
// Seed fix 2 (no empty clusters that traffic is routed to): a destination
// whose cluster has no usable endpoint (an empty subset, a subset no
// DestinationRule defines) is dropped from its route, the others' weights
// stand; a route left with no destination is dropped whole, so its requests
// fall through to the next matching route (usually the VirtualService's
// catch-all default). Only a destination without subset is kept when empty:
// there is nowhere else to send its traffic.
func VirtualHost(name string, domains []string, svc naming.ServiceKey, vs *config.Object, clusterFor ClusterFor, hashFor HashFor) *routev3.VirtualHost {
	vh := &routev3.VirtualHost{Name: name, Domains: domains}
	if vs == nil {
		d := config.Destination{Service: svc}
		c, _ := clusterFor(d)
		a := &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: c}, RetryPolicy: retryPolicy(nil)}
		if hashFor != nil {
			setHash(a, []config.HashKey{hashFor(d)}, true)
		}
		vh.Routes = []*routev3.Route{{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: a},
		}}
		return vh
	}
	var dropped []*structpb.Value
	for i, hr := range vs.VirtualService.Http {
		action, dest := routeAction(vs.Namespace, hr, clusterFor, hashFor)
		if action == nil && hr.DirectResponse == nil && hr.Redirect == nil {
			dropped = append(dropped, structpb.NewStringValue(droppedRoute(vs.Namespace, i, hr, clusterFor)))
			continue
		}
		matches := hr.Match
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for _, m := range matches {
			// A match naming gateways applies in the mesh only if it
			// names "mesh" (a Gateway's are narrowed by config.OnGateway).
			if !config.MatchAppliesOn(m, vs.Namespace, config.Key{}, true) {
				continue
			}
			var r *routev3.Route
			if routeExtras(hr) {
				r = httpRoute(hr, routeMatch(m), action, dest)
			} else {
				r = &routev3.Route{Name: hr.Name, Match: routeMatch(m), Action: &routev3.Route_Route{Route: action}}
			}
			markSource(r, m) // per subscriber, sourcematch.go
			vh.Routes = append(vh.Routes, r)
		}
	}
	if len(dropped) > 0 {
		// Why routes are missing, for a proxy's "no route" answer (the
		// gateway names them; Envoy and grpc-go ignore the metadata).
		vh.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"sextant": {Fields: map[string]*structpb.Value{DroppedRoutesField: structpb.NewListValue(&structpb.ListValue{Values: dropped})}},
		}}
	}
	return vh
}

// DroppedRoutesField is the field of a virtual host's "sextant" filter
// metadata that lists the VirtualService routes left out because none of
// their destinations may receive traffic, each with the reason (the
// gateway reads it as gateway.DroppedRoutesField).
const DroppedRoutesField = "dropped_routes"

// droppedRoute says why route i of a VirtualService was left out: each of
// its subset destinations is undefined or has no usable endpoint.
func droppedRoute(ns string, i int, hr *networking.HTTPRoute, clusterFor ClusterFor) string {
	var b strings.Builder
	b.WriteString("spec.http[" + strconv.Itoa(i) + "]")
	if hr.Name != "" {
		b.WriteString(" (" + strconv.Quote(hr.Name) + ")")
	}
	b.WriteString(":")
	for j, d := range hr.Route {
		k, err := config.ResolveHost(d.Destination.Host, ns)
		if err != nil {
			continue
		}
		if j > 0 {
			b.WriteString(";")
		}
		b.WriteString(" subset " + strconv.Quote(d.Destination.Subset) + " of " + k.String())
		if name, _ := clusterFor(config.Destination{Service: k, Subset: d.Destination.Subset, Port: d.Destination.GetPort().GetNumber()}); name == "" {
			b.WriteString(" is defined by no DestinationRule")
		} else {
			b.WriteString(" has no usable endpoint")
		}
	}
	return b.String()
}

// routeAction is the action of hr's destinations; when they come down to
// one, dest is its header changes (for the route).
func routeAction(ns string, hr *networking.HTTPRoute, clusterFor ClusterFor, hashFor HashFor) (a *routev3.RouteAction, dest *networking.Headers) {
	type wc struct {
		name    string
		weight  uint32
		headers *networking.Headers
		hash    config.HashKey
	}
	var dests []wc
	for _, d := range hr.Route {
		k, err := config.ResolveHost(d.Destination.Host, ns)
		if err != nil {
			continue
		}
		cd := config.Destination{Service: k, Subset: d.Destination.Subset, Port: d.Destination.GetPort().GetNumber()}
		name, ok := clusterFor(cd)
		if !ok && d.Destination.Subset != "" {
			continue
		}
		var hash config.HashKey
		if hashFor != nil {
			hash = hashFor(cd)
		}
		dests = append(dests, wc{name, uint32(d.Weight), d.Headers, hash})
	}
	a = &routev3.RouteAction{}
	switch {
	case len(dests) == 0:
		return nil, nil
	case len(dests) == 1:
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: dests[0].name}
		dest = dests[0].headers
	default:
		total := uint32(0)
		for _, d := range dests {
			total += d.weight
		}
		w := &routev3.WeightedCluster{}
		for _, d := range dests {
			if total == 0 {
				d.weight = 1 // the weighted ones were dropped: share evenly
			}
			if d.weight > 0 {
				cw := &routev3.WeightedCluster_ClusterWeight{Name: d.name, Weight: wrapperspb.UInt32(d.weight)}
				destHeaders(cw, d.headers)
				w.Clusters = append(w.Clusters, cw)
				dest = d.headers // (kept only when it is the one left)
			}
		}
		if len(w.Clusters) == 1 {
			a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: w.Clusters[0].Name}
		} else {
			a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: w}
		}
	}
	if hr.Timeout != nil {
		a.Timeout = hr.Timeout
		// grpc-go reads the deadline from max_stream_duration.
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: hr.Timeout}
	}
	a.RetryPolicy = retryPolicy(hr.Retries)
	keys := make([]config.HashKey, 0, len(dests))
	weighted := slices.ContainsFunc(dests, func(d wc) bool { return d.weight > 0 })
	for _, d := range dests {
		if d.weight > 0 || !weighted || len(dests) == 1 {
			keys = append(keys, d.hash)
		}
	}
	setHash(a, keys, len(dests) == 1)
	a.RequestMirrorPolicies = mirrorPolicies(ns, hr, clusterFor)
	if _, weighted := a.ClusterSpecifier.(*routev3.RouteAction_WeightedClusters); weighted {
		dest = nil
	}
	return a, dest
}

// DefaultRetryOn is what a route retries on unless its VirtualService says
// otherwise: Istio's default.
const DefaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// retryPolicy maps a route's retries as Istio does: none given is Istio's
// default policy (2 retries on DefaultRetryOn and 503, each on another
// host: Envoy's previous_hosts predicate, up to 5 picks); attempts 0 is no
// retries; otherwise the default with the route's attempts, per-try timeout
// and retryOn, whose numbers are status codes to retry.
var previousHostsURL = "type.googleapis.com/" + string((&previoushostsv3.PreviousHostsPredicate{}).ProtoReflect().Descriptor().FullName())

func retryPolicy(r *networking.HTTPRetry) *routev3.RetryPolicy {
	if r == nil {
		return defaultRetryPolicy
	}
	if r.Attempts <= 0 {
		return nil
	}
	return newRetryPolicy(r)
}

// defaultRetryPolicy is shared by every route without retries of its own
// (most): messages being marshalled are only read, so one serves all.
// Nothing may change it.
var defaultRetryPolicy = newRetryPolicy(nil)

func newRetryPolicy(r *networking.HTTPRetry) *routev3.RetryPolicy {
	prev := &anypb.Any{TypeUrl: previousHostsURL} // the predicate has no fields
	rp := &routev3.RetryPolicy{
		RetryOn:              DefaultRetryOn,
		NumRetries:           wrapperspb.UInt32(2),
		RetriableStatusCodes: []uint32{503},
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: prev},
		}},
		HostSelectionRetryMaxAttempts: 5,
	}
	if r == nil {
		return rp
	}
	rp.NumRetries = wrapperspb.UInt32(uint32(r.Attempts))
	rp.PerTryTimeout = r.PerTryTimeout
	retryExtras(rp, r)
	if r.RetryOn != "" {
		var on []string
		rp.RetriableStatusCodes = nil
		for _, c := range strings.Split(r.RetryOn, ",") {
			c = strings.TrimSpace(c)
			if code, err := strconv.ParseUint(c, 10, 32); err == nil {
				rp.RetriableStatusCodes = append(rp.RetriableStatusCodes, uint32(code))
				continue
			}
			on = append(on, c)
		}
		if len(rp.RetriableStatusCodes) > 0 && !slices.Contains(on, "retriable-status-codes") {
			on = append(on, "retriable-status-codes")
		}
		rp.RetryOn = strings.Join(on, ",")
	}
	return rp
}

func routeMatch(m *networking.HTTPMatchRequest) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return rm
	}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		rm.PathSpecifier = &routev3.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: u.Regex}}
	}
	names := make([]string, 0, len(m.Headers))
	for n := range m.Headers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		rm.Headers = append(rm.Headers, headerMatch(n, m.Headers[n]))
	}
	if m.Method != nil {
		rm.Headers = append(rm.Headers, headerMatch(":method", m.Method))
	}
	if matchExtras(m) {
		routeMatchExtras(rm, m)
	}
	return rm
}

func headerMatch(name string, sm *networking.StringMatch) *routev3.HeaderMatcher {
	s := &matcherv3.StringMatcher{}
	switch x := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		s.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: x.Exact}
	case *networking.StringMatch_Prefix:
		s.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: x.Prefix}
	case *networking.StringMatch_Regex:
		s.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: x.Regex}}
	}
	return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: s}}
}

// RouteConfiguration wraps one virtual host as the RDS resource name.
func RouteConfiguration(name string, vh *routev3.VirtualHost) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{vh}}
}

func hcm(routeName string, stripPort bool) *hcmv3.HttpConnectionManager {
	router, _ := anypb.New(&routerv3.Router{})
	h := &hcmv3.HttpConnectionManager{
		StatPrefix: routeName,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: adsSource, RouteConfigName: routeName,
		}},
		// CORS, then the fault filter, before the router, which is last, as
		// Envoy and grpc-go require (httproute.go, httproute_cors.go).
		HttpFilters: []*hcmv3.HttpFilter{corsFilter, faultFilter, {Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
	}
	if stripPort {
		h.StripPortMode = &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true}
	}
	return h
}

// APIListener builds the LDS resource a proxyless gRPC client asks for when
// it dials xds:///name: an api_listener whose HttpConnectionManager takes
// its routes from RDS resource routeName.
func APIListener(name, routeName string) *listenerv3.Listener {
	a, _ := anypb.New(hcm(routeName, false))
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: a}}
}

// HTTPListener builds the listener of a proxy: plain HTTP on port of every
// address, routes from RDS resource routeName (ProxyName), WebSocket
// upgrades enabled, as Istio's proxies have them.
func HTTPListener(name string, port uint32, routeName string) *listenerv3.Listener {
	h := hcm(routeName, true)
	h.UpgradeConfigs = []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
	a, _ := anypb.New(h)
	return &listenerv3.Listener{
		Name: name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}},
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a},
		}}}},
	}
}
