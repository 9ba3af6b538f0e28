package config

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// ClusterDomain is the DNS suffix Kubernetes gives services; Sextant accepts
// it so that Istio configs paste in unchanged.
const ClusterDomain = "cluster.local"

// ErrBadHost is wrapped by ResolveHost's errors.
var ErrBadHost = errors.New("config: host does not name a registry service")

// ResolveHost maps a config host to the registry service it names, the way
// Kubernetes DNS does for a client in namespace ns:
//
//	orders                            -> ns/orders
//	orders.default                    -> default/orders
//	orders.default.svc                -> default/orders
//	orders.default.svc.cluster.local  -> default/orders
//
// A host with a dot is split at its last dot (after removing ".svc" or
// ".svc.cluster.local"), so service names may contain dots ("a.b.default" is
// default/a.b) but a namespace containing dots can only be reached by short
// names from configs in that namespace. Wildcards ("*", "*.example.com"),
// IP addresses and upper-case letters are not registry services and are
// rejected.
func ResolveHost(host, ns string) (naming.ServiceKey, error) {
	if host == "" {
		return naming.ServiceKey{}, fmt.Errorf("%w: empty", ErrBadHost)
	}
	if net.ParseIP(host) != nil {
		return naming.ServiceKey{}, fmt.Errorf("%w: %q: IP addresses are not supported", ErrBadHost, host)
	}
	if strings.Contains(host, "*") {
		return naming.ServiceKey{}, fmt.Errorf("%w: %q: wildcard hosts are not supported", ErrBadHost, host)
	}
	h := host
	qualified := false
	if rest, ok := strings.CutSuffix(h, ".svc."+ClusterDomain); ok {
		h, qualified = rest, true
	} else if rest, ok := strings.CutSuffix(h, ".svc"); ok {
		h, qualified = rest, true
	}
	i := strings.LastIndexByte(h, '.')
	if i < 0 {
		if qualified {
			return naming.ServiceKey{}, fmt.Errorf("%w: %q: want name.namespace.svc", ErrBadHost, host)
		}
		if !naming.ValidName(h) {
			return naming.ServiceKey{}, fmt.Errorf("%w: %q: not a service name", ErrBadHost, host)
		}
		return naming.ServiceKey{Namespace: ns, Name: h}, nil
	}
	k := naming.ServiceKey{Namespace: h[i+1:], Name: h[:i]}
	if !naming.ValidName(k.Namespace) || !naming.ValidName(k.Name) {
		return naming.ServiceKey{}, fmt.Errorf("%w: %q: want name, name.namespace or name.namespace.svc[.%s]", ErrBadHost, host, ClusterDomain)
	}
	return k, nil
}

// Hostnames returns the names under which clients may reach k, shortest
// first: name.namespace, name.namespace.svc, name.namespace.svc.cluster.local
// (and the bare name, valid only inside k's namespace, is not included).
func Hostnames(k naming.ServiceKey) []string {
	q := k.Name + "." + k.Namespace
	return []string{q, q + ".svc", q + ".svc." + ClusterDomain}
}
