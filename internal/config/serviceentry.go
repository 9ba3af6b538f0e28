package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// KindServiceEntry is Istio's ServiceEntry: a service the registry does
// not hold (an external API, a database by address) that the mesh may
// route to. Each of its hosts becomes a service (ResolveHost), whose
// endpoints are the entry's (docs/controlplane.md, "ServiceEntry").
const KindServiceEntry = "ServiceEntry"

func init() {
	kindGroups[KindServiceEntry] = Group
	allow(&networking.ServiceEntry{}, "hosts", "addresses", "ports", "location", "resolution", "endpoints",
		"workload_selector", "export_to")
	allow(&networking.ServicePort{}, "number", "protocol", "name", "target_port")
	allow(&networking.WorkloadEntry{}, "address", "ports", "labels", "weight", "locality")
	allow(&networking.WorkloadSelector{}, "labels")
}

// protocols are the port protocols Istio names (case-insensitive).
var protocols = map[string]bool{
	"HTTP": true, "HTTPS": true, "GRPC": true, "GRPC-WEB": true, "HTTP2": true, "MONGO": true, "MYSQL": true,
	"REDIS": true, "TCP": true, "TLS": true, "UDP": true,
}

func validateServiceEntry(c errs, path string, o *Object) {
	se := o.ServiceEntry
	if len(se.Hosts) == 0 {
		c.add(join(path, "hosts"), ErrInvalid, "at least one host is required")
	}
	seen := map[naming.ServiceKey]string{}
	for i, h := range se.Hosts {
		p := index(join(path, "hosts"), i)
		if strings.Contains(h, "*") {
			// Istio reaches a wildcard's hosts by the address the caller
			// dialed (NONE) or per host name (DYNAMIC_DNS); Sextant routes
			// by service name only.
			c.add(p, ErrNotSupported, "%q: wildcard hosts are not supported (list each host)", h)
			continue
		}
		if !validHostName(h) {
			c.add(p, ErrInvalid, "%q: want a lower-case host name", h)
			continue
		}
		k, err := ResolveHost(h, o.Namespace)
		if err != nil {
			c.add(p, ErrInvalid, "%v", strings.TrimPrefix(err.Error(), "config: "))
			continue
		}
		if prev, dup := seen[k]; dup {
			c.add(p, ErrInvalid, "%q and %q both name service %s", prev, h, k)
		}
		seen[k] = h
	}
	for i, a := range se.Addresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			if _, err := netip.ParseAddr(a); err != nil {
				c.add(index(join(path, "addresses"), i), ErrInvalid, "%q: want an IP address or a CIDR block", a)
			}
		}
	}
	if len(se.Ports) == 0 {
		c.add(join(path, "ports"), ErrInvalid, "at least one port is required")
	}
	names, numbers := map[string]bool{}, map[uint32]bool{}
	for i, sp := range se.Ports {
		p := index(join(path, "ports"), i)
		if sp == nil {
			c.add(p, ErrInvalid, "want an object, got null")
			continue
		}
		if sp.Number == 0 || sp.Number > 65535 {
			c.add(join(p, "number"), ErrInvalid, "%d: want 1..65535", sp.Number)
		} else if numbers[sp.Number] {
			c.add(join(p, "number"), ErrInvalid, "%d: another port has this number", sp.Number)
		}
		numbers[sp.Number] = true
		if sp.Name == "" {
			c.add(join(p, "name"), ErrInvalid, "required")
		} else if names[sp.Name] {
			c.add(join(p, "name"), ErrInvalid, "%q: another port has this name", sp.Name)
		}
		names[sp.Name] = true
		if !protocols[strings.ToUpper(sp.Protocol)] {
			c.add(join(p, "protocol"), ErrInvalid, "%q: want one of HTTP, HTTPS, GRPC, GRPC-WEB, HTTP2, TCP, TLS, MONGO, MYSQL, REDIS, UDP", sp.Protocol)
		}
		if sp.TargetPort > 65535 {
			c.add(join(p, "targetPort"), ErrInvalid, "%d: want 1..65535", sp.TargetPort)
		}
	}
	if se.WorkloadSelector != nil {
		validateEntrySelector(c, path, se)
	}
	for i, ns := range se.ExportTo {
		if ns != "*" {
			c.add(index(join(path, "exportTo"), i), ErrNotSupported,
				"%q: not supported: Sextant publishes every service to every client (only \"*\")", ns)
		}
	}
	for i, ep := range se.Endpoints {
		validateEntryEndpoint(c, index(join(path, "endpoints"), i), se, ep, names)
	}
	switch se.Resolution {
	case networking.ServiceEntry_STATIC:
		if len(se.Endpoints) == 0 && se.WorkloadSelector == nil {
			c.add(join(path, "endpoints"), ErrInvalid, "resolution STATIC needs at least one endpoint with an IP address")
		}
		for i, ep := range se.Endpoints {
			if _, err := netip.ParseAddr(ep.GetAddress()); ep != nil && ep.Address != "" && err != nil {
				c.add(join(index(join(path, "endpoints"), i), "address"), ErrInvalid, "%q: resolution STATIC needs an IP address (use DNS for host names)", ep.Address)
			}
		}
	case networking.ServiceEntry_DNS, networking.ServiceEntry_DNS_ROUND_ROBIN:
		if se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(se.Endpoints) > 1 {
			c.add(join(path, "endpoints"), ErrInvalid, "resolution DNS_ROUND_ROBIN takes at most one endpoint (%d given): use DNS for several", len(se.Endpoints))
		}
	case networking.ServiceEntry_NONE:
		if len(se.Endpoints) > 0 {
			c.add(join(path, "endpoints"), ErrInvalid, "resolution NONE takes no endpoints: use STATIC or DNS")
		}
	default:
		c.add(join(path, "resolution"), ErrNotSupported, "%s: not supported (NONE, STATIC, DNS, DNS_ROUND_ROBIN)", se.Resolution)
	}
}

