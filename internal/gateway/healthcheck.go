package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextant-mesh/sextant/internal/probe"
)

// healthChecker runs a cluster's active health check (Envoy's
// health_checks) with Envoy's semantics: each endpoint is probed by its own
// goroutine, at most maxProbes probes of the whole gateway at once (the
// probes' semaphore); an endpoint takes calls only while EDS does not mark
// it unhealthy and the check has not failed it. The checker belongs to one
// clusterRT: setHosts adds and removes endpoints, retire stops it all.
type healthChecker struct {
	spec    *healthCheckSpec
	cluster string
	c       *clusterRT
	probes  *probeRunner
	// passed and failed count the checks (sextant_gateway_health_checks_total).
	passed, failed prometheus.Counter

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// traffic is closed by the cluster's first call: checks then move from
	// no_traffic_interval to interval (a wait in progress is cut short).
	traffic     chan struct{}
	trafficOnce sync.Once

	// https is the TLS cluster's HTTP check client (tlsClient).
	tlsOnce sync.Once
	https   *http.Client

	// mu guards hosts and every hcHost's fields, and serializes the writes
	// of health to the subset balancer. Lock order: mu, then the
	// balancer's own.
	mu    sync.Mutex
	hosts map[string]*hcHost
}

// hcHost is one endpoint's check state (Envoy's host health flags and
// session counters). Guarded by healthChecker.mu.
type hcHost struct {
	addr    string
	cancel  context.CancelFunc
	checked chan struct{} // closed after the first check
	eds     bool          // EDS does not mark it unhealthy
	failed  bool          // FAILED_ACTIVE_HC
	pending bool          // not checked yet (PENDING_ACTIVE_HC)
	// edge: the last check changed the state (Envoy's edge intervals).
	edge                     bool
	numHealthy, numUnhealthy uint32
	checks, failures         uint64
	last                     time.Time
	output                   string
}

// unejecter is outlier ejection that an active health check can end
// (balancer's ejection policy). Called on a check's goroutine.
type unejecter interface {
	Uneject(id string) bool
}

// probeRunner is the gateway's share of probing: one Prober (connections
// kept between probes of an endpoint) and a bound on probes in flight.
type probeRunner struct {
	p         *probe.Prober
	sem       chan struct{}
	lastSweep atomic.Int64
}

// maxProbes bounds the health-check probes the gateway runs at once: a
// thousand endpoints checked every second do not become a thousand
// concurrent connects.
const maxProbes = 64

func newProbeRunner() *probeRunner {
	return &probeRunner{p: probe.New(), sem: make(chan struct{}, maxProbes)}
}

// sweep lets the prober close its idle gRPC connections, at most once a
// minute, from whichever check goroutine gets there.
func (r *probeRunner) sweep(now time.Time) {
	last := r.lastSweep.Load()
	if now.UnixNano()-last < int64(time.Minute) || !r.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	r.p.Sweep(now)
}

func newHealthChecker(spec *healthCheckSpec, c *clusterRT, probes *probeRunner, m *metricsSet) *healthChecker {
	ctx, cancel := context.WithCancel(context.Background())
	return &healthChecker{spec: spec, cluster: c.name, c: c, probes: probes, ctx: ctx, cancel: cancel,
		passed: m.hcChecks.WithLabelValues(c.name, "success"), failed: m.hcChecks.WithLabelValues(c.name, "failure"),
		traffic: make(chan struct{}), hosts: map[string]*hcHost{}}
}

// sawTraffic notes a call to the cluster. Any goroutine; cheap after the
// first.
func (hc *healthChecker) sawTraffic() {
	select {
	case <-hc.traffic:
	default:
		hc.trafficOnce.Do(func() { close(hc.traffic) })
	}
}

// setEDS records EDS's health of addr (adding it, failed and pending, if it
// is new, as Envoy adds hosts to a checked cluster) and writes the health
// the balancer must use. The host must be in the balancer. Config
// goroutine; start the check of a new host with start.
func (hc *healthChecker) setEDS(addr string, eds bool) (isNew bool, err error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	h := hc.hosts[addr]
	if h == nil {
		h = &hcHost{addr: addr, failed: true, pending: true, checked: make(chan struct{})}
		hc.hosts[addr] = h
		isNew = true
	}
	h.eds = eds
	return isNew, hc.c.lb.SetHealth(addr, h.eds && !h.failed)
}

