package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// BrowserOptions configure BrowserGuard.
type BrowserOptions struct {
	// Addr is the address the listener is bound to: a loopback one
	// (127.0.0.1:7400, the default) makes the Host header checked.
	Addr string
	// AllowedHosts are more names a loopback listener answers to, besides
	// localhost, *.localhost, IP addresses and Addr's host: those a local
	// reverse proxy forwards in Host. "*" turns the Host check off.
	AllowedHosts []string
}

// BrowserGuard keeps web pages of other sites from using the API through
// the browser of someone who can reach it (issue 42), which ACL tokens do
// not prevent when ACLs are off:
//
//   - a write (any method but GET, HEAD and OPTIONS) that a browser marks
//     as cross-origin (Sec-Fetch-Site, else an Origin other than the
//     request's Host) is refused: 403, before any handler reads it. Such a
//     write is one a page may send without asking first (a "simple" POST
//     with Content-Type text/plain); the web console's own calls are
//     same-origin, and the CLI, the SDK and other programs send neither
//     header. Content types are not checked: the Origin check already
//     refuses every cross-origin body whatever its type.
//   - on a loopback listener, a Host that names none of this machine's
//     names (DNS rebinding: evil.example resolved to 127.0.0.1, the page
//     becoming same-origin with the API) is refused: 403.
//
// It returns an error for an entry of AllowedHosts that is not a host name.
func BrowserGuard(h http.Handler, o BrowserOptions) (http.Handler, error) {
	hosts := map[string]bool{}
	anyHost := !loopbackAddr(o.Addr)
	if host, _, err := net.SplitHostPort(o.Addr); err == nil {
		hosts[strings.ToLower(host)] = true
	}
	for _, n := range o.AllowedHosts {
		n = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(n), "."))
		switch {
		case n == "*":
			anyHost = true
		case n == "" || strings.ContainsAny(n, "/: \t@"):
			return nil, fmt.Errorf("httpapi: allowed host %q: want a host name without scheme or port (or *)", n)
		}
		hosts[n] = true
	}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{http.StatusForbidden, "permission_denied",
			fmt.Sprintf("cross-origin write refused: the page of %s may not write to this server through a browser (Origin %q, Host %q)",
				originName(r), r.Header.Get("Origin"), r.Host), ""})
	}))
	next := cop.Handler(h)
	if anyHost {
		return next, nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !knownHost(r.Host, hosts) {
			writeError(w, &apiError{http.StatusForbidden, "permission_denied",
				fmt.Sprintf("host %q refused: this server listens on loopback and answers only to localhost, its IP addresses and --allowed-hosts (a DNS name pointed at 127.0.0.1 by another site is how a page reaches a local server)", r.Host), ""})
			return
		}
		next.ServeHTTP(w, r)
	}), nil
}

// knownHost reports whether the Host header names this machine: no Host
// (HTTP/1.0, which browsers do not send), an IP address (a page of that
// address is same-origin with it anyway), localhost and *.localhost
// (RFC 6761), or one of hosts.
func knownHost(hostport string, hosts map[string]bool) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "", net.ParseIP(host) != nil, host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	}
	return hosts[host]
}

// loopbackAddr reports whether addr (host:port as listened on) is reachable
// only from this machine.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// originName is the site a refused write came from, for its message.
func originName(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		return o
	}
	return "another site (Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site") + ")"
}
