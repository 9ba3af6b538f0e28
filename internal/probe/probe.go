// Package probe asks an endpoint whether it is healthy, once: an HTTP
// request (2xx passing, 429 warning, anything else critical, as Consul
// judges), a TCP connect, or a gRPC grpc.health.v1 Check. It owns the
// transports and the gRPC connections that probes reuse, and nothing of
// scheduling, thresholds or state: the registry's active checks
// (internal/healthcheck) and the gateway's health checks build on it.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Status is a probe's verdict, in Consul's terms.
type Status uint8

// The verdicts.
const (
	Passing Status = iota
	Warning
	Critical
)

func (s Status) String() string {
	switch s {
	case Passing:
		return "passing"
	case Warning:
		return "warning"
	}
	return "critical"
}

// Result is what one probe found.
type Result struct {
	Status Status
	Output string // a short human account: what was asked and answered
	// Answered: the target answered the question (HTTP: a status line;
	// gRPC: a health status), as opposed to a connect failure, a reset or
	// a timeout. Envoy's health checks judge the two apart.
	Answered bool
	// Code is an HTTP answer's status code (0 for other probes).
	Code int
}

// HTTP is an HTTP probe's request.
type HTTP struct {
	URL           string
	Method        string // default GET
	Header        map[string][]string
	TLSSkipVerify bool
	// Client, if set, sends the request instead of the Prober's own (the
	// gateway's checks of a TLS cluster dial with the cluster's handshake);
	// it keeps its own connections.
	Client *http.Client
}

// maxBody is how much of an answer's body a probe reads into its output
// (Consul keeps 4 KiB); the rest is discarded unread.
const maxBody = 512

// Prober runs probes. It keeps connections alive between probes of a
// target (as Envoy's health checks, reuse_connection): a new connection
// per probe cost 9x the CPU of a reused one (BenchmarkHTTP, with and
// without keep-alive: docs/perf/health.md), which Consul pays (its HTTP
// checks disable keep-alive). Up to maxIdleConns HTTP connections and one
// gRPC connection per target are kept, each closed once unused for
// idleConn. Safe for concurrent use; Close releases what it holds.
type Prober struct {
	verify, skip *http.Client
	dialer       net.Dialer

	mu    sync.Mutex
	conns map[grpcKey]*grpcConn
}

type grpcKey struct {
	target string
	tls    bool
	via    string // GRPCVia's key: connections of one dialer only
}

type grpcConn struct {
	cc   *grpc.ClientConn
	used time.Time
}

// idleConn is how long a connection may stay unused before it is closed
// (HTTP: by the transport; gRPC: by Sweep): a target probed less often
// than this gets a new connection per probe.
const idleConn = 2 * time.Minute

// maxIdleConns bounds the HTTP connections kept between probes, so that
// file descriptors stay bounded however many targets there are.
const maxIdleConns = 16384

// New returns a Prober.
func New() *Prober {
	transport := func(skip bool) *http.Client {
		t := &http.Transport{
			Proxy:               nil, // a check probes the target itself, never through a proxy
			MaxIdleConns:        maxIdleConns,
			MaxIdleConnsPerHost: 8, // a target's checks probed at once by several workers
			IdleConnTimeout:     idleConn,
			TLSHandshakeTimeout: 10 * time.Second,
			DisableCompression:  true,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: skip}, //nolint:gosec // the check's own choice
		}
		return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is an answer: 3xx is critical, as Consul
		}}
	}
	return &Prober{verify: transport(false), skip: transport(true), conns: map[grpcKey]*grpcConn{}}
}

// HTTP sends req and judges the answer by its status: 2xx passing, 429
// warning, anything else (or no answer within ctx) critical.
func (p *Prober) HTTP(ctx context.Context, req HTTP) Result {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequestWithContext(ctx, method, req.URL, nil)
	if err != nil {
		return Result{Status: Critical, Output: fmt.Sprintf("HTTP %s %s: %v", method, req.URL, err)}
	}
	for name, values := range req.Header {
		if strings.EqualFold(name, "Host") && len(values) > 0 {
			r.Host = values[0]
			continue
		}
		r.Header[http.CanonicalHeaderKey(name)] = values
	}
	if r.Header.Get("User-Agent") == "" {
		r.Header.Set("User-Agent", "sextant-health-check")
	}
	c := p.verify
	if req.TLSSkipVerify {
		c = p.skip
	}
	if req.Client != nil {
		c = req.Client
	}
	resp, err := c.Do(r)
	if err != nil {
		return Result{Status: Critical, Output: fmt.Sprintf("HTTP %s %s: %v", method, req.URL, err)}
	}
	defer resp.Body.Close()
	var buf [maxBody]byte
	n, _ := io.ReadFull(resp.Body, buf[:])
	out := fmt.Sprintf("HTTP %s %s: %s Output: %s", method, req.URL, resp.Status, buf[:n])
	res := Result{Status: Critical, Output: out, Answered: true, Code: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		res.Status = Passing
	case resp.StatusCode == http.StatusTooManyRequests:
		res.Status = Warning
	}
	return res
}

