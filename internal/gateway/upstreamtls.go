package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

const upstreamTLSTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"

// upstreamTLSSpec is a decoded UpstreamTlsContext: how the gateway talks
// TLS to a cluster's endpoints, the SDS secrets it names still by name.
type upstreamTLSSpec struct {
	sni         string
	alpn        []string
	minVer      uint16
	maxVer      uint16
	certs       []tls.Certificate // inline tls_certificates
	certSecrets []string          // tls_certificate_sds_secret_configs
	ca          *x509.CertPool    // inline trusted_ca (or a file of the gateway's host)
	caSecret    string            // validation context by SDS
	sans        []sanMatch
	// verify: a validation context was given. Without one Envoy does not
	// verify the endpoint's certificate, and neither does the gateway.
	verify bool
	raw    proto.Message // for comparing specs across updates
}

// sanMatch is one subject-alt-name matcher; typ "" matches any SAN type
// (the deprecated match_subject_alt_names).
type sanMatch struct {
	typ string // "DNS", "URI", "EMAIL", "IP" or ""
	m   headerMatch
}

var sanTypes = map[tlsv3.SubjectAltNameMatcher_SanType]string{
	tlsv3.SubjectAltNameMatcher_DNS:        "DNS",
	tlsv3.SubjectAltNameMatcher_URI:        "URI",
	tlsv3.SubjectAltNameMatcher_EMAIL:      "EMAIL",
	tlsv3.SubjectAltNameMatcher_IP_ADDRESS: "IP",
}

// decodeUpstreamTLS reads a cluster's transport socket.
func decodeUpstreamTLS(path string, ts *core.TransportSocket) (*upstreamTLSSpec, error) {
	tc := ts.GetTypedConfig()
	if ts.GetName() != tlsSocketName && tc.GetTypeUrl() != upstreamTLSTypeURL {
		return nil, fieldErr(path, "transport socket %q: %v (envoy.transport_sockets.tls only)", ts.GetName(), errUnsupported)
	}
	if tc == nil {
		return nil, fieldErr(path+".typed_config", "empty (want an UpstreamTlsContext)")
	}
	if tc.GetTypeUrl() != upstreamTLSTypeURL {
		return nil, fieldErr(path+".typed_config", "type %q (want an UpstreamTlsContext)", tc.GetTypeUrl())
	}
	u := new(tlsv3.UpstreamTlsContext)
	if err := tc.UnmarshalTo(u); err != nil {
		return nil, fieldErr(path+".typed_config", "%v", err)
	}
	path += ".typed_config"
	spec := &upstreamTLSSpec{sni: u.GetSni(), minVer: tls.VersionTLS12, maxVer: tls.VersionTLS13, raw: u}
	if u.GetAllowRenegotiation() {
		return nil, fieldErr(path+".allow_renegotiation", "%v", errUnsupported)
	}
	c := u.GetCommonTlsContext()
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
	// Other ALPN values (Istio's istio-peer-exchange, istio) name nothing
	// the gateway speaks: they are not offered.
	for _, a := range c.GetAlpnProtocols() {
		if a == "h2" || a == "http/1.1" {
			spec.alpn = append(spec.alpn, a)
		}
	}
	// A certificate provider instance (what Sextant's control plane names
	// for the mesh's mutual TLS, gRFC A29) is the gateway's own identity:
	// its certificate "default" and roots "ROOTCA", as Istio names them.
	var err error
	if spec.certs, spec.certSecrets, err = decodeCertSources(cp, c); err != nil {
		return nil, err
	}
	if len(spec.certs)+len(spec.certSecrets) > 1 {
		return nil, fieldErr(cp+".tls_certificates", "%d client certificates: at most one", len(spec.certs)+len(spec.certSecrets))
	}
	if c.GetCustomHandshaker() != nil || c.GetKeyLog() != nil || c.GetTlsCertificateCertificateProvider() != nil {
		return nil, fieldErr(cp, "custom handshaker, key log, certificate provider: %v", errUnsupported)
	}
	var dv *tlsv3.CertificateValidationContext // where SAN matchers are
	switch v := c.GetValidationContextType().(type) {
	case nil:
	case *tlsv3.CommonTlsContext_ValidationContext:
		dv = v.ValidationContext
		p := cp + ".validation_context"
		switch {
		case dv.GetCaCertificateProviderInstance() != nil:
			spec.caSecret = providerPrefix + providerSecret(dv.GetCaCertificateProviderInstance(), "ROOTCA")
		case dv.GetTrustedCa() != nil:
			pool, err := upstreamCA(p+".trusted_ca", dv.GetTrustedCa())
			if err != nil {
				return nil, err
			}
			spec.ca = pool
		}
		spec.verify = spec.ca != nil || spec.caSecret != ""
		if err := checkUpstreamValidation(p, dv); err != nil {
			return nil, err
		}
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		n, err := sdsName(cp+".validation_context_sds_secret_config", v.ValidationContextSdsSecretConfig)
		if err != nil {
			return nil, err
		}
		spec.caSecret, spec.verify = n, true
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		p := cp + ".combined_validation_context"
		dv = v.CombinedValidationContext.GetDefaultValidationContext()
		if dv.GetTrustedCa() != nil || dv.GetCaCertificateProviderInstance() != nil {
			return nil, fieldErr(p+".default_validation_context.trusted_ca", "%v beside an SDS validation context", errUnsupported)
		}
		if err := checkUpstreamValidation(p+".default_validation_context", dv); err != nil {
			return nil, err
		}
		n, err := sdsName(p+".validation_context_sds_secret_config", v.CombinedValidationContext.GetValidationContextSdsSecretConfig())
		if err != nil {
			return nil, err
		}
		spec.caSecret, spec.verify = n, true
	default:
		return nil, fieldErr(cp, "validation context %T: %v", v, errUnsupported)
	}
	if spec.sans, err = decodeSANs(cp+".validation_context", dv); err != nil {
		return nil, err
	}
	if len(spec.sans) > 0 && !spec.verify {
		return nil, fieldErr(cp+".validation_context", "subject alt name matchers without trusted_ca: a name of an unverified certificate proves nothing")
	}
	return spec, nil
}

