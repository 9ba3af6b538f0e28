package gateway

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"google.golang.org/protobuf/types/known/structpb"
)

// Type URLs of the resources the gateway follows.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// Names the gateway reads from xDS resources (documented in docs/gateway.md).
const (
	hcmFilterName = "envoy.filters.network.http_connection_manager"
	// defaultStreamIdle is the HCM's stream_idle_timeout when unset
	// (Envoy's).
	defaultStreamIdle = 5 * time.Minute
	// LBMetadataKey is the filter_metadata key of endpoint metadata and of
	// a route's metadata_match, as in Envoy.
	LBMetadataKey = "envoy.lb"
	// SextantMetadataKey is the filter_metadata key of a Cluster's Sextant
	// settings: "service" names the call log partition.
	SextantMetadataKey = "sextant"
	// DroppedRoutesField is the field of a VirtualHost's Sextant metadata
	// listing the routes the control plane left out and why (a subset
	// with no usable endpoint): named in the "no route" answer.
	DroppedRoutesField = "dropped_routes"
	// PolicyTypeURLPrefix starts the TypedStruct type_url of a Sextant
	// balancer policy in Cluster.load_balancing_policy, followed by its name
	// (balancer.XDSTypeURL: "sextant.io/balancer/sextant_adaptive"); the
	// value may tune it: {"active_request_bias": 1.5, "decay": "10s"}.
	PolicyTypeURLPrefix = balancer.XDSTypeURLPrefix
	// ProxyListener is the name of the HTTP listener Sextant's control
	// plane publishes for proxies (internal/xds.ProxyName).
	ProxyListener  = "sextant-http"
	httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// errUnsupported marks a field the gateway refuses rather than ignore.
var errUnsupported = errors.New("not supported")

func fieldErr(path string, format string, args ...any) error {
	return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
}

// listenerSpec is a decoded Listener: where its routes come from.
type listenerSpec struct {
	name   string
	port   uint32
	rds    string           // RDS route_config_name, or
	inline *routeConfigSpec // an inline route_config
	raw    proto.Message
	noHTTP string // why the listener cannot serve HTTP ("" if it can)
	// chains are the filter chains with an HTTP connection manager, the
	// default_filter_chain last; tls is set when they carry TLS (then all
	// do, and the gateway serves the listener on a --tls-listen port).
	chains []*chainSpec
	tls    bool
	// tcpChains are plain TCP chains (tcp.go): a listener served on a
	// --tcp-listen port.
	tcpChains []*tcpChainSpec
	// upgrades are the HCM's upgrade_configs: each type, enabled or not
	// by default (a route may override it); a type not listed is refused.
	upgrades map[string]bool
	// streamIdle is the HCM's stream_idle_timeout (0: none).
	streamIdle time.Duration
	// rbac are the HCM's RBAC filters, in order (rbac.go).
	rbac []*rbacFilter
	// telemetry is the first HTTP chain's tracing and access logs.
	telemetry *listenerTelemetry
}

// telemetryOf is ls's telemetry; nil for a nil ls.
func (ls *listenerSpec) telemetryOf() *listenerTelemetry {
	if ls == nil {
		return nil
	}
	return ls.telemetry
}

func decodeListener(a *anypb.Any) (string, any, error) {
	l := new(listener.Listener)
	if err := a.UnmarshalTo(l); err != nil {
		return "", nil, fmt.Errorf("decode: %w", err)
	}
	name := l.GetName()
	if name == "" {
		return "", nil, fieldErr("name", "empty")
	}
	ls := &listenerSpec{name: name, raw: l, port: l.GetAddress().GetSocketAddress().GetPortValue()}
	fcs := l.GetFilterChains()
	if d := l.GetDefaultFilterChain(); d != nil {
		fcs = append(fcs[:len(fcs):len(fcs)], d)
	}
	plain := false
	for i, fc := range fcs {
		path := fmt.Sprintf("filter_chains[%d]", i)
		isDefault := i == len(l.GetFilterChains())
		if isDefault {
			path = "default_filter_chain"
		}
		cs := &chainSpec{isDefault: isDefault}
		found := false
		tcpPath, tcpFilter := "", (*listener.Filter)(nil)
		for j, f := range fc.GetFilters() {
			fpath := fmt.Sprintf("%s.filters[%d]", path, j)
			if isTCPProxy(f) && tcpFilter == nil {
				tcpPath, tcpFilter = fpath, f
			}
			if f.GetName() != hcmFilterName && f.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
				continue
			}
			if found {
				continue // the first HTTP filter of a chain serves
			}
			found = true
			if err := decodeHCM(fpath, f, cs); err != nil {
				return name, nil, err
			}
		}
		if !found {
			// A tcp_proxy chain matching TLS by server name, with no
			// transport socket, is TLS passthrough (passthrough.go); other
			// TCP proxying is not the gateway's.
			if tcpFilter != nil && fc.GetTransportSocket() == nil && fc.GetFilterChainMatch().GetTransportProtocol() != "tls" && !isInboundListener(name) {
				// Plain TCP (a Gateway TCP server's chain).
				t, err := decodeTCPChain(path, fc, tcpPath, tcpFilter)
				if err != nil {
					return name, nil, err
				}
				ls.tcpChains = append(ls.tcpChains, t)
				continue
			}
			if tcpFilter == nil || fc.GetTransportSocket() != nil || fc.GetFilterChainMatch().GetTransportProtocol() != "tls" {
				continue
			}
			t, err := decodeTCPProxy(tcpPath, tcpFilter)
			if err != nil {
				return name, nil, err
			}
			cs.tcp = t
			if err := decodeChainMatch(path+".filter_chain_match", fc.GetFilterChainMatch(), cs); err != nil {
				return name, nil, err
			}
			ls.chains = append(ls.chains, cs)
			continue
		}
		if err := decodeChainMatch(path+".filter_chain_match", fc.GetFilterChainMatch(), cs); err != nil {
			return name, nil, err
		}
		if ts := fc.GetTransportSocket(); ts != nil {
			t, err := decodeDownstreamTLS(path+".transport_socket", ts)
			if err != nil {
				return name, nil, err
			}
			cs.tls = t
		} else {
			plain = true
		}
		ls.chains = append(ls.chains, cs)
	}
	if len(ls.chains) == 0 {
		ls.noHTTP = "no " + hcmFilterName + " filter" // fine unless it is the one to serve
		return name, ls, nil
	}
	if len(ls.tcpChains) > 0 {
		return name, nil, fieldErr("filter_chains", "a listener with both TCP (tcp_proxy) and HTTP or TLS chains: %v (one port is one protocol)", errUnsupported)
	}
	for _, c := range ls.chains {
		ls.tls = ls.tls || c.tls != nil || c.tcp != nil
	}
	if isInboundListener(name) {
		// A workload's inbound listener: its TLS and plaintext chains are
		// told apart by the first byte of a connection (inbound.go).
		return name, ls, nil
	}
	if ls.tls {
		if plain {
			return name, nil, fieldErr("filter_chains", "%v", errMixedChains)
		}
		if err := checkChainNames(ls.chains); err != nil {
			return name, nil, err
		}
	}
	// A plaintext listener's chains are not matched: the first HTTP one serves.
	first := ls.chains[0]
	ls.rds, ls.inline, ls.upgrades, ls.streamIdle, ls.rbac = first.rds, first.inline, first.upgrades, first.streamIdle, first.rbac
	ls.telemetry = first.telemetry
	return name, ls, nil
}

