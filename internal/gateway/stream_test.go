package gateway_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/debian"
	"github.com/sextant-mesh/sextant/internal/gateway"
)

// sinkHandler answers an upload with its length and SHA-256.
func sinkHandler(w http.ResponseWriter, r *http.Request) {
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	fmt.Fprintf(w, "n=%d sha=%s te=%v", n, hex.EncodeToString(h.Sum(nil)), r.TransferEncoding)
}

// curl uploads a chunked body (past the retry buffer limit: it streams)
// and reads server-sent events through the gateway, seeing the first event
// while the upstream still holds the stream open.
func TestCurlChunkedUploadAndSSE(t *testing.T) {
	curl, err := debian.Ensure("curl", "curl")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/events" {
			sinkHandler(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		fmt.Fprint(w, "data: two\n\n")
	})
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "u"))),
		edsCluster("u"), assignment("u", ep{u: u}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/x", "n=0")

	body := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16) // 3 MiB
	file := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	out, err := exec.Command(curl, "-sS", "--max-time", "30", "-H", "Transfer-Encoding: chunked", "--data-binary", "@"+file, g.url+"/upload").CombinedOutput()
	if err != nil {
		t.Fatalf("curl upload: %v %s", err, out)
	}
	if want := fmt.Sprintf("n=%d sha=%s", len(body), hex.EncodeToString(sum[:])); !strings.HasPrefix(string(out), want) {
		t.Fatalf("upload through the gateway: %s, want %s", out, want)
	}

	cmd := exec.Command(curl, "-sSN", "--max-time", "30", g.url+"/events")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if l != "data: one" {
			t.Fatalf("first event: %q", l)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the first event did not come through before the stream ended")
	}
	close(release)
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("curl events: %v", err)
	}
	if got := strings.Join(rest, "|"); got != "|data: two|" {
		t.Fatalf("rest of the stream: %q", got)
	}
	recs := g.calls(t, "u")
	var up, sse bool
	for _, c := range recs {
		if c.BytesIn == uint32(len(body)) && c.Status == 200 {
			up = true
		}
		if c.BytesOut == uint32(len("data: one\n\ndata: two\n\n")) && c.Status == 200 {
			sse = true
		}
	}
	if !up || !sse {
		t.Fatalf("call records of the streamed calls: %+v", recs)
	}
}

// A request body up to the route's buffer limit is retried; one past it
// streams to one endpoint and is not (Envoy's per_request_buffer_limit_bytes).
func TestBufferLimitDecidesRetries(t *testing.T) {
	var calls atomic.Int64
	h := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1)%2 == 1 { // every first attempt fails
			w.WriteHeader(503)
			io.WriteString(w, "first")
			return
		}
		io.WriteString(w, "second")
	}
	a, b := startUpstream(t, "a", h), startUpstream(t, "b", h)
	rt := prefixRoute("/", "ab")
	rt.GetRoute().RetryPolicy = &route.RetryPolicy{RetryOn: "5xx", NumRetries: wrapperspb.UInt32(1)}
	rt.PerRequestBufferLimitBytes = wrapperspb.UInt32(64 << 10)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, rt)),
		edsCluster("ab"), assignment("ab", ep{u: a}, ep{u: b}))
	g := startGateway(t, cp.addr)
	g.waitEndpoints(t, 1)
	waitFor(t, "the route", func() bool { code, _, _ := g.get(t, "/"); return code != 404 && code != 503 || calls.Load() > 0 })

	post := func(n int, chunked bool) (int, string) {
		var body io.Reader = bytes.NewReader(make([]byte, n))
		if chunked {
			body = io.MultiReader(body) // no length: chunked
		}
		req, _ := http.NewRequest("POST", g.url+"/", body)
		resp, err := g.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		n       int
		chunked bool
		code    int
		body    string
	}{
		{32 << 10, false, 200, "second"},
		{32 << 10, true, 200, "second"},
		{256 << 10, false, 503, "first"},
		{256 << 10, true, 503, "first"},
	} {
		calls.Store(0)
		code, body := post(tc.n, tc.chunked)
		if code != tc.code || body != tc.body {
			t.Errorf("%d bytes (chunked %v): %d %q, want %d %q", tc.n, tc.chunked, code, body, tc.code, tc.body)
		}
		want := int64(2) // retried
		if tc.code == 503 {
			want = 1
		}
		if calls.Load() != want {
			t.Errorf("%d bytes (chunked %v): %d upstream calls, want %d", tc.n, tc.chunked, calls.Load(), want)
		}
	}
}

// Bad request bodies are answered with a clear status, and the gateway
// keeps serving: a truncated chunked body, malformed chunks, a body over
// the size limit (declared, or chunked).
func TestBadRequestBodies(t *testing.T) {
	u := startUpstream(t, "u", sinkHandler)
	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"}, prefixRoute("/", "u"))),
		edsCluster("u"), assignment("u", ep{u: u}))
	g := startGatewayWith(t, cp.addr, gateway.Options{MaxRequestBytes: 2 << 20})
	g.waitServes(t, "/", "n=0")
	addr := strings.TrimPrefix(g.url, "http://")

	raw := func(req string, halfClose bool) string {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		if halfClose {
			c.(*net.TCPConn).CloseWrite()
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "no answer: " + err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get(gateway.ErrorHeader), b)
	}
	for _, tc := range []struct {
		name, req string
		half      bool
		want      string
	}{
		{"truncated chunked", "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n4\r\nab", true, "400 bad_request"},
		{"malformed chunk size", "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", false, "400 bad_request"},
		{"truncated length", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort", true, "400 bad_request"},
		// (fasthttp reads the first 8 KiB of a body before the handler runs.)
		{"declared over the limit", "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n" + strings.Repeat("x", 16<<10), false, "413 request_too_large"},
	} {
		if got := raw(tc.req, tc.half); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// Chunked over the limit: streamed until the limit, then refused.
	req, _ := http.NewRequest("POST", g.url+"/up", io.MultiReader(bytes.NewReader(make([]byte, 3<<20))))
	resp, err := g.client.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("chunked over the limit: %d %s", resp.StatusCode, b)
		}
	} // else: the gateway closed the connection while the client still sent: also a refusal
	if code, body, _ := g.get(t, "/after"); code != 200 || !strings.HasPrefix(body, "n=0") {
		t.Fatalf("after bad bodies: %d %q", code, body)
	}
	var reasons []string
	for _, c := range g.calls(t, "u") {
		reasons = append(reasons, c.Reason)
	}
	if got := strings.Join(reasons, ","); !strings.Contains(got, "bad_request") || !strings.Contains(got, "request_too_large") {
		t.Fatalf("call records' reasons: %s", got)
	}
}
