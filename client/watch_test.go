package client

// The watch tests use a tiny fake of one service's blocking query, written to
// docs/api.md, for unit-testing the client only.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeService holds one service's revision and answers blocking queries on it.
type fakeService struct {
	mu      sync.Mutex
	rev     uint64
	changed chan struct{} // closed and replaced on every bump
	fail    atomic.Int32  // answer the next n requests with 503
	queries atomic.Int32
}

func newFakeService() *fakeService { return &fakeService{changed: make(chan struct{})} }

func (f *fakeService) bump() {
	f.mu.Lock()
	f.rev++
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.queries.Add(1)
	if r.URL.Query().Get("selector") == "bad(" {
		w.WriteHeader(400)
		w.Write([]byte(`{"error":{"code":"invalid_argument","message":"bad selector","field":"selector"}}`))
		return
	}
	if f.fail.Load() > 0 {
		f.fail.Add(-1)
		w.WriteHeader(503)
		w.Write([]byte(`{"error":{"code":"unavailable","message":"not ready"}}`))
		return
	}
	q := r.URL.Query()
	f.mu.Lock()
	rev, ch := f.rev, f.changed
	f.mu.Unlock()
	if q.Has("index") {
		index, _ := strconv.ParseUint(q.Get("index"), 10, 64)
		wait, err := time.ParseDuration(q.Get("wait"))
		if err != nil {
			wait = 30 * time.Second
		}
		if rev <= index {
			t := time.NewTimer(wait)
			select {
			case <-ch:
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
			f.mu.Lock()
			rev = f.rev
			f.mu.Unlock()
		}
	}
	inst := []Instance{}
	if rev > 0 {
		inst = append(inst, Instance{ID: "i" + strconv.FormatUint(rev, 10), Service: "s", Host: "h", Port: 1, Healthy: true, Revision: rev})
	}
	json.NewEncoder(w).Encode(QueryResult{Revision: rev, Instances: inst})
}

func startFake(t *testing.T) (*Client, *fakeService) {
	t.Helper()
	f := newFakeService()
	srv := httptest.NewServer(f)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.http.CloseIdleConnections()
		srv.CloseClientConnections()
		srv.Close()
	})
	return c, f
}

func recv(t *testing.T, w *Watcher) QueryResult {
	t.Helper()
	select {
	case res, ok := <-w.C:
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("no state within 5s")
	}
	return QueryResult{}
}

func TestWatchDeliversStatesAndStops(t *testing.T) {
	c, f := startFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := c.Watch(ctx, "n", "s", WatchOptions{Wait: 10 * time.Second})

	if got := recv(t, w); got.Revision != 0 || len(got.Instances) != 0 {
		t.Fatalf("first state = %+v, want the empty service at revision 0", got)
	}
	for want := uint64(1); want <= 3; want++ {
		// Wait until the watch is parked on a blocking query, so each bump
		// is seen on its own rather than coalesced.
		waitFor(t, func() bool { return f.queries.Load() >= int32(want+1) })
		f.bump()
		got := recv(t, w)
		if got.Revision != want || len(got.Instances) != 1 || got.Instances[0].Revision != want {
			t.Fatalf("state = %+v, want revision %d", got, want)
		}
	}

	cancel() // the parked blocking query must end with the context
	select {
	case _, ok := <-w.C:
		if ok {
			t.Fatal("state delivered after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop within 5s of cancel")
	}
	if err := w.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() = %v, want context.Canceled", err)
	}
	// goleak in TestMain checks the goroutine is gone.
}

func TestWatchCoalescesForSlowReader(t *testing.T) {
	c, f := startFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := c.Watch(ctx, "n", "s", WatchOptions{Wait: 10 * time.Second})
	// Do not read while the service changes five times.
	for range 5 {
		f.bump()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := recv(t, w)
		if got.Revision == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw the latest state, last %d", got.Revision)
		}
	}
}

func TestWatchRetriesTransientErrors(t *testing.T) {
	c, f := startFake(t)
	f.fail.Store(3)
	var seen atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := c.Watch(ctx, "n", "s", WatchOptions{
		MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		OnError: func(err error) {
			if errors.Is(err, ErrUnavailable) {
				seen.Add(1)
			}
		},
	})
	if got := recv(t, w); got.Revision != 0 {
		t.Fatalf("state = %+v", got)
	}
	if seen.Load() != 3 {
		t.Errorf("OnError saw %d unavailable errors, want 3", seen.Load())
	}
}

