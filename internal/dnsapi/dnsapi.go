// Package dnsapi answers DNS queries from the registry's instance table
// (docs/dns.md): A, AAAA and SRV records of the healthy instances of a
// service, under Sextant's own names (NAME.NAMESPACE.svc.sextant.) and
// Consul's (NAME.service.consul., TAG.NAME.service.DC.consul., ...).
//
// It owns the names, the records built from instances, negative answers,
// EDNS0 and truncation, and a server over UDP and TCP on one address
// (Server). It keeps no state: every answer is read from the table as it
// is at that moment. It does not own the instances (the registry does), nor
// access control: DNS carries no token, so whoever reaches the server reads
// the addresses it answers with.
package dnsapi

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Instances is the registry's instance table, read-only: the server
// passes reg.Instances(). Lookup is called from the DNS server's
// goroutines, many at once, and must not block; the group it returns is
// an immutable version (nil: the service never had an instance).
type Instances interface {
	Lookup(naming.ServiceKey) *catalog.Group[*instance.Instance]
}

var _ Instances = (*catalog.Groups[*instance.Instance])(nil)

// ErrInvalid is wrapped by the errors of Options.Validate.
var ErrInvalid = errors.New("dnsapi: invalid option")

const (
	// DefaultDatacenter is the datacenter Consul names may always carry.
	DefaultDatacenter = "dc1"
	// MaxTTL is the largest TTL (RFC 2181: 2^31-1 seconds).
	MaxTTL = math.MaxInt32 * time.Second
	// TagPrefix starts the metadata key of a Consul tag: tag T is the key
	// "tag/T", whatever its value.
	TagPrefix = "tag/"
)

// Options tune the answers. Zero values are sensible defaults: TTL 0 (no
// caching, as Consul's default), datacenter dc1, Consul names in the
// default namespace.
type Options struct {
	// TTL of every record, and the negative TTL of NXDOMAIN and empty
	// answers (the SOA's minimum). Whole seconds, at most MaxTTL.
	TTL time.Duration
	// Datacenter is the name Consul names may carry besides dc1
	// (NAME.service.DC.consul.): a DNS label, lower case.
	Datacenter string
	// ConsulNamespace is the namespace Consul names are looked up in.
	ConsulNamespace string
	// Logger receives failed writes at debug level (nil: discard).
	Logger *slog.Logger
}

// Validate checks o, for flags to be checked before anything opens.
func (o Options) Validate() error {
	switch {
	case o.TTL < 0 || o.TTL > MaxTTL:
		return fmt.Errorf("%w: TTL %v is out of range 0..%v", ErrInvalid, o.TTL, MaxTTL)
	case o.TTL%time.Second != 0:
		return fmt.Errorf("%w: TTL %v is not whole seconds", ErrInvalid, o.TTL)
	case o.Datacenter != "" && !naming.ValidLabel(o.Datacenter):
		return fmt.Errorf("%w: datacenter %q is not a DNS label: 1..63 chars of [a-z0-9-], starting and ending with a letter or digit", ErrInvalid, o.Datacenter)
	case o.ConsulNamespace != "" && !naming.ValidName(o.ConsulNamespace):
		return fmt.Errorf("%w: namespace %q is not a valid name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", ErrInvalid, o.ConsulNamespace)
	}
	return nil
}

// Handler answers queries (a dns.Handler). It holds only its options and
// the table it reads, so any number of goroutines may call ServeDNS.
type Handler struct {
	inst   Instances
	ttl    uint32
	dc     string // the configured datacenter, lower case
	addrDC string // "addr.DC.consul."
	ns     string // the namespace of Consul names
	log    *slog.Logger
	consul zone
	sxt    zone
}

var _ dns.Handler = (*Handler)(nil)

// zone is one of the served zones: its apex and the names of its SOA.
type zone struct {
	apex, ns, mbox string // "consul.", "ns.consul.", "hostmaster.consul."
	consul         bool
}

func newZone(apex string, consul bool) zone {
	return zone{apex: apex, ns: "ns." + apex, mbox: "hostmaster." + apex, consul: consul}
}

