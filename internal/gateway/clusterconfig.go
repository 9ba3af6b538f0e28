//lint:file-ignore SA1019 deprecated Envoy fields are still sent by control planes; the gateway reads them as Envoy does.

package gateway

import (
	"fmt"
	"net"
	"strconv"
	"time"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lbleast "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	lbmaglev "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	lbrandom "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	lbring "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	lbrr "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/locality"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// clusterSpec is a decoded Cluster.
type clusterSpec struct {
	name    string
	eds     string // the ClusterLoadAssignment name (eds service_name or name); "" for STATIC
	static  []hostSpec
	dns     *dnsSpec // a STRICT_DNS or LOGICAL_DNS cluster's names (dns.go)
	service string   // call-log partition
	// subsetName is the subset the call records of this cluster name when
	// the call had no metadata match (filter_metadata["sextant"].subset).
	subsetName string
	policy     policySpec
	subset     *subset.Config // nil: no subset load balancing
	eject      *balancer.EjectionConfig
	connect    time.Duration
	h2c        bool
	tls        *upstreamTLSSpec // nil: plaintext
	budget     retryBudget
	circuit    circuitSpec      // circuit_breakers (circuit.go)
	conn       connOpts         // per-connection limits of HTTP/1.1 pools (circuit.go)
	hc         *healthCheckSpec // active health check; nil: EDS health only
	// localityWeighted: common_lb_config.locality_weighted_lb_config, the
	// EDS localities' weights split each priority's calls (priority.go).
	localityWeighted bool
	raw              proto.Message
	// unsupported says why calls cannot be sent to this cluster (a type or
	// policy the gateway does not implement); "" for a usable cluster.
	unsupported string
}

// policySpec is the cluster's balancer policy; equal specs share learned
// state across a cluster update.
type policySpec struct {
	name  string
	bias  float64
	decay time.Duration
	ring  uint64 // ring_hash's minimum ring size, maglev's table size (0: default)
}

type retryBudget struct {
	percent float64 // share of active requests that may be retries
	min     int     // retries always allowed at once
}

func decodeClusterAny(a *anypb.Any) (string, any, error) {
	c := new(cluster.Cluster)
	if err := a.UnmarshalTo(c); err != nil {
		return "", nil, fmt.Errorf("decode: %w", err)
	}
	s, err := decodeCluster(c)
	return c.GetName(), s, err
}

func decodeCluster(c *cluster.Cluster) (*clusterSpec, error) {
	s := &clusterSpec{name: c.GetName(), raw: c, connect: 5 * time.Second,
		budget: retryBudget{percent: 20, min: 3}}
	if s.name == "" {
		return nil, fieldErr("name", "empty")
	}
	s.service = s.name
	s.localityWeighted = c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil
	md := c.GetMetadata().GetFilterMetadata()[SextantMetadataKey].GetFields()
	if v, ok := scalar(md["service"]); ok && v != "" {
		s.service = v
	}
	if v, ok := scalar(md["subset"]); ok {
		s.subsetName = v
	}
	switch c.GetType() {
	case cluster.Cluster_EDS:
		s.eds = c.GetEdsClusterConfig().GetServiceName()
		if s.eds == "" {
			s.eds = s.name
		}
		if ec := c.GetEdsClusterConfig().GetEdsConfig(); ec != nil && ec.GetAds() == nil && ec.GetApiConfigSource() != nil {
			return nil, fieldErr("eds_cluster_config.eds_config", "only ADS is supported")
		}
	case cluster.Cluster_STATIC:
		hosts, err := decodeHosts(c.GetLoadAssignment(), "load_assignment")
		if err != nil {
			return nil, err
		}
		s.static = hosts
	case cluster.Cluster_STRICT_DNS, cluster.Cluster_LOGICAL_DNS:
		if err := decodeDNS(c, s); err != nil {
			return nil, err
		}
	default:
		// Accepted, so that one such cluster does not refuse the whole CDS
		// update as Envoy would not; calls routed to it get 503.
		s.unsupported = fmt.Sprintf("type %v is not supported by the gateway (EDS, STATIC, STRICT_DNS, LOGICAL_DNS)", c.GetType())
		return s, nil
	}
	if ts := c.GetTransportSocket(); ts != nil {
		t, err := decodeUpstreamTLS("transport_socket", ts)
		if err != nil {
			// Accepted, so that one such cluster does not refuse the whole
			// CDS update; its calls get 503 saying why rather than going
			// out in plaintext.
			s.unsupported = fmt.Sprintf("transport socket %q: %v: calls are not sent in plaintext instead", ts.GetName(), err)
			s.eds, s.static, s.dns = "", nil, nil // its endpoints are never used
			return s, nil
		}
		s.tls = t
		if len(t.certs) > 0 {
			s.raw = redactClusterKeys(c)
		}
	}
	if d := c.GetConnectTimeout(); d != nil {
		t, err := duration(d, "connect_timeout")
		if err != nil {
			return nil, err
		}
		if t > 0 {
			s.connect = t
		}
	}
	if err := decodePolicy(c, s); err != nil {
		return nil, err
	}
	if s.unsupported != "" {
		return s, nil
	}
	if sc := c.GetLbSubsetConfig(); sc != nil {
		cfg, err := decodeSubset(sc)
		if err != nil {
			return nil, err
		}
		s.subset = cfg
	}
	if od := c.GetOutlierDetection(); od != nil {
		e := &balancer.EjectionConfig{MaxEjectedPercent: 10} // Envoy's default
		if v := od.GetConsecutive_5Xx(); v != nil {
			e.ConsecutiveFailures = int(v.GetValue())
			// 0, as Istio sends for consecutive5xxErrors: 0, is off.
			e.NoConsecutiveFailures = e.ConsecutiveFailures == 0
		}
		if v := od.GetEnforcingConsecutive_5Xx(); v != nil {
			if v.GetValue() > 100 {
				return nil, fieldErr("outlier_detection.enforcing_consecutive_5xx", "%d above 100", v.GetValue())
			}
			// Enforcement is all or nothing here: 0 is off, any other on.
			e.NoConsecutiveFailures = e.NoConsecutiveFailures || v.GetValue() == 0
		}
		e.SplitLocalOrigin = od.GetSplitExternalLocalOriginErrors()
		if v := od.GetConsecutiveLocalOriginFailure(); v != nil {
			e.ConsecutiveLocalOriginFailures = int(v.GetValue())
			e.NoLocalOriginFailures = v.GetValue() == 0
		}
		if v := od.GetEnforcingConsecutiveLocalOriginFailure(); v != nil {
			if v.GetValue() > 100 {
				return nil, fieldErr("outlier_detection.enforcing_consecutive_local_origin_failure", "%d above 100", v.GetValue())
			}
			e.NoLocalOriginFailures = e.NoLocalOriginFailures || v.GetValue() == 0
		}
		if d := od.GetBaseEjectionTime(); d != nil {
			t, err := duration(d, "outlier_detection.base_ejection_time")
			if err != nil {
				return nil, err
			}
			e.BaseEjection = t
		}
		if d := od.GetMaxEjectionTime(); d != nil {
			t, err := duration(d, "outlier_detection.max_ejection_time")
			if err != nil {
				return nil, err
			}
			e.MaxEjection = t
		}
		if v := od.GetMaxEjectionPercent(); v != nil {
			if v.GetValue() > 100 {
				return nil, fieldErr("outlier_detection.max_ejection_percent", "%d above 100", v.GetValue())
			}
			e.MaxEjectedPercent = int(v.GetValue())
		}
		s.eject = e
	}
	for i, t := range c.GetCircuitBreakers().GetThresholds() {
		if rb := t.GetRetryBudget(); rb != nil && t.GetPriority() == core.RoutingPriority_DEFAULT {
			if p := rb.GetBudgetPercent(); p != nil {
				if p.GetValue() < 0 || p.GetValue() > 100 {
					return nil, fieldErr(fmt.Sprintf("circuit_breakers.thresholds[%d].retry_budget.budget_percent", i), "%v not in [0, 100]", p.GetValue())
				}
				s.budget.percent = p.GetValue()
			}
			if m := rb.GetMinRetryConcurrency(); m != nil {
				s.budget.min = int(m.GetValue())
			}
		}
	}
	if a, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]; ok {
		o := new(upstreamhttp.HttpProtocolOptions)
		if err := a.UnmarshalTo(o); err != nil {
			return nil, fieldErr("typed_extension_protocol_options", "%v", err)
		}
		if o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil {
			s.h2c = true
		}
	}
	if c.GetHttp2ProtocolOptions() != nil {
		s.h2c = true
	}
	if err := decodeCircuit(c, s); err != nil {
		return nil, err
	}
	hc, err := decodeHealthChecks(c.GetHealthChecks())
	if err != nil {
		return nil, err
	}
	s.hc = hc
	return s, nil
}

