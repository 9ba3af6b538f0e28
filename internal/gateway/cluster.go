package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// upstream sends one request to one endpoint over a pooled connection.
type upstream interface {
	// do sends req and fills resp, giving up at deadline. Any goroutine;
	// blocks for the call.
	// do sends req and reads the answer into resp, by deadline (zero:
	// none), giving up when the stream moves no byte for idle (0: never).
	// now is the time the caller read as it called (a clock read less).
	// ph, if not nil, may take the answer's head instead of resp's header
	// (h1pass.go; ph.ok says whether it did).
	do(req *fasthttp.Request, resp *fasthttp.Response, ph *passHead, now, deadline time.Time, idle time.Duration) error
	// closeIdle closes the pooled idle connections (the endpoint left).
	closeIdle()
}

// h1Upstream is HTTP/1.1 with keep-alive connections: an upPool with
// roundTrip (upstream.go), which reads and writes on the calling goroutine
// (no per-connection goroutines, no channel hand-offs: the cost that makes
// net/http's Transport slow as a proxy client).
type h1Upstream struct{ pool *upPool }

func newH1Upstream(addr string, connect time.Duration, ut *upstreamTLS, opts connOpts) *h1Upstream {
	d := opts.netDialer(connect) // (tcp_keepalive)
	plain := func(a string) (net.Conn, error) { return fasthttp.DialTimeout(a, connect) }
	if opts.keepalive {
		plain = func(a string) (net.Conn, error) { return d.Dial("tcp", a) }
	}
	// A plaintext connection is an upConn (upconn.go); one that
	// opts.dialer wraps (max_requests_per_connection,
	// max_connection_duration) goes the usual way.
	dial := func(a string) (net.Conn, error) {
		c, err := plain(a)
		if err != nil {
			return nil, err
		}
		return newUpConn(c), nil
	}
	if ut != nil {
		dial = func(a string) (net.Conn, error) { return ut.dial(context.Background(), d, a, false) }
	}
	return &h1Upstream{pool: newUpPool(addr, opts.dialer(dial), 4096, time.Second, opts.idleTimeout())}
}

func (u *h1Upstream) do(req *fasthttp.Request, resp *fasthttp.Response, ph *passHead, now, deadline time.Time, idle time.Duration) error {
	retry, err := roundTrip(u.pool, req, resp, ph, now, deadline, idle)
	// One more try only for an idempotent request (and a body that can be
	// sent again) that met a pooled connection the upstream had closed
	// (nothing was received): the race every keep-alive client has. Other
	// failures go to the route's retry policy.
	if err != nil && retry && !req.IsBodyStream() && (req.Header.IsGet() || req.Header.IsHead() || req.Header.IsPut()) &&
		(errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed)) {
		resp.Reset()
		_, err = roundTrip(u.pool, req, resp, ph, time.Now(), deadline, idle)
	}
	if errors.Is(err, io.EOF) {
		err = fasthttp.ErrConnectionClosed
	}
	return err
}

func (u *h1Upstream) closeIdle() { u.pool.closeIdle() }

// h2cUpstream is HTTP/2 through the gateway's own client (h2client.go),
// for clusters that ask for it: over cleartext (prior knowledge), or over
// TLS (ALPN h2) for a cluster with a TLS transport socket.
type h2cUpstream struct {
	addr   string
	scheme string // "http" (h2c) or "https"
	tr     *h2Client
}

func newH2CUpstream(addr string, connect time.Duration, ut *upstreamTLS, opts connOpts) *h2cUpstream {
	d := opts.netDialer(connect) // (tcp_keepalive)
	if ut == nil {
		dial := func(ctx context.Context) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			bc := newBatchConn(c) // batchconn.go: a unary call's frames in one write
			bc.start()
			return bc, nil
		}
		return &h2cUpstream{addr: addr, scheme: "http", tr: newH2Client("http", dial, opts)}
	}
	// The handshake is the gateway's own, with the cluster's current
	// config (rotated secrets apply to new connections).
	dial := func(ctx context.Context) (net.Conn, error) { return ut.dial(ctx, d, addr, true) }
	return &h2cUpstream{addr: addr, scheme: "https", tr: newH2Client("https", dial, opts)}
}