// decodeHCM reads an HTTP connection manager filter into cs.
func decodeHCM(path string, f *listener.Filter, cs *chainSpec) error {
	m := new(hcm.HttpConnectionManager)
	if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
		return fieldErr(path+".typed_config", "%v", err)
	}
	cs.streamIdle = defaultStreamIdle
	if d := m.GetStreamIdleTimeout(); d != nil {
		t, err := duration(d, path+".stream_idle_timeout")
		if err != nil {
			return err
		}
		cs.streamIdle = t
	}
	for k, uc := range m.GetUpgradeConfigs() {
		typ := strings.ToLower(uc.GetUpgradeType())
		if typ == "" {
			return fieldErr(fmt.Sprintf("%s.upgrade_configs[%d].upgrade_type", path, k), "empty")
		}
		if typ == "connect" {
			continue // CONNECT is not proxied, as without a connect_matcher
		}
		if cs.upgrades == nil {
			cs.upgrades = map[string]bool{}
		}
		cs.upgrades[typ] = uc.GetEnabled() == nil || uc.GetEnabled().GetValue()
	}
	rf, err := decodeHTTPFilters(m.GetHttpFilters(), path+".typed_config")
	if err != nil {
		return err
	}
	cs.rbac = rf
	if cs.telemetry, err = decodeTelemetry(path+".typed_config", m); err != nil {
		return err
	}
	switch rs := m.GetRouteSpecifier().(type) {
	case *hcm.HttpConnectionManager_Rds:
		cs.rds = rs.Rds.GetRouteConfigName()
		if cs.rds == "" {
			return fieldErr(path+".rds.route_config_name", "empty")
		}
	case *hcm.HttpConnectionManager_RouteConfig:
		rc, err := decodeRouteConfig(rs.RouteConfig)
		if err != nil {
			return fmt.Errorf("%s.route_config.%w", path, err)
		}
		cs.inline = rc
	default:
		return fieldErr(path, "route specifier %T: %v (use rds or route_config)", rs, errUnsupported)
	}
	return nil
}

// compileRegex compiles an RE2 expression (Go's regexp is RE2) that must
// match the whole input, as Envoy's safe_regex does.
func compileRegex(expr string, ignoreCase bool) (*regexp.Regexp, error) {
	if len(expr) > 1024 {
		return nil, errors.New("longer than 1024 bytes")
	}
	flags := ""
	if ignoreCase {
		flags = "(?i)"
	}
	return regexp.Compile(flags + `^(?:` + expr + `)$`)
}

func duration(d *durationpb.Duration, path string) (time.Duration, error) {
	if err := d.CheckValid(); err != nil {
		return 0, fieldErr(path, "%v", err)
	}
	t := d.AsDuration()
	if t < 0 {
		return 0, fieldErr(path, "negative")
	}
	return t, nil
}

// lbMetadata reads filter_metadata["envoy.lb"] as subset request metadata:
// string values as they are, numbers and booleans in their JSON form.
func lbMetadata(m *core.Metadata, path string) (map[string]string, error) {
	st := m.GetFilterMetadata()[LBMetadataKey]
	if len(st.GetFields()) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(st.GetFields()))
	for k, v := range st.GetFields() {
		s, ok := scalar(v)
		if !ok {
			return nil, fieldErr(fmt.Sprintf("%s.filter_metadata[%q].%s", path, LBMetadataKey, k), "a list or struct cannot be matched")
		}
		out[k] = s
	}
	return out, nil
}

func scalar(v *structpb.Value) (string, bool) {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return x.StringValue, true
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(x.NumberValue, 'f', -1, 64), true
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(x.BoolValue), true
	}
	return "", false
}
