package xds

import (
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
)

// ServerListenerPrefix is the name of the listener grpc-go's xDS server
// asks for, before its listening address, with the template Sextant's
// docs give its bootstrap: "server_listener_resource_name_template":
// "grpc/server?xds.resource.listening_address=%s" (grpc-go's default in
// its own examples and Istio's).
const ServerListenerPrefix = "grpc/server?xds.resource.listening_address="

// ParseServerListener returns the listening address a server listener's
// name carries, and false for any other name.
func ParseServerListener(name string) (netip.AddrPort, bool) {
	rest, ok := strings.CutPrefix(name, ServerListenerPrefix)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, false
	}
	return ap, true
}

// The filter chains of an inbound listener.
const (
	InboundMTLSChain      = "inbound-mtls"
	InboundPlaintextChain = "inbound-plaintext"
)

// ServerListener builds the listener a proxyless gRPC server (grpc-go's
// xds.NewGRPCServer) gets for its listening address addr: one HTTP
// connection manager whose inline route sends every request to the
// server's own handlers (non_forwarding_action), behind the RBAC filters of
// the AuthorizationPolicies in policies (RBACFilters) and the JWT filter of
// the RequestAuthentications among them (JWTFilter), and a transport by
// PeerAuthentication mode:
//
//   - STRICT: TLS with the server's certificate and the mesh's roots from
//     the certificate provider instance "sextant", client certificate
//     required;
//   - DISABLE: plaintext;
//   - PERMISSIVE (and UNSET): a TLS chain matched by transport_protocol
//     "tls" and a plaintext one matched by "raw_buffer", Istio's shape.
//     grpc-go cannot tell TLS from plaintext on one port (gRFC A36 drops
//     chains matching any transport_protocol but "raw_buffer", and it
//     refuses the listener filters, such as Envoy's TLS inspector, that
//     would tell them apart), so a grpc-go server serves PERMISSIVE as
//     plaintext.
func ServerListener(name string, addr netip.AddrPort, mode security.PeerAuthentication_MutualTLS_Mode, policies []*config.Object) *listenerv3.Listener {
	return &listenerv3.Listener{Name: name, Address: socketAddress(addr), FilterChains: inboundChains(mode, policies)}
}

// InboundChains encodes the filter chains ServerListener gives a workload
// of mode and policies, as Listener fields (filter_chains, each tagged):
// every workload with the same mode and policies shares them, and
// ServerListenerBytes puts them behind each one's name and address.
func InboundChains(mode security.PeerAuthentication_MutualTLS_Mode, policies []*config.Object) ([]byte, error) {
	var out []byte
	for _, fc := range inboundChains(mode, policies) {
		b, err := deterministic.Marshal(fc)
		if err != nil {
			return nil, err
		}
		out = protowire.AppendTag(out, 3, protowire.BytesType) // Listener.filter_chains
		out = protowire.AppendBytes(out, b)
	}
	return out, nil
}

// ServerListenerBytes encodes the listener ServerListener builds, from
// chains InboundChains encoded: the deterministic encoding writes fields in
// number order, and name (1) and address (2) come before filter_chains (3).
func ServerListenerBytes(name string, addr netip.AddrPort, chains []byte) ([]byte, error) {
	head, err := deterministic.Marshal(&listenerv3.Listener{Name: name, Address: socketAddress(addr)})
	if err != nil {
		return nil, err
	}
	return append(head, chains...), nil
}

func socketAddress(addr netip.AddrPort) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: addr.Addr().String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(addr.Port())},
	}}}
}

func inboundChains(mode security.PeerAuthentication_MutualTLS_Mode, policies []*config.Object) []*listenerv3.FilterChain {
	router := &anypb.Any{}
	_ = anypb.MarshalFrom(router, &routerv3.Router{}, deterministic)
	filters := append(SecurityFilters(policies), &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}})
	h := &hcmv3.HttpConnectionManager{
		StatPrefix: "inbound",
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "inbound",
			VirtualHosts: []*routev3.VirtualHost{{Name: "inbound", Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
			}}}},
		}},
		HttpFilters: filters,
	}
	hcmAny := &anypb.Any{}
	_ = anypb.MarshalFrom(hcmAny, h, deterministic)
	chain := func(name, transport string, ts *corev3.TransportSocket) *listenerv3.FilterChain {
		fc := &listenerv3.FilterChain{Name: name, TransportSocket: ts, Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcmAny},
		}}}
		if transport != "" {
			fc.FilterChainMatch = &listenerv3.FilterChainMatch{TransportProtocol: transport}
		}
		return fc
	}
	switch mode {
	case security.PeerAuthentication_MutualTLS_STRICT:
		return []*listenerv3.FilterChain{chain(InboundMTLSChain, "", serverTLS(true))}
	case security.PeerAuthentication_MutualTLS_DISABLE:
		return []*listenerv3.FilterChain{chain(InboundPlaintextChain, "", nil)}
	}
	return []*listenerv3.FilterChain{chain(InboundMTLSChain, "tls", serverTLS(false)), chain(InboundPlaintextChain, "raw_buffer", nil)}
}

// serverTLS is the DownstreamTlsContext of the mesh's mutual TLS: the
// server's certificate and the roots that verify clients from the
// certificate provider (gRFC A29), as clusterTLS gives clients theirs.
func serverTLS(requireClient bool) *corev3.TransportSocket {
	ctx := &tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertificateProvider, CertificateName: CertificateName},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: CertificateProvider, CertificateName: RootCertName},
			}},
			AlpnProtocols: []string{"h2"},
		},
		RequireClientCertificate: wrapperspb.Bool(requireClient),
	}
	a := &anypb.Any{}
	_ = anypb.MarshalFrom(a, ctx, deterministic)
	return &corev3.TransportSocket{Name: TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
}
