package dnsapi

import (
	"math/rand/v2"
	"net"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// minRRSize is the least an answer record takes in a message: an A record
// whose owner is a compression pointer (2 + 10 + 4 bytes). A message of
// limit bytes holds at most limit/minRRSize answers.
const minRRSize = 16

// builder collects the answers of one response and the additional record
// each brings, so that a truncated answer keeps the additional records of
// the answers it keeps.
type builder struct {
	qname string // the question's name, as asked: the answers' owner
	qtype uint16
	ttl   uint32
	max   int // answers beyond this many cannot fit: not built

	answers []dns.RR
	// extras[i] came with answers[i] (nil: none, or an earlier answer
	// brought it); only SRV answers bring any, the others leave it empty.
	extras []dns.RR

	// Address records are allocated in batches: a few allocations per
	// answer rather than two per record.
	batch int // records per batch
	as    []dns.A
	aaaas []dns.AAAA
	ips   []byte
}

func (b *builder) hdr(name string, rrtype uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: b.ttl}
}

// ipRecord is the A or AAAA record of a at name.
func (b *builder) ipRecord(name string, a netip.Addr) dns.RR {
	batch := max(b.batch, 1)
	if len(b.ips)+net.IPv6len > cap(b.ips) {
		b.ips = make([]byte, 0, batch*net.IPv6len)
	}
	start := len(b.ips)
	if a.Is4() {
		ip := a.As4()
		b.ips = append(b.ips, ip[:]...)
		if len(b.as) == cap(b.as) {
			b.as = make([]dns.A, 0, batch) // the records handed out stay in the old one
		}
		b.as = append(b.as, dns.A{Hdr: b.hdr(name, dns.TypeA), A: b.ips[start:len(b.ips):len(b.ips)]})
		return &b.as[len(b.as)-1]
	}
	ip := a.As16()
	b.ips = append(b.ips, ip[:]...)
	if len(b.aaaas) == cap(b.aaaas) {
		b.aaaas = make([]dns.AAAA, 0, batch)
	}
	b.aaaas = append(b.aaaas, dns.AAAA{Hdr: b.hdr(name, dns.TypeAAAA), AAAA: b.ips[start:len(b.ips):len(b.ips)]})
	return &b.aaaas[len(b.aaaas)-1]
}

// families reports which address records the question asks for.
func (b *builder) families() (v4, v6 bool) {
	switch b.qtype {
	case dns.TypeA:
		return true, false
	case dns.TypeAAAA:
		return false, true
	case dns.TypeANY:
		return true, true
	}
	return false, false
}

// addr answers an <hex>.addr name with its address.
func (b *builder) addr(a netip.Addr) {
	if v4, v6 := b.families(); a.Is4() && v4 || a.Is6() && v6 {
		b.answers = append(b.answers, b.ipRecord(b.qname, a))
	}
}

// instances answers with items (the builder's to reorder) in a random
// order: one record per distinct address for A, AAAA and ANY (an instance
// whose host is a DNS name has none), one SRV record per distinct target
// and port, its target's address as an additional record. An IP's target
// is <hex>.<suffix>.
func (b *builder) instances(items []*instance.Instance, suffix string) {
	v4, v6 := b.families()
	srv := b.qtype == dns.TypeSRV
	if !v4 && !v6 && !srv {
		return // no record of this type: NODATA
	}
	n := min(len(items), b.max)
	b.batch = n
	b.answers = make([]dns.RR, 0, n)
	if srv {
		b.extras = make([]dns.RR, 0, n)
	}
	var ips dedup[netip.Addr]
	var targets dedup[srvKey]
	var named dedup[string] // targets whose address record is in
	// A Fisher-Yates shuffle, drawn as the answers are built: a large
	// service costs the answers that can fit, not a shuffle of all.
	for i := range items {
		if len(b.answers) >= b.max {
			return
		}
		j := i + rand.IntN(len(items)-i)
		items[i], items[j] = items[j], items[i]
		in := items[i]
		ip, isIP := hostIP(in.Host)
		if !srv {
			if isIP && (ip.Is4() && v4 || ip.Is6() && v6) && ips.add(ip) {
				b.answers = append(b.answers, b.ipRecord(b.qname, ip))
			}
			continue
		}
		target := dns.Fqdn(in.Host) // a DNS name, as registered
		if isIP {
			target = hexName(ip) + "." + suffix
		}
		if !targets.add(srvKey{target, uint16(in.Port)}) {
			continue
		}
		rr := &dns.SRV{Hdr: b.hdr(b.qname, dns.TypeSRV), Priority: 1, Weight: srvWeight(in.Weight), Port: uint16(in.Port), Target: target}
		var extra dns.RR
		if isIP && named.add(target) {
			extra = b.ipRecord(target, ip)
		}
		b.answers = append(b.answers, rr)
		b.extras = append(b.extras, extra)
	}
}

type srvKey struct {
	target string
	port   uint16
}

// srvWeight is an instance's weight as an SRV weight: 1..65535.
func srvWeight(w int) uint16 { return uint16(min(max(w, 1), 65535)) }

// hostIP returns host as an address (IPv4-mapped IPv6 as IPv4, no zone),
// if it is one.
func hostIP(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// dedup is a set that stays off the heap while it holds a few keys.
type dedup[K comparable] struct {
	few  [8]K
	n    int
	many map[K]struct{}
}

// add adds k and reports whether it was new.
func (d *dedup[K]) add(k K) bool {
	if d.many != nil {
		if _, ok := d.many[k]; ok {
			return false
		}
		d.many[k] = struct{}{}
		return true
	}
	for _, f := range d.few[:d.n] {
		if f == k {
			return false
		}
	}
	if d.n < len(d.few) {
		d.few[d.n] = k
		d.n++
		return true
	}
	d.many = make(map[K]struct{}, 2*len(d.few))
	for _, f := range d.few {
		d.many[f] = struct{}{}
	}
	d.many[k] = struct{}{}
	return true
}

// finish puts the answers, their additional records and opt (if any) in m.
func (b *builder) finish(m *dns.Msg, opt *dns.OPT) { b.keep(m, opt, len(b.answers)) }

// keep puts the first n answers and their additional records in m.
func (b *builder) keep(m *dns.Msg, opt *dns.OPT, n int) {
	m.Answer = b.answers[:n]
	m.Extra = m.Extra[:0]
	for _, e := range b.extras[:min(n, len(b.extras))] {
		if e != nil {
			m.Extra = append(m.Extra, e)
		}
	}
	if opt != nil {
		m.Extra = append(m.Extra, opt)
	}
}

// fit keeps as many answers in m as fit in limit bytes, with their
// additional records. Over UDP a cut sets TC, so that the client asks
// again over TCP; over TCP (64 KiB) there is nothing to ask again with,
// so the answer is only cut.
func (b *builder) fit(m *dns.Msg, opt *dns.OPT, limit int, udp bool) {
	if fits(m, limit) {
		return
	}
	lo, hi := 0, len(b.answers) // lo answers fit, hi do not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		b.keep(m, opt, mid)
		if fits(m, limit) {
			lo = mid
		} else {
			hi = mid
		}
	}
	b.keep(m, opt, lo)
	m.Truncated = udp
}

// fits reports whether m packs into limit bytes, trying the cheap
// uncompressed length first.
func fits(m *dns.Msg, limit int) bool {
	m.Compress = false
	n := m.Len()
	m.Compress = true
	return n <= limit || m.Len() <= limit
}
