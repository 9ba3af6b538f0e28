// Package xdsclient owns the gateway's side of the xDS protocol: one
// aggregated (ADS) state-of-the-world stream to a control plane over grpc-go,
// the subscriptions per resource type, ACK and NACK (with the reason), the
// last accepted resources of every type, and reconnection with backoff. It
// does not know what a listener or a cluster means: the user decodes each
// resource (Type.Decode) and turns the accepted state into its own config
// (Handler.Update), which may refuse it.
//
// The accepted state survives a lost stream: while the control plane is
// unreachable the user keeps serving the last good config, and after a
// reconnect the client subscribes again with the versions it holds.
package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type is one resource type the client follows.
type Type struct {
	// URL is the type URL, e.g. "type.googleapis.com/envoy.config.listener.v3.Listener".
	URL string
	// Wildcard types (LDS, CDS) are subscribed to in full; the others
	// (RDS, EDS) by the names Handler.Update asks for.
	Wildcard bool
	// Names are resources of a wildcard type subscribed to by name beside
	// the wildcard ("*"): those the server makes on demand only (a
	// sidecar's inbound listener).
	Names []string
	// Decode checks one resource and returns its name and decoded value,
	// or an error naming the bad field. Called on the client's goroutine.
	Decode func(*anypb.Any) (name string, value any, err error)
}

// State is the accepted resources: type URL -> name -> decoded value. The
// client builds a new map for each type it changes; the user may keep it.
type State map[string]map[string]any

// Handler turns accepted resources into the user's config.
type Handler interface {
	// Update is called on the client's goroutine after a response decoded
	// cleanly, with the state that accepting it would give. It returns the
	// names to subscribe to for each non-wildcard type, or an error: the
	// response is then NACKed with the error's text and the previous state
	// of that type is kept. It may block briefly (building a config).
	Update(s State) (map[string][]string, error)
}

// Options configure a Client.
type Options struct {
	// Node identifies the gateway to the control plane (its snapshot key).
	Node *core.Node
	// Types in subscription order (LDS, CDS, then RDS, EDS as Envoy does).
	Types []Type
	// Handler receives accepted states.
	Handler Handler
	// Backoff bounds the reconnection delay: it starts at MinBackoff
	// (default 100ms), doubles per failed attempt up to MaxBackoff (5s),
	// with ±20% jitter, and resets after a stream that received a response.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives connection events and NACKs; nil discards.
	Logger *slog.Logger
}

// Client follows one ADS stream. Run owns its goroutine.
type Client struct {
	opts  Options
	conn  grpc.ClientConnInterface
	types map[string]*Type

	// mu guards the fields below: read by Status from any goroutine,
	// written by Run's goroutine.
	mu     sync.Mutex
	state  State
	subs   map[string][]string // non-wildcard type -> names; a wildcard type's "*" and Names
	vers   map[string]string   // type -> last accepted version
	nonces map[string]string   // type -> last nonce seen on this stream
	status Status

	// Run's goroutine only: the version last refused per type, and how
	// long to wait before refusing it again (a SotW server answers a NACK
	// by sending the same version again; without a pause the two would
	// loop as fast as the network allows).
	nacked    map[string]string
	nackDelay time.Duration
}

// Status is what the client has done so far, for /v1/config and metrics.
type Status struct {
	Connected bool
	// Versions is the last accepted version per type URL.
	Versions map[string]string
	// LastNACK is the last refused response's reason ("" if none).
	LastNACK     string
	LastNACKType string
	ACKs, NACKs  int64
	Reconnects   int64
}

