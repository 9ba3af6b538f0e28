package ingress

import (
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// UpstreamSecrets adds to secrets the SDS Secrets that DestinationRules'
// tls (SIMPLE, MUTUAL) credentialNames name, as internal/xds names them in
// the clusters' UpstreamTlsContexts: "ns/NAME", the client certificate and
// key of a tls secret (MUTUAL), and "ns/NAME-cacert", the CA that verifies
// the endpoints (NAME's ca.crt, else the secret NAME-cacert's, as Istio
// reads them). It returns a warning for what is missing; the gateway fails
// those handshakes (never sends plaintext) until it exists.
func UpstreamSecrets(drs []*config.Entry, secretOf func(ns, name string) *secret.Secret, secrets map[string]proto.Message) []string {
	var warns []string
	for _, e := range drs {
		dr := e.Object.DestinationRule
		ns := e.Object.Namespace
		// i is the subset, -1 the rule's own traffic policy. Runs on every
		// config change over every rule: nothing is formatted for the
		// rules without a credential.
		for i := -1; i < len(dr.GetSubsets()); i++ {
			t := dr.GetTrafficPolicy().GetTls()
			if i >= 0 {
				t = dr.GetSubsets()[i].GetTrafficPolicy().GetTls()
			}
			mode := t.GetMode()
			if (mode != networking.ClientTLSSettings_SIMPLE && mode != networking.ClientTLSSettings_MUTUAL) || t.GetCredentialName() == "" {
				continue
			}
			where := fmt.Sprintf("%s spec.trafficPolicy.tls", e.Object.Key)
			if i >= 0 {
				where = fmt.Sprintf("%s spec.subsets[%d].trafficPolicy.tls", e.Object.Key, i)
			}
			name := xds.CredentialSecret(ns, t.GetCredentialName())
			sec := secretOf(ns, t.GetCredentialName())
			if mode == networking.ClientTLSSettings_MUTUAL {
				switch {
				case sec == nil:
					warns = append(warns, fmt.Sprintf("%s: credentialName %q: no such secret in namespace %s (sextant secret create tls); TLS to the endpoints fails until it exists", where, t.GetCredentialName(), ns))
				case sec.Type != secret.TypeTLS:
					warns = append(warns, fmt.Sprintf("%s: mode MUTUAL: secret %s is a %s secret; it needs a certificate and key (sextant secret create tls)", where, name, sec.Type))
				default:
					secrets[name] = certSecret(name, sec)
					if na := sec.Info().NotAfter; time.Now().After(na) {
						warns = append(warns, fmt.Sprintf("%s: the certificate of secret %s expired at %s", where, name, na.Format(time.RFC3339)))
					}
				}
			}
			if t.GetInsecureSkipVerify().GetValue() {
				continue
			}
			if ca := caOf(secretOf, ns, t.GetCredentialName()); ca != nil {
				secrets[name+xds.CACertSuffix] = caSecret(name+xds.CACertSuffix, ca)
			} else {
				warns = append(warns, fmt.Sprintf("%s: credentialName %q: no CA (neither secret %s with a CA nor secret %s%s in namespace %s); TLS to the endpoints fails until one exists",
					where, t.GetCredentialName(), t.GetCredentialName(), t.GetCredentialName(), CASuffix, ns))
			}
		}
	}
	return warns
}

// caOf is the CA of credential name in ns: the secret's ca.crt, else the
// secret name-cacert's (Istio's convention), nil if neither has one.
func caOf(secretOf func(ns, name string) *secret.Secret, ns, name string) []byte {
	for _, n := range []string{name, name + CASuffix} {
		if s := secretOf(ns, n); s != nil && len(s.CA) > 0 {
			return s.CA
		}
	}
	return nil
}

func caSecret(name string, ca []byte) *tlsv3.Secret {
	return &tlsv3.Secret{Name: name, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: ca}}}}}
}