// providerSecret is the SDS secret name of a certificate provider
// instance's certificate (def when it names none).
func providerSecret(pi *tlsv3.CertificateProviderPluginInstance, def string) string {
	if n := pi.GetCertificateName(); n != "" {
		return n
	}
	return def
}

// upstreamCA reads trusted_ca: inline, or a file of the gateway's own host
// (Envoy's system roots, /etc/ssl/certs/ca-certificates.crt, as Istio
// sends for SIMPLE without a CA).
func upstreamCA(path string, d *core.DataSource) (*x509.CertPool, error) {
	var pem []byte
	if f, ok := d.GetSpecifier().(*core.DataSource_Filename); ok {
		b, err := readCAFile(f.Filename)
		if err != nil {
			return nil, fieldErr(path+".filename", "%v", err)
		}
		pem = b
	} else {
		b, err := inline(path, d)
		if err != nil {
			return nil, err
		}
		pem = b
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fieldErr(path, "no PEM certificate")
	}
	return pool, nil
}

// maxCAFile bounds a CA bundle read from a file (the system bundle is
// about 200 KiB).
const maxCAFile = 4 << 20

// readCAFile reads a regular file of at most maxCAFile bytes.
func readCAFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	} else if st.Size() > maxCAFile {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", name, st.Size(), maxCAFile)
	}
	return io.ReadAll(io.LimitReader(f, maxCAFile))
}

// checkUpstreamValidation refuses what the gateway cannot honour in an
// upstream validation context; SAN matchers are read by decodeSANs.
func checkUpstreamValidation(path string, v *tlsv3.CertificateValidationContext) error {
	w := proto.Clone(v).(*tlsv3.CertificateValidationContext)
	w.MatchSubjectAltNames, w.MatchTypedSubjectAltNames = nil, nil
	return checkValidation(path, w)
}

