package dnsapi

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Servers are started on goroutines; none may be left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type table = catalog.Groups[*instance.Instance]

// inst is a healthy instance of ns/svc at host:port with weight 100 and
// the metadata of pairs (key, value, key, value...).
func inst(ns, svc, host string, port int, pairs ...string) *instance.Instance {
	md := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		md[pairs[i]] = pairs[i+1]
	}
	return &instance.Instance{
		ID: fmt.Sprintf("%s-%s-%s-%d", ns, svc, host, port), Namespace: ns, Service: svc, Host: host, Port: port,
		Weight: 100, Healthy: true, Metadata: label.FromMap(md),
	}
}

func with(in *instance.Instance, edit func(*instance.Instance)) *instance.Instance {
	edit(in)
	return in
}

// newTable is an instance table holding ins, as the registry's.
func newTable(ins ...*instance.Instance) *table {
	t := catalog.NewGroups(catalog.Codec[*instance.Instance]{})
	load(t, ins...)
	return t
}

// load replaces the table's instances with ins.
func load(t *table, ins ...*instance.Instance) {
	vals := make([]any, len(ins))
	for i, in := range ins {
		vals[i] = in
	}
	t.Load(1, vals)
}

func newHandler(t testing.TB, inst Instances, opts Options) *Handler {
	t.Helper()
	if opts.TTL == 0 {
		opts.TTL = 5 * time.Second
	}
	h, err := New(inst, opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// serve runs h on 127.0.0.1:0 until the test ends, and returns its address.
func serve(t *testing.T, h dns.Handler) string {
	t.Helper()
	srv, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(h) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Shutdown")
		}
	})
	return srv.Addr()
}

// query asks addr over network ("udp" or "tcp") for name's qtype records,
// with an EDNS0 buffer size unless it is 0.
func query(t *testing.T, addr, network, name string, qtype uint16, edns uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns > 0 {
		m.SetEdns0(edns, false)
	}
	c := &dns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 65535}
	var r *dns.Msg
	var err error
	for try := 0; try < 3; try++ { // a lost UDP datagram on a busy machine
		if r, _, err = c.Exchange(m, addr); err == nil {
			return r
		}
	}
	t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	return nil
}

// addrs lists the addresses of r's A and AAAA answers, sorted.
func addrs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestNames(t *testing.T) {
	tb := newTable(
		inst("default", "orders", "10.0.0.1", 8080, "tag/primary", ""),
		inst("default", "orders", "10.0.0.2", 8080, "tag/Canary", "yes"),
		inst("prod", "orders", "10.1.0.1", 9090),
		inst("prod", "a.b", "10.2.0.1", 80),
		inst("web", "shop", "10.3.0.1", 80, "tag/v1.2", ""),
	)
	h := newHandler(t, tb, Options{Datacenter: "east"})
	addr := serve(t, h)
	hw := newHandler(t, tb, Options{ConsulNamespace: "web"})
	addrWeb := serve(t, hw)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  []string // addresses (A) or SRV targets' addresses
		addr  string   // server (default: addr)
	}{
		{"orders.service.consul.", dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"orders.service.dc1.consul.", dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"orders.service.east.consul.", dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"ORDERS.Service.EAST.Consul.", dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"orders.default.svc.sextant.", dns.TypeA, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"Orders.Prod.SVC.sextant.", dns.TypeA, []string{"10.1.0.1"}, ""},
		{"a.b.prod.svc.sextant.", dns.TypeA, []string{"10.2.0.1"}, ""},
		{"primary.orders.service.consul.", dns.TypeA, []string{"10.0.0.1"}, ""},
		{"canary.orders.service.dc1.consul.", dns.TypeA, []string{"10.0.0.2"}, ""},
		{"CANARY.orders.service.consul.", dns.TypeA, []string{"10.0.0.2"}, ""},
		{"_orders._primary.service.consul.", dns.TypeSRV, []string{"10.0.0.1"}, ""},
		{"_orders._tcp.service.consul.", dns.TypeSRV, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"_orders._tcp.consul.", dns.TypeSRV, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"_orders._tcp.east.consul.", dns.TypeSRV, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"orders.service.consul.", dns.TypeSRV, []string{"10.0.0.1", "10.0.0.2"}, ""},
		{"shop.service.consul.", dns.TypeA, []string{"10.3.0.1"}, addrWeb},
		{"v1.2.shop.service.consul.", dns.TypeA, []string{"10.3.0.1"}, addrWeb}, // a tag of two labels
		{"0a000001.addr.east.consul.", dns.TypeA, []string{"10.0.0.1"}, ""},
		{"0a000001.addr.consul.", dns.TypeA, []string{"10.0.0.1"}, ""},
		{"0A000001.addr.sextant.", dns.TypeA, []string{"10.0.0.1"}, ""},
	} {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network+"/"+tc.name+"/"+dns.TypeToString[tc.qtype], func(t *testing.T) {
				server := addr
				if tc.addr != "" {
					server = tc.addr
				}
				r := query(t, server, network, tc.name, tc.qtype, 0)
				if r.Rcode != dns.RcodeSuccess || !r.Authoritative {
					t.Fatalf("rcode %s, aa %v, want NOERROR, aa\n%v", dns.RcodeToString[r.Rcode], r.Authoritative, r)
				}
				got := addrs(r)
				if tc.qtype == dns.TypeSRV {
					got = srvAddrs(t, r)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, want %v\n%v", got, tc.want, r)
				}
				for _, rr := range r.Answer {
					if rr.Header().Name != tc.name || rr.Header().Ttl != 5 {
						t.Fatalf("answer %v: want owner %q as asked and TTL 5", rr, tc.name)
					}
				}
			})
		}
	}
}