func (u *h2cUpstream) do(req *fasthttp.Request, resp *fasthttp.Response, ph *passHead, _, deadline time.Time, idle time.Duration) error {
	if ph != nil && ph.req.ok {
		ph.req.apply(&req.Header) // the edits made in the head it sends
	}
	var body io.Reader = http.NoBody
	cl := int64(0)
	if req.IsBodyStream() {
		body, cl = req.BodyStream(), int64(req.Header.ContentLength())
	} else if b := req.Body(); len(b) > 0 {
		body, cl = bytes.NewReader(b), int64(len(b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	if !deadline.IsZero() {
		cancel()
		ctx, cancel = context.WithDeadline(context.Background(), deadline)
	}
	// The stream idle timeout cancels the stream once no byte moved for
	// idle: armed until the answer's head, then re-armed by each read of
	// its body (h2Body).
	var watch *idleWatch
	if idle > 0 {
		watch = newIdleWatch(idle, cancel)
		if req.IsBodyStream() {
			body = touchReader{r: body, w: watch}
		}
	}
	var rc io.ReadCloser
	if body != http.NoBody {
		rc = io.NopCloser(body)
	}
	hres, err := u.tr.roundTripFast(ctx, time.Time{}, &req.Header, false, cl, rc) // cl -1: a chunked body
	if err != nil {
		watch.stop()
		cancel()
		if (!deadline.IsZero() && !time.Now().Before(deadline)) || watch.hasFired() {
			return fasthttp.ErrTimeout
		}
		return err
	}
	watch.touch()
	resp.SetStatusCode(hres.Status)
	for _, f := range hres.Fields {
		resp.Header.Add(canonicalHeader(f.Name), f.Value)
	}
	if cl := hres.ContentLength; cl >= 0 && cl <= bufferedResponseMax {
		// Small and of known length: read whole (the stream ends at once).
		defer cancel()
		defer watch.stop()
		defer hres.Body.Close()
		buf := bodyBufs.Get().(*[]byte)
		defer bodyBufs.Put(buf)
		if int64(cap(*buf)) < cl {
			*buf = make([]byte, cl)
		}
		b := (*buf)[:cl]
		if _, err := io.ReadFull(hres.Body, b); err != nil {
			if (!deadline.IsZero() && !time.Now().Before(deadline)) || watch.hasFired() {
				return fasthttp.ErrTimeout
			}
			return fmt.Errorf("read body: %w", err)
		}
		resp.SetBody(b)
		return nil
	}
	n := -1
	if hres.ContentLength >= 0 && hres.ContentLength <= math.MaxInt32 {
		n = int(hres.ContentLength)
	}
	resp.SetBodyStream(&h2Body{res: hres, cancel: cancel, dst: &resp.Header, deadline: deadline, watch: watch}, n)
	return nil
}

// h2Body is an HTTP/2 answer's body read into a fasthttp response: its
// trailers join the response's at the end; closing it ends the stream.
type h2Body struct {
	res      *h2Answer
	cancel   context.CancelFunc
	dst      *fasthttp.ResponseHeader
	deadline time.Time
	watch    *idleWatch // nil: no stream idle timeout
	tail     streamTail
}

func (b *h2Body) Read(p []byte) (int, error) {
	n, err := b.res.Body.Read(p)
	if n > 0 {
		b.watch.touch()
	}
	if err == io.EOF {
		tr := b.res.Trailers
		for i, f := range tr {
			if slices.ContainsFunc(tr[:i], func(p hpack.HeaderField) bool { return p.Name == f.Name }) {
				continue // added with the name's first
			}
			k := canonicalHeader(f.Name)
			if b.dst.AddTrailer(k) != nil {
				continue
			}
			for _, g := range tr[i:] {
				if g.Name == f.Name {
					b.dst.Add(k, g.Value)
				}
			}
		}
	} else if err != nil && ((!b.deadline.IsZero() && !time.Now().Before(b.deadline)) || b.watch.hasFired()) {
		err = fasthttp.ErrTimeout
	}
	b.tail.read(n, err)
	return n, err
}

func (b *h2Body) CloseWithError(error) error {
	if b.cancel == nil {
		return nil
	}
	err := b.res.Body.Close()
	b.watch.stop()
	b.cancel()
	b.cancel = nil
	b.tail.end(b.dst)
	return err
}

func (u *h2cUpstream) closeIdle() { u.tr.CloseIdleConnections() }

// pools shares one upstream per endpoint address and protocol across
// clusters and config versions, so that a config change keeps connections.
// Only the config goroutine (Gateway.Update) touches it.
type pools struct {
	mu sync.Mutex
	m  map[poolKey]*poolRef
}

type poolKey struct {
	addr string
	h2c  bool
	tls  *upstreamTLS // a TLS cluster's connections are its own
	opts connOpts     // so are those of per-connection limits (circuit.go)
}

type poolRef struct {
	up   upstream
	refs int
}

func (p *pools) acquire(addr string, h2c bool, connect time.Duration, ut *upstreamTLS, opts connOpts) upstream {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[poolKey]*poolRef{}
	}
	k := poolKey{addr, h2c, ut, opts}
	r := p.m[k]
	if r == nil {
		r = &poolRef{}
		if h2c {
			r.up = newH2CUpstream(addr, connect, ut, opts)
		} else {
			r.up = newH1Upstream(addr, connect, ut, opts)
		}
		p.m[k] = r
	}
	r.refs++
	return r.up
}

// release drops one reference; the last one closes the idle connections
// (calls in flight finish on theirs).
func (p *pools) release(addr string, h2c bool, ut *upstreamTLS, opts connOpts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := poolKey{addr, h2c, ut, opts}
	if r := p.m[k]; r != nil {
		if r.refs--; r.refs <= 0 {
			delete(p.m, k)
			r.up.closeIdle()
		}
	}
}

func (p *pools) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, r := range p.m {
		r.up.closeIdle()
		delete(p.m, k)
	}
}

// endpoint is one upstream host of a cluster, as calls see it.
type endpoint struct {
	addr string
	up   upstream
	m    *endpointMetrics
}

// clusterRT is a cluster at run time: its balancer, endpoints and counters.
// The config goroutine builds and updates it; calls read it.
type clusterRT struct {
	spec   *clusterSpec
	name   string
	policy balancer.Policy
	lb     *levelLB
	useMD  bool // the cluster has subset selectors: pass request metadata
	eps    atomic.Pointer[map[string]*endpoint]
	m      *clusterMetrics
	// tls is the cluster's handshake config (nil: plaintext), swapped when
	// its secrets change.
	tls *upstreamTLS

	active  atomic.Int64 // calls in flight, for the retry budget
	retries atomic.Int64 // retries in flight
	// cb is the cluster's circuit breakers (circuit.go); nil: no limits.
	cb *circuit

	// hc runs the cluster's active health check (nil: none); it owns the
	// health written to lb for its hosts (healthcheck.go).
	hc *healthChecker

	// Config goroutine only.
	hosts map[string]hostSpec
}

// newClusterRT builds a cluster with no endpoints; policy may be a policy
// kept from the cluster's previous version (learned state survives).
func newClusterRT(spec *clusterSpec, policy balancer.Policy, m *clusterMetrics) (*clusterRT, error) {
	cfg := subset.Config{FallbackPolicy: subset.AnyEndpoint}
	useMD := false
	if spec.subset != nil {
		cfg = *spec.subset
		useMD = len(cfg.Selectors) > 0
	}
	lb, err := newLevelLB(cfg, policy, spec.localityWeighted)
	if err != nil {
		return nil, fmt.Errorf("gateway: cluster %q: %w", spec.name, err)
	}
	c := &clusterRT{spec: spec, name: spec.name, policy: policy, lb: lb, useMD: useMD, m: m, hosts: map[string]hostSpec{},
		cb: newCircuit(spec, m)}
	if spec.tls != nil {
		c.tls = &upstreamTLS{}
	}
	empty := map[string]*endpoint{}
	c.eps.Store(&empty)
	return c, nil
}

// newPolicy builds the cluster's balancer policy with its outlier ejection.
func newPolicy(spec *clusterSpec) (balancer.Policy, error) {
	opts := []balancer.Option{balancer.WithActiveRequestBias(spec.policy.bias), balancer.WithDecay(spec.policy.decay),
		balancer.WithRingSize(spec.policy.ring)}
	if spec.eject != nil {
		opts = append(opts, balancer.WithOutlierEjection(*spec.eject))
	}
	p, err := balancer.New(spec.policy.name, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: cluster %q: %w", spec.name, err)
	}
	return p, nil
}

// setHosts moves the cluster to hosts: adds, replaces and removes hosts in
// the subset balancer and acquires or releases their connection pools.
// Config goroutine only.
func (c *clusterRT) setHosts(hosts []hostSpec, p *pools, mf *metricsSet) error {
	next := make(map[string]hostSpec, len(hosts))
	for _, h := range hosts {
		next[h.addr] = h
	}
	old := *c.eps.Load()
	eps := make(map[string]*endpoint, len(next))
	var upsert []*subset.Host
	var places []hostPlace
	var health []hostSpec
	for addr, h := range next {
		prev, had := c.hosts[addr]
		if had {
			eps[addr] = old[addr]
		} else {
			eps[addr] = &endpoint{addr: addr, up: p.acquire(addr, c.spec.h2c, c.spec.connect, c.tls, c.spec.conn),
				m: mf.endpoint(c.name, addr)}
		}
		if !had || prev.weight != h.weight || prev.priority != h.priority || prev.locality != h.locality || prev.locWeight != h.locWeight ||
			!prev.labels.Equal(h.labels) || !listsEqual(prev.lists, h.lists) {
			upsert = append(upsert, &subset.Host{ID: addr, Addr: addr, Weight: h.weight, Labels: h.labels, Lists: h.lists})
			places = append(places, hostPlace{level: h.priority, loc: h.locality, weight: h.locWeight})
		}
		if !had || prev.healthy != h.healthy {
			health = append(health, h)
		}
	}
	var gone []string
	for addr := range c.hosts {
		if _, ok := next[addr]; !ok {
			gone = append(gone, addr)
		}
	}
	// Every subset's picker comes from the one policy: keep the learned
	// state of every endpoint of the cluster, not only of the last subset
	// built (balancer.Retainer).
	if r, ok := c.policy.(balancer.Retainer); ok {
		ids := make([]string, 0, len(next))
		for addr := range next {
			ids = append(ids, addr)
		}
		r.Retain(ids)
	}
	// Publish the endpoints before the balancer can pick them, and keep
	// the removed ones until it no longer does: a pick in between would
	// find no endpoint.
	if len(gone) > 0 {
		both := maps.Clone(eps)
		for _, addr := range gone {
			both[addr] = old[addr]
		}
		c.eps.Store(&both)
	} else {
		c.eps.Store(&eps)
	}
	if len(upsert) > 0 {
		if err := c.lb.upsert(upsert, places); err != nil {
			return fmt.Errorf("gateway: cluster %q: %w", c.name, err)
		}
	}
	var checks []string
	for _, h := range health {
		if c.hc != nil {
			// EDS health and the active check's, together.
			isNew, err := c.hc.setEDS(h.addr, h.healthy)
			if err != nil {
				return fmt.Errorf("gateway: cluster %q: %w", c.name, err)
			}
			if isNew {
				checks = append(checks, h.addr)
			}
			continue
		}
		if err := c.lb.SetHealth(h.addr, h.healthy); err != nil {
			return fmt.Errorf("gateway: cluster %q: %w", c.name, err)
		}
	}
	for _, addr := range checks {
		c.hc.start(addr)
	}
	if len(gone) > 0 {
		if c.hc != nil {
			for _, addr := range gone {
				c.hc.remove(addr)
			}
		}
		c.lb.Remove(gone...)
		c.eps.Store(&eps)
		for _, addr := range gone {
			p.release(addr, c.spec.h2c, c.tls, c.spec.conn)
			mf.forgetEndpoint(c.name, addr)
		}
	}
	c.hosts = next
	return nil
}

// retire releases every pool of a cluster that a config change replaced.
func (c *clusterRT) retire(p *pools) {
	if c.hc != nil {
		c.hc.stop()
	}
	for addr := range c.hosts {
		p.release(addr, c.spec.h2c, c.tls, c.spec.conn)
	}
	c.hosts = nil
}

func listsEqual(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

// endpointFor returns the endpoint a pick named.
func (c *clusterRT) endpointFor(addr string) *endpoint { return (*c.eps.Load())[addr] }

// allowRetry takes a retry permit of the cluster's retry budget (Envoy's
// retry_budget: retries in flight at most budget% of active calls, and
// always at least min). The caller returns it with c.retries.Add(-1).
func (c *clusterRT) allowRetry() bool {
	b := c.spec.budget
	limit := max(int64(b.min), int64(float64(c.active.Load())*b.percent/100))
	if c.retries.Add(1) > limit {
		c.retries.Add(-1)
		c.m.overflow[overflowRetries].Inc()
		return false
	}
	return true
}
