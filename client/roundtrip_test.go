package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// httpBackend is a real HTTP server on loopback that answers with its name,
// or with status when status is not 200.
type httpBackend struct {
	name   string
	status int
	hits   atomic.Int64
	srv    *httptest.Server
}

func startHTTPBackend(t *testing.T, name string, status int) *httpBackend {
	t.Helper()
	b := &httpBackend{name: name, status: status}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Backend", b.name)
		w.Header().Set("X-Host", r.Host)
		w.WriteHeader(b.status)
		io.WriteString(w, b.name+":"+string(body))
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *httpBackend) port() int { return b.srv.Listener.Addr().(*net.TCPAddr).Port }

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestRoundTripperMovesOffFailingInstances(t *testing.T) {
	_, c, _ := stackClient(t)
	good1 := startHTTPBackend(t, "good1", 200)
	good2 := startHTTPBackend(t, "good2", 200)
	bad := startHTTPBackend(t, "bad", 503)
	mustRegister(t, c,
		Instance{ID: "good1", Service: "web", Host: "127.0.0.1", Port: good1.port(), Metadata: map[string]string{"role": "good"}},
		Instance{ID: "good2", Service: "web", Host: "127.0.0.1", Port: good2.port(), Metadata: map[string]string{"role": "good"}},
		Instance{ID: "bad", Service: "web", Host: "127.0.0.1", Port: bad.port(), Metadata: map[string]string{"role": "bad"}},
		Instance{ID: "down", Service: "web", Host: "127.0.0.1", Port: closedPort(t), Metadata: map[string]string{"role": "down"}},
	)
	v, err := c.NewView(ViewOptions{Policy: PolicyRoundRobin, Wait: 5 * time.Second,
		OutlierEjection: &OutlierEjection{ConsecutiveFailures: 3, BaseEjection: time.Minute, MaxEjectedPercent: 50, CountRejected: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	log, err := OpenCallLog(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	base := NewTransport()
	defer base.CloseIdleConnections()
	hc := &http.Client{Transport: NewRoundTripper(v, RoundTripperOptions{Base: base, MaxRetries: 3, Recorder: log})}
	start := time.Now()

	// GETs: every one answered 200 by a good instance; the failing ones
	// are retried elsewhere and, once ejected, no longer picked.
	for i := range 40 {
		resp, err := hc.Get("http://web/items/" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "good") || resp.Header.Get("X-Host") != "web" {
			t.Fatalf("GET %d: %d %q (Host seen %q)", i, resp.StatusCode, body, resp.Header.Get("X-Host"))
		}
	}
	badHits := bad.hits.Load()
	if badHits == 0 || badHits > 3 {
		t.Errorf("the failing instance got %d attempts, want 1..3 before its ejection", badHits)
	}
	for range 20 {
		resp, err := hc.Get("http://web/again")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := bad.hits.Load(); n != badHits {
		t.Errorf("the ejected instance got %d more attempts", n-badHits)
	}

	// A PUT's body is sent again on a retry.
	req, _ := http.NewRequest(http.MethodPut, "http://web/items/x", strings.NewReader("payload"))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasSuffix(string(body), ":payload") {
		t.Errorf("PUT answered %q", body)
	}

	// A POST is not retried: it goes to the instance picked and its answer
	// comes back as it is.
	ctx := WithPickOptions(context.Background(), PickOptions{Selector: "role=bad", Policy: PolicyRandom})
	before := bad.hits.Load()
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://web/orders", strings.NewReader("x"))
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || bad.hits.Load() != before+1 {
		t.Errorf("POST: %d after %d attempts, want 503 after 1", resp.StatusCode, bad.hits.Load()-before)
	}

	// Every attempt was recorded.
	if err := log.Sync(); err != nil {
		t.Fatal(err)
	}
	recs, _, err := log.Calls("default/web", start.Add(-time.Second), time.Now().Add(time.Second), 0, time.Hour, 10000)
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[int]int{}
	badAddr := "127.0.0.1:" + strconv.Itoa(bad.port())
	for _, r := range recs {
		statuses[r.Status]++
		if r.Service != "default/web" || r.Latency <= 0 || r.Endpoint == "" {
			t.Fatalf("record %+v", r)
		}
		if r.Status == 503 && r.Endpoint != badAddr {
			t.Fatalf("a 503 recorded for %s, want the bad instance %s", r.Endpoint, badAddr)
		}
		if r.Status == 0 && r.Reason != "connect_failure" {
			t.Fatalf("a transport error recorded with reason %q", r.Reason)
		}
	}
	if statuses[200] != 61 || statuses[503] != int(bad.hits.Load()) || statuses[0] == 0 {
		t.Errorf("recorded statuses %v: want 61 x 200, %d x 503 and the refused connections as 0", statuses, bad.hits.Load())
	}
}

func TestRoundTripperErrors(t *testing.T) {
	_, c, _ := stackClient(t)
	v, err := c.NewView(ViewOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	hc := &http.Client{Transport: NewRoundTripper(v, RoundTripperOptions{})}
	if _, err := hc.Get("http://web:8080/"); !errors.Is(err, ErrInvalidPick) {
		t.Errorf("host with a port: %v", err)
	}
	if _, err := hc.Get("http://empty/"); !errors.Is(err, ErrNoInstance) {
		t.Errorf("service without instances: %v", err)
	}
}

// closeCounter is a request body that counts its Closes.
type closeCounter struct {
	io.Reader
	closes atomic.Int32
}

func (b *closeCounter) Close() error { b.closes.Add(1); return nil }

// TestRoundTripperClosesBodyOnError: RoundTrip closes the request's body on
// every error it returns before sending (the http.RoundTripper contract;
// http.Client would close it itself, other callers rely on RoundTrip).
func TestRoundTripperClosesBodyOnError(t *testing.T) {
	_, c, _ := stackClient(t)
	v, err := c.NewView(ViewOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	rt := NewRoundTripper(v, RoundTripperOptions{})
	defer rt.CloseIdleConnections()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		url  string
	}{
		{"host with a port", context.Background(), "http://web:8080/"},
		{"service not added", cancelled, "http://never-added/"},
		{"service without instances", context.Background(), "http://empty/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &closeCounter{Reader: strings.NewReader("payload")}
			req, err := http.NewRequestWithContext(tc.ctx, http.MethodPost, tc.url, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rt.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("RoundTrip succeeded")
			}
			if n := body.closes.Load(); n != 1 {
				t.Fatalf("body closed %d times after %v, want once", n, err)
			}
		})
	}
}
