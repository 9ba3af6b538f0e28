package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"
)

// TLS to a service's endpoints with certificates of the user's own
// (a DestinationRule's tls mode SIMPLE or MUTUAL with credentialName), as
// Envoy is told it: the secrets by SDS on the ADS stream, named as a
// Gateway's credentials are (internal/ingress publishes them).
const (
	// CACertSuffix ends the name of the SDS secret with a credential's CA:
	// "default/backend-cert-cacert", as Istio names a secret's ca.crt.
	CACertSuffix = "-cacert"
	// SystemRoots is the CA bundle a client without a credentialName
	// trusts (SIMPLE): the gateway host's own, at Debian's path, as Istio
	// sends it.
	SystemRoots = "/etc/ssl/certs/ca-certificates.crt"
)

// CredentialSecret names the SDS secret of credentialName in namespace ns.
func CredentialSecret(ns, credential string) string { return ns + "/" + credential }

// credentialTLS is the UpstreamTlsContext of tls (SIMPLE or MUTUAL) for a
// service in namespace ns: the client certificate (MUTUAL) from the
// credential's secret, the CA from the credential (its ca.crt, or the
// secret NAME-cacert), else the system roots; the server's names checked
// against subjectAltNames, else against sni when given, else not checked
// (the chain is); nothing verified with insecureSkipVerify. h2: the
// cluster speaks HTTP/2 (ALPN h2).
func credentialTLS(ns string, tls *networking.ClientTLSSettings, h2 bool) *corev3.TransportSocket {
	common := &tlsv3.CommonTlsContext{AlpnProtocols: []string{"http/1.1"}}
	if h2 {
		common.AlpnProtocols = []string{"h2"}
	}
	name := ""
	if tls.CredentialName != "" {
		name = CredentialSecret(ns, tls.CredentialName)
	}
	if tls.Mode == networking.ClientTLSSettings_MUTUAL {
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{{Name: name, SdsConfig: adsSource}}
	}
	if !tls.InsecureSkipVerify.GetValue() {
		sans := tls.SubjectAltNames
		if len(sans) == 0 && tls.Sni != "" {
			sans = []string{tls.Sni}
		}
		var ms []*tlsv3.SubjectAltNameMatcher
		for _, san := range sans {
			typ := tlsv3.SubjectAltNameMatcher_DNS
			if isURI(san) {
				typ = tlsv3.SubjectAltNameMatcher_URI
			}
			ms = append(ms, &tlsv3.SubjectAltNameMatcher{SanType: typ, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}}})
		}
		if name != "" {
			common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: ms},
				ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: name + CACertSuffix, SdsConfig: adsSource}}}
		} else {
			common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: SystemRoots}},
				MatchTypedSubjectAltNames: ms}}
		}
	}
	a, _ := anypb.New(&tlsv3.UpstreamTlsContext{Sni: tls.Sni, CommonTlsContext: common})
	return &corev3.TransportSocket{Name: TLSTransportSocket, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
}

// isURI tells a URI SAN (spiffe://...) from a DNS name.
func isURI(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ':':
			return i > 0
		case c == '.' || c == '-' || c == '*':
			return false
		}
	}
	return false
}
