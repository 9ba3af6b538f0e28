package xds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bitset"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Server is the Aggregated Discovery Service: every stream is a subscriber
// of the Cache. Each stream has two goroutines: gRPC's handler goroutine
// sends responses built from the subscriber's pending sets (sendLoop), and
// a receive goroutine reads and applies requests (subscriptions, ACKs,
// NACKs); a client that stops reading blocks only its own handler.
type Server struct {
	discoverygrpc.UnimplementedAggregatedDiscoveryServiceServer

	cache    *Cache
	log      *slog.Logger
	metrics  *Metrics
	grpcOpts []grpc.ServerOption
	ackWait  time.Duration
	age      keepalive.ServerParameters // MaxConnectionAge and its grace
	ids      atomic.Uint64
	turns    *turns
	// secretAccess makes each stream's SecretAccess (secretacl.go).
	secretAccess func(context.Context) SecretAccess
	wl           *workloads // nil: no workload certificates over SDS
	sdsService   bool       // ServerOptions.SecretService

	mu   sync.Mutex
	subs map[uint64]*subscriber
}

// ServerOptions configure a Server. Zero values are sensible defaults.
type ServerOptions struct {
	// Logger receives NACKs (warn) and stream starts and ends (debug); nil
	// discards.
	Logger *slog.Logger
	// Metrics records push latency; nil: a fresh, unregistered set.
	Metrics *Metrics
	// GRPC are more options of the gRPC server Serve makes: transport
	// credentials (TLS), the ACL guard's interceptors.
	GRPC []grpc.ServerOption
	// AckWait is how long a type's next response waits for the client to
	// answer the previous one (see ackWait); zero: one second.
	AckWait time.Duration
	// StallTimeout is how long data Serve's server wrote may stay
	// unacknowledged by a client's TCP (it is gone, or its window stays
	// shut because it reads nothing) before the connection is dropped: the
	// connections' TCP_USER_TIMEOUT and the wait for a keepalive ping's
	// answer. Zero: DefaultStallTimeout.
	StallTimeout time.Duration
	// MaxConnectionAge closes a client's connection after about this long
	// (gRPC adds 10% jitter), so that its streams move: a client
	// reconnects through its DNS name or load balancer, perhaps to a
	// server that joined since, and a delta client resumes with nothing
	// resent. Zero: DefaultMaxConnectionAge; negative: never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long streams may run on after the
	// connection is told to go; then it is cut. Zero: 10 s.
	MaxConnectionAgeGrace time.Duration
	// SecretAccess returns a stream's right to SDS secrets from its
	// context (acl.SDS: secret:read on the secret's namespace), asked
	// once per stream; nil: every stream receives every secret, unaudited.
	SecretAccess func(context.Context) SecretAccess
	// Workloads issues the certificates Envoy nodes ask for as the SDS
	// secrets "default" and "ROOTCA" (workload.go); nil: none are served.
	Workloads WorkloadIssuer
	// SecretService: Serve serves the Secret Discovery Service too
	// (RegisterSecrets), as a local SDS agent does.
	SecretService bool
}

// DefaultMaxConnectionAge is ServerOptions.MaxConnectionAge's default,
// istiod's: streams rebalance over the servers within about half an hour
// of a server joining.
const DefaultMaxConnectionAge = 30 * time.Minute

// DefaultStallTimeout is ServerOptions.StallTimeout's default. gRPC's own,
// 20 s, dropped subscribers that were alive but slow to read: at 1,000
// subscribers syncing 4.6 GB on a loaded machine, clients went more than
// 20 s without reading, the kernel aborted the server's end and the client
// read "connection reset by peer" (docs/perf/push.md). A subscriber that
// falls behind catches up (its pending sets coalesce); one that is gone
// costs its memory for this long.
const DefaultStallTimeout = 5 * time.Minute

