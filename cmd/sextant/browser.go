package main

import (
	"net"
	"net/http"

	"github.com/sextant-mesh/sextant/internal/httpapi"
)

// browserGuard refuses, on ln, cross-origin writes from web pages and, on a
// loopback address, Hosts that are not this machine's (docs/security.md,
// "Threat model"). --allowed-hosts was checked by validate.
func browserGuard(h http.Handler, ln net.Listener, f serverFlags) http.Handler {
	g, err := httpapi.BrowserGuard(h, httpapi.BrowserOptions{Addr: ln.Addr().String(), AllowedHosts: f.allowedHosts})
	if err != nil {
		panic(err) // validate refused it before anything listened
	}
	return g
}

// validHosts reports whether --allowed-hosts are host names BrowserGuard takes.
func validHosts(hosts []string) bool {
	_, err := httpapi.BrowserGuard(http.NotFoundHandler(), httpapi.BrowserOptions{AllowedHosts: hosts})
	return err == nil
}
