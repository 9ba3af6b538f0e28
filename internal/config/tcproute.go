package config

import (
	"net/netip"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1"
)

// VirtualService tcp routes: the opaque TCP a Gateway server of protocol
// TCP (or MONGO, REDIS, MYSQL: plain TCP, as Istio proxies them without
// their protocol filters) forwards, chosen by the connection's port and
// addresses, to weighted destinations.

func init() {
	allow(&networking.VirtualService{}, "tcp")
	allow(&networking.TCPRoute{}, "match", "route")
	allow(&networking.L4MatchAttributes{}, "port", "destination_subnets", "source_subnet", "gateways")
	// Istio matches them against the proxy's own labels and namespace
	// (on a Gateway, the gateway's); Sextant sends HTTP routes per node
	// (internal/xds sourcematch.go) but not yet a listener's chains.
	for _, f := range []protoreflect.Name{"source_labels", "source_namespace"} {
		notSupportedNotes[protoreflect.FullName("istio.networking.v1alpha3.L4MatchAttributes."+f)] =
			"tcp routes are not yet sent per gateway (Istio matches the gateway's own labels); match the caller's address with sourceSubnet"
		notSupportedNotes[protoreflect.FullName("istio.networking.v1alpha3.TLSMatchAttributes."+f)] =
			"tls routes are not yet sent per gateway (Istio matches the gateway's own labels); bind the VirtualService to that Gateway instead"
	}
}

// tcpProtocols are the Gateway server protocols served as plain TCP.
var tcpProtocols = map[string]bool{"TCP": true, "MONGO": true, "REDIS": true, "MYSQL": true}

// IsTCPProtocol reports whether a Gateway server's port protocol is served
// as plain TCP.
func IsTCPProtocol(p string) bool { return tcpProtocols[strings.ToUpper(p)] }

// validateTCPRoute checks a tcp route of a VirtualService bound to
// Gateways: its matches (port, subnets, gateways) and weighted destinations.
func validateTCPRoute(c errs, path, ns string, r *networking.TCPRoute) {
	for i, m := range r.Match {
		p := index(join(path, "match"), i)
		if m.Port > 65535 {
			c.add(join(p, "port"), ErrInvalid, "%d: want 1..65535", m.Port)
		}
		for j, s := range m.DestinationSubnets {
			if _, err := ParseSubnet(s); err != nil {
				c.add(index(join(p, "destinationSubnets"), j), ErrInvalid, "%v", err)
			}
		}
		if s := m.SourceSubnet; s != "" {
			if _, err := ParseSubnet(s); err != nil {
				c.add(join(p, "sourceSubnet"), ErrInvalid, "%v", err)
			}
		}
		validateGatewayRefs(c, join(p, "gateways"), m.Gateways)
	}
	if len(r.Route) == 0 {
		c.add(join(path, "route"), ErrInvalid, "at least one destination is required")
	}
	total := int64(0)
	for i, d := range r.Route {
		p := index(join(path, "route"), i)
		if d.Weight < 0 {
			c.add(join(p, "weight"), ErrInvalid, "%d: must not be negative", d.Weight)
		}
		total += int64(d.Weight)
		validateDestination(c, join(p, "destination"), ns, d.Destination)
	}
	if len(r.Route) > 1 && total == 0 {
		c.add(join(path, "route"), ErrInvalid, "with several destinations, weights must add up to more than 0")
	}
}

// ParseSubnet reads an IPv4 or IPv6 address or CIDR block ("10.1.0.0/16",
// "10.1.2.3": one address), as Istio's subnet fields take them.
func ParseSubnet(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, &subnetError{s}
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, &subnetError{s}
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

type subnetError struct{ s string }

func (e *subnetError) Error() string {
	return "\"" + e.s + "\": want an IP address or CIDR block (10.1.0.0/16)"
}