// NewServer returns an ADS server over c. Register it on a grpc.Server made
// with ServerOption, or call Serve.
func NewServer(c *Cache, opts ServerOptions) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.AckWait <= 0 {
		opts.AckWait = defaultAckWait
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	age := keepalive.ServerParameters{Timeout: opts.StallTimeout, MaxConnectionAge: opts.MaxConnectionAge, MaxConnectionAgeGrace: opts.MaxConnectionAgeGrace}
	switch {
	case age.MaxConnectionAge == 0:
		age.MaxConnectionAge = DefaultMaxConnectionAge
	case age.MaxConnectionAge < 0:
		age.MaxConnectionAge = 0 // gRPC: infinity
	}
	if age.MaxConnectionAgeGrace <= 0 {
		age.MaxConnectionAgeGrace = 10 * time.Second
	}
	s := &Server{age: age, cache: c, log: opts.Logger, metrics: opts.Metrics, subs: map[uint64]*subscriber{}, grpcOpts: opts.GRPC, ackWait: opts.AckWait, turns: newTurns(),
		secretAccess: opts.SecretAccess, sdsService: opts.SecretService}
	if opts.Workloads != nil {
		s.wl = newWorkloads(opts.Workloads, c, opts.Logger)
	}
	return s
}

// RunWorkloads renews the workload certificates served over SDS and
// follows the trust bundle until ctx ends (Serve runs it; a caller that
// registers the server on its own gRPC server runs it itself). Without
// ServerOptions.Workloads it returns at once.
func (s *Server) RunWorkloads(ctx context.Context) {
	if s.wl == nil {
		return
	}
	s.wl.run(ctx, s.workloadKeys)
}

// workloadKeys returns the cache keys of the workload certificates the
// current streams hold.
func (s *Server) workloadKeys() map[string]bool {
	s.mu.Lock()
	subs := make([]*subscriber, 0, len(s.subs))
	for _, sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	keys := map[string]bool{}
	for _, sub := range subs {
		sub.mu.Lock()
		if sub.wlKey != "" {
			keys[sub.wlKey] = true
		}
		sub.mu.Unlock()
	}
	return keys
}

// Register adds the ADS service to g, which must have been created with
// ServerOption().
func (s *Server) Register(g *grpc.Server) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// Serve serves ADS on lis until ctx is done, then stops: streams get a
// second to end on their own, then are cut. It returns nil after ctx ends.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	// Fixed flow-control windows turn off gRPC's BDP estimation, which
	// otherwise pings a client after nearly every ACK it reads when ACKs
	// are spaced out: a frame and a write each way per request. Requests
	// are small; 1 MiB is ample. gRPC sets each connection's
	// TCP_USER_TIMEOUT to the keepalive Timeout (20 s unless set): the
	// stall timeout replaces it (s.age.Timeout).
	g := grpc.NewServer(append([]grpc.ServerOption{ServerOption(), grpc.MaxRecvMsgSize(16 << 20),
		grpc.InitialWindowSize(1 << 20), grpc.InitialConnWindowSize(1 << 20),
		grpc.KeepaliveParams(s.age)}, s.grpcOpts...)...)
	s.Register(g)
	if s.sdsService {
		s.RegisterSecrets(g)
	}
	// The stopper ends with ctx, or when Serve fails on its own (a broken
	// listener): then nothing is left to stop and the error is returned now.
	failed, done := make(chan struct{}), make(chan struct{})
	wlCtx, wlStop := context.WithCancel(ctx)
	wlDone := make(chan struct{})
	go func() { defer close(wlDone); s.RunWorkloads(wlCtx) }()
	defer func() { wlStop(); <-wlDone }()
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-failed:
			g.Stop()
			return
		}
		t := time.AfterFunc(time.Second, g.Stop)
		g.GracefulStop()
		t.Stop()
	}()
	err := g.Serve(userTimeoutListener{Listener: lis, d: s.age.Timeout})
	close(failed)
	<-done
	if errors.Is(err, grpc.ErrServerStopped) || ctx.Err() != nil {
		return nil
	}
	return err
}

// request is what both protocol variants ask.
type request struct {
	typeURL   string
	nonce     string
	errMsg    *string
	names     []string          // state of the world
	subscribe []string          // delta
	unsub     []string          // delta
	initial   map[string]string // delta, first request
	node      *corev3.Node      // the first request's says who the stream is
}