// srvAddrs checks that every SRV answer of r has its target's address
// record in the additional section, and lists those addresses, sorted.
func srvAddrs(t *testing.T, r *dns.Msg) []string {
	t.Helper()
	extra := map[string]string{}
	for _, rr := range r.Extra {
		switch rr := rr.(type) {
		case *dns.A:
			extra[rr.Hdr.Name] = rr.A.String()
		case *dns.AAAA:
			extra[rr.Hdr.Name] = rr.AAAA.String()
		}
	}
	var out []string
	for _, rr := range r.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			t.Fatalf("answer %v is not an SRV record", rr)
		}
		a, ok := extra[srv.Target]
		if !ok {
			t.Fatalf("no additional record of %s\n%v", srv.Target, r)
		}
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

func TestNegativeAnswers(t *testing.T) {
	tb := newTable(
		inst("default", "orders", "10.0.0.1", 8080, "tag/primary", ""),
		with(inst("default", "orders", "10.0.0.2", 8080, "tag/sick", ""), func(in *instance.Instance) { in.Healthy = false }),
		with(inst("default", "down", "10.0.0.3", 80), func(in *instance.Instance) { in.Healthy = false }),
		with(inst("default", "isolated", "10.0.0.4", 80), func(in *instance.Instance) { in.Isolated = true }),
	)
	// An emptied service: its group stays in the table, with no instances.
	gone := inst("default", "gone", "10.0.0.5", 80)
	tb.Apply(2, []catalog.Change{{Key: gone.Key(), ID: gone.ID, Revision: 2, Value: gone, Created: true}})
	tb.Apply(3, []catalog.Change{{Key: gone.Key(), ID: gone.ID, Revision: 3}})
	addr := serve(t, newHandler(t, tb, Options{TTL: 7 * time.Second}))
	const (
		nx      = dns.RcodeNameError
		ok      = dns.RcodeSuccess
		refused = dns.RcodeRefused
		notimp  = dns.RcodeNotImplemented
	)
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		soa   bool // an SOA in the authority section
	}{
		{"nosuch.service.consul.", dns.TypeA, nx, true},
		{"nosuch.default.svc.sextant.", dns.TypeSRV, nx, true},
		{"gone.service.consul.", dns.TypeA, nx, true},
		{"down.service.consul.", dns.TypeA, ok, true},
		{"down.service.consul.", dns.TypeSRV, ok, true},
		{"isolated.default.svc.sextant.", dns.TypeA, ok, true},
		{"sick.orders.service.consul.", dns.TypeA, ok, true}, // only an unhealthy instance has the tag
		{"nosuch.orders.service.consul.", dns.TypeA, nx, true},
		{"orders.service.dc9.consul.", dns.TypeA, nx, true},
		{"orders.service.dc1.extra.consul.", dns.TypeA, nx, true},
		{"orders.node.consul.", dns.TypeA, nx, true},
		{"orders.query.consul.", dns.TypeA, nx, true},
		{"service.consul.", dns.TypeA, nx, true},
		{"orders.svc.sextant.", dns.TypeA, nx, true},
		{"x.orders.default.pod.sextant.", dns.TypeA, nx, true},
		{"0a00001.addr.consul.", dns.TypeA, nx, true},
		{"zz000001.addr.consul.", dns.TypeA, nx, true},
		{"orders.service.consul.", dns.TypeAAAA, ok, true}, // IPv4 only
		{"orders.service.consul.", dns.TypeMX, ok, true},
		{"orders.service.consul.", dns.TypeTXT, ok, true},
		{"0a000001.addr.consul.", dns.TypeAAAA, ok, true},
		{"consul.", dns.TypeA, ok, true},
		{"sextant.", dns.TypeNS, ok, true},
		{"consul.", dns.TypeAXFR, notimp, false},
		{"example.com.", dns.TypeA, refused, false},
		{"consul.example.com.", dns.TypeA, refused, false},
		{"xconsul.", dns.TypeA, refused, false},
		{".", dns.TypeNS, refused, false},
	} {
		t.Run(tc.name+"/"+dns.TypeToString[tc.qtype], func(t *testing.T) {
			network := "udp"
			if tc.qtype == dns.TypeAXFR {
				network = "tcp"
			}
			r := query(t, addr, network, tc.name, tc.qtype, 0)
			if r.Rcode != tc.rcode || len(r.Answer) != 0 {
				t.Fatalf("rcode %s with %d answers, want %s and none\n%v", dns.RcodeToString[r.Rcode], len(r.Answer), dns.RcodeToString[tc.rcode], r)
			}
			if !tc.soa {
				if len(r.Ns) != 0 {
					t.Fatalf("authority %v, want none", r.Ns)
				}
				return
			}
			if len(r.Ns) != 1 {
				t.Fatalf("authority %v, want the zone's SOA", r.Ns)
			}
			soa, isSOA := r.Ns[0].(*dns.SOA)
			zone := "consul."
			if strings.HasSuffix(tc.name, "sextant.") {
				zone = "sextant."
			}
			if !isSOA || soa.Hdr.Name != zone || soa.Minttl != 7 || soa.Hdr.Ttl != 7 || !r.Authoritative {
				t.Fatalf("authority %v (aa %v), want the SOA of %s with TTL and minimum 7", r.Ns, r.Authoritative, zone)
			}
		})
	}
	t.Run("SOA at the apex", func(t *testing.T) {
		r := query(t, addr, "udp", "Sextant.", dns.TypeSOA, 0)
		if len(r.Answer) != 1 || r.Answer[0].(*dns.SOA).Hdr.Name != "sextant." || r.Rcode != ok {
			t.Fatalf("want the SOA of sextant.\n%v", r)
		}
	})
	t.Run("class CH", func(t *testing.T) {
		m := new(dns.Msg)
		m.SetQuestion("orders.service.consul.", dns.TypeA)
		m.Question[0].Qclass = dns.ClassCHAOS
		if r := newHandler(t, tb, Options{}).answer(m, false); r.Rcode != refused {
			t.Fatalf("rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
		}
	})
}

