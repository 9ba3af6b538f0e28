package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// benchCert is the certificate every TLS proxy of a run serves: ECDSA
// P-256, for 127.0.0.1, as PEM and as the files nginx reads.
type benchCert struct {
	certPEM, keyPEM   []byte
	certFile, keyFile string
}

func newBenchCert(dir string) (*benchCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sextant bench"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}} // client: the sidecar pair's nginx
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &benchCert{certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		certFile: filepath.Join(dir, "bench.crt"), keyFile: filepath.Join(dir, "bench.key")}
	if err := os.WriteFile(c.certFile, c.certPEM, 0o600); err != nil {
		return nil, err
	}
	return c, os.WriteFile(c.keyFile, c.keyPEM, 0o600)
}

// benchTLSListener is the TLS listener the sextant-tls gateway serves on
// port: one filter chain for any server name, its certificate by SDS, TLS
// 1.2-1.3, ALPN h2 and http/1.1 (what Istio publishes for an HTTPS server).
func benchTLSListener(port uint32) *listener.Listener {
	l := benchListener()
	l.Name = "bench-tls"
	l.Address = &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: "127.0.0.1",
		PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}
	ads := &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}
	d, _ := anypb.New(&tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
		AlpnProtocols:                  []string{"h2", "http/1.1"},
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "bench-cert", SdsConfig: ads}},
	}})
	l.FilterChains[0].TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls",
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: d}}
	return l
}

func benchSecret(c *benchCert) *tlsv3.Secret {
	return &tlsv3.Secret{Name: "bench-cert", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
		CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: c.certPEM}},
		PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: c.keyPEM}},
	}}}
}
