package main

import (
	"net"
	"net/http"

	"github.com/sextant-mesh/sextant/internal/browserguard"
	"github.com/sextant-mesh/sextant/internal/httpapi"
)

// browserGuard refuses, on ln, cross-origin writes from web pages and, on a
// loopback address, Hosts that are not this machine's (docs/security.md,
// "Threat model"). --allowed-hosts was checked by validate.
func browserGuard(h http.Handler, ln net.Listener, f serverFlags) http.Handler {
	g, err := browserguard.New(browserguard.Options{Addr: ln.Addr().String(), AllowedHosts: f.allowedHosts, HostsFlag: "--allowed-hosts"})
	if err != nil {
		panic(err) // validate refused it before anything listened
	}
	return httpapi.BrowserGuard(h, g)
}

// validHosts checks --allowed-hosts.
func validHosts(hosts []string) error {
	_, err := browserguard.New(browserguard.Options{AllowedHosts: hosts})
	return err
}