func TestRecordTypes(t *testing.T) {
	tb := newTable(
		with(inst("default", "mixed", "10.0.0.1", 8080), func(in *instance.Instance) { in.Weight = 0 }), // drained: left out
		with(inst("default", "mixed", "2001:db8::1", 8081), func(in *instance.Instance) { in.Weight = 300 }),
		inst("default", "mixed", "::ffff:10.0.0.9", 8082),
		inst("default", "mixed", "fe80::2%eth0", 8083),
		inst("default", "mixed", "db.example.com", 5432),
		inst("default", "mixed", "10.0.0.1", 8080+1), // the same address on another port
	)
	h := newHandler(t, tb, Options{Datacenter: "east"})
	addr := serve(t, h)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"mixed.service.consul.", dns.TypeA, []string{"10.0.0.1", "10.0.0.9"}},
		{"mixed.service.consul.", dns.TypeAAAA, []string{"2001:db8::1", "fe80::2"}},
		{"mixed.service.consul.", dns.TypeANY, []string{"10.0.0.1", "10.0.0.9", "2001:db8::1", "fe80::2"}},
	} {
		r := query(t, addr, "udp", tc.name, tc.qtype, 0)
		if got := addrs(r); !slices.Equal(got, tc.want) || r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s %s: %v, want %v\n%v", tc.name, dns.TypeToString[tc.qtype], got, tc.want, r)
		}
	}

	for _, tc := range []struct {
		name   string
		suffix string
	}{
		{"mixed.service.consul.", ".addr.east.consul."},
		{"mixed.service.dc1.consul.", ".addr.dc1.consul."},
		{"mixed.default.svc.sextant.", ".addr.sextant."},
	} {
		r := query(t, addr, "tcp", tc.name, dns.TypeSRV, 0)
		type srv struct {
			target        string
			weight, port  uint16
			extra, family string
		}
		extra := map[string]dns.RR{}
		for _, rr := range r.Extra {
			extra[rr.Header().Name] = rr
		}
		var got []srv
		for _, rr := range r.Answer {
			s := rr.(*dns.SRV)
			if s.Priority != 1 {
				t.Errorf("%v: priority %d, want 1", s, s.Priority)
			}
			e := srv{target: s.Target, weight: s.Weight, port: s.Port}
			switch rr := extra[s.Target].(type) {
			case *dns.A:
				e.extra, e.family = rr.A.String(), "A"
			case *dns.AAAA:
				e.extra, e.family = rr.AAAA.String(), "AAAA"
			}
			got = append(got, e)
		}
		bySRV := func(a, b srv) int { return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.target, b.target)) }
		slices.SortFunc(got, bySRV)
		want := []srv{
			{"0a000001" + tc.suffix, 100, 8081, "10.0.0.1", "A"},
			{"20010db8000000000000000000000001" + tc.suffix, 300, 8081, "2001:db8::1", "AAAA"},
			{"0a000009" + tc.suffix, 100, 8082, "10.0.0.9", "A"},
			{"fe800000000000000000000000000002" + tc.suffix, 100, 8083, "fe80::2", "AAAA"},
			{"db.example.com.", 100, 5432, "", ""}, // a DNS name: as registered, no additional record
		}
		slices.SortFunc(want, bySRV)
		if !slices.EqualFunc(got, want, func(a, b srv) bool { return a == b }) {
			t.Errorf("%s SRV:\n got %v\nwant %v\n%v", tc.name, got, want, r)
		}
		if n := len(r.Extra); n != 4 {
			t.Errorf("%s SRV: %d additional records, want 4 (one per address)\n%v", tc.name, n, r)
		}
		// The targets answer: a client may look them up on their own.
		for _, w := range want {
			if w.family == "" {
				continue
			}
			q := query(t, addr, "udp", w.target, dns.StringToType[w.family], 0)
			if got := addrs(q); len(got) != 1 || got[0] != w.extra {
				t.Errorf("%s %s: %v, want %s", w.target, w.family, got, w.extra)
			}
		}
	}
}