// start runs addr's check until it is removed or the checker stops.
func (hc *healthChecker) start(addr string) {
	hc.mu.Lock()
	h := hc.hosts[addr]
	if h == nil || h.cancel != nil {
		hc.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(hc.ctx)
	h.cancel = cancel
	hc.mu.Unlock()
	hc.wg.Add(1)
	go func() {
		defer hc.wg.Done()
		hc.run(ctx, h)
	}()
}

// remove stops addr's check (the endpoint left EDS: Sextant's registry is
// the authority on membership, as with Envoy's
// ignore_health_on_host_removal). Config goroutine, before the host leaves
// the balancer.
func (hc *healthChecker) remove(addr string) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if h := hc.hosts[addr]; h != nil {
		if h.cancel != nil {
			h.cancel()
		}
		delete(hc.hosts, addr)
	}
}

// stop ends every check and waits for their goroutines.
func (hc *healthChecker) stop() {
	hc.cancel()
	hc.wg.Wait()
	if hc.https != nil {
		hc.https.CloseIdleConnections()
	}
}

// warm waits, until t fires, for every host to have had its first check,
// as Envoy warms a new cluster before it takes calls: a cluster replaced by
// a config change does not answer 503 while its hosts are pending.
func (hc *healthChecker) warm(t <-chan time.Time) bool {
	hc.mu.Lock()
	var waits []chan struct{}
	for _, h := range hc.hosts {
		waits = append(waits, h.checked)
	}
	hc.mu.Unlock()
	for _, w := range waits {
		select {
		case <-w:
		case <-t:
			return false
		case <-hc.ctx.Done():
			return true
		}
	}
	return true
}

// warmAll warms new clusters' checkers together, under one deadline: the
// longest initial_jitter + timeout of them, and a little.
func warmAll(hcs []*healthChecker) {
	if len(hcs) == 0 {
		return
	}
	var d time.Duration
	for _, hc := range hcs {
		d = max(d, hc.spec.initialJitter+hc.spec.timeout)
	}
	t := time.NewTimer(d + 100*time.Millisecond)
	defer t.Stop()
	for _, hc := range hcs {
		if !hc.warm(t.C) {
			return
		}
	}
}

// run is one host's check loop: check, wait, check again.
func (hc *healthChecker) run(ctx context.Context, h *hcHost) {
	if j := hc.spec.initialJitter; j > 0 {
		if !hc.sleep(ctx, rand.N(j), 0) {
			return
		}
	}
	for {
		select {
		case hc.probes.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		ok, network, out := hc.check(ctx, h.addr)
		<-hc.probes.sem
		if ctx.Err() != nil {
			return // stopped mid-probe: the result says nothing of the host
		}
		hc.probes.sweep(time.Now())
		hc.mu.Lock()
		if hc.hosts[h.addr] != h {
			hc.mu.Unlock()
			return
		}
		hc.apply(h, ok, network, out)
		wait, noTraffic := hc.nextInterval(h)
		hc.mu.Unlock()
		if !hc.sleep(ctx, wait, noTraffic) {
			return
		}
	}
}

// sleep waits d, or returns early once the cluster sees its first call if
// d is a no-traffic interval (the wait then ends interval after it began).
// False: stopped.
func (hc *healthChecker) sleep(ctx context.Context, d, noTraffic time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	traffic := hc.traffic
	if noTraffic == 0 {
		traffic = nil
	}
	began := time.Now()
	for {
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		case <-traffic:
			traffic = nil
			left := noTraffic - time.Since(began)
			if left <= 0 {
				return true
			}
			t.Reset(left)
		}
	}
}