// decodePolicy reads load_balancing_policy (the first policy the gateway
// knows, as Envoy and grpc-go do) or else lb_policy.
func decodePolicy(c *cluster.Cluster, s *clusterSpec) error {
	s.policy = policySpec{bias: 1, decay: 10 * time.Second}
	if lp := c.GetLoadBalancingPolicy(); lp != nil {
		for i, p := range lp.GetPolicies() {
			path := fmt.Sprintf("load_balancing_policy.policies[%d].typed_extension_config.typed_config", i)
			tc := p.GetTypedExtensionConfig().GetTypedConfig()
			if tc == nil {
				continue
			}
			switch tc.GetTypeUrl() {
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin":
				if err := tc.UnmarshalTo(new(lbrr.RoundRobin)); err != nil {
					return fieldErr(path, "%v", err)
				}
				s.policy.name = "round_robin"
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.random.v3.Random":
				if err := tc.UnmarshalTo(new(lbrandom.Random)); err != nil {
					return fieldErr(path, "%v", err)
				}
				s.policy.name = "random"
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest":
				lr := new(lbleast.LeastRequest)
				if err := tc.UnmarshalTo(lr); err != nil {
					return fieldErr(path, "%v", err)
				}
				s.policy.name = "least_request"
				if b := lr.GetActiveRequestBias(); b != nil {
					s.policy.bias = b.GetDefaultValue()
				}
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash":
				rh := new(lbring.RingHash)
				if err := tc.UnmarshalTo(rh); err != nil {
					return fieldErr(path, "%v", err)
				}
				if err := ringSpec(&s.policy, rh.GetHashFunction() == lbring.RingHash_DEFAULT_HASH || rh.GetHashFunction() == lbring.RingHash_XX_HASH,
					rh.GetMinimumRingSize().GetValue(), path); err != nil {
					return err
				}
			case "type.googleapis.com/envoy.extensions.load_balancing_policies.maglev.v3.Maglev":
				m := new(lbmaglev.Maglev)
				if err := tc.UnmarshalTo(m); err != nil {
					return fieldErr(path, "%v", err)
				}
				if err := maglevSpec(&s.policy, m.GetTableSize().GetValue(), path+".table_size"); err != nil {
					return err
				}
			case "type.googleapis.com/xds.type.v3.TypedStruct":
				ts := new(xdstype.TypedStruct)
				if err := tc.UnmarshalTo(ts); err != nil {
					return fieldErr(path, "%v", err)
				}
				name, ok := balancer.NameFromXDSTypeURL(ts.GetTypeUrl())
				if !ok {
					continue
				}
				if _, err := balancer.New(name); err != nil {
					return fieldErr(path+".type_url", "unknown policy %q (known: %v)", name, balancer.Names())
				}
				s.policy.name = name
				if err := decodeSextantPolicy(ts.GetValue(), path+".value", &s.policy); err != nil {
					return err
				}
			default:
				continue
			}
			return nil
		}
		return fieldErr("load_balancing_policy", "no policy the gateway supports (round_robin, random, least_request, or a TypedStruct %q<name>)", PolicyTypeURLPrefix)
	}
	switch c.GetLbPolicy() {
	case cluster.Cluster_ROUND_ROBIN:
		s.policy.name = "round_robin"
	case cluster.Cluster_RANDOM:
		s.policy.name = "random"
	case cluster.Cluster_LEAST_REQUEST:
		s.policy.name = "least_request"
		if b := c.GetLeastRequestLbConfig().GetActiveRequestBias(); b != nil {
			s.policy.bias = b.GetDefaultValue()
		}
	case cluster.Cluster_RING_HASH:
		rc := c.GetRingHashLbConfig()
		return ringSpec(&s.policy, rc.GetHashFunction() == cluster.Cluster_RingHashLbConfig_XX_HASH,
			rc.GetMinimumRingSize().GetValue(), "ring_hash_lb_config")
	case cluster.Cluster_MAGLEV:
		return maglevSpec(&s.policy, c.GetMaglevLbConfig().GetTableSize().GetValue(), "maglev_lb_config.table_size")
	default:
		s.unsupported = fmt.Sprintf("lb_policy %v is not supported by the gateway (ROUND_ROBIN, RANDOM, LEAST_REQUEST, or load_balancing_policy)", c.GetLbPolicy())
	}
	return nil
}