// rawUDP sends m over UDP and returns the response and its size in bytes.
func rawUDP(t *testing.T, addr string, m *dns.Msg) (*dns.Msg, int) {
	t.Helper()
	out, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 65536)
	for try := 0; try < 3; try++ {
		if _, err := conn.Write(out); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			continue
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		return r, n
	}
	t.Fatalf("no answer from %s", addr)
	return nil, 0
}

func TestTruncation(t *testing.T) {
	var ins []*instance.Instance
	for i := range 300 {
		ins = append(ins, inst("default", "big", fmt.Sprintf("10.1.%d.%d", i/250, 1+i%250), 80))
		ins = append(ins, inst("default", "big6", fmt.Sprintf("2001:db8::%x", i+1), 80))
	}
	addr := serve(t, newHandler(t, newTable(ins...), Options{}))
	for _, tc := range []struct {
		name    string
		qtype   uint16
		edns    uint16 // 0: none
		limit   int    // the answer's bound
		wantOPT uint16
	}{
		{"big.service.consul.", dns.TypeA, 0, 512, 0},
		{"big.service.consul.", dns.TypeA, 256, 512, 512}, // below 512: 512
		{"big.service.consul.", dns.TypeA, 1232, 1232, 1232},
		{"big.service.consul.", dns.TypeA, 65000, 4096, 4096}, // capped
		{"big6.service.consul.", dns.TypeAAAA, 1232, 1232, 1232},
		{"big.service.consul.", dns.TypeSRV, 0, 512, 0},
		{"big6.default.svc.sextant.", dns.TypeSRV, 4096, 4096, 4096},
		{"big.service.consul.", dns.TypeANY, 2048, 2048, 2048},
	} {
		t.Run(fmt.Sprintf("%s/%s/edns%d", tc.name, dns.TypeToString[tc.qtype], tc.edns), func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion(tc.name, tc.qtype)
			if tc.edns > 0 {
				m.SetEdns0(tc.edns, false)
			}
			r, size := rawUDP(t, addr, m)
			if !r.Truncated || size > tc.limit || len(r.Answer) == 0 {
				t.Fatalf("UDP: %d bytes, %d answers, TC %v: want TC, at most %d bytes and some answers", size, len(r.Answer), r.Truncated, tc.limit)
			}
			// Nearly full: the cut is at the last answer that fits.
			if per := size / len(r.Answer); size+2*per < tc.limit {
				t.Fatalf("UDP: %d bytes with %d answers, where %d fit", size, len(r.Answer), tc.limit)
			}
			opt := r.IsEdns0()
			switch {
			case tc.wantOPT == 0 && opt != nil:
				t.Fatalf("an OPT record in the answer to a query without one: %v", opt)
			case tc.wantOPT != 0 && (opt == nil || opt.UDPSize() != tc.wantOPT):
				t.Fatalf("OPT %v, want one with size %d", opt, tc.wantOPT)
			}
			if tc.qtype == dns.TypeSRV {
				srvAddrs(t, r) // every kept answer keeps its address
			}
			// Over TCP, as the client then asks: everything.
			full := query(t, addr, "tcp", tc.name, tc.qtype, tc.edns)
			if full.Truncated || len(full.Answer) != 300 {
				t.Fatalf("TCP: %d answers, TC %v: want all 300", len(full.Answer), full.Truncated)
			}
			if tc.qtype == dns.TypeSRV {
				if got := srvAddrs(t, full); len(got) != 300 {
					t.Fatalf("TCP: %d SRV targets with addresses, want 300", len(got))
				}
			}
		})
	}
	t.Run("small enough", func(t *testing.T) {
		addr := serve(t, newHandler(t, newTable(ins[:10]...), Options{}))
		r, size := rawUDP(t, addr, new(dns.Msg).SetQuestion("big.service.consul.", dns.TypeA))
		if r.Truncated || len(r.Answer) != 5 || size > 512 {
			t.Fatalf("%d answers in %d bytes, TC %v: want all 5, not truncated", len(r.Answer), size, r.Truncated)
		}
	})
	t.Run("64 KiB over TCP", func(t *testing.T) {
		var many []*instance.Instance
		for i := range 6000 {
			many = append(many, inst("default", "huge", fmt.Sprintf("2001:db8::%x", i+1), 80))
		}
		h := newHandler(t, newTable(many...), Options{})
		r := h.answer(new(dns.Msg).SetQuestion("huge.service.consul.", dns.TypeAAAA), true)
		out, err := r.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if r.Truncated || len(out) > dns.MaxMsgSize || len(r.Answer) < 2000 {
			t.Fatalf("%d answers in %d bytes, TC %v: want as many as fit in 64 KiB, without TC", len(r.Answer), len(out), r.Truncated)
		}
	})
}

