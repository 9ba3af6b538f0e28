package gateway

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// DNS clusters (STRICT_DNS, LOGICAL_DNS), as the control plane publishes a
// ServiceEntry resolved by DNS: the cluster's load_assignment names hosts,
// which the gateway resolves itself, as Envoy does. A STRICT_DNS cluster's
// endpoints are every address each name resolves to; a LOGICAL_DNS
// cluster's, the first address of its one name. A new cluster's names are
// resolved while its update is applied (Envoy's warming, bounded by
// dnsWarmTimeout); then one goroutine of the gateway re-resolves every DNS
// cluster's names each dns_refresh_rate (Envoy's default 5s, at least
// dnsMinRefresh), keeping the last answer when a lookup fails.

const (
	dnsDefaultRefresh = 5 * time.Second
	dnsMinRefresh     = 100 * time.Millisecond
	dnsMaxRefresh     = time.Hour
	dnsLookupTimeout  = 2 * time.Second
	dnsWarmTimeout    = 2 * time.Second
	// dnsMaxAddrs bounds the endpoints one name gives a STRICT_DNS cluster.
	dnsMaxAddrs = 64
)

// dnsSpec is a DNS cluster's names (hostSpec.addr is "name:port").
type dnsSpec struct {
	names   []hostSpec
	logical bool
	refresh time.Duration
	family  cluster.Cluster_DnsLookupFamily
}

// pick keeps the addresses family allows, as Envoy's dns_lookup_family:
// AUTO prefers IPv6, V4_PREFERRED IPv4 (each falling back to the other).
func (d *dnsSpec) pick(addrs []netip.Addr) []netip.Addr {
	var v4, v6 []netip.Addr
	for _, a := range addrs {
		if a.Unmap().Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	switch d.family {
	case cluster.Cluster_V4_ONLY:
		return v4
	case cluster.Cluster_V6_ONLY:
		return v6
	case cluster.Cluster_V4_PREFERRED:
		if len(v4) > 0 {
			return v4
		}
		return v6
	case cluster.Cluster_ALL:
		return append(v4, v6...)
	}
	if len(v6) > 0 {
		return v6
	}
	return v4
}

func decodeDNS(c *cluster.Cluster, s *clusterSpec) error {
	names, err := decodeHosts(c.GetLoadAssignment(), "load_assignment")
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fieldErr("load_assignment.endpoints", "a %v cluster needs at least one host", c.GetType())
	}
	d := &dnsSpec{names: names, logical: c.GetType() == cluster.Cluster_LOGICAL_DNS, refresh: dnsDefaultRefresh,
		family: c.GetDnsLookupFamily()}
	if d.logical && len(names) != 1 {
		return fieldErr("load_assignment.endpoints", "a LOGICAL_DNS cluster takes exactly one host, got %d", len(names))
	}
	if r := c.GetDnsRefreshRate(); r != nil {
		t, err := duration(r, "dns_refresh_rate")
		if err != nil {
			return err
		}
		d.refresh = min(max(t, dnsMinRefresh), dnsMaxRefresh)
	}
	s.dns = d
	return nil
}

// lookupFunc resolves a host name to its addresses.
type lookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// dnsResolver holds the last answer per name and runs the refresh loop.
// Its fields are guarded by g.mu, but lookups run without it.
type dnsResolver struct {
	lookup  lookupFunc
	answers map[string][]netip.Addr // by host name
	wake    chan struct{}           // a new DNS cluster: recompute the period
	cancel  context.CancelFunc
	done    chan struct{}
}

// dnsRunner returns the gateway's resolver, starting its loop on first
// use. g.mu held.
func (g *Gateway) dnsRunner() *dnsResolver {
	if g.dns == nil {
		lookup := g.lookup
		if lookup == nil {
			lookup = defaultLookup
		}
		ctx, cancel := context.WithCancel(context.Background())
		g.dns = &dnsResolver{lookup: lookup, answers: map[string][]netip.Addr{}, wake: make(chan struct{}, 1),
			cancel: cancel, done: make(chan struct{})}
		go g.dnsLoop(ctx, g.dns)
	}
	return g.dns
}

