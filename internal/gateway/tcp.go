package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// Plain TCP: a listener of tcp_proxy filter chains without TLS (what
// Istio publishes for a Gateway server of protocol TCP), served by
// ServeTCP on its port. A connection takes the chain its addresses match
// (Envoy's order: the most specific destination prefix, then the most
// specific source prefix), is forwarded as TLS passthrough is
// (forwardTCP, passthrough.go), and leaves one call record.

// tcpChainSpec is a plain TCP filter chain.
type tcpChainSpec struct {
	dst, src []netip.Prefix // filter_chain_match prefix_ranges, source_prefix_ranges; empty: any
	tcp      *tcpProxySpec
	stat     string // tcp_proxy stat_prefix: the record's route
}

// decodeTCPChain reads a filter chain whose network filter is tcp_proxy f
// (at fpath), matched on addresses only.
func decodeTCPChain(path string, fc *listener.FilterChain, fpath string, f *listener.Filter) (*tcpChainSpec, error) {
	t, err := decodeTCPProxy(fpath, f)
	if err != nil {
		return nil, err
	}
	cs := &tcpChainSpec{tcp: t, stat: statPrefix(f)}
	m := fc.GetFilterChainMatch()
	other := proto.Clone(m).(*listener.FilterChainMatch)
	if other != nil {
		other.PrefixRanges, other.SourcePrefixRanges = nil, nil
		if other.GetTransportProtocol() == "raw_buffer" {
			other.TransportProtocol = ""
		}
		if !proto.Equal(other, &listener.FilterChainMatch{}) {
			return nil, fieldErr(path+".filter_chain_match", "a TCP chain matches prefix_ranges and source_prefix_ranges only: %v", errUnsupported)
		}
	}
	read := func(p string, rs []*corev3.CidrRange) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for i, r := range rs {
			a, err := netip.ParseAddr(r.GetAddressPrefix())
			bits := int(r.GetPrefixLen().GetValue())
			if r.GetPrefixLen() == nil {
				bits = a.BitLen()
			}
			pr, perr := a.Prefix(bits)
			if err != nil || perr != nil {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", p, i), "%s/%d: not an address prefix", r.GetAddressPrefix(), bits)
			}
			out = append(out, pr)
		}
		return out, nil
	}
	if cs.dst, err = read(path+".filter_chain_match.prefix_ranges", m.GetPrefixRanges()); err != nil {
		return nil, err
	}
	if cs.src, err = read(path+".filter_chain_match.source_prefix_ranges", m.GetSourcePrefixRanges()); err != nil {
		return nil, err
	}
	return cs, nil
}

func statPrefix(f *listener.Filter) string {
	m := new(tcpproxy.TcpProxy)
	if f.GetTypedConfig().UnmarshalTo(m) != nil {
		return ""
	}
	return m.GetStatPrefix()
}

// longest is the length of the longest prefix of ps holding a: 0 for no
// prefixes (matches any, least specific), -1 when none holds it.
func longest(ps []netip.Prefix, a netip.Addr) int {
	if len(ps) == 0 {
		return 0
	}
	best := -1
	for _, p := range ps {
		if p.Contains(a) && p.Bits()+1 > best {
			best = p.Bits() + 1
		}
	}
	return best
}

// tcpListenerRT is a TCP port's chains at run time.
type tcpListenerRT struct {
	name   string
	chains []*tcpChainSpec
	proxy  []*tcpProxyRT
}

// match picks the chain for a connection from src to dst (-1: none), as
// Envoy does, one criterion after the other without going back: the
// chains with the most specific destination prefix holding dst, then of
// those the one with the most specific source prefix holding src.
func (l *tcpListenerRT) match(dst, src netip.Addr) int {
	bestD := -1
	for _, c := range l.chains {
		bestD = max(bestD, longest(c.dst, dst))
	}
	if bestD < 0 {
		return -1
	}
	best, bestS := -1, -1
	for i, c := range l.chains {
		if longest(c.dst, dst) != bestD {
			continue
		}
		if s := longest(c.src, src); s > bestS {
			best, bestS = i, s
		}
	}
	return best
}

// tcpState is the TCP listeners by port (Options.TCPListenPorts).
type tcpState map[uint32]*tcpListenerRT

// buildTCP builds the TCP listeners of the ports the gateway serves TCP
// on from the listeners of an update and its clusters.
func (g *Gateway) buildTCP(all map[string]any, clusters map[string]*clusterRT) (tcpState, error) {
	if len(g.opts.TCPListenPorts) == 0 {
		return nil, nil
	}
	out := tcpState{}
	for _, port := range g.opts.TCPListenPorts {
		var ls *listenerSpec
		for _, v := range all {
			l := v.(*listenerSpec)
			if len(l.tcpChains) == 0 || l.port != port {
				continue
			}
			if ls != nil {
				return nil, fmt.Errorf("gateway: TCP listeners %q and %q both on port %d", ls.name, l.name, port)
			}
			ls = l
		}
		if ls == nil {
			continue
		}
		rt := &tcpListenerRT{name: ls.name, chains: ls.tcpChains}
		for _, c := range ls.tcpChains {
			rt.proxy = append(rt.proxy, newTCPProxyRT(c.tcp, clusters))
		}
		out[port] = rt
	}
	return out, nil
}