func validateEntryEndpoint(c errs, p string, se *networking.ServiceEntry, ep *networking.WorkloadEntry, ports map[string]bool) {
	if ep == nil {
		c.add(p, ErrInvalid, "want an object, got null")
		return
	}
	if ep.Address == "" {
		c.add(join(p, "address"), ErrInvalid, "required")
	} else if _, err := netip.ParseAddr(ep.Address); err != nil && (!validHostName(ep.Address) || strings.Contains(ep.Address, "*")) {
		c.add(join(p, "address"), ErrInvalid, "%q: want an IP address or a host name", ep.Address)
	}
	for _, name := range slices.Sorted(maps.Keys(ep.Ports)) {
		pp := mapKey(join(p, "ports"), name)
		if !ports[name] {
			c.add(pp, ErrInvalid, "%q is not the name of one of the entry's ports", name)
		}
		if n := ep.Ports[name]; n == 0 || n > 65535 {
			c.add(pp, ErrInvalid, "%d: want 1..65535", n)
		}
	}
	validateSelector(c, join(p, "labels"), ep.Labels)
	if ep.Network != "" {
		c.add(join(p, "network"), ErrNotSupported, "")
	}
	if ep.ServiceAccount != "" {
		c.add(join(p, "serviceAccount"), ErrNotSupported, "")
	}
	if ep.Locality != "" {
		if parts := strings.Split(ep.Locality, "/"); len(parts) > 3 || slices.Contains(parts, "") {
			c.add(join(p, "locality"), ErrInvalid, "%q: want region, region/zone or region/zone/subzone", ep.Locality)
		}
	}
}