// New returns a client over conn (a grpc.ClientConn dialed by the caller;
// the client does not close it).
func New(conn grpc.ClientConnInterface, opts Options) (*Client, error) {
	if opts.Handler == nil || len(opts.Types) == 0 {
		return nil, errors.New("xdsclient: a handler and at least one type are required")
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Node == nil {
		opts.Node = &core.Node{}
	}
	c := &Client{opts: opts, conn: conn, types: map[string]*Type{},
		state: State{}, subs: map[string][]string{}, vers: map[string]string{}, nonces: map[string]string{},
		nacked: map[string]string{}}
	for i := range opts.Types {
		t := &opts.Types[i]
		if t.Decode == nil || t.URL == "" {
			return nil, fmt.Errorf("xdsclient: type %d: URL and Decode are required", i)
		}
		c.types[t.URL] = t
		if t.Wildcard && len(t.Names) > 0 {
			// Never changed by Update's wants: wildcard types are not followed.
			c.subs[t.URL] = append([]string{"*"}, t.Names...)
		}
		c.state[t.URL] = map[string]any{}
	}
	return c, nil
}

// Status returns a copy of the client's status. Any goroutine.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Versions = make(map[string]string, len(c.vers))
	for k, v := range c.vers {
		s.Versions[k] = v
	}
	return s
}

// Run follows the control plane until ctx ends, reconnecting with backoff.
// It returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	backoff := c.opts.MinBackoff
	for {
		got, err := c.stream(ctx)
		c.mu.Lock()
		c.status.Connected = false
		c.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if got {
			backoff = c.opts.MinBackoff
		}
		c.opts.Logger.Warn("xdsclient: stream ended; keeping the last good config", "err", err, "retry_in", backoff)
		d := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, c.opts.MaxBackoff)
		c.mu.Lock()
		c.status.Reconnects++
		c.mu.Unlock()
	}
}

var adsDesc = &grpc.StreamDesc{StreamName: "StreamAggregatedResources", ServerStreams: true, ClientStreams: true}

// stream runs one ADS stream until it fails; got reports whether any
// response arrived (a healthy stream resets the backoff).
func (c *Client) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := c.conn.NewStream(ctx, adsDesc, "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
	if err != nil {
		return false, fmt.Errorf("xdsclient: open stream: %w", err)
	}
	c.mu.Lock()
	clear(c.nonces) // nonces belong to a stream
	c.mu.Unlock()
	// Subscribe to every type: wildcards always, the others when names are
	// wanted (after a reconnect, the names held before).
	for _, t := range c.opts.Types {
		c.mu.Lock()
		names, send := c.subs[t.URL], t.Wildcard || len(c.subs[t.URL]) > 0
		c.mu.Unlock()
		if send {
			if err := c.send(cs, t.URL, names, nil); err != nil {
				return false, err
			}
		}
	}
	for {
		resp := new(discovery.DiscoveryResponse)
		if err := cs.RecvMsg(resp); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("xdsclient: control plane closed the stream")
			}
			return got, err
		}
		if !got {
			got = true
			c.mu.Lock()
			c.status.Connected = true
			c.mu.Unlock()
		}
		if err := c.handle(ctx, cs, resp); err != nil {
			return got, err
		}
	}
}

// send writes one DiscoveryRequest for typeURL: an ACK (nack == nil) or a
// NACK carrying nack's text. version is the last accepted one.
func (c *Client) send(cs grpc.ClientStream, typeURL string, names []string, nack error) error {
	c.mu.Lock()
	req := &discovery.DiscoveryRequest{
		Node:          c.opts.Node,
		TypeUrl:       typeURL,
		VersionInfo:   c.vers[typeURL],
		ResponseNonce: c.nonces[typeURL],
		ResourceNames: names,
	}
	c.mu.Unlock()
	if nack != nil {
		req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: nack.Error()}
	}
	if err := cs.SendMsg(req); err != nil {
		return fmt.Errorf("xdsclient: send %s request: %w", shortType(typeURL), err)
	}
	return nil
}

