package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLifecycleStopsInReverseOnce: the parts stop in the reverse order of
// their start, each once, whether stop is called once, twice, or deferred
// after a step failed part-way through the start.
func TestLifecycleStopsInReverseOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stops int  // calls of stop
		fail  bool // a step after b fails: c never starts
		want  []string
	}{
		{"one stop", 1, false, []string{"c", "b", "a"}},
		{"stop twice", 2, false, []string{"c", "b", "a"}},
		{"failed start", 1, true, []string{"b", "a"}},
		{"failed start, stop twice", 2, true, []string{"b", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stopped []string
			run := func() error {
				lc := newLifecycle(nil)
				defer lc.stop()
				lc.add("a", func() error { stopped = append(stopped, "a"); return nil })
				lc.start("b", false, func(ctx context.Context) error {
					<-ctx.Done()
					stopped = append(stopped, "b") // before b's stop returns
					return nil
				})
				if tc.fail {
					return errors.New("c: cannot start")
				}
				cDone := make(chan struct{})
				lc.serve("c", true, func() error { <-cDone; return nil }, func() error {
					stopped = append(stopped, "c")
					close(cDone)
					return nil
				})
				for range tc.stops {
					if err := lc.stop(); err != nil {
						return err
					}
				}
				return nil
			}
			err := run()
			if tc.fail != (err != nil) {
				t.Fatalf("run: %v", err)
			}
			if !slices.Equal(stopped, tc.want) {
				t.Fatalf("stopped %v, want %v", stopped, tc.want)
			}
		})
	}
}

// TestLifecycleEssential: an essential part that ends on its own ends
// wait with its error, named; a part ending otherwise does not.
func TestLifecycleEssential(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		essential bool
		err       error  // what the part returns on its own
		want      string // wait's error; empty: wait lasts until ctx ends
	}{
		{"essential fails", true, boom, "engine: boom"},
		{"essential returns nil", true, nil, "engine: stopped"},
		{"not essential", false, boom, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := newLifecycle(nil)
			defer lc.stop()
			lc.add("store", func() error { return nil })
			lc.start("engine", tc.essential, func(context.Context) error { return tc.err })
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := lc.wait(ctx)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("wait: %v, want nil once ctx ended", err)
			case tc.want == "" && ctx.Err() == nil:
				t.Fatal("wait returned before ctx ended")
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("wait: %v, want %q", err, tc.want)
			case tc.err != nil && tc.want != "" && !errors.Is(err, tc.err):
				t.Fatalf("wait: %v does not wrap %v", err, tc.err)
			}
		})
	}
}

// TestLifecycleStoppedByAnother: an essential part that ends because a
// part stopped before it pulled its ground away (the http server after
// its drain) did not fail.
func TestLifecycleStoppedByAnother(t *testing.T) {
	lc := newLifecycle(nil)
	closed := make(chan struct{})
	lc.serve("http server", true, func() error { <-closed; return errors.New("closed") }, func() error { return nil })
	lc.add("drain", func() error { close(closed); return nil })
	if err := lc.stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lc.failed:
		t.Fatalf("failed after the shutdown: %v", lc.failure)
	default:
	}
}

// TestLifecycleStopErrors: stop returns every stop function's error and
// still stops the parts before the one that failed.
func TestLifecycleStopErrors(t *testing.T) {
	lc := newLifecycle(nil)
	closeErr := errors.New("store: close failed")
	stopped := false
	lc.add("store", func() error { stopped = true; return closeErr })
	lc.add("registry", func() error { return errors.New("registry: close failed") })
	err := lc.stop()
	if !errors.Is(err, closeErr) || !strings.Contains(err.Error(), "registry: close failed") || !stopped {
		t.Fatalf("stop: %v (store stopped: %v)", err, stopped)
	}
	if err := lc.stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}