func decodeSANs(path string, v *tlsv3.CertificateValidationContext) ([]sanMatch, error) {
	var out []sanMatch
	add := func(p, typ string, sm *matcher.StringMatcher) error {
		if sm == nil {
			return fieldErr(p, "empty")
		}
		hm, err := decodeHeaderMatcher(&route.HeaderMatcher{Name: "san", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: sm}}, p)
		if err != nil {
			return err
		}
		out = append(out, sanMatch{typ: typ, m: hm})
		return nil
	}
	for i, sm := range v.GetMatchSubjectAltNames() {
		if err := add(fmt.Sprintf("%s.match_subject_alt_names[%d]", path, i), "", sm); err != nil {
			return nil, err
		}
	}
	for i, t := range v.GetMatchTypedSubjectAltNames() {
		p := fmt.Sprintf("%s.match_typed_subject_alt_names[%d]", path, i)
		typ, ok := sanTypes[t.GetSanType()]
		if !ok {
			return nil, fieldErr(p+".san_type", "%v: %v (DNS, URI, EMAIL, IP_ADDRESS)", t.GetSanType(), errUnsupported)
		}
		if err := add(p+".matcher", typ, t.GetMatcher()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sans lists a certificate's subject alt names by type.
func sans(c *x509.Certificate) [][2]string {
	var out [][2]string
	for _, n := range c.DNSNames {
		out = append(out, [2]string{"DNS", n})
	}
	for _, u := range c.URIs {
		out = append(out, [2]string{"URI", u.String()})
	}
	for _, e := range c.EmailAddresses {
		out = append(out, [2]string{"EMAIL", e})
	}
	for _, ip := range c.IPAddresses {
		out = append(out, [2]string{"IP", ip.String()})
	}
	return out
}

// matchSANs reports whether one of c's subject alt names matches one of
// ms (Envoy: any matcher, any name of its type).
func matchSANs(c *x509.Certificate, ms []sanMatch) bool {
	for _, n := range sans(c) {
		for i := range ms {
			if (ms[i].typ == "" || ms[i].typ == n[0]) && matchString(&ms[i].m, []byte(n[1])) {
				return true
			}
		}
	}
	return false
}

// errSANMismatch is wrapped by the handshake error of a certificate whose
// names match none of the cluster's matchers.
var errSANMismatch = errors.New("subject alt name mismatch")

// config builds the client handshake config from the spec and the secrets
// received; a secret not (yet) received leaves it not ready (the reason).
// h2 says the cluster speaks HTTP/2: ALPN offers h2 only; otherwise
// http/1.1 when the spec lists it.
func (t *upstreamTLSSpec) config(secrets map[string]any, h2 bool) (*tls.Config, string) {
	conf := &tls.Config{MinVersion: t.minVer, MaxVersion: t.maxVer, ServerName: t.sni,
		ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	switch {
	case h2:
		conf.NextProtos = []string{"h2"}
	case slices.Contains(t.alpn, "http/1.1"):
		conf.NextProtos = []string{"http/1.1"}
	}
	var why string
	var roots *x509.CertPool
	if conf.Certificates, roots, why = resolveSecrets(t.certs, t.certSecrets, t.ca, t.caSecret, secrets); why != "" {
		return nil, why
	}
	// Envoy checks the chain and then the SAN matchers, not the host name
	// (auto_sni_san_validation aside): Go's own check would compare the
	// host name, so the gateway verifies in VerifyConnection.
	conf.InsecureSkipVerify = true
	if t.verify {
		ms := t.sans
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("certificate verify failed: no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(opts); err != nil {
				return fmt.Errorf("certificate verify failed: %w", err)
			}
			if len(ms) > 0 && !matchSANs(leaf, ms) {
				var names []string
				for _, n := range sans(leaf) {
					names = append(names, n[0]+":"+n[1])
				}
				return fmt.Errorf("%w: the certificate's names %v match none of the cluster's", errSANMismatch, names)
			}
			return nil
		}
	}
	return conf, ""
}

// upstreamTLS is a cluster's current client handshake config, swapped by
// the config goroutine when a secret rotates: new connections use the new
// one, connections already open keep theirs.
type upstreamTLS struct {
	p atomic.Pointer[upstreamTLSState]
	// peers: endpoint address -> the first URI SAN of the certificate of
	// its last handshake, the server's identity a call record names.
	peers sync.Map
}

// peer is the identity endpoint addr presented at its last handshake; ""
// if none is known. Any goroutine.
func (u *upstreamTLS) peer(addr string) string {
	if u == nil {
		return ""
	}
	v, _ := u.peers.Load(addr)
	s, _ := v.(string)
	return s
}

type upstreamTLSState struct {
	conf     *tls.Config
	notReady string
}

// set swaps in a handshake config, or why there is none, and returns the
// reason it replaced (seen: whether there was a state before). Callers
// hold the gateway's mu.
func (u *upstreamTLS) set(conf *tls.Config, notReady string) (was string, seen bool) {
	old := u.p.Swap(&upstreamTLSState{conf: conf, notReady: notReady})
	if old == nil {
		return "", false
	}
	return old.notReady, true
}

// tlsError is a failed TLS connection to an endpoint: a connect failure
// (retried and counted by outlier detection as one) that the call's answer
// and record name. A local one was never tried: the gateway's own TLS
// config for the cluster is not ready (a secret or its identity has not
// come), which is not the endpoint's fault and must not eject it; Envoy
// keeps such a cluster warming.
type tlsError struct {
	addr  string
	err   error
	local bool
}

func (e *tlsError) Error() string { return "TLS to " + e.addr + ": " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// dial connects to addr by d (the cluster's socket options) and runs the
// TLS handshake with the current config, both within d.Timeout. h2
// requires the endpoint to choose h2 (ALPN).
func (u *upstreamTLS) dial(ctx context.Context, d *net.Dialer, addr string, h2 bool) (net.Conn, error) {
	st := u.p.Load()
	if st == nil || st.conf == nil {
		why := "no TLS config"
		if st != nil {
			why = st.notReady
		}
		return nil, &tlsError{addr: addr, err: errors.New(why), local: true}
	}
	ctx, cancel := context.WithTimeout(ctx, d.Timeout) // the handshake's too
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if h2 {
		bc := newBatchConn(c) // batchconn.go: the HTTP/2 transport flushes per frame
		bc.start()
		c = bc
	}
	tc := tls.Client(c, st.conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, &tlsError{addr: addr, err: handshakeErr(err)}
	}
	cs := tc.ConnectionState()
	if h2 && cs.NegotiatedProtocol != "h2" {
		tc.Close()
		return nil, &tlsError{addr: addr, err: errors.New("the endpoint did not choose h2 (ALPN) for an HTTP/2 cluster")}
	}
	if len(cs.PeerCertificates) > 0 && len(cs.PeerCertificates[0].URIs) > 0 {
		if id := cs.PeerCertificates[0].URIs[0].String(); u.peer(addr) != id {
			u.peers.Store(addr, id)
		}
	}
	return tc, nil
}

// handshakeErr names a handshake failure plainly: Go reports a certificate
// its verifier refused as "tls: failed to verify certificate: ...".
func handshakeErr(err error) error {
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	var he x509.HostnameError
	if errors.Is(err, errSANMismatch) || strings.Contains(err.Error(), "certificate verify failed") {
		return err
	}
	if errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &he) {
		return fmt.Errorf("certificate verify failed: %w", err)
	}
	return err
}

// secrets names the SDS secrets the context needs (not the identity's).
func (t *upstreamTLSSpec) secrets() []string {
	var out []string
	for _, n := range append(slices.Clone(t.certSecrets), t.caSecret) {
		if n != "" && !strings.HasPrefix(n, providerPrefix) {
			out = append(out, n)
		}
	}
	return out
}

// redactClusterKeys returns c with the private keys of its inline client
// certificates redacted, for /v1/config (as secrets are).
func redactClusterKeys(c *cluster.Cluster) *cluster.Cluster {
	red := proto.Clone(c).(*cluster.Cluster)
	u := new(tlsv3.UpstreamTlsContext)
	if err := red.GetTransportSocket().GetTypedConfig().UnmarshalTo(u); err != nil {
		return red
	}
	for _, tc := range u.GetCommonTlsContext().GetTlsCertificates() {
		tc.PrivateKey = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: "[redacted]"}}
	}
	a, err := anypb.New(u)
	if err != nil {
		return red
	}
	red.TransportSocket.ConfigType = &core.TransportSocket_TypedConfig{TypedConfig: a}
	return red
}
