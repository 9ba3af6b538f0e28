package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Registration is an instance kept registered by Keepalive: heartbeated
// before its TTL runs out, registered again when the server no longer has it,
// and deregistered when the registration ends. Its methods are safe for
// concurrent use.
type Registration struct {
	hb       *heartbeater
	in       Instance // ID set; read-only after Keepalive returns
	interval time.Duration
	opts     keepaliveOptions

	// due is when the next heartbeat is owed; guarded by hb.mu.
	due time.Time

	stopAfter func() bool // stops the context.AfterFunc watching the caller's ctx
	endOnce   sync.Once
	closed    atomic.Bool
	done      chan struct{} // closed once deregistered (or tried to)
	err       error         // the deregister's error; read after done
}

// KeepaliveOption tunes one Keepalive.
type KeepaliveOption func(*keepaliveOptions)

type keepaliveOptions struct {
	onError           func(error)
	deregisterTimeout time.Duration
}

// WithKeepaliveErrors hears every error the registration meets and retries
// (an unreachable server, a failed re-register): once per failed batch for
// each registration in it, so with many registrations give it to one.
// fn runs on the heartbeating goroutine, shared with every registration of
// the Client: it must not block.
func WithKeepaliveErrors(fn func(error)) KeepaliveOption {
	return func(o *keepaliveOptions) { o.onError = fn }
}

// WithDeregisterTimeout bounds the deregister sent when the registration
// ends (default 5s).
func WithDeregisterTimeout(d time.Duration) KeepaliveOption {
	return func(o *keepaliveOptions) { o.deregisterTimeout = d }
}

// HeartbeatFraction is the part of the TTL between two heartbeats of one
// instance. The server marks an instance unhealthy after 3 x TTL without a
// heartbeat, so five heartbeats in a row may fail before it does.
const HeartbeatFraction = 0.5

// maxHeartbeatIDs is the API's limit of ids per heartbeat request, and
// maxReregister the instances per register request when many come back.
const (
	maxHeartbeatIDs = 10000
	maxReregister   = 1000
)

// ErrRegistrationClosed is returned by Close after the first call.
var ErrRegistrationClosed = errors.New("client: registration already closed")

// Keepalive registers in and keeps it registered until ctx ends or Close is
// called, then deregisters it. ttl (rounded up to whole seconds, at most
// 3600s) replaces in.TTLSeconds; 0 keeps in.TTLSeconds, and an instance
// with no TTL is registered and deregistered but never heartbeated.
//
// Heartbeats go every HeartbeatFraction x TTL, and all the registrations of
// one Client share them: one POST /v1/heartbeats carries every id that is
// due (or due within a quarter of its interval), up to 10,000 per request.
// Ids the server does not know (it lost them, or was restarted without its
// data) are registered again at once. While the server is unreachable the
// heartbeats are retried with jittered exponential backoff, never waiting
// more than one interval.
//
// Keepalive returns once the first register is answered: its error, if any,
// is returned and nothing keeps running. The registration owns no goroutine
// of its own; the Client's heartbeating goroutine runs while it has
// registrations.
func (c *Client) Keepalive(ctx context.Context, in Instance, ttl time.Duration, opts ...KeepaliveOption) (*Registration, error) {
	if ttl < 0 || ttl > time.Hour {
		return nil, fmt.Errorf("client: keepalive: ttl %v not in [0, 1h]", ttl)
	}
	if ttl > 0 {
		in.TTLSeconds = int(math.Ceil(ttl.Seconds()))
	}
	r := &Registration{hb: c.heartbeater(), done: make(chan struct{})}
	r.opts.deregisterTimeout = 5 * time.Second
	for _, o := range opts {
		o(&r.opts)
	}
	res, err := c.Register(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("client: keepalive: %w", err)
	}
	in.ID = res.IDs[0]
	r.in = in
	r.interval = time.Duration(float64(in.TTLSeconds) * HeartbeatFraction * float64(time.Second))
	if r.interval > 0 {
		r.hb.add(r, time.Now().Add(r.interval))
	}
	r.stopAfter = context.AfterFunc(ctx, func() { r.end() })
	return r, nil
}

// ID is the registered instance's id.
func (r *Registration) ID() string { return r.in.ID }

// Instance is the instance as registered, with its ID.
func (r *Registration) Instance() Instance { return r.in }

// Done is closed when the registration has ended (ctx ended or Close) and
// its deregister was answered or gave up.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Err is the deregister's error once Done is closed (nil while running).
func (r *Registration) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Close stops heartbeating and deregisters the instance, waiting for the
// answer (bounded by WithDeregisterTimeout). An instance the server no
// longer has is not an error. A second Close returns ErrRegistrationClosed.
func (r *Registration) Close() error {
	r.stopAfter() // if ctx already ended, its AfterFunc deregisters
	r.endOnce.Do(r.deregister)
	<-r.done
	if r.closed.Swap(true) {
		return ErrRegistrationClosed
	}
	return r.err
}

