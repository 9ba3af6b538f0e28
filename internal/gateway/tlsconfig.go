package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// SecretType is the SDS resource type: certificates and CAs a listener's
// DownstreamTlsContext names, sent on the same ADS stream.
const SecretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

const (
	tlsSocketName        = "envoy.transport_sockets.tls"
	downstreamTLSTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)

// secretSpec is a decoded SDS Secret: a certificate with its key, or a
// validation context (trusted CAs), as in Envoy.
type secretSpec struct {
	name string
	cert *tls.Certificate // tls_certificate
	ca   *x509.CertPool   // validation_context.trusted_ca
	raw  proto.Message    // with the private key redacted, for /v1/config
}

func decodeSecretAny(a *anypb.Any) (string, any, error) {
	s := new(tlsv3.Secret)
	if err := a.UnmarshalTo(s); err != nil {
		return "", nil, fmt.Errorf("decode: %w", err)
	}
	spec, err := decodeSecret(s)
	return s.GetName(), spec, err
}

func decodeSecret(s *tlsv3.Secret) (*secretSpec, error) {
	if s.GetName() == "" {
		return nil, fieldErr("name", "empty")
	}
	spec := &secretSpec{name: s.GetName()}
	switch t := s.GetType().(type) {
	case *tlsv3.Secret_TlsCertificate:
		c, err := decodeCertificate("tls_certificate", t.TlsCertificate)
		if err != nil {
			return nil, err
		}
		spec.cert = c
		red := proto.Clone(s).(*tlsv3.Secret)
		red.GetTlsCertificate().PrivateKey = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: "[redacted]"}}
		spec.raw = red
	case *tlsv3.Secret_ValidationContext:
		vc, err := decodeValidation("validation_context", t.ValidationContext)
		if err != nil {
			return nil, err
		}
		spec.ca = vc
		spec.raw = s
	default:
		return nil, fieldErr("type", "%T: %v (tls_certificate or validation_context)", t, errUnsupported)
	}
	return spec, nil
}

// inline returns the bytes of an inline DataSource; files and environment
// variables are the gateway host's, which the control plane cannot know.
func inline(path string, d *core.DataSource) ([]byte, error) {
	switch v := d.GetSpecifier().(type) {
	case *core.DataSource_InlineBytes:
		return v.InlineBytes, nil
	case *core.DataSource_InlineString:
		return []byte(v.InlineString), nil
	case nil:
		return nil, fieldErr(path, "empty")
	default:
		return nil, fieldErr(path, "%T: %v (inline_bytes or inline_string)", v, errUnsupported)
	}
}

func decodeCertificate(path string, c *tlsv3.TlsCertificate) (*tls.Certificate, error) {
	chain, err := inline(path+".certificate_chain", c.GetCertificateChain())
	if err != nil {
		return nil, err
	}
	key, err := inline(path+".private_key", c.GetPrivateKey())
	if err != nil {
		return nil, err
	}
	if c.GetPassword() != nil || c.GetPrivateKeyProvider() != nil || c.GetOcspStaple() != nil {
		return nil, fieldErr(path, "password, private_key_provider and ocsp_staple: %v", errUnsupported)
	}
	cert, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return nil, fieldErr(path, "%v", err)
	}
	return &cert, nil
}

func decodeValidation(path string, v *tlsv3.CertificateValidationContext) (*x509.CertPool, error) {
	if err := checkValidation(path, v); err != nil {
		return nil, err
	}
	pem, err := inline(path+".trusted_ca", v.GetTrustedCa())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fieldErr(path+".trusted_ca", "no PEM certificate")
	}
	return pool, nil
}

// checkValidation refuses the validation settings the gateway cannot honour.
func checkValidation(path string, v *tlsv3.CertificateValidationContext) error {
	switch {
	case len(v.GetMatchSubjectAltNames()) > 0 || len(v.GetMatchTypedSubjectAltNames()) > 0:
		return fieldErr(path+".match_subject_alt_names", "%v", errUnsupported)
	case len(v.GetVerifyCertificateSpki()) > 0 || len(v.GetVerifyCertificateHash()) > 0:
		return fieldErr(path+".verify_certificate_spki/hash", "%v", errUnsupported)
	case v.GetCrl() != nil:
		return fieldErr(path+".crl", "%v", errUnsupported)
	case v.GetAllowExpiredCertificate():
		return fieldErr(path+".allow_expired_certificate", "%v", errUnsupported)
	case v.GetTrustChainVerification() != tlsv3.CertificateValidationContext_VERIFY_TRUST_CHAIN:
		return fieldErr(path+".trust_chain_verification", "%v", errUnsupported)
	case v.GetCustomValidatorConfig() != nil:
		return fieldErr(path+".custom_validator_config", "%v", errUnsupported)
	}
	return nil
}

// tlsContextSpec is a decoded DownstreamTlsContext: what the handshake of a
// filter chain needs, the SDS secrets it names still by name.
type tlsContextSpec struct {
	certs        []tls.Certificate // inline tls_certificates
	certSecrets  []string          // tls_certificate_sds_secret_configs
	ca           *x509.CertPool    // inline validation context
	caSecret     string            // validation context by SDS
	requireCert  bool
	requireSNI   bool
	minVer       uint16
	maxVer       uint16
	alpn         []string
	hasValidator bool // ca or caSecret
}

