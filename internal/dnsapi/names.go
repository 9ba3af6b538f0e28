package dnsapi

import (
	"encoding/hex"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// nameKind is what a name in a served zone names.
type nameKind uint8

const (
	noName      nameKind = iota // nothing: NXDOMAIN
	apexName                    // the zone itself: only its SOA
	serviceName                 // a service's instances, or those with a tag
	addrName                    // an address spelled in hex (SRV targets)
)

// lookup is a parsed name.
type lookup struct {
	kind nameKind
	key  naming.ServiceKey // serviceName
	tag  string            // serviceName: "" for none
	dc   string            // Consul names: the datacenter queried or configured
	addr netip.Addr        // addrName
}

// zoneOf returns the served zone of name (lower case, with its final dot)
// and the rest of the name before it, without the dot between them.
func (h *Handler) zoneOf(name string) (zone, string, bool) {
	for _, z := range [...]*zone{&h.consul, &h.sxt} {
		if name == z.apex {
			return *z, "", true
		}
		if n := len(name) - len(z.apex); n > 1 && name[n-1] == '.' && name[n:] == z.apex {
			return *z, name[:n-1], true
		}
	}
	return zone{}, "", false
}

// labels splits rest (a name without its zone) into its labels, in buf
// while they fit.
func labels(rest string, buf []string) []string {
	out := buf[:0]
	for {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return append(out, rest)
		}
		out = append(out, rest[:i])
		rest = rest[i+1:]
	}
}

// parseConsul parses rest, a name of the consul. zone, as Consul does:
// the rightmost label that names a kind ("service", "addr") splits the
// name into what is looked up (left) and an optional datacenter (right).
// Left of "service": NAME, TAG.NAME (a tag of several labels is joined
// with dots) or RFC 2782's _NAME._TAG (_tcp: no tag). An SRV query may
// leave "service" out of the RFC 2782 form (_NAME._TAG[.DC].consul.).
func (h *Handler) parseConsul(rest string, qtype uint16) lookup {
	if rest == "" {
		return lookup{kind: apexName}
	}
	var buf [8]string
	ls := labels(rest, buf[:])
	kind := noName
	var parts, suffix []string
scan:
	for i := len(ls) - 1; i >= 0; i-- {
		switch ls[i] {
		case "service":
			kind, parts, suffix = serviceName, ls[:i], ls[i+1:]
			break scan
		case "addr":
			kind, parts, suffix = addrName, ls[:i], ls[i+1:]
			break scan
		case "node", "connect", "virtual", "ingress", "query":
			return lookup{} // Consul's other kinds: no nodes, meshes or prepared queries here
		default:
			if qtype == dns.TypeSRV && strings.HasPrefix(ls[i], "_") {
				kind, parts, suffix = serviceName, ls[:i+1], ls[i+1:]
				break scan
			}
		}
	}
	if kind == noName || len(parts) == 0 {
		return lookup{}
	}
	lk := lookup{kind: kind, dc: h.dc}
	switch len(suffix) {
	case 0:
	case 1:
		if suffix[0] != h.dc && suffix[0] != DefaultDatacenter {
			return lookup{} // another datacenter: none is known here
		}
		lk.dc = suffix[0]
	default:
		return lookup{}
	}
	if kind == addrName {
		if len(parts) != 1 {
			return lookup{}
		}
		return hexAddr(parts[0], lk)
	}
	n := len(parts)
	var name string
	switch {
	case n == 2 && strings.HasPrefix(parts[0], "_") && strings.HasPrefix(parts[1], "_"):
		name, lk.tag = parts[0][1:], parts[1][1:]
		if lk.tag == "tcp" {
			lk.tag = ""
		}
	default:
		// A name starting with "_" (RFC 2782's form without its _TAG)
		// is no valid name: NXDOMAIN, as in Consul.
		name = parts[n-1]
		if n > 1 {
			// The labels before the name, joined: rest starts with them.
			l := n - 2
			for _, p := range parts[:n-1] {
				l += len(p)
			}
			lk.tag = rest[:l]
		}
	}
	if !naming.ValidName(name) {
		return lookup{}
	}
	lk.key = naming.ServiceKey{Namespace: h.ns, Name: name}
	return lk
}

// parseSextant parses rest, a name of the sextant. zone:
// NAME.NAMESPACE.svc (NAME may have dots, NAMESPACE may not) or HEX.addr.
func parseSextant(rest string) lookup {
	if rest == "" {
		return lookup{kind: apexName}
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return lookup{}
	}
	before := rest[:i]
	switch rest[i+1:] {
	case "svc":
		j := strings.LastIndexByte(before, '.')
		if j < 0 {
			return lookup{}
		}
		key := naming.ServiceKey{Namespace: before[j+1:], Name: before[:j]}
		if !naming.ValidName(key.Namespace) || !naming.ValidName(key.Name) {
			return lookup{}
		}
		return lookup{kind: serviceName, key: key}
	case "addr":
		if strings.IndexByte(before, '.') >= 0 {
			return lookup{}
		}
		return hexAddr(before, lookup{kind: addrName})
	}
	return lookup{}
}

// hexAddr completes lk with the address s spells: 8 hex digits for IPv4,
// 32 for IPv6 (Consul's <hex>.addr names).
func hexAddr(s string, lk lookup) lookup {
	var b [16]byte
	if len(s) != 8 && len(s) != 32 {
		return lookup{}
	}
	if _, err := hex.Decode(b[:len(s)/2], []byte(s)); err != nil {
		return lookup{}
	}
	if len(s) == 8 {
		lk.addr = netip.AddrFrom4([4]byte(b[:4]))
	} else {
		lk.addr = netip.AddrFrom16(b)
	}
	return lk
}

// hexName spells a for a <hex>.addr name: 8 hex digits for IPv4 (an
// IPv4-mapped IPv6 address included), 32 for IPv6.
func hexName(a netip.Addr) string {
	if a.Is4() {
		b := a.As4()
		return hex.EncodeToString(b[:])
	}
	b := a.As16()
	return hex.EncodeToString(b[:])
}