// ringSpec is a ring_hash policy: xxHash only (the hash the gateway's
// route hash policies compute, as Envoy's default), a ring up to Envoy's
// maximum.
func ringSpec(p *policySpec, xxHash bool, minSize uint64, path string) error {
	if !xxHash {
		return fieldErr(path+".hash_function", "only XX_HASH is supported (MURMUR_HASH_2 is not)")
	}
	if minSize > balancer.MaxRingSize {
		return fieldErr(path+".minimum_ring_size", "%d is more than %d", minSize, balancer.MaxRingSize)
	}
	p.name, p.ring = "ring_hash", minSize
	return nil
}

// maglevSpec is a maglev policy; Envoy requires a prime table size.
func maglevSpec(p *policySpec, size uint64, path string) error {
	if size != 0 && (size > 5000011 || !isPrime(size)) {
		return fieldErr(path, "%d: a prime up to 5000011 is required", size)
	}
	p.name, p.ring = "maglev", size
	return nil
}

func isPrime(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func decodeSextantPolicy(v *structpb.Struct, path string, p *policySpec) error {
	for k, f := range v.GetFields() {
		switch k {
		case "name": // optional: the type_url names the policy
			if f.GetStringValue() != p.name {
				return fieldErr(path+".name", "%q, but the type_url names %q", f.GetStringValue(), p.name)
			}
		case "active_request_bias":
			p.bias = f.GetNumberValue()
		case "decay":
			d, err := time.ParseDuration(f.GetStringValue())
			if err != nil || d <= 0 {
				return fieldErr(path+".decay", "bad duration %q", f.GetStringValue())
			}
			p.decay = d
		default:
			return fieldErr(path+"."+k, "unknown field")
		}
	}
	if p.name == "" {
		return fieldErr(path+".name", "required")
	}
	return nil
}

func decodeSubset(sc *cluster.Cluster_LbSubsetConfig) (*subset.Config, error) {
	cfg := &subset.Config{PanicModeAny: sc.GetPanicModeAny(), ListAsAny: sc.GetListAsAny()}
	switch sc.GetFallbackPolicy() {
	case cluster.Cluster_LbSubsetConfig_NO_FALLBACK:
		cfg.FallbackPolicy = subset.NoFallback
	case cluster.Cluster_LbSubsetConfig_ANY_ENDPOINT:
		cfg.FallbackPolicy = subset.AnyEndpoint
	case cluster.Cluster_LbSubsetConfig_DEFAULT_SUBSET:
		cfg.FallbackPolicy = subset.DefaultSubset
	}
	if ds := sc.GetDefaultSubset(); len(ds.GetFields()) > 0 {
		cfg.DefaultSubset = map[string]string{}
		for k, v := range ds.GetFields() {
			s, ok := scalar(v)
			if !ok {
				return nil, fieldErr("lb_subset_config.default_subset."+k, "a list or struct cannot be matched")
			}
			cfg.DefaultSubset[k] = s
		}
	}
	for _, sel := range sc.GetSubsetSelectors() {
		s := subset.Selector{Keys: sel.GetKeys(), SingleHostPerSubset: sel.GetSingleHostPerSubset(),
			FallbackKeysSubset: sel.GetFallbackKeysSubset()}
		switch sel.GetFallbackPolicy() {
		case cluster.Cluster_LbSubsetConfig_LbSubsetSelector_NO_FALLBACK:
			s.FallbackPolicy = subset.NoFallback
		case cluster.Cluster_LbSubsetConfig_LbSubsetSelector_ANY_ENDPOINT:
			s.FallbackPolicy = subset.AnyEndpoint
		case cluster.Cluster_LbSubsetConfig_LbSubsetSelector_DEFAULT_SUBSET:
			s.FallbackPolicy = subset.DefaultSubset
		case cluster.Cluster_LbSubsetConfig_LbSubsetSelector_KEYS_SUBSET:
			s.FallbackPolicy = subset.KeysSubset
		}
		cfg.Selectors = append(cfg.Selectors, s)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lb_subset_config: %w", err)
	}
	return cfg, nil
}

// hostSpec is one endpoint of a ClusterLoadAssignment.
type hostSpec struct {
	addr    string
	weight  uint32
	healthy bool
	// priority is the EDS priority of the host's locality (0 first), or
	// the one the gateway gives it from its own locality (locality.go).
	priority uint32
	locality locality.Locality
	// locWeight is the locality's load_balancing_weight (0: none).
	locWeight uint32
	labels    label.Labels // as the subset balancer reads them
	lists     map[string][]string
}

// maxPriority bounds an EDS priority: each level is a balancer.
const maxPriority = 127

// assignmentSpec is a decoded ClusterLoadAssignment.
type assignmentSpec struct {
	name  string
	hosts []hostSpec
	raw   proto.Message
}

func decodeEndpointsAny(a *anypb.Any) (string, any, error) {
	cla := new(endpointpb.ClusterLoadAssignment)
	if err := a.UnmarshalTo(cla); err != nil {
		return "", nil, fmt.Errorf("decode: %w", err)
	}
	if cla.GetClusterName() == "" {
		return "", nil, fieldErr("cluster_name", "empty")
	}
	hosts, err := decodeHosts(cla, "")
	if err != nil {
		return cla.GetClusterName(), nil, err
	}
	return cla.GetClusterName(), &assignmentSpec{name: cla.GetClusterName(), hosts: hosts, raw: cla}, nil
}

// decodeHosts flattens the localities and priorities of an assignment into
// one host set (priorities are not used for failover; docs/gateway.md).
func decodeHosts(cla *endpointpb.ClusterLoadAssignment, prefix string) ([]hostSpec, error) {
	if prefix != "" {
		prefix += "."
	}
	var hosts []hostSpec
	seen := map[string]string{}
	for i, le := range cla.GetEndpoints() {
		if p := le.GetPriority(); p > maxPriority {
			return nil, fieldErr(fmt.Sprintf("%sendpoints[%d].priority", prefix, i), "%d above %d", p, maxPriority)
		}
		for j, lb := range le.GetLbEndpoints() {
			path := fmt.Sprintf("%sendpoints[%d].lb_endpoints[%d]", prefix, i, j)
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				return nil, fieldErr(path+".endpoint.address.socket_address", "required")
			}
			if net.ParseIP(sa.GetAddress()) == nil && !validDNSName(sa.GetAddress()) {
				return nil, fieldErr(path+".endpoint.address.socket_address.address", "%q is not an IP address or host name", sa.GetAddress())
			}
			port := sa.GetPortValue()
			if port == 0 || port > 65535 {
				return nil, fieldErr(path+".endpoint.address.socket_address.port_value", "%d not in [1, 65535]", port)
			}
			h := hostSpec{addr: net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(port))), weight: 1, priority: le.GetPriority(),
				locality:  locality.Locality{Region: le.GetLocality().GetRegion(), Zone: le.GetLocality().GetZone(), SubZone: le.GetLocality().GetSubZone()},
				locWeight: le.GetLoadBalancingWeight().GetValue()}
			if p, dup := seen[h.addr]; dup {
				return nil, fieldErr(path, "address %s repeats %s", h.addr, p)
			}
			seen[h.addr] = path
			if w := lb.GetLoadBalancingWeight(); w != nil {
				h.weight = w.GetValue()
			}
			switch lb.GetHealthStatus() {
			case core.HealthStatus_UNKNOWN, core.HealthStatus_HEALTHY:
				h.healthy = true
			}
			var labels map[string]string
			for k, v := range lb.GetMetadata().GetFilterMetadata()[LBMetadataKey].GetFields() {
				if s, ok := scalar(v); ok {
					if labels == nil {
						labels = map[string]string{}
					}
					labels[k] = s
					continue
				}
				lv := v.GetListValue()
				if lv == nil {
					return nil, fieldErr(fmt.Sprintf("%s.metadata.filter_metadata[%q].%s", path, LBMetadataKey, k), "a struct is not a label value")
				}
				var list []string
				for _, e := range lv.GetValues() {
					s, ok := scalar(e)
					if !ok {
						return nil, fieldErr(fmt.Sprintf("%s.metadata.filter_metadata[%q].%s", path, LBMetadataKey, k), "list elements must be scalars")
					}
					list = append(list, s)
				}
				if h.lists == nil {
					h.lists = map[string][]string{}
				}
				h.lists[k] = list
			}
			h.labels = label.FromMap(labels)
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '.' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
