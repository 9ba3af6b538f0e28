package config

import (
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// MeshGateway is the reserved gateway name of a VirtualService's gateways
// that means the mesh (the sidecars and proxyless clients), as in Istio.
const MeshGateway = "mesh"

// InMesh reports whether a VirtualService applies to the mesh: it names no
// gateways, or names "mesh" among them. One bound to gateways only is read
// by the gateways' translation, never by the mesh's routes.
func InMesh(vs *networking.VirtualService) bool {
	if len(vs.Gateways) == 0 {
		return true
	}
	for _, g := range vs.Gateways {
		if g == MeshGateway {
			return true
		}
	}
	return false
}

// GatewayRef resolves a VirtualService's gateways entry, "name" (in the
// VirtualService's namespace ns) or "namespace/name", to the Gateway's key.
func GatewayRef(ref, ns string) (Key, bool) {
	if gns, name, ok := strings.Cut(ref, "/"); ok {
		ns, ref = gns, name
	}
	if !naming.ValidName(ns) || !naming.ValidName(ref) {
		return Key{}, false
	}
	return Key{Kind: KindGateway, Namespace: ns, Name: ref}, true
}

// ServerHost is one entry of a Gateway server's hosts: the namespace whose
// VirtualServices may bind to it ("*": any) and the host name ("*", a
// "*.suffix" wildcard or an exact name, lower case).
type ServerHost struct {
	Namespace, Host string
}

// ParseServerHost reads "host" (any namespace), "*/host", "./host" (the
// Gateway's namespace gwNS) or "namespace/host".
func ParseServerHost(s, gwNS string) (ServerHost, bool) {
	ns, h := "*", s
	if a, b, ok := strings.Cut(s, "/"); ok {
		ns, h = a, b
		if ns == "." {
			ns = gwNS
		}
		if ns != "*" && !naming.ValidName(ns) {
			return ServerHost{}, false
		}
	}
	if !validHostName(h) {
		return ServerHost{}, false
	}
	return ServerHost{Namespace: ns, Host: h}, true
}

// validHostName accepts "*", "*.example.com" and DNS names, lower case.
func validHostName(h string) bool {
	if h == "*" {
		return true
	}
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.Contains(h, "*") {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// MatchHost reports whether host name h (a VirtualService's host, exact or
// wildcard) is served by pattern p (a Gateway server's host).
func MatchHost(p, h string) bool {
	switch {
	case p == "*" || p == h:
		return true
	case strings.HasPrefix(p, "*."):
		suffix := p[1:] // ".example.com"
		return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
	}
	return false
}

func validateGatewayRefs(c errs, path string, refs []string) {
	for i, r := range refs {
		if r == MeshGateway {
			continue
		}
		if _, ok := GatewayRef(r, "default"); !ok {
			c.add(index(path, i), ErrInvalid, "%q: want a Gateway name, namespace/name or %q", r, MeshGateway)
		}
	}
}

func validateGatewayHosts(c errs, path string, hosts []string) {
	for i, h := range hosts {
		if !validHostName(h) {
			c.add(index(path, i), ErrInvalid, "%q: want a host name (lower case), *.suffix or *", h)
		}
	}
}

// Gateway server protocols Sextant's gateway serves.
var gatewayProtocols = map[string]bool{"HTTP": true, "HTTPS": true, "HTTP2": true, "TLS": true, "TCP": true}

func validateGateway(c errs, path string, gw *networking.Gateway) {
	if len(gw.Servers) == 0 {
		c.add(join(path, "servers"), ErrInvalid, "at least one server is required")
	}
	type portUse struct {
		tls   bool
		tcp   bool
		hosts map[string]string // HTTPS: host -> the server path that has it
	}
	ports := map[uint32]*portUse{}
	for i, s := range gw.Servers {
		p := index(join(path, "servers"), i)
		port := s.GetPort()
		if port == nil {
			c.add(join(p, "port"), ErrInvalid, "required")
			continue
		}
		if port.Number == 0 || port.Number > 65535 {
			c.add(join(p, "port.number"), ErrInvalid, "%d is not a port (1-65535)", port.Number)
		}
		proto := strings.ToUpper(port.Protocol)
		if tcpProtocols[proto] {
			proto = "TCP" // Istio proxies MONGO, REDIS and MYSQL as TCP
		}
		if !gatewayProtocols[proto] {
			c.add(join(p, "port.protocol"), ErrNotSupported, "%q: the gateway serves HTTP, HTTPS, HTTP2, TLS (passthrough) and TCP (also MONGO, REDIS, MYSQL as plain TCP)", port.Protocol)
			continue
		}
		if len(s.Hosts) == 0 {
			c.add(join(p, "hosts"), ErrInvalid, "at least one host is required")
		}
		for j, h := range s.Hosts {
			if _, ok := ParseServerHost(h, "default"); !ok {
				c.add(index(join(p, "hosts"), j), ErrInvalid, "%q: want [namespace/]host, the host a lower-case name, *.suffix or *", h)
			}
		}
		isTLS := proto == "HTTPS" || proto == "TLS"
		validateServerTLS(c, join(p, "tls"), s.Tls, isTLS)
		switch mode := s.Tls.GetMode(); {
		case proto == "TLS" && mode != networking.ServerTLSSettings_PASSTHROUGH && mode != networking.ServerTLSSettings_AUTO_PASSTHROUGH:
			c.add(join(p, "tls.mode"), ErrNotSupported, "protocol TLS: the gateway forwards TLS unopened only: mode PASSTHROUGH or AUTO_PASSTHROUGH (to terminate TLS, use protocol HTTPS)")
		case proto == "HTTPS" && mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH:
			// Istio's rule: the server name picks a service, nothing is terminated.
			c.add(join(p, "tls.mode"), ErrInvalid, "AUTO_PASSTHROUGH needs protocol TLS (the connection is forwarded unopened)")
		}
		use := ports[port.Number]
		if use == nil {
			use = &portUse{tls: isTLS, tcp: proto == "TCP", hosts: map[string]string{}}
			ports[port.Number] = use
		} else if use.tls != isTLS {
			c.add(join(p, "port.number"), ErrInvalid, "port %d is both TLS (HTTPS) and plaintext in this Gateway", port.Number)
		} else if use.tcp != (proto == "TCP") {
			c.add(join(p, "port.number"), ErrInvalid, "port %d is both TCP and HTTP in this Gateway", port.Number)
		}
		if isTLS {
			for _, h := range s.Hosts {
				sh, _ := ParseServerHost(h, "default")
				if prev, dup := use.hosts[sh.Host]; dup {
					c.add(join(p, "hosts"), ErrInvalid, "host %q on port %d is also served by %s: the certificate for a server name must be one", sh.Host, port.Number, prev)
				}
				use.hosts[sh.Host] = p
			}
		}
	}
}

func validateServerTLS(c errs, path string, t *networking.ServerTLSSettings, isTLS bool) {
	if !isTLS {
		if t != nil && t.Mode != networking.ServerTLSSettings_PASSTHROUGH && t.Mode != 0 || t.GetCredentialName() != "" {
			c.add(path, ErrInvalid, "TLS settings on a plaintext server: only httpsRedirect (use protocol HTTPS to terminate TLS)")
		}
		return
	}
	if t == nil {
		c.add(path, ErrInvalid, "required on an HTTPS server: mode SIMPLE or MUTUAL with credentialName")
		return
	}
	if t.HttpsRedirect {
		c.add(join(path, "httpsRedirect"), ErrInvalid, "on an HTTPS server: set it on the plaintext server that redirects")
	}
	switch t.Mode {
	case networking.ServerTLSSettings_ISTIO_MUTUAL:
		// The gateway's own workload certificate and the mesh's roots.
		if t.CredentialName != "" {
			c.add(join(path, "credentialName"), ErrInvalid, "not used with ISTIO_MUTUAL: the gateway presents its workload identity (sextant gateway --identity-namespace) and trusts the mesh's roots")
		}
		checkVersions(c, path, t)
		return
	case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
	case networking.ServerTLSSettings_PASSTHROUGH, networking.ServerTLSSettings_AUTO_PASSTHROUGH:
		// The endpoint does the handshake with its own certificate.
		if t.CredentialName != "" {
			c.add(join(path, "credentialName"), ErrInvalid, "not used with %s: the endpoint serves its own certificate; set mode SIMPLE or MUTUAL to terminate TLS with this one", t.Mode)
		}
		if t.MinProtocolVersion != 0 || t.MaxProtocolVersion != 0 {
			c.add(join(path, "minProtocolVersion"), ErrInvalid, "not used with %s: the endpoint chooses", t.Mode)
		}
		return
	default:
		c.add(join(path, "mode"), ErrNotSupported, "%s: want SIMPLE, MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL, PASSTHROUGH or AUTO_PASSTHROUGH", t.Mode)
	}
	if t.CredentialName == "" {
		c.add(join(path, "credentialName"), ErrInvalid, "required: the name of a TLS secret (sextant secret create tls NAME ...)")
	} else if !naming.ValidName(t.CredentialName) {
		c.add(join(path, "credentialName"), ErrInvalid, "%q is not a secret name", t.CredentialName)
	}
	checkVersions(c, path, t)
}

func checkVersions(c errs, path string, t *networking.ServerTLSSettings) {
	lo, hi := t.MinProtocolVersion, t.MaxProtocolVersion
	if lo != networking.ServerTLSSettings_TLS_AUTO && hi != networking.ServerTLSSettings_TLS_AUTO && lo > hi {
		c.add(join(path, "minProtocolVersion"), ErrInvalid, "%s is above maxProtocolVersion %s", lo, hi)
	}
}
