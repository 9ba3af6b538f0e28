package config

import (
	"fmt"

	networking "istio.io/api/networking/v1"
)

// bindingWarnings warns about each Gateway a VirtualService names that
// does not exist, or whose servers expose none of its hosts to its
// namespace (a host "./h" or "ns/h" is the Gateway's own namespace's or
// ns's only): as in Istio, such a VirtualService does not bind there and
// the gateway routes none of its hosts. also are the objects of the same
// apply, which may bring the Gateway.
func (t *Table) bindingWarnings(o *Object, also []*Object) []string {
	if o.VirtualService == nil {
		return nil
	}
	var out []string
	for i, ref := range o.VirtualService.Gateways {
		if ref == MeshGateway {
			continue
		}
		k, ok := GatewayRef(ref, o.Namespace)
		if !ok {
			continue // refused by validation
		}
		gw := t.gatewayFor(k, also)
		if gw == nil {
			out = append(out, fmt.Sprintf("spec.gateways[%d]: Gateway %s/%s does not exist: nothing binds until it does", i, k.Namespace, k.Name))
			continue
		}
		exposed := false
		for _, s := range gw.Servers {
			for _, h := range s.Hosts {
				sh, ok := ParseServerHost(h, k.Namespace)
				if !ok {
					continue
				}
				for _, vh := range o.VirtualService.Hosts {
					if (sh.Namespace == "*" || sh.Namespace == o.Namespace) && MatchHost(sh.Host, vh) {
						exposed = true
					}
				}
			}
		}
		if !exposed {
			// The Gateway's hosts are not named: it may be another
			// namespace's, which the writer may not read.
			out = append(out, fmt.Sprintf("spec.gateways[%d]: Gateway %s/%s serves none of this VirtualService's hosts to namespace %s (a server host ./h or ns/h serves h to one namespace only): it does not bind there and the gateway routes none of them",
				i, k.Namespace, k.Name, o.Namespace))
		}
	}
	return out
}

// gatewayFor is Gateway k's spec: among also (the same apply's objects)
// first, else stored; nil if neither has it.
func (t *Table) gatewayFor(k Key, also []*Object) *networking.Gateway {
	for _, a := range also {
		if a.Key == k && a.Gateway != nil {
			return a.Gateway
		}
	}
	if e := t.Get(k); e != nil {
		return e.Object.Gateway
	}
	return nil
}
