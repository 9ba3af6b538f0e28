package ingress

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// meshChain is the filter chain of a Gateway server in tls.mode
// ISTIO_MUTUAL: the mesh's mutual TLS at the edge, as Istio publishes it.
// The gateway presents its own workload certificate and verifies clients'
// against the mesh's roots, both from the certificate provider instance
// (the gateway's identity: sextant gateway --identity-namespace), client
// certificates required; AuthorizationPolicies selecting the Gateway then
// check the callers' SPIFFE IDs (the listener's RBAC filters). Without
// requireClient (a PeerAuthentication selecting the gateway says
// PERMISSIVE), a client certificate is verified when given and a client
// without one is served too (one port cannot also be plaintext).
func meshChain(routeName string, names []string, t *networking.ServerTLSSettings, requireClient bool) *listenerv3.FilterChain {
	d := &tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsVersion(t.GetMinProtocolVersion(), tlsv3.TlsParameters_TLSv1_2),
				TlsMaximumProtocolVersion: tlsVersion(t.GetMaxProtocolVersion(), tlsv3.TlsParameters_TLSv1_3)},
			AlpnProtocols: []string{"h2", "http/1.1"},
			TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
				InstanceName: xds.CertificateProvider, CertificateName: xds.CertificateName},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
					InstanceName: xds.CertificateProvider, CertificateName: xds.RootCertName}}},
		},
		RequireClientCertificate: wrapperspb.Bool(requireClient),
	}
	da, _ := anypb.New(d)
	fc := &listenerv3.FilterChain{
		Filters: []*listenerv3.Filter{httpFilter(routeName)},
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: da}},
	}
	if len(names) > 0 {
		fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: names}
	}
	return fc
}

// gatewayMTLS returns, for a Gateway of gws, the mode of the
// PeerAuthentication of sec (nil: none) that selects its workloads (its
// spec.selector labels) on port.
func gatewayMTLS(gws []*config.Entry, sec *config.Security, port uint32) func(config.Key) security.PeerAuthentication_MutualTLS_Mode {
	return func(k config.Key) security.PeerAuthentication_MutualTLS_Mode {
		if sec == nil {
			return security.PeerAuthentication_MutualTLS_UNSET
		}
		for _, e := range gws {
			if e.Object.Key == k {
				return sec.SelectedMTLSMode(config.Workload{Namespace: e.Object.Namespace, Labels: label.FromMap(e.Object.Gateway.Selector), Port: port})
			}
		}
		return security.PeerAuthentication_MutualTLS_UNSET
	}
}