// StreamAggregatedResources serves one state-of-the-world stream.
func (s *Server) StreamAggregatedResources(stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	m := &requestMsg{delta: false} // one per stream, read into by one goroutine at a time
	return s.serve(stream.Context(), stream, false, func() (request, error) {
		m.req = request{}
		err := stream.RecvMsg(m)
		return m.req, err
	})
}

// DeltaAggregatedResources serves one delta (incremental) stream.
func (s *Server) DeltaAggregatedResources(stream discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	m := &requestMsg{delta: true} // one per stream, read into by one goroutine at a time
	return s.serve(stream.Context(), stream, true, func() (request, error) {
		m.req = request{}
		err := stream.RecvMsg(m)
		return m.req, err
	})
}

// sotwRequest is what a DiscoveryRequest asks.
func sotwRequest(m *discoverygrpc.DiscoveryRequest) request {
	r := request{typeURL: m.TypeUrl, nonce: m.ResponseNonce, names: m.ResourceNames,
		node: m.GetNode()}
	if m.ErrorDetail != nil {
		msg := m.ErrorDetail.GetMessage()
		r.errMsg = &msg
	}
	return r
}

// deltaRequest is what a DeltaDiscoveryRequest asks.
func deltaRequest(m *discoverygrpc.DeltaDiscoveryRequest) request {
	r := request{typeURL: m.TypeUrl, nonce: m.ResponseNonce, subscribe: m.ResourceNamesSubscribe,
		unsub: m.ResourceNamesUnsubscribe, initial: m.InitialResourceVersions,
		node: m.GetNode()}
	if m.ErrorDetail != nil {
		msg := m.ErrorDetail.GetMessage()
		r.errMsg = &msg
	}
	return r
}

type sender interface{ SendMsg(any) error }

func (s *Server) serve(ctx context.Context, stream sender, delta bool, recv func() (request, error)) error {
	sub := &subscriber{c: s.cache, id: s.ids.Add(1), since: time.Now(), delta: delta, wake: make(chan struct{}, 1), ns: "default", ackWait: s.ackWait}
	if p, ok := peer.FromContext(ctx); ok {
		sub.addr = p.Addr.String()
	}
	sub.secrets = s.secretAccessOf(ctx)
	// The first request says who the stream is.
	req, err := recv()
	if err != nil {
		if ctx.Err() != nil {
			return endedErr(ctx)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	sub.node, sub.clust = req.node.GetId(), req.node.GetCluster()
	if ns := NodeNamespace(req.node); ns != "" {
		sub.ns = ns
	}
	sub.flavour = NodeFlavour(req.node)
	sub.locality = nodeLocality(req.node)
	sub.source = newNodeSource(req.node, sub.ns)
	sub.wlSA = NodeServiceAccount(req.node)
	s.mu.Lock()
	s.subs[sub.id] = sub
	s.mu.Unlock()
	s.cache.addSubscriber(sub)
	sub.rescope() // after joining: a SetSidecars from now on rescopes it too
	s.metrics.subscribers.Inc()
	defer func() {
		s.cache.removeSubscriber(sub)
		s.mu.Lock()
		delete(s.subs, sub.id)
		s.mu.Unlock()
		s.metrics.subscribers.Dec()
	}()
	s.log.Debug("xds: stream started", "node", sub.node, "addr", sub.addr, "delta", delta)
	s.onRequest(sub, req)

	// The handler goroutine sends (sendLoop); the receive goroutine, owned
	// by it, reads and applies the requests that follow. Applying them
	// where they are read spares a hand-off between goroutines per ACK.
	// Recv blocks until the client sends; the goroutine stops when Recv
	// fails, which it does once the handler has returned and gRPC has ended
	// the stream. A failed Recv cancels the send loop.
	streamCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				recvErr <- err
				cancel()
				return
			}
			if ctx.Err() != nil {
				return // the handler is returning
			}
			s.onRequest(sub, req)
		}
	}()
	if err := s.sendLoop(ctx, sub, stream); err != nil {
		// The stream is broken.
		s.log.Debug("xds: send failed", "node", sub.node, "addr", sub.addr, "err", err)
		return err
	}
	s.log.Debug("xds: stream ended", "node", sub.node, "addr", sub.addr)
	if streamCtx.Err() != nil {
		return endedErr(streamCtx)
	}
	select {
	case err := <-recvErr:
		if !errors.Is(err, io.EOF) {
			return err
		}
	default:
	}
	return nil
}

