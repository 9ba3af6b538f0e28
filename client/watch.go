package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// MaxWait is the longest a server holds one blocking query.
const MaxWait = 5 * time.Minute

// WatchOptions configure a watch.
type WatchOptions struct {
	Selector    string
	HealthyOnly bool
	// Wait is how long each blocking query may be held by the server
	// (0: 30s, the server's default; at most MaxWait).
	Wait time.Duration
	// MinBackoff and MaxBackoff bound the wait before retrying after a
	// transient error (defaults 100ms and 5s); the wait doubles each time.
	MinBackoff, MaxBackoff time.Duration
	// OnError, if set, is told of each transient error before the retry.
	// It runs on the watching goroutine and must not block.
	OnError func(error)
}

// WatchFunc follows one service with blocking queries, each with index = the
// last revision seen, and calls fn with the current state first and then with
// every new state (a new service revision), on the calling goroutine. It
// returns when ctx ends (with ctx's error), when fn returns an error (that
// error), or on a permanent error such as an invalid selector. Transient
// errors (network, unavailable, overload) are retried with backoff.
func (c *Client) WatchFunc(ctx context.Context, namespace, service string, opts WatchOptions, fn func(QueryResult) error) error {
	minB, maxB := opts.MinBackoff, opts.MaxBackoff
	if minB <= 0 {
		minB = 100 * time.Millisecond
	}
	if maxB < minB {
		maxB = max(5*time.Second, minB)
	}
	q := QueryOptions{Selector: opts.Selector, HealthyOnly: opts.HealthyOnly}
	backoff := minB
	first := true
	behind := 0 // older answers skipped in a row
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := c.Query(ctx, namespace, service, q)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !retryable(err) {
				return err
			}
			if opts.OnError != nil {
				opts.OnError(err)
			}
			// Full jitter keeps many watchers from retrying in step.
			if err := sleep(ctx, rand.N(backoff)+time.Millisecond); err != nil {
				return err
			}
			backoff = min(2*backoff, maxB)
			continue
		}
		backoff = minB
		if !first && res.Revision < q.Index && res.Applied < q.Index && behind == 0 {
			// A server behind the one that answered q.Index (servers of a
			// cluster behind one address): what it holds is older than what
			// was delivered, so the watch does not move backwards. It asks
			// again, and that server blocks until it has caught up. Only
			// an answer still older after that is taken: the server's data
			// went back (lost, or restored from a backup).
			behind++
			continue
		}
		behind = 0
		if first || res.Revision != q.Index {
			first = false
			if err := fn(res); err != nil {
				return err
			}
		}
		q.Index = res.Revision
		// Index 0 (an unknown service) must still block: Query only sends
		// the index when Wait or Index is set. The server rejects a wait
		// above MaxWait, which would end the watch for good.
		q.Wait = min(opts.Wait, MaxWait)
		if q.Wait <= 0 {
			q.Wait = 30 * time.Second
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Watcher delivers the states of a watched service on C. See Client.Watch.
type Watcher struct {
	// C receives the current state, then each new state. If the reader falls
	// behind, it gets the latest state, not every intermediate one. C is
	// closed when the watch ends.
	C    <-chan QueryResult
	done chan struct{}
	err  error
}

// Err returns why the watch ended: ctx's error or a permanent error. It
// waits for the watching goroutine to finish.
func (w *Watcher) Err() error {
	<-w.done
	return w.err
}

// Watch starts one goroutine that follows a service like WatchFunc and
// delivers states on the returned Watcher's channel. The goroutine stops and
// closes the channel when ctx ends or on a permanent error; cancel ctx to
// stop it.
func (c *Client) Watch(ctx context.Context, namespace, service string, opts WatchOptions) *Watcher {
	ch := make(chan QueryResult, 1)
	w := &Watcher{C: ch, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(ch)
		err := c.WatchFunc(ctx, namespace, service, opts, func(res QueryResult) error {
			// Coalesce: replace an unread state rather than wait for a slow
			// reader, so the watch never falls behind the server.
			for {
				select {
				case ch <- res:
					return nil
				default:
				}
				select {
				case <-ch:
				default:
				}
			}
		})
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = ctx.Err()
		}
		w.err = err
	}()
	return w
}
