package gateway_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextant-mesh/sextant/internal/gateway"
)

// logCount counts the records a gateway logs, by message and one
// attribute's value.
type logCount struct {
	mu   sync.Mutex
	attr string
	n    map[string]int // "message|value"
}

func newLogCount(attr string) *logCount { return &logCount{attr: attr, n: map[string]int{}} }

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCount) WithGroup(string) slog.Handler            { return l }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == l.attr {
			v = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.n[r.Message+"|"+v]++
	l.mu.Unlock()
	return nil
}

func (l *logCount) count(msg, v string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[msg+"|"+v]
}

// A TLS cluster waiting for its CA secret is logged once, however many xDS
// updates (clusters, endpoints of other clusters) come while it waits, and
// once more when the secret comes; a TLS filter chain waiting for its
// certificate likewise once. Each response of the control plane is an
// update of its own: the message came 4-7 times at the same millisecond.
func TestTLSWaitLoggedOncePerChange(t *testing.T) {
	ca := newPKI(t)
	u := startUpstream(t, "up", protoEcho)
	c := tlsCluster(edsCluster("orders"), &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		ValidationContextType: sdsValidation("ca")}})
	clusters := newLogCount("cluster")
	chains := newLogCount("listener")
	cp := startControlPlane(t, "")
	g := startGatewayOpts(t, cp.addr, true, gateway.Options{Logger: slog.New(fanout{clusters, chains})})
	base := []typesResource{
		rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "orders"))), c, assignment("orders", ep{u: u}),
		tlsListener("gw-tls", g.tlsPort(), tlsChain{names: []string{"a.test"}, cert: "a-cert"}), routeConfig("routes", vhost("all", []string{"*"}, prefixRoute("/", "orders"))),
	}
	cp.set(base...)
	g.waitEndpoints(t, 1)
	// More updates while both wait: clusters and their endpoints added.
	cp.set(append(base, edsCluster("b"), assignment("b", ep{u: u}))...)
	g.waitEndpoints(t, 2)
	cp.set(append(base, edsCluster("b"), assignment("b", ep{u: u}), edsCluster("c"), assignment("c", ep{u: u}))...)
	g.waitEndpoints(t, 3)
	if n := clusters.count("gateway: TLS cluster waits for its secrets", "orders"); n != 1 {
		t.Errorf("the wait of cluster orders logged %d times, want once", n)
	}
	if n := chains.count("gateway: TLS filter chain waits for its secrets", "gw-tls"); n != 1 {
		t.Errorf("the wait of the TLS chain logged %d times, want once", n)
	}
	aCert, aKey := ca.issue(t, false, "a.test")
	cp.set(append(base, caSecret("ca", ca.pem), certSecret("a-cert", aCert, aKey))...)
	waitFor(t, "the cluster's secrets to be logged", func() bool {
		return clusters.count("gateway: TLS cluster has its secrets", "orders") > 0
	})
	if n := clusters.count("gateway: TLS cluster has its secrets", "orders"); n != 1 {
		t.Errorf("the secrets' arrival logged %d times, want once", n)
	}
	if n := clusters.count("gateway: TLS cluster waits for its secrets", "orders"); n != 1 {
		t.Errorf("the wait of cluster orders logged %d times in all, want once", n)
	}
}

// fanout hands each record to every handler.
type fanout []slog.Handler

func (f fanout) Enabled(context.Context, slog.Level) bool { return true }
func (f fanout) WithAttrs([]slog.Attr) slog.Handler       { return f }
func (f fanout) WithGroup(string) slog.Handler            { return f }
func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range f {
		h.Handle(ctx, r)
	}
	return nil
}