// EntryHosts returns the services a ServiceEntry's hosts name.
func EntryHosts(o *Object) []naming.ServiceKey {
	if o == nil || o.ServiceEntry == nil {
		return nil
	}
	out := make([]naming.ServiceKey, 0, len(o.ServiceEntry.Hosts))
	for _, h := range o.ServiceEntry.Hosts {
		if k, err := ResolveHost(h, o.Namespace); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// Resolution says how a ServiceEntry's endpoints are found, as Sextant
// publishes it: from the entry's addresses (EDS), or by DNS on the host
// names (each address a host: STRICT_DNS; the first address: LOGICAL_DNS).
type Resolution uint8

const (
	ResolveStatic Resolution = iota
	ResolveStrictDNS
	ResolveLogicalDNS
)

// EntryEndpoint is one endpoint of a ServiceEntry on one of its ports.
type EntryEndpoint struct {
	Address     string // an IP address, or a host name to resolve (DNS)
	Port        uint32 // where to connect
	ServicePort uint32 // the entry's port it serves (a route's destination port)
	HTTP2       bool   // the port's protocol is HTTP/2 (GRPC, HTTP2)
	Weight      uint32
	Labels      map[string]string
	Locality    string // region[/zone[/subzone]]
}

// EntryService is what a ServiceEntry gives the service one of its hosts names.
type EntryService struct {
	Key        Key
	Resolution Resolution
	Endpoints  []EntryEndpoint
	// Selected is set for an entry with a workloadSelector: its
	// endpoints are registry instances, not Endpoints (workloadselector.go).
	Selected *EntrySelection
}

// EntryFor returns the endpoints ServiceEntry o gives service s (one of its
// hosts): each endpoint on each port (the endpoint's own port for the
// port's name, else the port's targetPort, else its number); with DNS and
// no endpoints, or NONE, the host name itself on each port, resolved by the
// client (NONE: the name the caller used, as it would have resolved it).
func EntryFor(o *Object, s naming.ServiceKey) *EntryService {
	se := o.ServiceEntry
	host := ""
	for _, h := range se.Hosts {
		if k, err := ResolveHost(h, o.Namespace); err == nil && k == s {
			host = h
			break
		}
	}
	if host == "" {
		return nil
	}
	e := &EntryService{Key: o.Key}
	if se.WorkloadSelector != nil {
		selectedEntry(e, o)
		return e
	}
	switch se.Resolution {
	case networking.ServiceEntry_DNS:
		e.Resolution = ResolveStrictDNS
	case networking.ServiceEntry_DNS_ROUND_ROBIN, networking.ServiceEntry_NONE:
		e.Resolution = ResolveLogicalDNS
	}
	eps := se.Endpoints
	if len(eps) == 0 && se.Resolution != networking.ServiceEntry_STATIC {
		eps = []*networking.WorkloadEntry{{Address: host}}
	}
	for _, sp := range se.Ports {
		proto := strings.ToUpper(sp.Protocol)
		for _, ep := range eps {
			port := sp.Number
			if sp.TargetPort != 0 {
				port = sp.TargetPort
			}
			if n, ok := ep.Ports[sp.Name]; ok {
				port = n
			}
			w := ep.Weight
			if w == 0 {
				w = 1
			}
			e.Endpoints = append(e.Endpoints, EntryEndpoint{
				Address: ep.Address, Port: port, ServicePort: sp.Number, HTTP2: proto == "GRPC" || proto == "HTTP2",
				Weight: w, Labels: ep.Labels, Locality: ep.Locality,
			})
		}
	}
	return e
}

// Matches reports whether the endpoint's labels satisfy sel.
func (ep *EntryEndpoint) Matches(sel label.Selector) bool {
	return sel.Matches(label.FromMap(ep.Labels))
}

// ID names the endpoint within its entry (address and port).
func (ep *EntryEndpoint) ID(k Key) string {
	return fmt.Sprintf("%s/%s:%s", k, ep.Address, strconv.FormatUint(uint64(ep.Port), 10))
}

// EntryStatic reports whether o is a ServiceEntry of resolution STATIC,
// whose endpoints travel over EDS (the others' in their clusters).
func EntryStatic(o *Object) bool {
	return o.ServiceEntry != nil && o.ServiceEntry.Resolution == networking.ServiceEntry_STATIC
}
