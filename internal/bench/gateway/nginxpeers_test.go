package gateway

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
)

// TestNginxPeersDoWhatTheySay: each nginx of the dataplane figures does
// what its name says to a call, as the endpoint and the client see it.
// nginx passes the head on without forwarding fields; nginx-fwd and
// nginx-fwd-log add to X-Forwarded-For and Via, set X-Forwarded-Proto,
// keep the client's X-Request-Id or make one, and answer with their own
// Via and X-Request-Id; nginx-log and nginx-fwd-log write a line a call
// with the endpoint's address.
func TestNginxPeersDoWhatTheySay(t *testing.T) {
	if _, err := debian.Ensure("nginx", "nginx"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen http.Header
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Via", "1.1 endpoint")
		w.Header().Set("X-Request-Id", "from-the-endpoint")
		_, _ = w.Write([]byte("ok"))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	up := ln.Addr().String()

	tmp := t.TempDir()
	cert, err := newBenchCert(tmp)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, name := range NginxPeers {
		t.Run(name, func(t *testing.T) {
			forwards := strings.Contains(name, "fwd")
			logs := strings.HasSuffix(name, "log")
			dp, err := startDataplaneProxy(ctx, DataplaneConfig{NoPin: true}, name, tmp, up, up, nil, cert)
			if err != nil {
				t.Fatal(err)
			}
			defer dp.stop()
			call := func(h map[string]string) (http.Header, http.Header) {
				t.Helper()
				req, _ := http.NewRequest("GET", "http://"+dp.h1+"/x", nil)
				for k, v := range h {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				mu.Lock()
				defer mu.Unlock()
				return seen, resp.Header
			}

			got, ans := call(nil)
			if !forwards {
				for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id", "Via"} {
					if v := got.Get(k); v != "" {
						t.Errorf("the endpoint got %s: %q from %s", k, v, name)
					}
				}
				if ans.Get("Via") != "1.1 endpoint" {
					t.Errorf("answer's Via %q, want the endpoint's", ans.Get("Via"))
				}
			} else {
				want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "Via": "1.1 nginx"}
				for k, v := range want {
					if got.Get(k) != v {
						t.Errorf("the endpoint got %s: %q, want %q", k, got.Get(k), v)
					}
				}
				id := got.Get("X-Request-Id")
				if !hexID.MatchString(id) {
					t.Errorf("the endpoint got X-Request-Id %q, want one made (32 hex digits)", id)
				}
				if ans.Get("X-Request-Id") != id || ans.Get("Via") != "1.1 nginx" {
					t.Errorf("answer: X-Request-Id %q (sent up %q), Via %q", ans.Get("X-Request-Id"), id, ans.Get("Via"))
				}
				got, ans = call(map[string]string{"X-Forwarded-For": "10.0.0.9", "X-Request-Id": "abc-1", "Via": "1.0 client"})
				want = map[string]string{"X-Forwarded-For": "10.0.0.9, 127.0.0.1", "X-Request-Id": "abc-1", "Via": "1.0 client, 1.1 nginx"}
				for k, v := range want {
					if got.Get(k) != v {
						t.Errorf("the endpoint got %s: %q, want %q", k, got.Get(k), v)
					}
				}
				if ans.Get("X-Request-Id") != "abc-1" {
					t.Errorf("answer's X-Request-Id %q, want the client's", ans.Get("X-Request-Id"))
				}
			}

			logFile := filepath.Join(tmp, name, "access.log")
			if !logs {
				if _, err := os.Stat(logFile); err == nil {
					t.Errorf("%s wrote an access log", name)
				}
				return
			}
			// Buffered, flushed every second: the lines come within a few.
			deadline := time.Now().Add(10 * time.Second)
			for {
				b, _ := os.ReadFile(logFile)
				if n := strings.Count(string(b), " "+up+" 200 "); n >= 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no line with the endpoint %s in %s: %q", up, logFile, b)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