var tlsVersions = map[tlsv3.TlsParameters_TlsProtocol]uint16{
	tlsv3.TlsParameters_TLSv1_0: tls.VersionTLS10,
	tlsv3.TlsParameters_TLSv1_1: tls.VersionTLS11,
	tlsv3.TlsParameters_TLSv1_2: tls.VersionTLS12,
	tlsv3.TlsParameters_TLSv1_3: tls.VersionTLS13,
}

// sdsName returns an SDS secret config's name; its source must be ADS, the
// only stream the gateway has.
func sdsName(path string, c *tlsv3.SdsSecretConfig) (string, error) {
	if c.GetName() == "" {
		return "", fieldErr(path+".name", "empty")
	}
	if c.GetSdsConfig().GetAds() == nil {
		return "", fieldErr(path+".sds_config", "%v (want ads {}: secrets come on the ADS stream)", errUnsupported)
	}
	return c.GetName(), nil
}

// decodeCertSources reads where a TLS context's own certificates come
// from: inline tls_certificates, SDS secrets by name, and a certificate
// provider instance, which is the gateway's own workload identity
// (identity.go; the mesh's mutual TLS, Istio's ISTIO_MUTUAL), named among
// the secrets with providerPrefix.
func decodeCertSources(cp string, c *tlsv3.CommonTlsContext) ([]tls.Certificate, []string, error) {
	var certs []tls.Certificate
	var secrets []string
	for i, tc := range c.GetTlsCertificates() {
		cert, err := decodeCertificate(fmt.Sprintf("%s.tls_certificates[%d]", cp, i), tc)
		if err != nil {
			return nil, nil, err
		}
		certs = append(certs, *cert)
	}
	for i, sc := range c.GetTlsCertificateSdsSecretConfigs() {
		n, err := sdsName(fmt.Sprintf("%s.tls_certificate_sds_secret_configs[%d]", cp, i), sc)
		if err != nil {
			return nil, nil, err
		}
		secrets = append(secrets, n)
	}
	if pi := c.GetTlsCertificateProviderInstance(); pi != nil {
		secrets = append(secrets, providerPrefix+providerSecret(pi, "default"))
	}
	return certs, secrets, nil
}

func decodeDownstreamTLS(path string, ts *core.TransportSocket) (*tlsContextSpec, error) {
	if ts.GetName() != tlsSocketName && ts.GetTypedConfig().GetTypeUrl() != downstreamTLSTypeURL {
		return nil, fieldErr(path, "transport socket %q: %v (envoy.transport_sockets.tls only)", ts.GetName(), errUnsupported)
	}
	d := new(tlsv3.DownstreamTlsContext)
	if err := ts.GetTypedConfig().UnmarshalTo(d); err != nil {
		return nil, fieldErr(path+".typed_config", "%v", err)
	}
	path += ".typed_config"
	spec := &tlsContextSpec{requireCert: d.GetRequireClientCertificate().GetValue(), requireSNI: d.GetRequireSni().GetValue(),
		minVer: tls.VersionTLS12, maxVer: tls.VersionTLS13}
	if d.GetOcspStaplePolicy() == tlsv3.DownstreamTlsContext_STRICT_STAPLING || d.GetOcspStaplePolicy() == tlsv3.DownstreamTlsContext_MUST_STAPLE {
		return nil, fieldErr(path+".ocsp_staple_policy", "%v", errUnsupported)
	}
	c := d.GetCommonTlsContext()
	cp := path + ".common_tls_context"
	if p := c.GetTlsParams(); p != nil {
		if v := p.GetTlsMinimumProtocolVersion(); v != tlsv3.TlsParameters_TLS_AUTO {
			spec.minVer = tlsVersions[v]
		}
		if v := p.GetTlsMaximumProtocolVersion(); v != tlsv3.TlsParameters_TLS_AUTO {
			spec.maxVer = tlsVersions[v]
		}
		if spec.minVer == 0 || spec.maxVer == 0 || spec.minVer > spec.maxVer {
			return nil, fieldErr(cp+".tls_params", "protocol versions %v..%v", p.GetTlsMinimumProtocolVersion(), p.GetTlsMaximumProtocolVersion())
		}
		if len(p.GetCipherSuites()) > 0 || len(p.GetEcdhCurves()) > 0 || len(p.GetSignatureAlgorithms()) > 0 {
			return nil, fieldErr(cp+".tls_params", "cipher_suites, ecdh_curves, signature_algorithms: %v (Go's TLS stack chooses: ECDHE with AES-GCM or ChaCha20-Poly1305)", errUnsupported)
		}
	}
	for i, a := range c.GetAlpnProtocols() {
		if a != "h2" && a != "http/1.1" {
			return nil, fieldErr(fmt.Sprintf("%s.alpn_protocols[%d]", cp, i), "%q: %v (h2, http/1.1)", a, errUnsupported)
		}
		spec.alpn = append(spec.alpn, a)
	}
	var err error
	if spec.certs, spec.certSecrets, err = decodeCertSources(cp, c); err != nil {
		return nil, err
	}
	if len(spec.certs)+len(spec.certSecrets) == 0 {
		return nil, fieldErr(cp, "no tls_certificates, tls_certificate_sds_secret_configs or tls_certificate_provider_instance")
	}
	if c.GetCustomHandshaker() != nil || c.GetKeyLog() != nil {
		return nil, fieldErr(cp, "custom handshaker, key log: %v", errUnsupported)
	}
	switch v := c.GetValidationContextType().(type) {
	case nil:
	case *tlsv3.CommonTlsContext_ValidationContext:
		if pi := v.ValidationContext.GetCaCertificateProviderInstance(); pi != nil {
			// The mesh's roots: clients' workload certificates.
			rest := proto.Clone(v.ValidationContext).(*tlsv3.CertificateValidationContext)
			rest.CaCertificateProviderInstance = nil
			if rest.GetTrustedCa() != nil {
				return nil, fieldErr(cp+".validation_context.trusted_ca", "%v beside a certificate provider instance", errUnsupported)
			}
			if err := checkValidation(cp+".validation_context", rest); err != nil {
				return nil, err
			}
			spec.caSecret = providerPrefix + providerSecret(pi, "ROOTCA")
			break
		}
		spec.ca, err = decodeValidation(cp+".validation_context", v.ValidationContext)
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		spec.caSecret, err = sdsName(cp+".validation_context_sds_secret_config", v.ValidationContextSdsSecretConfig)
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		cv := v.CombinedValidationContext
		p := cp + ".combined_validation_context"
		if dv := cv.GetDefaultValidationContext(); dv != nil {
			if dv.GetTrustedCa() != nil {
				return nil, fieldErr(p+".default_validation_context.trusted_ca", "%v beside an SDS validation context", errUnsupported)
			}
			if err := checkValidation(p+".default_validation_context", dv); err != nil {
				return nil, err
			}
		}
		spec.caSecret, err = sdsName(p+".validation_context_sds_secret_config", cv.GetValidationContextSdsSecretConfig())
	default:
		err = fieldErr(cp, "validation context %T: %v", v, errUnsupported)
	}
	if err != nil {
		return nil, err
	}
	spec.hasValidator = spec.ca != nil || spec.caSecret != ""
	if spec.requireCert && !spec.hasValidator {
		return nil, fieldErr(path+".require_client_certificate", "set without a validation context (no CA to verify clients against)")
	}
	return spec, nil
}