// ServeTCP serves the TCP listener whose port is ln's (Options.
// TCPListenPorts must name it) until Shutdown or ln is closed: each
// connection is forwarded by the chain its addresses match, or closed when
// none does (or the port has no listener yet). It closes its connections
// and returns nil once they have ended.
func (g *Gateway) ServeTCP(ln net.Listener) error {
	ta, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("gateway: TCP listener address %v is not TCP", ln.Addr())
	}
	port := uint32(ta.Port)
	if !slices.Contains(g.opts.TCPListenPorts, port) {
		return fmt.Errorf("gateway: port %d is not in Options.TCPListenPorts", port)
	}
	g.srvMu.Lock()
	g.tlsServers = append(g.tlsServers, servers{ln: ln}) // Shutdown closes it
	g.srvMu.Unlock()
	// A TCP connection has no request to finish: once ln is closed its
	// connections are closed too (their records say upstream_reset), or
	// ServeTCP would wait for them, up to the idle timeout.
	var (
		mu     sync.Mutex
		open   = map[net.Conn]struct{}{}
		closed bool
		conns  sync.WaitGroup
	)
	err := acceptLoop(ln, func(c net.Conn) {
		mu.Lock()
		if closed {
			mu.Unlock()
			c.Close()
			return
		}
		open[c] = struct{}{}
		conns.Add(1)
		mu.Unlock()
		go func() {
			defer conns.Done()
			g.serveTCPConn(c, port)
			mu.Lock()
			delete(open, c)
			mu.Unlock()
		}()
	})
	mu.Lock()
	closed = true
	for c := range open {
		c.Close()
	}
	mu.Unlock()
	conns.Wait()
	return err
}

// serveTCPConn forwards c by its port's chain and records it.
func (g *Gateway) serveTCPConn(c net.Conn, port uint32) {
	defer c.Close()
	start := time.Now()
	var l *tcpListenerRT
	if st := g.tcpL.Load(); st != nil {
		l = (*st)[port]
	}
	dst := addrOf(c.LocalAddr())
	src := addrOf(c.RemoteAddr())
	i := -1
	if l != nil {
		i = l.match(dst, src)
	}
	if i < 0 {
		g.metrics.tcp.WithLabelValues("", "no_chain").Inc()
		g.log.Debug("gateway: TCP: no filter chain matches", "port", port, "remote", c.RemoteAddr().String())
		return
	}
	r := g.forwardTCP(c, nil, l.proxy[i], g.metrics.tcp)
	if r.err != nil {
		g.log.Debug("gateway: TCP", "cluster", r.cluster, "endpoint", r.endpoint, "result", r.result, "err", r.err)
	}
	if g.rec == nil {
		return
	}
	rec := calllog.Record{
		Start:    start.UnixNano(),
		Latency:  time.Since(start),
		Cluster:  r.cluster,
		Route:    l.chains[i].stat,
		Endpoint: r.endpoint,
		Reason:   r.ended,
		BytesIn:  uint32(min(r.in, 1<<32-1)),
		BytesOut: uint32(min(r.out, 1<<32-1)),
		Port:     uint16(port),
		PeerIP:   src,
	}
	if r.cl != nil {
		rec.Service, rec.Subset = r.cl.spec.service, r.cl.spec.subsetName
	}
	// No HTTP is spoken, but the call log's status says how it went, as
	// for a call: 200 proxied (the reason says how it ended), 503 no
	// connection to an endpoint, 502 reset or broken.
	switch {
	case r.result != "connected":
		rec.Status = 503
	case r.ended == calllog.ReasonReset:
		rec.Status = 502
	default:
		rec.Status = 200
	}
	g.rec.Record(rec)
}

func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// tcpPortStatus is one TCP port as the admin API's /v1/config shows it.
type tcpPortStatus struct {
	Port     uint32           `json:"port"`
	Listener string           `json:"listener,omitempty"` // empty: no TCP listener for this port yet
	Chains   []tcpChainStatus `json:"chains"`
}

type tcpChainStatus struct {
	Destinations []string          `json:"destination_prefixes,omitempty"` // empty: any
	Sources      []string          `json:"source_prefixes,omitempty"`
	Route        string            `json:"route,omitempty"`
	Clusters     map[string]uint32 `json:"clusters"` // name -> weight
	IdleTimeout  string            `json:"idle_timeout,omitempty"`
}

// tcpStatus describes the TCP ports served (Options.TCPListenPorts).
func (g *Gateway) tcpStatus() []tcpPortStatus {
	var st tcpState
	if p := g.tcpL.Load(); p != nil {
		st = *p
	}
	out := []tcpPortStatus{}
	for _, port := range g.opts.TCPListenPorts {
		ps := tcpPortStatus{Port: port, Chains: []tcpChainStatus{}}
		if l := st[port]; l != nil {
			ps.Listener = l.name
			for _, c := range l.chains {
				cs := tcpChainStatus{Route: c.stat, Clusters: map[string]uint32{}}
				for _, p := range c.dst {
					cs.Destinations = append(cs.Destinations, p.String())
				}
				for _, p := range c.src {
					cs.Sources = append(cs.Sources, p.String())
				}
				for _, cw := range c.tcp.clusters {
					cs.Clusters[cw.name] += cw.weight
				}
				if c.tcp.idle > 0 {
					cs.IdleTimeout = c.tcp.idle.String()
				}
				ps.Chains = append(ps.Chains, cs)
			}
		}
		out = append(out, ps)
	}
	return out
}