// end is the context's AfterFunc.
func (r *Registration) end() { r.endOnce.Do(r.deregister) }

func (r *Registration) deregister() {
	defer close(r.done)
	if r.interval > 0 {
		r.hb.remove(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.deregisterTimeout)
	defer cancel()
	_, err := r.hb.c.DeregisterOne(ctx, r.in.ID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		r.err = fmt.Errorf("client: keepalive: deregister %s: %w", r.in.ID, err)
	}
}

// heartbeater sends the heartbeats of every registration of one Client. Its
// goroutine runs while there are registrations: the first add starts it and
// the last remove stops it (and waits for it), so an idle Client owns no
// goroutine.
type heartbeater struct {
	c *Client

	// mu guards the fields below; never held across a request.
	mu       sync.Mutex
	regs     map[string]*Registration
	wake     chan struct{} // buffered 1: a new registration may be due sooner
	cancel   context.CancelFunc
	loopDone chan struct{} // of the running loop; nil when none
}

func (c *Client) heartbeater() *heartbeater {
	c.hbOnce.Do(func() {
		c.hb = &heartbeater{c: c, regs: map[string]*Registration{}, wake: make(chan struct{}, 1)}
	})
	return c.hb
}

func (h *heartbeater) add(r *Registration, due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.due = due
	// Of two registrations of one id the newer heartbeats; the older still
	// deregisters when it ends, and the newer then registers it again.
	h.regs[r.in.ID] = r
	if h.loopDone == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel, h.loopDone = cancel, make(chan struct{})
		go h.loop(ctx, h.loopDone)
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// remove drops r; when it was the last registration it stops the loop and
// waits for it, so that a closed registration leaves no goroutine behind.
func (h *heartbeater) remove(r *Registration) {
	h.mu.Lock()
	if h.regs[r.in.ID] == r {
		delete(h.regs, r.in.ID)
	}
	var wait chan struct{}
	if len(h.regs) == 0 && h.loopDone != nil {
		h.cancel()
		wait = h.loopDone
		h.loopDone, h.cancel = nil, nil
	}
	h.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

// loop heartbeats until ctx (cancelled by the last remove) ends.
func (h *heartbeater) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var (
		backoff time.Duration
		batch   []*Registration
		ids     []string
	)
	for {
		now := time.Now()
		batch = batch[:0]
		next := now.Add(time.Hour)
		minInterval := time.Hour
		h.mu.Lock()
		for _, r := range h.regs {
			minInterval = min(minInterval, r.interval)
			// A registration due within a quarter of its interval goes
			// now, so that registrations made apart fall into step and
			// share requests.
			if !r.due.After(now.Add(r.interval / 4)) {
				batch = append(batch, r)
			} else if r.due.Before(next) {
				next = r.due
			}
		}
		h.mu.Unlock()

		if len(batch) > 0 {
			// A round gets one interval (at least a second): a request the
			// server never answers (a half-open connection) is given up and
			// retried, not waited on until TCP notices minutes later.
			bctx, cancel := context.WithTimeout(ctx, max(minInterval, time.Second))
			err := h.beat(bctx, batch, &ids)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				for _, r := range batch {
					if r.opts.onError != nil {
						r.opts.onError(err)
					}
				}
				// Full jitter, from 100ms doubling up to one interval: the
				// registrations stay due and are retried as a batch.
				backoff = min(max(2*backoff, 100*time.Millisecond), minInterval)
				next = now.Add(backoff/2 + rand.N(backoff/2+1))
			} else {
				backoff = 0
				h.mu.Lock()
				for _, r := range batch {
					r.due = now.Add(r.interval)
					if r.due.Before(next) {
						next = r.due
					}
				}
				h.mu.Unlock()
			}
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-h.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// beat heartbeats batch in requests of at most maxHeartbeatIDs ids, and
// registers again the instances the server does not know.
func (h *heartbeater) beat(ctx context.Context, batch []*Registration, ids *[]string) error {
	byID := make(map[string]*Registration, len(batch))
	for _, r := range batch {
		byID[r.in.ID] = r
	}
	var lost []Instance
	for start := 0; start < len(batch); start += maxHeartbeatIDs {
		*ids = (*ids)[:0]
		for _, r := range batch[start:min(start+maxHeartbeatIDs, len(batch))] {
			*ids = append(*ids, r.in.ID)
		}
		notFound, err := h.c.Heartbeat(ctx, (*ids)...)
		if err != nil {
			return fmt.Errorf("client: keepalive: heartbeat: %w", err)
		}
		for _, id := range notFound {
			if r, ok := byID[id]; ok {
				lost = append(lost, r.in)
			}
		}
	}
	for start := 0; start < len(lost); start += maxReregister {
		if _, err := h.c.Register(ctx, lost[start:min(start+maxReregister, len(lost))]...); err != nil {
			return fmt.Errorf("client: keepalive: register again: %w", err)
		}
	}
	return nil
}