// chainSpec is one filter chain of a listener: what it matches, its TLS
// (nil: plaintext) and its HTTP connection manager.
type chainSpec struct {
	serverNames []string
	isDefault   bool // the listener's default_filter_chain
	tls         *tlsContextSpec
	tcp         *tcpProxySpec // TLS passthrough: no tls, no HTTP
	streamIdle  time.Duration // the HCM's stream_idle_timeout; 0: none
	rds         string
	inline      *routeConfigSpec
	upgrades    map[string]bool
	rbac        []*rbacFilter
	telemetry   *listenerTelemetry // the HCM's tracing and access logs (telemetry.go)
}

func decodeChainMatch(path string, m *listener.FilterChainMatch, cs *chainSpec) error {
	if m == nil {
		return nil
	}
	switch tp := m.GetTransportProtocol(); tp {
	case "", "tls", "raw_buffer":
	default:
		return fieldErr(path+".transport_protocol", "%q: %v", tp, errUnsupported)
	}
	other := proto.Clone(m).(*listener.FilterChainMatch)
	other.ServerNames, other.TransportProtocol = nil, ""
	if !proto.Equal(other, &listener.FilterChainMatch{}) {
		return fieldErr(path, "only server_names and transport_protocol are matched: %v", errUnsupported)
	}
	for i, n := range m.GetServerNames() {
		n = strings.ToLower(n)
		if n == "" || n == "*" || strings.Contains(n[1:], "*") || (strings.HasPrefix(n, "*") && !strings.HasPrefix(n, "*.")) {
			return fieldErr(fmt.Sprintf("%s.server_names[%d]", path, i), "%q: want a host name or *.suffix", m.GetServerNames()[i])
		}
		cs.serverNames = append(cs.serverNames, n)
	}
	return nil
}

// errMixedChains refuses what the gateway cannot tell apart on one port.
var errMixedChains = errors.New("a listener with both TLS and plaintext filter chains: not supported (one port is either TLS or plaintext)")

// checkChainNames refuses two TLS filter chains that match the same server
// name, or two that match any name, as Envoy does.
func checkChainNames(chains []*chainSpec) error {
	seen := map[string]bool{}
	for i, c := range chains {
		if c.isDefault {
			continue
		}
		names := c.serverNames
		if len(names) == 0 {
			names = []string{"(any)"}
		}
		for _, n := range names {
			if seen[n] {
				return fieldErr(fmt.Sprintf("filter_chains[%d].filter_chain_match.server_names", i), "%s matched by two filter chains", n)
			}
			seen[n] = true
		}
	}
	return nil
}
