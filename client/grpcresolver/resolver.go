// Package grpcresolver connects grpc-go to Sextant: a resolver for targets
// "sextant://[server]/[namespace/]service[?selector=...]" that feeds a
// service's healthy instances to gRPC as they change, and a balancer,
// "sextant_adaptive", that picks among the ready connections with Sextant's
// adaptive policy and learns from each RPC's outcome.
//
// Importing the package registers both with grpc-go:
//
//	import _ "github.com/sextant-mesh/sextant/client/grpcresolver"
//
//	conn, err := grpc.NewClient("sextant:///orders?selector=version%3Dv2",
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// The registered resolver reaches the server named in the target's
// authority, else $SEXTANT_SERVER, else http://127.0.0.1:7400; each resolver
// watches its service with a View of its own, closed with the ClientConn. To
// share one View (and its client options) between connections, pass
// NewBuilder(view) with grpc.WithResolvers instead.
//
// The package owns the mapping between gRPC and the client's View; it does
// not own discovery (the View) or the policies (internal/balancer).
package grpcresolver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Scheme is the target scheme the resolver answers to.
const Scheme = "sextant"

func init() {
	resolver.Register(&builder{})
	registerBalancer()
}

// defaultServer is used when neither the target's authority nor
// $SEXTANT_SERVER names a server.
const defaultServer = "http://127.0.0.1:7400"

// NewBuilder returns a resolver builder over an existing View, for
// grpc.WithResolvers: services are added to v as targets name them, and v
// stays open until its owner closes it (after the connections).
func NewBuilder(v *client.View) resolver.Builder { return &builder{view: v} }

type builder struct {
	view *client.View // nil: a View per resolver, from the target's authority
}

func (b *builder) Scheme() string { return Scheme }

// Build implements resolver.Builder. Called by grpc-go when a ClientConn is
// created; it does not block on the server.
func (b *builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	service, sel, err := parseTarget(&target.URL)
	if err != nil {
		return nil, err
	}
	r := &sextantResolver{cc: cc, service: service, sel: sel, view: b.view, notify: make(chan struct{}, 1), done: make(chan struct{})}
	if r.view == nil {
		server := target.URL.Host
		if server == "" {
			server = os.Getenv("SEXTANT_SERVER")
		}
		if server == "" {
			server = defaultServer
		}
		c, err := client.New(server, client.WithUserAgent("sextant-grpc/1"))
		if err != nil {
			return nil, fmt.Errorf("grpcresolver: %w", err)
		}
		if r.view, err = c.NewView(client.ViewOptions{}); err != nil {
			return nil, fmt.Errorf("grpcresolver: %w", err)
		}
		r.ownView, r.own = true, c
	}
	sc := cc.ParseServiceConfig(`{"loadBalancingConfig":[{"` + BalancerName + `":{}}]}`)
	if sc.Err != nil {
		return nil, fmt.Errorf("grpcresolver: service config: %w", sc.Err)
	}
	r.sc = sc
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	go r.run(ctx)
	return r, nil
}

// parseTarget reads the service ("[namespace/]name") and the selector of a
// target URL.
func parseTarget(u *url.URL) (string, label.Selector, error) {
	service := strings.TrimPrefix(u.Path, "/")
	if service == "" {
		service = u.Opaque
	}
	if service == "" {
		return "", nil, fmt.Errorf("grpcresolver: target %q names no service", u.String())
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", nil, fmt.Errorf("grpcresolver: target %q: query: %w", u.String(), err)
	}
	for k := range q {
		if k != "selector" {
			return "", nil, fmt.Errorf("grpcresolver: target %q: unknown parameter %q (known: selector)", u.String(), k)
		}
	}
	sel, err := label.Parse(q.Get("selector"))
	if err != nil {
		return "", nil, fmt.Errorf("grpcresolver: target %q: selector: %w", u.String(), err)
	}
	return service, sel, nil
}

// sextantResolver follows one service of a View and pushes its addresses to
// gRPC. Its goroutine (run) owns every call to cc; the View's subscription
// only signals it, so a slow ClientConn never holds up the View.
type sextantResolver struct {
	cc      resolver.ClientConn
	service string
	sel     label.Selector
	view    *client.View
	ownView bool
	own     *client.Client // the client of an own View
	sc      *serviceconfig.ParseResult

	notify chan struct{} // buffered 1: the view has a new state
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (r *sextantResolver) run(ctx context.Context) {
	defer close(r.done)
	if err := r.view.Add(ctx, r.service); err != nil {
		if ctx.Err() == nil {
			r.cc.ReportError(err)
		}
		return
	}
	unsub, err := r.view.Subscribe(r.service, func() {
		select {
		case r.notify <- struct{}{}:
		default:
		}
	})
	if err != nil {
		r.cc.ReportError(err)
		return
	}
	defer unsub()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.notify:
		}
		st, err := r.view.State(r.service)
		if err != nil {
			r.cc.ReportError(err)
			continue
		}
		_ = r.cc.UpdateState(resolver.State{Addresses: r.addresses(st), ServiceConfig: r.sc})
	}
}

// addresses are the healthy, non-isolated instances the selector matches,
// each carrying its id and weight for the balancer.
func (r *sextantResolver) addresses(st client.ServiceState) []resolver.Address {
	addrs := make([]resolver.Address, 0, len(st.Instances))
	for i := range st.Instances {
		in := &st.Instances[i]
		if !in.Healthy || in.Isolated || !r.sel.Matches(in.Labels()) {
			continue
		}
		addr := hostPort(in)
		addrs = append(addrs, resolver.Address{
			Addr:               addr,
			BalancerAttributes: attributes.New(instanceKey{}, instanceInfo{id: in.ID, weight: uint32(max(in.EffectiveWeight(), 0))}),
		})
	}
	return addrs
}

func hostPort(in *client.Instance) string { return net.JoinHostPort(in.Host, strconv.Itoa(in.Port)) }

// ResolveNow implements resolver.Resolver: the View is always current, so
// there is nothing to do.
func (r *sextantResolver) ResolveNow(resolver.ResolveNowOptions) {}

// Close implements resolver.Resolver: it stops the goroutine and, if the
// resolver made its View, closes it.
func (r *sextantResolver) Close() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		if r.ownView {
			r.view.Close()
			r.own.HTTPClient().CloseIdleConnections()
		}
	})
}

// instanceKey is the balancer attribute key of an address's instanceInfo.
type instanceKey struct{}

type instanceInfo struct {
	id     string
	weight uint32
}
