// Package browserguard decides which requests a server refuses because a
// web page of another site may have sent them through its visitor's
// browser (issue 42): a loopback address is reachable from every page a
// local browser opens, and ACL tokens do not help when ACLs are off. The
// HTTP API, the Consul API and the gateway's admin API ask it; each
// answers a refusal in its own error shape. It owns no goroutine.
package browserguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Why a request is refused; errors Check returns wrap one of these.
var (
	ErrCrossOrigin = errors.New("cross-origin write refused")
	ErrHost        = errors.New("host refused")
)

// Options configure a Guard.
type Options struct {
	// Addr is the address the listener is bound to: a loopback one
	// (127.0.0.1:7400) makes the Host header checked.
	Addr string
	// AllowedHosts are more names a loopback listener answers to, besides
	// localhost, *.localhost, IP addresses and Addr's host: those a local
	// reverse proxy forwards in Host. "*" turns the Host check off.
	AllowedHosts []string
	// HostsFlag names AllowedHosts in refusals ("--allowed-hosts").
	HostsFlag string
}

// Guard refuses:
//
//   - a write (any method but GET, HEAD and OPTIONS) that a browser marks
//     as cross-origin (Sec-Fetch-Site, else an Origin other than the
//     request's Host; net/http's CrossOriginProtection). Such a write is
//     one a page may send without asking first (a form, a POST with
//     Content-Type text/plain); a server's own pages are same-origin, and
//     programs (CLI, SDK) send neither header. Content types are not
//     checked: the origin check refuses a cross-origin body of any type.
//   - on a loopback listener, a Host that names none of this machine's
//     names (DNS rebinding: evil.example re-resolved to 127.0.0.1 makes
//     its page same-origin with the server).
//
// It is immutable, safe for concurrent use.
type Guard struct {
	hosts   map[string]bool
	anyHost bool
	flag    string
	cop     *http.CrossOriginProtection
}

// New builds a Guard, or says which entry of o.AllowedHosts is not a
// host name.
func New(o Options) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}, anyHost: !Loopback(o.Addr), flag: o.HostsFlag, cop: http.NewCrossOriginProtection()}
	if g.flag == "" {
		g.flag = "the allowed hosts"
	}
	if host, _, err := net.SplitHostPort(o.Addr); err == nil {
		g.hosts[strings.ToLower(host)] = true
	}
	for _, n := range o.AllowedHosts {
		n = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(n), "."))
		switch {
		case n == "*":
			g.anyHost = true
		case n == "" || strings.ContainsAny(n, "/: \t@"):
			return nil, fmt.Errorf("browserguard: allowed host %q: want a host name without scheme or port (or *)", n)
		}
		g.hosts[n] = true
	}
	return g, nil
}

// Check returns nil for a request the server may serve, else an error
// wrapping ErrCrossOrigin or ErrHost whose message says why, for the
// caller to answer 403 with.
func (g *Guard) Check(r *http.Request) error {
	if !g.anyHost && !g.knownHost(r.Host) {
		return fmt.Errorf("%w: %q: this server listens on loopback and answers only to localhost, IP addresses and %s (a DNS name another site points at 127.0.0.1 is how its page would reach a local server)",
			ErrHost, r.Host, g.flag)
	}
	if g.cop.Check(r) != nil {
		return fmt.Errorf("%w: a page of %s may not write to this server through a browser (Origin %q, Host %q)",
			ErrCrossOrigin, originName(r), r.Header.Get("Origin"), r.Host)
	}
	return nil
}

// knownHost reports whether the Host header names this machine: no Host
// (HTTP/1.0, which browsers do not send), an IP address (a page of that
// address is same-origin with it anyway), localhost and *.localhost
// (RFC 6761), or one of g's hosts.
func (g *Guard) knownHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "", net.ParseIP(host) != nil, host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	}
	return g.hosts[host]
}

// Loopback reports whether addr (host:port as listened on) is reachable
// only from this machine.
func Loopback(addr string) bool {
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