// TCP connects to addr (host:port) and closes the connection: passing if
// the connect succeeds within ctx.
func (p *Prober) TCP(ctx context.Context, addr string) Result {
	conn, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Result{Status: Critical, Output: fmt.Sprintf("TCP connect %s: %v", addr, err)}
	}
	conn.Close()
	return Result{Status: Passing, Output: fmt.Sprintf("TCP connect %s: Success", addr)}
}

// GRPC asks addr's grpc.health.v1.Health service about service ("": the
// server as a whole): SERVING is passing, anything else (or no answer
// within ctx) critical. With useTLS the connection is TLS without
// certificate checks, as Consul's grpc_use_tls.
func (p *Prober) GRPC(ctx context.Context, addr, service string, useTLS bool) Result {
	return p.grpc(ctx, addr, service, grpcKey{target: addr, tls: useTLS}, nil)
}

// GRPCVia is GRPC over connections dial makes (already secured, e.g. a TLS
// handshake with a cluster's own config); via names the dialer, so that
// connections are shared only among probes of the same one.
func (p *Prober) GRPCVia(ctx context.Context, addr, service, via string, dial func(context.Context, string) (net.Conn, error)) Result {
	return p.grpc(ctx, addr, service, grpcKey{target: addr, via: via}, dial)
}

func (p *Prober) grpc(ctx context.Context, addr, service string, k grpcKey, dial func(context.Context, string) (net.Conn, error)) Result {
	cc, err := p.grpcConn(k, dial)
	if err != nil {
		return Result{Status: Critical, Output: fmt.Sprintf("gRPC %s: %v", addr, err)}
	}
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		// A status the server sent (NOT_FOUND for an unknown service...)
		// is an answer; UNAVAILABLE, DEADLINE_EXCEEDED and CANCELED are
		// the transport's (no answer).
		s, _ := status.FromError(err)
		answered := s.Code() != codes.Unavailable && s.Code() != codes.DeadlineExceeded && s.Code() != codes.Canceled
		if s.Code() == codes.Unimplemented {
			return Result{Status: Critical, Output: fmt.Sprintf("gRPC %s: no grpc.health.v1 service: %v", addr, s.Message()), Answered: answered}
		}
		return Result{Status: Critical, Output: fmt.Sprintf("gRPC %s service %q: %v", addr, service, err), Answered: answered}
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return Result{Status: Critical, Output: fmt.Sprintf("gRPC %s service %q: %s", addr, service, st), Answered: true}
	}
	return Result{Status: Passing, Output: fmt.Sprintf("gRPC %s service %q: SERVING", addr, service), Answered: true}
}

func (p *Prober) grpcConn(k grpcKey, dial func(context.Context, string) (net.Conn, error)) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return nil, errClosed
	}
	if c, ok := p.conns[k]; ok {
		c.used = time.Now()
		return c.cc, nil
	}
	creds := insecure.NewCredentials() // with dial: the connection is secured already
	if k.tls {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as Consul's grpc_use_tls
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
	}
	cc, err := grpc.NewClient("passthrough:///"+k.target, opts...)
	if err != nil {
		return nil, err
	}
	p.conns[k] = &grpcConn{cc: cc, used: time.Now()}
	return cc, nil
}

var errClosed = errors.New("probe: closed")

// Sweep closes the gRPC connections unused since before now - idleConn.
// The owner calls it now and then.
func (p *Prober) Sweep(now time.Time) {
	p.mu.Lock()
	var idle []*grpc.ClientConn
	for k, c := range p.conns {
		if now.Sub(c.used) > idleConn {
			idle = append(idle, c.cc)
			delete(p.conns, k)
		}
	}
	p.mu.Unlock()
	for _, cc := range idle {
		cc.Close()
	}
}

// Close closes every connection; probes after it fail (gRPC) or open
// their own (HTTP, TCP).
func (p *Prober) Close() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.cc.Close()
	}
	p.verify.CloseIdleConnections()
	p.skip.CloseIdleConnections()
}