// endedErr is the status of a stream whose context ended: its deadline
// passed (DeadlineExceeded) or it was cancelled. Returning nil would end the
// stream with OK, which a client whose own timer has not fired yet reads as
// the server closing the stream on its own.
func endedErr(ctx context.Context) error {
	return status.FromContextError(ctx.Err()).Err()
}

// sendLoop sends the stream's responses, on its handler goroutine, until
// ctx ends (nil) or a send fails.
func (s *Server) sendLoop(ctx context.Context, sub *subscriber, stream sender) error {
	defer s.turns.leave(sub)
	// retry fires when a type that waits for the client's answer may send
	// without it (sub.ackWait).
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var retryC <-chan time.Time
	var secretsChanged <-chan struct{} // the stream's rights to secrets may have changed
	if sub.secrets != nil {
		secretsChanged = sub.secrets.Changed()
	}
	holdTimer := time.NewTimer(time.Hour)
	holdTimer.Stop()
	defer holdTimer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.wake:
		case <-retryC:
		case <-secretsChanged:
			secretsChanged = sub.secrets.Changed()
			sub.recheckSecrets(s)
		}
		// A round sends each type once, clusters before the listeners and
		// routes that name them; endpoints go first and again between the
		// others, so an endpoint change waits behind at most one response of
		// another type (a state-of-the-world cluster list is megabytes).
		// Before a config response the loop gives way to other subscribers'
		// endpoint responses (yieldToEndpoints).
		now := time.Now() // refreshed after each send; a round's checks share it
		start := now
		send := func(t Type) error {
			for {
				ok, err := s.sendOne(sub, stream, t, now)
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				now = time.Now()
			}
			if t == TypeEndpoint {
				sub.endpointsServed()
			}
			return nil
		}
		for _, t := range []Type{TypeEndpoint, TypeCluster, TypeEndpoint, TypeSecret, TypeListener, TypeEndpoint, TypeRoute, TypeEndpoint} {
			if t != TypeEndpoint {
				// Checked, then held, then sent: a change of t marked after
				// the check goes in the next round (its notify wakes one),
				// held like any other.
				ready, since := sub.ready(t, now)
				if !ready {
					continue
				}
				// A change that has waited maxDefer since its commit gives
				// way no longer: under endless endpoint churn config still
				// gets its share.
				aged := !since.IsZero() && now.Sub(since) >= maxDefer
				if !aged {
					if held, own := s.yieldToEndpoints(ctx, sub, holdTimer); held {
						now = time.Now()
						if own {
							if err := send(TypeEndpoint); err != nil {
								return err
							}
						}
					}
				}
			}
			if err := send(t); err != nil {
				return err
			}
		}
		retryC = nil
		if at, ok := sub.retryAt(start); ok {
			retry.Reset(time.Until(at))
			retryC = retry.C
		}
	}
}

// maxHold is the longest a config response waits for other subscribers'
// endpoint responses: endpoint changes go first across subscribers, and
// config still moves under endless endpoint churn.
const maxHold = 5 * time.Millisecond

// maxDefer is how old (since its commit) a config change may be and still
// give way to other subscribers' endpoint responses. Holding every config
// response maxHold, at 100 endpoint changes a second over 200 streams some
// stream always had one queued: each config response of each stream waited,
// round after round, and a DestinationRule change took seconds.
const maxDefer = 50 * time.Millisecond