// check probes addr once. ok: healthy; network: a failure without an answer
// (connect refused, reset, timeout), which counts towards
// unhealthy_threshold, while an answer that is not healthy (a status not
// expected and not retriable, a gRPC NOT_SERVING) fails the host at once,
// as in Envoy.
func (hc *healthChecker) check(ctx context.Context, addr string) (ok, network bool, out string) {
	s := hc.spec
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ut := hc.c.tls // a TLS cluster: checks use its handshake, as Envoy's use its transport socket
	switch s.kind {
	case hcTCP:
		r := hc.probes.p.TCP(ctx, addr)
		return r.Status == probe.Passing, true, r.Output
	case hcGRPC:
		var r probe.Result
		if ut != nil {
			r = hc.probes.p.GRPCVia(ctx, addr, s.service, fmt.Sprintf("%p", ut), func(ctx context.Context, a string) (net.Conn, error) {
				return ut.dial(ctx, &net.Dialer{Timeout: hc.c.spec.connect}, a, true)
			})
		} else {
			r = hc.probes.p.GRPC(ctx, addr, s.service, false)
		}
		return r.Status == probe.Passing, !r.Answered, r.Output
	}
	host := s.host
	if host == "" {
		// Envoy's default is the cluster's name; Sextant's cluster names
		// ("default/orders:8080") are no host names: the address then.
		host = hc.cluster
		if !validHostHeader(host) {
			host = addr
		}
	}
	hdr := http.Header{"Host": {host}}
	for _, kv := range s.headers {
		hdr.Add(kv[0], kv[1])
	}
	for _, k := range s.remove {
		hdr.Del(k)
	}
	req := probe.HTTP{URL: "http://" + addr + s.path, Method: s.method, Header: hdr}
	if ut != nil {
		req.URL, req.Client = "https://"+addr+s.path, hc.tlsClient()
	}
	r := hc.probes.p.HTTP(ctx, req)
	if !r.Answered {
		return false, true, r.Output
	}
	if inRanges(s.expected, r.Code) {
		return true, false, r.Output
	}
	return false, inRanges(s.retriable, r.Code), r.Output
}

