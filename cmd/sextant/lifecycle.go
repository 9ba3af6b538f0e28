package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
)

// lifecycle owns the running parts of a command (the server, the gateway):
// the servers and goroutines it started, the stores it opened. Each part is
// handed over as soon as it runs, so that a later step's failure and the
// shutdown stop exactly the parts that run: in the reverse order of their
// start, each once.
//
// The command's goroutine calls every method. The goroutines the lifecycle
// starts only report their own end.
type lifecycle struct {
	log   *slog.Logger
	parts []part // running, in start order

	stopping atomic.Bool   // stop has begun: a part ending now was stopped
	failOnce sync.Once     // the first essential part to end on its own
	failed   chan struct{} // closed by failOnce
	failure  error         // why, set before failed is closed
}

// part is one running part and the function that stops it.
type part struct {
	name string
	stop func() error
}

// newLifecycle returns a lifecycle with nothing running. A part that is not
// essential and ends on its own is logged on log (nil: discarded).
func newLifecycle(log *slog.Logger) *lifecycle {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &lifecycle{log: log, failed: make(chan struct{})}
}

// add hands over a part that already runs (an open store, a registry):
// stop stops it, and its error is stop's.
func (l *lifecycle) add(name string, stop func() error) {
	l.parts = append(l.parts, part{name: name, stop: stop})
}

// start runs run on a goroutine of its own, with a context that the part's
// stop cancels before it waits for run to return. What run returns once
// the shutdown began is ignored.
//
// An essential part is one the command cannot serve without: run returning
// before the shutdown began (with nil or an error) makes wait return its
// error, prefixed with name. Any other part ending early is logged.
func (l *lifecycle) start(name string, essential bool, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	l.serve(name, essential, func() error { return run(ctx) }, func() error { cancel(); return nil })
}

// serve is start for a server stopped by a call rather than a context: it
// runs serve on a goroutine of its own; the part's stop calls shutdown, then
// waits for serve to return. Its error is shutdown's.
func (l *lifecycle) serve(name string, essential bool, serve, shutdown func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := serve()
		if l.stopping.Load() {
			return // stopped by the shutdown, or by a part stopped before it
		}
		if !essential {
			l.log.Warn("stopped on its own", "part", name, "err", err)
			return
		}
		if err == nil {
			err = errors.New("stopped")
		}
		l.failOnce.Do(func() {
			l.failure = fmt.Errorf("%s: %w", name, err)
			close(l.failed)
		})
	}()
	l.add(name, func() error {
		err := shutdown()
		<-done
		return err
	})
}

// wait blocks until ctx ends, returning nil, or until an essential part
// ends on its own, returning its error. It stops nothing.
func (l *lifecycle) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-l.failed:
		return l.failure
	}
}

// stop stops the running parts, the last started first, and returns their
// stop functions' errors. Each part is stopped once: a later call stops
// nothing, so stop can be deferred for early returns and also called at
// the shutdown.
func (l *lifecycle) stop() error {
	l.stopping.Store(true)
	var errs []error
	for len(l.parts) > 0 {
		p := l.parts[len(l.parts)-1]
		l.parts = l.parts[:len(l.parts)-1]
		if err := p.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