func TestEDNS(t *testing.T) {
	h := newHandler(t, newTable(inst("default", "orders", "10.0.0.1", 80)), Options{})
	m := new(dns.Msg)
	m.SetQuestion("orders.service.consul.", dns.TypeA)
	m.SetEdns0(1232, true)
	r := h.answer(m, false)
	if opt := r.IsEdns0(); opt == nil || opt.UDPSize() != 1232 || opt.Version() != 0 || !opt.Do() || len(r.Answer) != 1 {
		t.Fatalf("want one answer and an OPT of size 1232 with DO copied\n%v", r)
	}
	m.IsEdns0().SetVersion(1)
	r = h.answer(m, false)
	if r.Rcode != dns.RcodeBadVers || r.IsEdns0() == nil || len(r.Answer) != 0 {
		t.Fatalf("EDNS version 1: want BADVERS with an OPT and no answer\n%v", r)
	}
	if _, err := r.Pack(); err != nil {
		t.Fatalf("BADVERS does not pack: %v", err)
	}
}

// TestShuffled: the order of the answers changes from one answer to the
// next.
func TestShuffled(t *testing.T) {
	var ins []*instance.Instance
	for i := range 10 {
		ins = append(ins, inst("default", "orders", fmt.Sprintf("10.0.0.%d", i+1), 80))
	}
	addr := serve(t, newHandler(t, newTable(ins...), Options{}))
	order := func(r *dns.Msg) string {
		var s []string
		for _, rr := range r.Answer {
			s = append(s, rr.(*dns.A).A.String())
		}
		return strings.Join(s, ",")
	}
	first := order(query(t, addr, "udp", "orders.service.consul.", dns.TypeA, 0))
	for try := 0; try < 50; try++ {
		r := query(t, addr, "udp", "orders.service.consul.", dns.TypeA, 0)
		if len(r.Answer) != 10 {
			t.Fatalf("%d answers, want 10", len(r.Answer))
		}
		if order(r) != first {
			return
		}
	}
	t.Fatalf("51 answers in the same order %s", first)
}