// yieldToEndpoints holds a config response of sub back while another
// subscriber has an endpoint change to send, at most maxHold. It reports
// whether it waited, and whether sub itself got an endpoint change
// meanwhile (to send first; its wake signal is kept for the next round).
func (s *Server) yieldToEndpoints(ctx context.Context, sub *subscriber, t *time.Timer) (held, own bool) {
	idle := s.cache.endpointsIdle()
	select {
	case <-idle:
		return false, false
	default:
	}
	if sub.endpointQueued() {
		return true, true
	}
	t.Reset(maxHold)
	defer t.Stop()
	woke := false
	defer func() {
		if woke {
			sub.poke() // for the next round: something else may have come
		}
	}()
	for {
		select {
		case <-idle:
			return true, false
		case <-t.C:
			return true, false
		case <-ctx.Done():
			return true, false
		case <-sub.wake:
			// An ACK or a change: only an endpoint change of sub's own
			// ends the wait.
			woke = true
			if sub.endpointQueued() {
				return true, true
			}
		}
	}
}

// sendOne sends the next response of type t, if any. A large
// state-of-the-world list waits for its turn (turns).
func (s *Server) sendOne(sub *subscriber, stream sender, t Type, now time.Time) (bool, error) {
	var tn *turn
	if t != TypeEndpoint && sub.bigFull(t, now) {
		// Built once its turn comes, it carries the state of then.
		if tn = s.turns.take(sub); tn == nil {
			return false, nil // in line: poked when granted a turn
		}
	}
	sub.mu.Lock()
	r, ok := sub.build(t, now)
	switch {
	case ok && tn != nil:
		// gRPC queues a message whole and SendMsg returns at once: the
		// transfer is over when the client answers, and the turn is held
		// until then (or maxTurn).
		st := &sub.t[t]
		st.turn.release()
		st.turn = tn
	case tn != nil:
		tn.release()
	}
	var secrets []sentSecret
	if ok {
		secrets, sub.sentSecrets = sub.sentSecrets, nil
		sub.sending = true
		if sub.epQueued && t != TypeEndpoint {
			sub.epQueued = false
			sub.c.endpointServed()
		}
	}
	sub.mu.Unlock()
	if !ok {
		return false, nil
	}
	err := stream.SendMsg(r.msg)
	size := r.msg.size
	// The parts list is the subscriber's, reused by the next build: let
	// go of this version's bytes now rather than then (only this
	// goroutine builds, so no lock).
	clear(r.msg.bufs)
	sub.mu.Lock()
	sub.sending = false
	sub.mu.Unlock()
	if err != nil {
		return false, err
	}
	if len(secrets) > 0 {
		sub.reportSecrets(secrets)
	}
	if !r.origin.IsZero() {
		s.metrics.sentT[t].Observe(time.Since(r.origin).Seconds())
	}
	s.metrics.bytesT[t].Add(float64(size))
	if t == TypeCluster {
		sub.clustersSent()
	}
	return true, nil
}