// stopDNS ends the refresh loop and waits for it (Shutdown).
func (g *Gateway) stopDNS() {
	g.mu.Lock()
	r := g.dns
	g.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// dnsHosts are spec's endpoints from the resolver's answers; names never
// answered are resolved first, all at once, within dnsWarmTimeout. g.mu
// held (lookups of new names run under it: an update is applied with its
// DNS clusters warm, as Envoy warms them).
func (g *Gateway) dnsHosts(d *dnsSpec) []hostSpec {
	r := g.dnsRunner()
	var missing []string
	for _, n := range d.names {
		if host, _, _ := net.SplitHostPort(n.addr); r.answers[host] == nil && !slices.Contains(missing, host) {
			missing = append(missing, host)
		}
	}
	if len(missing) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), dnsWarmTimeout)
		for host, addrs := range resolveAll(ctx, r.lookup, missing) {
			r.answers[host] = addrs
		}
		cancel()
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return resolvedHosts(d, r.answers)
}

// resolvedHosts maps a DNS cluster's names to endpoints by answers.
func resolvedHosts(d *dnsSpec, answers map[string][]netip.Addr) []hostSpec {
	var out []hostSpec
	seen := map[string]bool{}
	for _, n := range d.names {
		host, port, _ := net.SplitHostPort(n.addr)
		addrs := answers[host]
		if _, err := netip.ParseAddr(host); err != nil {
			addrs = d.pick(addrs)
		}
		if d.logical && len(addrs) > 1 {
			addrs = addrs[:1]
		}
		for _, a := range addrs {
			h := n
			h.addr = net.JoinHostPort(a.Unmap().String(), port)
			if !seen[h.addr] {
				seen[h.addr] = true
				out = append(out, h)
			}
		}
	}
	return out
}

// resolveAll looks the hosts up in parallel; a host whose lookup failed is
// left out (the caller keeps its last answer).
func resolveAll(ctx context.Context, lookup lookupFunc, hosts []string) map[string][]netip.Addr {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := make(map[string][]netip.Addr, len(hosts))
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, dnsLookupTimeout)
			defer cancel()
			var addrs []netip.Addr
			if ip, err := netip.ParseAddr(h); err == nil {
				addrs = []netip.Addr{ip}
			} else if addrs, err = lookup(lctx, h); err != nil || len(addrs) == 0 {
				return
			}
			if len(addrs) > dnsMaxAddrs {
				addrs = addrs[:dnsMaxAddrs]
			}
			mu.Lock()
			out[h] = addrs
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// dnsLoop re-resolves the names of the DNS clusters in force, at the
// shortest refresh period among them, and moves each cluster whose
// endpoints changed to its new ones.
func (g *Gateway) dnsLoop(ctx context.Context, r *dnsResolver) {
	defer close(r.done)
	timer := time.NewTimer(dnsDefaultRefresh)
	defer timer.Stop()
	for {
		g.mu.Lock()
		period, hosts := g.dnsNames()
		g.mu.Unlock()
		timer.Reset(period)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			if !timer.Stop() {
				<-timer.C
			}
			continue
		case <-timer.C:
		}
		if len(hosts) == 0 {
			continue
		}
		answers := resolveAll(ctx, r.lookup, hosts)
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		for h, a := range answers {
			r.answers[h] = a
		}
		// The clusters as they are now: an update may have come meanwhile.
		_, named := g.dnsNames()
		for host := range r.answers {
			if !slices.Contains(named, host) {
				delete(r.answers, host) // no cluster names it any more
			}
		}
		for name, c := range g.clusters {
			if c.spec.dns == nil {
				continue
			}
			next := resolvedHosts(c.spec.dns, r.answers)
			if sameAddrs(c.hosts, next) {
				continue
			}
			if err := c.setHosts(next, &g.pools, g.metrics); err != nil {
				g.log.Error("gateway: DNS cluster", "cluster", name, "error", err)
			} else {
				g.log.Debug("gateway: DNS cluster re-resolved", "cluster", name, "endpoints", strconv.Itoa(len(next)))
			}
		}
		g.mu.Unlock()
	}
}

// dnsNames returns the shortest refresh period of the DNS clusters in
// force and the names they resolve. g.mu held.
func (g *Gateway) dnsNames() (time.Duration, []string) {
	period, hosts := dnsMaxRefresh, []string(nil)
	for _, c := range g.clusters {
		if d := c.spec.dns; d != nil {
			period = min(period, d.refresh)
			for _, n := range d.names {
				if h, _, _ := net.SplitHostPort(n.addr); !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
	}
	return period, hosts
}

func sameAddrs(have map[string]hostSpec, next []hostSpec) bool {
	if len(have) != len(next) {
		return false
	}
	for _, h := range next {
		if _, ok := have[h.addr]; !ok {
			return false
		}
	}
	return true
}