// TestChangesSeen: an answer reads the table as it is: a deregistered or
// unhealthy instance is gone from the next answer.
func TestChangesSeen(t *testing.T) {
	a, b := inst("default", "orders", "10.0.0.1", 80), inst("default", "orders", "10.0.0.2", 80)
	tb := newTable(a, b)
	addr := serve(t, newHandler(t, tb, Options{}))
	ask := func() []string { return addrs(query(t, addr, "udp", "orders.service.consul.", dns.TypeA, 0)) }
	if got := ask(); len(got) != 2 {
		t.Fatalf("%v, want both", got)
	}
	load(tb, a)
	if got := ask(); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Fatalf("after b left: %v", got)
	}
	sick := a.Clone()
	sick.Healthy = false
	load(tb, sick)
	if r := query(t, addr, "udp", "orders.service.consul.", dns.TypeA, 0); len(r.Answer) != 0 || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after a turned unhealthy: want NOERROR and no answer\n%v", r)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		ok   bool
	}{
		{Options{}, true},
		{Options{TTL: time.Hour, Datacenter: "eu-west-1", ConsulNamespace: "prod"}, true},
		{Options{TTL: -time.Second}, false},
		{Options{TTL: 1500 * time.Millisecond}, false},
		{Options{TTL: MaxTTL + time.Second}, false},
		{Options{Datacenter: "East"}, false},
		{Options{Datacenter: "a.b"}, false},
		{Options{Datacenter: "-a"}, false},
		{Options{Datacenter: strings.Repeat("a", 64)}, false},
		{Options{ConsulNamespace: "Prod"}, false},
	} {
		err := tc.opts.Validate()
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ok %v", tc.opts, err, tc.ok)
		}
		if _, err := New(newTable(), tc.opts); (err == nil) != tc.ok {
			t.Errorf("New(%+v): %v, want ok %v", tc.opts, err, tc.ok)
		}
	}
}