func TestWatchStopsOnPermanentError(t *testing.T) {
	c, _ := startFake(t)
	w := c.Watch(context.Background(), "n", "s", WatchOptions{Selector: "bad("})
	select {
	case _, ok := <-w.C:
		if ok {
			t.Fatal("got a state for an invalid selector")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop")
	}
	var e *Error
	if err := w.Err(); !errors.As(err, &e) || e.Field != "selector" || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Err() = %v, want invalid_argument on field selector", err)
	}
}

func TestWatchFuncReturnsCallbackError(t *testing.T) {
	c, _ := startFake(t)
	stop := errors.New("enough")
	calls := 0
	err := c.WatchFunc(context.Background(), "n", "s", WatchOptions{}, func(QueryResult) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("WatchFunc = %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWatchClampsWait(t *testing.T) {
	var waits []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		waits = append(waits, r.URL.Query().Get("wait"))
		n := len(waits)
		mu.Unlock()
		w.Write([]byte(`{"revision":` + strconv.Itoa(n) + `,"instances":[]}`))
	}))
	defer srv.Close()
	c, _ := New(srv.URL)
	defer c.http.CloseIdleConnections()
	calls := 0
	err := c.WatchFunc(context.Background(), "n", "s", WatchOptions{Wait: time.Hour}, func(QueryResult) error {
		if calls++; calls == 2 {
			return errors.New("stop")
		}
		return nil
	})
	if err == nil || err.Error() != "stop" {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != 2 || waits[0] != "" || waits[1] != "5m0s" {
		t.Errorf("waits sent = %q, want no wait on the first query, then 5m0s", waits)
	}
}

// TestWatchNeverMovesBackwards: behind one address, a server behind the
// one that answered before (a cluster behind a load balancer) answers an
// older revision; the watch skips it and delivers only what is at least
// as new, an older revision from a server that has applied the index (the
// service shrank across a restart), or an older one given twice in a row
// (the server lost its data: following it is all there is to do). A scripted fake: a lagging
// server's timing is not reproducible with real ones in a unit test.
func TestWatchNeverMovesBackwards(t *testing.T) {
	type answer struct {
		rev, applied uint64
		ids          []string
	}
	script := []answer{
		{rev: 10, ids: []string{"a", "b"}},
		{rev: 5, ids: []string{"a"}},              // behind: skipped
		{rev: 11, ids: []string{"a", "b", "c"}},   // newer
		{rev: 0},                                  // behind, never saw the service: skipped
		{rev: 12, ids: []string{"a", "c"}},        // newer
		{rev: 5, applied: 9, ids: []string{"a"}},  // behind index 12: skipped
		{rev: 7, applied: 12, ids: []string{"a"}}, // current, after a restart: delivered
		{rev: 3, ids: []string{"x"}},              // behind: skipped
		{rev: 3, ids: []string{"x"}},              // still: the server's data went back
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i >= len(script) {
			<-r.Context().Done() // nothing more: block like a quiet service
			return
		}
		a := script[i]
		if a.applied > 0 {
			w.Header().Set("X-Sextant-Applied", strconv.FormatUint(a.applied, 10))
		}
		res := QueryResult{Revision: a.rev, Instances: []Instance{}}
		for _, id := range a.ids {
			res.Instances = append(res.Instances, Instance{ID: id, Service: "s", Host: "h", Port: 1, Revision: a.rev})
		}
		json.NewEncoder(w).Encode(res)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []uint64
	done := make(chan error, 1)
	go func() {
		done <- c.WatchFunc(ctx, "default", "s", WatchOptions{Wait: time.Second}, func(res QueryResult) error {
			got = append(got, res.Revision)
			if len(got) == 5 {
				cancel()
			}
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("delivered %v within 10 s, want 5 states", got)
	}
	if fmt.Sprint(got) != "[10 11 12 7 3]" {
		t.Fatalf("delivered revisions %v, want [10 11 12 7 3]", got)
	}
}