// New returns the handler of the instances in inst.
func New(inst Instances, opts Options) (*Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{
		inst:   inst,
		ttl:    uint32(opts.TTL / time.Second),
		dc:     opts.Datacenter,
		ns:     opts.ConsulNamespace,
		log:    opts.Logger,
		consul: newZone("consul.", true),
		sxt:    newZone("sextant.", false),
	}
	if h.dc == "" {
		h.dc = DefaultDatacenter
	}
	h.addrDC = "addr." + h.dc + ".consul."
	if h.ns == "" {
		h.ns = naming.DefaultNamespace
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

// ServeDNS implements dns.Handler: it answers r on w, or not at all if r
// is itself a response.
func (h *Handler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	m := h.answer(r, tcp)
	if m == nil {
		return
	}
	if err := w.WriteMsg(m); err != nil {
		h.log.Debug("dns: write failed", "client", w.RemoteAddr().String(), "err", err)
	}
}

// Message sizes (RFC 1035, RFC 6891).
const (
	minUDPSize = dns.MinMsgSize // without EDNS0, and the least a client may ask for
	maxUDPSize = 4096           // the most an EDNS0 client gets over UDP
	maxTCPSize = dns.MaxMsgSize
)

// answer returns the response to r, over TCP or UDP (which bounds its
// size), or nil if r is a response.
func (h *Handler) answer(r *dns.Msg, tcp bool) *dns.Msg {
	if r.Response {
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Compress = true
	reqOPT := r.IsEdns0()
	udpSize := minUDPSize
	if reqOPT != nil {
		udpSize = min(max(int(reqOPT.UDPSize()), minUDPSize), maxUDPSize)
	}
	var b builder
	switch {
	case r.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case len(r.Question) != 1:
		m.Rcode = dns.RcodeFormatError
	case reqOPT != nil && reqOPT.Version() != 0:
		m.Rcode = dns.RcodeBadVers // RFC 6891 6.1.3; the OPT below carries it
	default:
		limit := maxTCPSize
		if !tcp {
			limit = udpSize
		}
		b = h.resolve(m, r.Question[0], limit)
	}
	var opt *dns.OPT
	if reqOPT != nil {
		opt = &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		opt.SetUDPSize(uint16(udpSize))
		opt.SetDo(reqOPT.Do()) // RFC 3225 3: copied, though nothing here is signed
	}
	b.finish(m, opt)
	if tcp {
		b.fit(m, opt, maxTCPSize, false)
	} else {
		b.fit(m, opt, udpSize, true)
	}
	return m
}

// resolve answers q into m: the rcode, the authority section, and the
// answers and their additional records in b.
func (h *Handler) resolve(m *dns.Msg, q dns.Question, limit int) builder {
	name := strings.ToLower(q.Name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	z, rest, ok := h.zoneOf(name)
	if !ok || (q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY) {
		m.Rcode = dns.RcodeRefused // not ours: no recursion, no referral
		return builder{}
	}
	m.Authoritative = true
	switch q.Qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		m.Rcode = dns.RcodeNotImplemented
		return builder{}
	}
	var lk lookup
	if z.consul {
		lk = h.parseConsul(rest, q.Qtype)
	} else {
		lk = parseSextant(rest)
	}
	b := builder{qname: q.Name, qtype: q.Qtype, ttl: h.ttl, max: limit/minRRSize + 1}
	found := true
	switch lk.kind {
	case apexName:
		if q.Qtype == dns.TypeSOA {
			b.answers = append(b.answers, h.soa(z))
		}
	case addrName:
		b.addr(lk.addr)
	case serviceName:
		found = h.service(&b, z, lk)
	default:
		found = false
	}
	if !found {
		m.Rcode = dns.RcodeNameError
	}
	if len(b.answers) == 0 {
		// NXDOMAIN, or a name without records of this type (NODATA):
		// the SOA gives the negative TTL (RFC 2308).
		m.Ns = append(m.Ns, h.soa(z))
	}
	return b
}

// service adds the records of the healthy instances lk names to b, and
// reports whether the name exists: the service has instances (healthy or
// not) and, for a tag, one of them carries it.
func (h *Handler) service(b *builder, z zone, lk lookup) bool {
	g := h.inst.Lookup(lk.key)
	if g == nil || g.Len() == 0 {
		return false
	}
	var ready []*instance.Instance
	if lk.tag == "" {
		ready = g.Select(nil, true)
	} else {
		var ok bool
		if ready, ok = tagged(g.Items(), lk.tag); !ok {
			return false
		}
	}
	// Weight 0 is drained: never picked by the gateway, left out of EDS,
	// and so left out here (Select's slice is this call's own).
	ready = slices.DeleteFunc(ready, func(in *instance.Instance) bool { return in.Weight == 0 })
	// An IP's SRV target is a name of the queried zone that answers it,
	// in the queried datacenter: <hex>.addr.dc1.consul. as Consul's.
	suffix := "addr.sextant."
	switch {
	case !z.consul:
	case lk.dc == h.dc:
		suffix = h.addrDC
	default:
		suffix = "addr." + DefaultDatacenter + ".consul."
	}
	b.instances(ready, suffix)
	return true
}

// soa is z's SOA record; its minimum, the negative TTL, is the TTL. The
// serial is the time, as Consul's: no zone transfer reads it.
func (h *Handler) soa(z zone) *dns.SOA {
	return &dns.SOA{
		Hdr:    dns.RR_Header{Name: z.apex, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: h.ttl},
		Ns:     z.ns,
		Mbox:   z.mbox,
		Serial: uint32(time.Now().Unix()),
		// Consul's defaults; nothing transfers the zone.
		Refresh: 3600, Retry: 600, Expire: 86400,
		Minttl: h.ttl,
	}
}

// tagged returns the ready items of all that carry tag (a metadata key
// "tag/TAG", compared without regard to case, as Consul compares tags), and
// whether any item, ready or not, carries it.
func tagged(all []*instance.Instance, tag string) ([]*instance.Instance, bool) {
	ready := all[:0]
	any := false
	for _, in := range all {
		if !HasTag(in, tag) {
			continue
		}
		any = true
		if in.ItemReady() {
			ready = append(ready, in)
		}
	}
	return ready, any
}

// HasTag reports whether in carries the Consul tag tag (the metadata key
// TagPrefix+tag), compared without regard to case as Consul compares tags.
func HasTag(in *instance.Instance, tag string) bool {
	n := len(TagPrefix) + len(tag)
	for i := range in.Metadata.Len() {
		k, _ := in.Metadata.At(i)
		if len(k) == n && strings.EqualFold(k[:len(TagPrefix)], TagPrefix) && strings.EqualFold(k[len(TagPrefix):], tag) {
			return true
		}
	}
	return false
}
