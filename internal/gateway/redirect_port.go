package gateway

import (
	"net"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// redirectPortField is xds.RedirectPortField: a route's "sextant" filter
// metadata saying its redirect keeps the request's port (Istio's
// derivePort FROM_REQUEST_PORT), which Envoy's RedirectAction cannot say.
const redirectPortField = "redirect_port"

func redirectKeepsPort(r *route.Route) bool {
	v := r.GetMetadata().GetFilterMetadata()["sextant"].GetFields()[redirectPortField]
	return v.GetStringValue() == "FROM_REQUEST_PORT"
}

// withRequestPort is authority h with the port of the request's host
// (none if it gave none).
func withRequestPort(h string, reqHost []byte) string {
	_, port, err := net.SplitHostPort(string(reqHost))
	if err != nil || port == "" {
		return h
	}
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	return net.JoinHostPort(h, port)
}
