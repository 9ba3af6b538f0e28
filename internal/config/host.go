package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// ServiceKey names a registry service (namespace and name), the thing a
// config host stands for.
type ServiceKey struct {
	Namespace string
	Name      string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name.
func (k ServiceKey) Compare(o ServiceKey) int {
	if c := strings.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

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
func ResolveHost(host, ns string) (ServiceKey, error) {
	if host == "" {
		return ServiceKey{}, fmt.Errorf("%w: empty", ErrBadHost)
	}
	if net.ParseIP(host) != nil {
		return ServiceKey{}, fmt.Errorf("%w: %q: IP addresses are not supported", ErrBadHost, host)
	}
	if strings.Contains(host, "*") {
		return ServiceKey{}, fmt.Errorf("%w: %q: wildcard hosts are not supported", ErrBadHost, host)
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
			return ServiceKey{}, fmt.Errorf("%w: %q: want name.namespace.svc", ErrBadHost, host)
		}
		if !validName(h) {
			return ServiceKey{}, fmt.Errorf("%w: %q: not a service name", ErrBadHost, host)
		}
		return ServiceKey{Namespace: ns, Name: h}, nil
	}
	k := ServiceKey{Namespace: h[i+1:], Name: h[:i]}
	if !validNamespace(k.Namespace) || !validName(k.Name) {
		return ServiceKey{}, fmt.Errorf("%w: %q: want name, name.namespace or name.namespace.svc[.%s]", ErrBadHost, host, ClusterDomain)
	}
	return k, nil
}

// Hostnames returns the names under which clients may reach k, shortest
// first: name.namespace, name.namespace.svc, name.namespace.svc.cluster.local
// (and the bare name, valid only inside k's namespace, is not included).
func Hostnames(k ServiceKey) []string {
	q := k.Name + "." + k.Namespace
	return []string{q, q + ".svc", q + ".svc." + ClusterDomain}
}

// validName holds a registry service name: 1..128 of [a-z0-9._-], starting
// and ending with a letter or digit (docs/api.md).
func validName(s string) bool {
	if len(s) == 0 || len(s) > 128 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '.' && c != '_' {
			return false
		}
	}
	return true
}

// validNamespace is validName: namespaces follow the same rule.
func validNamespace(s string) bool { return validName(s) }

// validLabel holds a DNS-1123 label: a subset name.
func validLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