// handle decodes one response, asks the handler, then ACKs or NACKs it and
// updates the subscriptions the new state needs.
func (c *Client) handle(ctx context.Context, cs grpc.ClientStream, resp *discovery.DiscoveryResponse) error {
	url := resp.GetTypeUrl()
	t, ok := c.types[url]
	c.mu.Lock()
	c.nonces[url] = resp.GetNonce()
	c.mu.Unlock()
	if !ok {
		return c.send(cs, url, nil, fmt.Errorf("xdsclient: type %q not subscribed", url))
	}
	next, err := c.decode(t, resp)
	var want map[string][]string
	if err == nil {
		want, err = c.opts.Handler.Update(next)
	}
	c.mu.Lock()
	names := c.subs[url]
	c.mu.Unlock()
	if err != nil {
		c.opts.Logger.Warn("xdsclient: NACK", "type", shortType(url), "version", resp.GetVersionInfo(), "err", err)
		c.mu.Lock()
		c.status.NACKs++
		c.status.LastNACK = err.Error()
		c.status.LastNACKType = url
		c.mu.Unlock()
		if c.nacked[url] == resp.GetVersionInfo() {
			// The same refused version again: pause before refusing it
			// again (MinBackoff doubling to MaxBackoff).
			c.nackDelay = min(max(2*c.nackDelay, c.opts.MinBackoff), c.opts.MaxBackoff)
			t := time.NewTimer(c.nackDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		c.nacked[url] = resp.GetVersionInfo()
		return c.send(cs, url, names, err)
	}
	delete(c.nacked, url)
	c.nackDelay = 0
	c.mu.Lock()
	c.state = next
	c.vers[url] = resp.GetVersionInfo()
	c.status.ACKs++
	c.mu.Unlock()
	if err := c.send(cs, url, names, nil); err != nil {
		return err
	}
	// Follow the names the new state refers to (RDS from LDS, EDS from CDS).
	for _, dt := range c.opts.Types {
		if dt.Wildcard {
			continue
		}
		w := slices.Clone(want[dt.URL])
		slices.Sort(w)
		w = slices.Compact(w)
		c.mu.Lock()
		old := c.subs[dt.URL]
		changed := !slices.Equal(old, w)
		if changed {
			c.subs[dt.URL] = w
			// Forget resources no longer subscribed to.
			if m := c.state[dt.URL]; len(m) > 0 {
				keep := make(map[string]any, len(w))
				for _, n := range w {
					if v, ok := m[n]; ok {
						keep[n] = v
					}
				}
				c.state[dt.URL] = keep
			}
		}
		c.mu.Unlock()
		if changed {
			if err := c.send(cs, dt.URL, w, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// decode returns the state that accepting resp would give, or the first
// resource error. State-of-the-world: for wildcard types the response is the
// whole set; for the others it replaces the named resources it carries.
func (c *Client) decode(t *Type, resp *discovery.DiscoveryResponse) (State, error) {
	c.mu.Lock()
	next := make(State, len(c.state))
	for k, v := range c.state {
		next[k] = v
	}
	subs := c.subs[t.URL]
	c.mu.Unlock()
	m := map[string]any{}
	if !t.Wildcard {
		for n, v := range next[t.URL] {
			m[n] = v
		}
	}
	seen := map[string]bool{}
	for i, r := range resp.GetResources() {
		if r.GetTypeUrl() != t.URL {
			return nil, fmt.Errorf("resources[%d]: type %q in a %s response", i, r.GetTypeUrl(), shortType(t.URL))
		}
		name, v, err := t.Decode(r)
		if err != nil {
			return nil, fmt.Errorf("resources[%d] (%s %q): %w", i, shortType(t.URL), name, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("resources[%d]: duplicate %s %q", i, shortType(t.URL), name)
		}
		seen[name] = true
		if !t.Wildcard && !slices.Contains(subs, name) {
			continue // not asked for (any more)
		}
		m[name] = v
	}
	next[t.URL] = m
	return next, nil
}

// shortType is the last element of a type URL, for messages.
func shortType(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '.' {
			return url[i+1:]
		}
	}
	return url
}