// tlsClient is the HTTP client of a TLS cluster's checks: its connections
// made with the cluster's own handshake (SNI, CA, client certificate),
// kept alive between checks, closed when the checker stops.
func (hc *healthChecker) tlsClient() *http.Client {
	hc.tlsOnce.Do(func() {
		ut, connect := hc.c.tls, hc.c.spec.connect
		hc.https = &http.Client{
			Transport: &http.Transport{
				DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
					return ut.dial(ctx, &net.Dialer{Timeout: connect}, addr, false)
				},
				MaxIdleConnsPerHost: 2,
				IdleConnTimeout:     2 * time.Minute,
				DisableCompression:  true,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
	return hc.https
}

// apply moves h's state by one result as Envoy's health check sessions do,
// and writes its health to the balancer when it changed. hc.mu held.
func (hc *healthChecker) apply(h *hcHost, ok, network bool, out string) {
	s := hc.spec
	first := h.pending
	if first {
		// checked closes once the health is in the balancer (below):
		// warm lets the cluster take calls as it closes.
		h.pending = false
		defer close(h.checked)
	}
	h.checks++
	h.last, h.output = time.Now(), out
	if ok {
		hc.passed.Inc()
	} else {
		hc.failed.Inc()
	}
	was := h.failed
	if ok {
		h.numUnhealthy = 0
		if h.failed {
			// The first check of a host bypasses healthy_threshold.
			if h.numHealthy++; first || h.numHealthy >= s.healthyThreshold {
				h.failed, h.numHealthy = false, 0
			}
		}
	} else {
		h.failures++
		h.numHealthy = 0
		if !h.failed {
			if h.numUnhealthy++; !network || h.numUnhealthy >= s.unhealthyThreshold {
				h.failed, h.numUnhealthy = true, 0
			}
		}
	}
	if ok {
		// A passing check ends an outlier ejection, as Envoy's
		// successful_active_health_check_uneject_host (default true).
		if u, isU := hc.c.policy.(unejecter); isU {
			u.Uneject(h.addr)
		}
	}
	h.edge = was != h.failed
	if h.edge {
		// The host is in the balancer while it is in hosts (setHosts
		// removes it from both, in that order, under mu).
		_ = hc.c.lb.SetHealth(h.addr, h.eds && !h.failed)
	}
}

// nextInterval is Envoy's choice of the wait before the next check, with
// jitter; noTraffic is the base when it is a no-traffic interval. hc.mu held.
func (hc *healthChecker) nextInterval(h *hcHost) (wait, noTraffic time.Duration) {
	s := hc.spec
	base := s.interval
	select {
	case <-hc.traffic:
		switch {
		case h.edge && !h.failed && s.healthyEdge > 0:
			base = s.healthyEdge
		case h.edge && h.failed && s.unhealthyEdge > 0:
			base = s.unhealthyEdge
		case h.failed && s.unhealthy > 0:
			base = s.unhealthy
		}
	default:
		base = s.noTraffic
		if !h.failed && s.noTrafficHealthy > 0 {
			base = s.noTrafficHealthy
		}
		noTraffic = base
	}
	wait = base
	if p := s.jitterPercent; p > 0 {
		if j := int64(base) * int64(p) / 100; j > 0 {
			wait += time.Duration(rand.Int64N(j))
		}
	}
	if j := s.intervalJitter; j > 0 {
		wait += rand.N(j)
	}
	if noTraffic > 0 {
		// Once traffic comes, the rest of the wait is interval's.
		noTraffic = s.interval
	}
	return wait, noTraffic
}

// hostHealth is one endpoint's health as /v1/clusters shows it.
type hostHealth struct {
	Address     string    `json:"address"`
	Healthy     bool      `json:"healthy"`
	HealthFlags string    `json:"health_flags"`
	EDSHealthy  bool      `json:"eds_healthy"`
	Checks      uint64    `json:"checks,omitempty"`
	Failures    uint64    `json:"failures,omitempty"`
	LastCheck   time.Time `json:"last_check,omitzero"`
	Output      string    `json:"output,omitempty"`
}

// flags are Envoy's /clusters health_flags: "healthy", or the reasons a
// host takes no calls ("/failed_active_hc/failed_eds_health").
func flags(eds, failed, pending bool) string {
	var f string
	if failed {
		f += "/failed_active_hc"
	}
	if pending {
		f += "/pending_active_hc"
	}
	if !eds {
		f += "/failed_eds_health"
	}
	if f == "" {
		return "healthy"
	}
	return f
}

// snapshot returns every host's health, by address.
func (hc *healthChecker) snapshot() []hostHealth {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	out := make([]hostHealth, 0, len(hc.hosts))
	for _, h := range hc.hosts {
		out = append(out, hostHealth{Address: h.addr, Healthy: h.eds && !h.failed, HealthFlags: flags(h.eds, h.failed, h.pending),
			EDSHealthy: h.eds, Checks: h.checks, Failures: h.failures, LastCheck: h.last, Output: h.output})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

// noteCall tells the cluster's checker that the cluster takes calls. On the
// call's goroutine.
func (c *clusterRT) noteCall() {
	if c.hc != nil {
		c.hc.sawTraffic()
	}
}

// probeRunner returns the gateway's probe runner, made on first use.
// g.mu held.
func (g *Gateway) probeRunner() *probeRunner {
	if g.probes == nil {
		g.probes = newProbeRunner()
	}
	return g.probes
}

// stopHealthChecks ends every cluster's checks and closes the probes'
// connections (Shutdown).
func (g *Gateway) stopHealthChecks() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.clusters {
		if c.hc != nil {
			c.hc.stop()
		}
	}
	if g.probes != nil {
		g.probes.p.Close()
	}
}

// clusterHealth is one cluster in /v1/clusters.
type clusterHealth struct {
	Name        string       `json:"name"`
	HealthCheck string       `json:"health_check,omitempty"`
	Endpoints   []hostHealth `json:"endpoints"`
}

// clustersHealth lists every cluster's endpoints with their health, as
// Envoy's /clusters shows health_flags.
func (g *Gateway) clustersHealth() []clusterHealth {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]clusterHealth, 0, len(g.clusters))
	for name, c := range g.clusters {
		ch := clusterHealth{Name: name}
		if c.hc != nil {
			ch.HealthCheck = c.hc.spec.describe()
			ch.Endpoints = c.hc.snapshot()
		} else {
			for addr, h := range c.hosts {
				ch.Endpoints = append(ch.Endpoints, hostHealth{Address: addr, Healthy: h.healthy, EDSHealthy: h.healthy,
					HealthFlags: flags(h.healthy, false, false)})
			}
			sort.Slice(ch.Endpoints, func(i, j int) bool { return ch.Endpoints[i].Address < ch.Endpoints[j].Address })
		}
		if ch.Endpoints == nil {
			ch.Endpoints = []hostHealth{}
		}
		out = append(out, ch)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// healthCollector exposes the checks' state at scrape time.
type healthCollector struct{ g *Gateway }

var descHCFailed = prometheus.NewDesc("sextant_gateway_endpoint_health_check_failed",
	"1 while the cluster's active health check keeps the endpoint out (failed or not yet checked), else 0.", []string{"cluster", "endpoint"}, nil)

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descHCFailed }

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cl := range c.g.clustersHealth() {
		if cl.HealthCheck == "" {
			continue
		}
		for _, e := range cl.Endpoints {
			v := 0.0
			if strings.Contains(e.HealthFlags, "active_hc") {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descHCFailed, prometheus.GaugeValue, v, cl.Name, e.Address)
		}
	}
}
