package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// countingTransport counts the requests a Client sends, by method and path.
type countingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[req.Method+" "+req.URL.Path]++
	c.mu.Unlock()
	return c.base.RoundTrip(req)
}

func (c *countingTransport) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// stackClient starts a restartable real server and a client that counts its
// requests.
func stackClient(t *testing.T) (*apitest.Stack, *Client, *countingTransport) {
	t.Helper()
	st := apitest.StartStack(t)
	tr := NewTransport()
	ct := &countingTransport{base: tr, n: map[string]int{}}
	c, err := New(st.URL(), WithHTTPClient(&http.Client{Transport: ct}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return st, c, ct
}

// eventually polls cond every 20ms until it holds or limit passes.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func present(c *Client, id string) bool {
	in, err := c.Get(context.Background(), id)
	return err == nil && in.Healthy
}

func TestKeepaliveHeartbeatsAndDeregistersOnClose(t *testing.T) {
	_, c, ct := stackClient(t)
	ctx := context.Background()
	reg, err := c.Keepalive(ctx, Instance{Service: "orders", Host: "10.0.0.1", Port: 80}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reg.ID() == "" || reg.Instance().TTLSeconds != 1 {
		t.Fatalf("registration %+v", reg.Instance())
	}
	// 3 x TTL without a heartbeat would make it unhealthy; the heartbeats
	// (every 500ms) keep it healthy past that.
	eventually(t, 10*time.Second, "three heartbeats", func() bool { return ct.count("POST /v1/heartbeats") >= 3 })
	time.Sleep(3100*time.Millisecond - 3*500*time.Millisecond)
	if !present(c, reg.ID()) {
		t.Fatal("instance not healthy after 3 x TTL of heartbeats")
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, reg.ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after Close: Get = %v, want ErrNotFound", err)
	}
	if err := reg.Close(); !errors.Is(err, ErrRegistrationClosed) {
		t.Errorf("second Close = %v", err)
	}
	// TestMain's goleak checks that the heartbeating goroutine stopped.
}

func TestKeepaliveDeregistersWhenContextEnds(t *testing.T) {
	_, c, _ := stackClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	reg, err := c.Keepalive(ctx, Instance{Service: "orders", Host: "10.0.0.1", Port: 81}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-reg.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("registration did not end with its context")
	}
	if reg.Err() != nil {
		t.Fatal(reg.Err())
	}
	if _, err := c.Get(context.Background(), reg.ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after ctx end: Get = %v, want ErrNotFound", err)
	}
	if err := reg.Close(); err != nil {
		t.Errorf("Close after ctx end = %v, want the deregister's result (nil)", err)
	}
}

func TestKeepaliveRejectsBadInstance(t *testing.T) {
	_, c, _ := stackClient(t)
	_, err := c.Keepalive(context.Background(), Instance{Service: "orders", Host: "h", Port: 0}, time.Second)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInvalidArgument) || e.Field != "instances[0].port" {
		t.Fatalf("Keepalive(port 0) = %v", err)
	}
	if _, err := c.Keepalive(context.Background(), Instance{Service: "orders", Host: "h", Port: 1}, 2*time.Hour); err == nil {
		t.Fatal("Keepalive accepted a 2h ttl")
	}
}

// TestKeepaliveSurvivesServerRestart: the server stops (connections
// refused: heartbeats back off), comes back without its data (heartbeats
// answer not_found), and the instance is registered again within about one
// heartbeat interval; a restart that keeps the data needs nothing.
func TestKeepaliveSurvivesServerRestart(t *testing.T) {
	st, c, ct := stackClient(t)
	var errs atomic.Int64
	reg, err := c.Keepalive(context.Background(), Instance{Service: "orders", Host: "10.0.0.1", Port: 82,
		Metadata: map[string]string{"zone": "z1"}}, 2*time.Second,
		WithKeepaliveErrors(func(error) { errs.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()

	mustOK(t, st.Wipe())
	eventually(t, 10*time.Second, "a failed heartbeat while the server is down", func() bool { return errs.Load() > 0 })
	mustOK(t, st.Start())
	took := eventually(t, 10*time.Second, "instance back after a restart without data", func() bool { return present(c, reg.ID()) })
	t.Logf("back %v after the restart (interval 1s)", took)
	in, err := c.Get(context.Background(), reg.ID())
	if err != nil || in.Metadata["zone"] != "z1" || in.TTLSeconds != 2 {
		t.Fatalf("registered again as %+v, %v", in, err)
	}
	if ct.count("POST /v1/instances") < 2 {
		t.Errorf("no register after the not_found")
	}

	st.Stop()
	mustOK(t, st.Start())
	eventually(t, 10*time.Second, "instance present after a restart with data", func() bool { return present(c, reg.ID()) })
}

// TestKeepaliveBatchesHeartbeats: many registrations of one Client share
// heartbeat requests.
func TestKeepaliveBatchesHeartbeats(t *testing.T) {
	_, c, ct := stackClient(t)
	const n = 200
	regs := make([]*Registration, n)
	for i := range regs {
		var err error
		regs[i], err = c.Keepalive(context.Background(), Instance{ID: fmt.Sprintf("b-%d", i), Service: "batch", Host: "10.0.0.1", Port: 1000 + i}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
	}
	before := ct.count("POST /v1/heartbeats")
	time.Sleep(2 * time.Second) // 4 intervals of 500ms
	sent := ct.count("POST /v1/heartbeats") - before
	// One request per registration per interval would be 800; batched, at
	// most a few per interval (registrations fall into step within one).
	if sent == 0 || sent > 40 {
		t.Errorf("%d heartbeat requests for %d registrations over 4 intervals", sent, n)
	}
	for _, r := range regs {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d heartbeat requests for %d registrations over 4 intervals", sent, n)
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestKeepaliveHungHeartbeat: a heartbeat the server never answers (a
// half-open connection, a stuck proxy) is given up after an interval and
// retried, so heartbeats go on rather than wait for TCP to notice.
func TestKeepaliveHungHeartbeat(t *testing.T) {
	var beats atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/instances":
			w.Write([]byte(`{"revision":1,"ids":["hung-1"]}`))
		case "POST /v1/heartbeats":
			if beats.Add(1) == 1 {
				select { // the first one hangs until the client gives up
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
			w.Write([]byte(`{"revision":1,"not_found":[]}`))
		case "POST /v1/instances:deregister":
			w.Write([]byte(`{"revision":2,"not_found":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.HTTPClient().CloseIdleConnections()
	r, err := c.Keepalive(context.Background(), Instance{ID: "hung-1", Service: "hung", Host: "10.0.0.1", Port: 80}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for deadline := time.Now().Add(10 * time.Second); beats.Load() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d heartbeat requests in 10s with a 1s TTL: a hung heartbeat stopped the others", beats.Load())
		}
	}
}
