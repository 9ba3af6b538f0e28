package dnsapi

import (
	"fmt"
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// fuzzTable holds a service of every kind of host, with tags, and one
// large enough to be truncated over UDP.
func fuzzTable() *table {
	ins := []*instance.Instance{
		inst("default", "orders", "10.0.0.1", 8080, "tag/primary", "", "tag/v1.2", "x"),
		inst("default", "orders", "2001:db8::1", 8080, "tag/Canary", ""),
		inst("default", "orders", "db.example.com", 5432),
		with(inst("default", "orders", "10.0.0.3", 8080), func(in *instance.Instance) { in.Healthy = false }),
		inst("prod", "a.b", "::ffff:10.0.0.9", 80),
	}
	for i := range 120 {
		ins = append(ins, inst("default", "big", fmt.Sprintf("10.1.0.%d", i+1), 80+i, "tag/t", ""))
		ins = append(ins, inst("default", "big", fmt.Sprintf("2001:db8::%x", i+1), 80+i))
	}
	return newTable(ins...)
}

// FuzzAnswer feeds arbitrary packets to the handler, as the server does:
// whatever unpacks gets an answer that packs, within the size the
// transport allows, or none if it is a response. Its seed corpus is
// testdata/fuzz/FuzzAnswer (queries of every name and record type served,
// with and without EDNS0).
func FuzzAnswer(f *testing.F) {
	h, err := New(fuzzTable(), Options{Datacenter: "east"})
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{"orders.service.consul.", "big.default.svc.sextant.", "0a000001.addr.sextant."} {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeSRV} {
			m := new(dns.Msg).SetQuestion(name, qtype)
			out, err := m.Pack()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(out)
		}
	}
	f.Fuzz(func(t *testing.T, packet []byte) {
		r := new(dns.Msg)
		if r.Unpack(packet) != nil {
			return // the server drops what does not unpack
		}
		udpLimit := minUDPSize
		if opt := r.IsEdns0(); opt != nil {
			udpLimit = min(max(int(opt.UDPSize()), minUDPSize), maxUDPSize)
		}
		for _, tcp := range []bool{false, true} {
			m := h.answer(r, tcp)
			if m == nil {
				if !r.Response {
					t.Fatalf("no answer to a query: %v", r)
				}
				continue
			}
			out, err := m.Pack()
			if err != nil {
				t.Fatalf("the answer does not pack: %v\n%v", err, m)
			}
			limit := maxTCPSize
			if !tcp {
				limit = udpLimit
			}
			if len(out) > limit {
				t.Fatalf("tcp %v: %d bytes, more than %d\n%v", tcp, len(out), limit, m)
			}
			if m.Id != r.Id || !m.Response {
				t.Fatalf("id %d (response %v), want %d", m.Id, m.Response, r.Id)
			}
		}
		// And through ServeDNS, as the server calls it.
		for _, remote := range []net.Addr{udpClient, &net.TCPAddr{IP: udpClient.IP, Port: udpClient.Port}} {
			h.ServeDNS(&discard{remote: remote}, r)
		}
	})
}