func TestServer(t *testing.T) {
	h := newHandler(t, newTable(inst("default", "orders", "10.0.0.1", 80)), Options{})
	t.Run("one port for UDP and TCP", func(t *testing.T) {
		addr := serve(t, h)
		for _, network := range []string{"udp", "tcp"} {
			if got := addrs(query(t, addr, network, "orders.service.consul.", dns.TypeA, 0)); len(got) != 1 {
				t.Fatalf("%s: %v", network, got)
			}
		}
	})
	t.Run("address in use", func(t *testing.T) {
		for _, network := range []string{"udp", "tcp"} {
			var addr string
			if network == "udp" {
				// A UDP port whose TCP twin is free (Listen binds TCP
				// first): another process's socket may hold the TCP one.
				for i := 0; addr == ""; i++ {
					pc, err := net.ListenPacket("udp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					ln, err := net.Listen("tcp", pc.LocalAddr().String())
					if err != nil {
						pc.Close()
						if i == 20 {
							t.Fatalf("no UDP port of 20 had its TCP twin free: %v", err)
						}
						continue
					}
					ln.Close()
					defer pc.Close()
					addr = pc.LocalAddr().String()
				}
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				addr = ln.Addr().String()
			}
			srv, err := Listen(addr)
			if err == nil {
				srv.Shutdown()
				t.Fatalf("%s %s taken: Listen succeeded", network, addr)
			}
			if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), network) {
				t.Fatalf("%s taken: %v", network, err)
			}
		}
	})
	t.Run("shutdown before serve", func(t *testing.T) {
		srv, err := Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Serve(h); err != nil {
			t.Fatalf("Serve after Shutdown: %v", err)
		}
		// The sockets are closed: the address is free again.
		again, err := Listen(srv.Addr())
		if err != nil {
			t.Fatalf("address not released: %v", err)
		}
		again.Shutdown()
	})
	t.Run("a socket fails", func(t *testing.T) {
		srv, err := Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(h) }()
		query(t, srv.Addr(), "tcp", "orders.service.consul.", dns.TypeA, 0) // serving
		srv.ln.Close()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("Serve returned nil after its TCP listener failed")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve kept running with a failed listener")
		}
		srv.Shutdown() // nothing left to stop
	})
	t.Run("shutdown right after serve", func(t *testing.T) {
		for range 20 {
			srv, err := Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(h) }()
			if err := srv.Shutdown(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return")
			}
		}
	})
}

// discard is a dns.ResponseWriter that packs what it is given, as the
// server's does, and drops it.
type discard struct {
	remote net.Addr
	buf    []byte
}

func (d *discard) LocalAddr() net.Addr  { return d.remote }
func (d *discard) RemoteAddr() net.Addr { return d.remote }
func (d *discard) WriteMsg(m *dns.Msg) error {
	out, err := m.PackBuffer(d.buf)
	d.buf = out
	return err
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) Close() error                { return nil }
func (d *discard) TsigStatus() error           { return nil }
func (d *discard) TsigTimersOnly(bool)         {}
func (d *discard) Hijack()                     {}

var udpClient = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53000}

// BenchmarkServeA: one A query of a service of 5 instances, answered and
// packed.
func BenchmarkServeA(b *testing.B) {
	var ins []*instance.Instance
	for i := range 5 {
		ins = append(ins, inst("default", "orders", fmt.Sprintf("10.0.0.%d", i+1), 80))
	}
	h := newHandler(b, newTable(ins...), Options{})
	q := new(dns.Msg).SetQuestion("orders.service.consul.", dns.TypeA)
	w := &discard{remote: udpClient, buf: make([]byte, 0, 512)}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeDNS(w, q)
	}
}