func (s *Server) onRequest(sub *subscriber, req request) {
	t, ok := TypeOf(req.typeURL)
	if !ok {
		s.log.Debug("xds: request for an unknown type", "node", sub.node, "type", req.typeURL)
		return
	}
	// Listener keys are resolved before taking sub.mu: making an on-demand
	// listener notifies every subscriber, this one included.
	var keys map[string]string // nil (read as empty) but for listeners and workload secrets
	if t == TypeListener {
		keys = map[string]string{}
		for _, list := range [][]string{req.names, req.subscribe, req.unsub, slices.Collect(mapKeys(req.initial))} {
			for _, n := range list {
				if n != "*" {
					keys[n] = s.listenerKey(n, sub.ns)
				}
			}
		}
	}
	if t == TypeSecret && s.wl != nil && sub.flavour == FlavourEnvoy {
		keys = s.workloadSecretKeys(sub, req)
	}
	key := func(n string) string {
		if k, ok := keys[n]; ok {
			return k
		}
		return n
	}
	tc := s.cache.types[t]
	now := time.Now()
	sub.mu.Lock()
	st := &sub.t[t]
	first := !st.requested
	st.requested = true
	gated := st.awaiting != ""
	if f, found := st.ack(req.nonce, req.errMsg, now); found {
		if st.turn != nil && st.awaiting == "" {
			st.turn.release() // the client has the response that held it
			st.turn = nil
		}
		if req.errMsg != nil {
			s.metrics.nacks.WithLabelValues(t.String()).Inc()
			s.log.Warn("xds: NACK", "node", sub.node, "addr", sub.addr, "type", t.String(), "version", f.version, "error", *req.errMsg)
		} else if !f.origin.IsZero() {
			s.metrics.ackedT[t].Observe(now.Sub(f.origin).Seconds())
		}
	}
	fullType := t == TypeCluster || t == TypeListener
	// asked: the request may have marked something to send; a plain ACK
	// did not (then the send goroutine is woken only if the answer lets
	// work through that waited for it).
	asked := first || len(req.subscribe) > 0 || len(req.unsub) > 0
	if !sub.delta {
		wildcard := len(req.names) == 0 && fullType && (first || st.wildcard)
		var next bitset.BitSet
		for _, n := range req.names {
			if n == "*" {
				wildcard = true
				continue
			}
			next.Set(uint(tc.lookup(key(n))))
		}
		added := next.Difference(&st.subs)
		changed := !next.Equal(&st.subs) || wildcard != st.wildcard
		asked = asked || changed
		if wildcard && !st.wildcard && !fullType {
			tc.markVisible(&st.pending)
		}
		st.subs, st.wildcard = next, wildcard
		if fullType {
			st.full = st.full || first || changed
			if t == TypeCluster && (first || changed) {
				st.unsentFrom = 1 // the whole list is due
			}
		} else {
			st.pending.InPlaceUnion(added)
		}
	} else {
		if first {
			for n, v := range req.initial {
				id := tc.lookup(key(n))
				st.growSent(int(id) + 1)
				if val := sub.view(t, tc.current(id)); val != nil && val.sameContent(v) {
					st.sent[id] = val.seq
					if sub.secrets != nil && t == TypeSecret {
						st.pending.Set(uint(id)) // held: removed if it may not be
					}
				} else {
					st.sent[id] = math.MaxUint64 // held at another version, or gone
					st.pending.Set(uint(id))
				}
			}
			if len(req.subscribe) == 0 && fullType {
				st.wildcard = true
				tc.markVisible(&st.pending)
			}
		}
		for _, n := range req.subscribe {
			if n == "*" {
				if !st.wildcard {
					st.wildcard = true
					tc.markVisible(&st.pending)
				}
				continue
			}
			id := uint(tc.lookup(key(n)))
			if !st.subs.Test(id) {
				st.subs.Set(id)
				st.pending.Set(id)
				st.missing.Set(id)
			}
		}
		for _, n := range req.unsub {
			if n == "*" {
				st.wildcard = false
				continue
			}
			id := tc.lookup(key(n))
			st.subs.Clear(uint(id))
			st.missing.Clear(uint(id))
			if int(id) < len(st.sent) {
				st.sent[id] = 0 // the client dropped it
			}
		}
	}
	if sub.delta && t == TypeCluster && st.pending.Any() && (first || len(req.subscribe) > 0) {
		st.unsentFrom = 1 // clusters the request asked for are due
	}
	if asked {
		st.dirty = true // requests above may have marked pending ids
	}
	// A plain ACK with nothing waiting behind it wakes nobody: at one
	// response per change that was a send round per response for nothing.
	wake := asked || (gated && st.awaiting == "" && (st.full || st.dirty))
	sub.mu.Unlock()
	if wake {
		sub.poke()
	}
}

func (st *subType) growSent(n int) {
	if len(st.sent) < n {
		st.sent = append(st.sent, make([]uint64, n-len(st.sent))...)
	}
}

// markVisible sets in b every id holding a visible resource.
func (tc *typeCache) markVisible(b *bitset.BitSet) {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	for id, e := range tc.entries {
		if e != nil && !e.hidden {
			b.Set(uint(id))
		}
	}
}

func (tc *typeCache) current(id uint32) *entry {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	if int(id) < len(tc.entries) {
		return tc.entries[id]
	}
	return nil
}

// listenerKey returns the cache key of listener name for a client in ns:
// a published listener of that name, or an on-demand one.
func (s *Server) listenerKey(name, ns string) string {
	if _, _, ok := s.cache.Get(TypeListener, name); ok {
		return name
	}
	return s.cache.ensureListener(name, ns)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
