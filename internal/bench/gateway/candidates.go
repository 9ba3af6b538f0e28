package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// ServeUpstream is the bench's upstream: Go net/http answering every call
// with body bytes (the DESIGN.md reference upstream). It serves ln until ctx
// ends.
func ServeUpstream(ctx context.Context, ln net.Listener, body int) error {
	payload := bytes.Repeat([]byte("x"), min(body, 64<<10))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			// An upload (the stream scenario): its size back.
			_, _ = io.WriteString(w, "n="+strconv.FormatInt(n, 10))
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		if body <= len(payload) || r.URL.Path == "/probe" {
			_, _ = w.Write(payload)
			return
		}
		// A large answer (the stream scenario) is written from one chunk.
		w.Header().Set("Content-Length", strconv.Itoa(body))
		for left := body; left > 0; left -= len(payload) {
			if _, err := w.Write(payload[:min(left, len(payload))]); err != nil {
				return
			}
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// Candidates are the data paths measured before choosing the gateway's
// (docs/gateway.md, "Why fasthttp"); "sextant" is the chosen one, run as
// the real gateway.
var Candidates = []string{"reverseproxy", "nethttp-fastclient", "fasthttp-bare", "go-floor", "go-epoll", "go-epoll-block"}

// ServeCandidate runs candidate data path mode on ln in front of upstream
// until ctx ends: plain keep-alive reverse proxies without routing.
func ServeCandidate(ctx context.Context, mode string, ln net.Listener, upstream string) error {
	var h http.Handler
	switch mode {
	case "go-floor":
		return serveFloor(ctx, ln, upstream)
	case "go-epoll", "go-epoll-block":
		return serveEpollFloor(ctx, ln, upstream, mode == "go-epoll-block")
	case "fasthttp-bare":
		// The floor of the shipped design: fasthttp's server handing each
		// request to a HostClient, with no routing, balancing, headers,
		// metrics or records.
		hc := &fasthttp.HostClient{Addr: upstream, MaxConns: 1024, NoDefaultUserAgentHeader: true,
			DisableHeaderNamesNormalizing: true, DisablePathNormalizing: true}
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			if err := hc.DoTimeout(&ctx.Request, &ctx.Response, 15*time.Second); err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			}
		}, NoDefaultServerHeader: true, NoDefaultContentType: true, NoDefaultDate: true}
		go func() { <-ctx.Done(); _ = srv.Shutdown() }()
		return srv.Serve(ln)
	case "reverseproxy":
		// The standard library's proxy with a transport sized for 64
		// concurrent connections.
		u, _ := url.Parse("http://" + upstream)
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.ErrorLog = log.New(io.Discard, "", 0) // wrk closing its connections is not news
		rp.Transport = &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
			DisableCompression: true}
		h = rp
	case "nethttp-fastclient":
		// net/http's server with a lean client: fasthttp's HostClient, which
		// writes and reads on the calling goroutine.
		hc := &fasthttp.HostClient{Addr: upstream, MaxConns: 1024, NoDefaultUserAgentHeader: true,
			DisableHeaderNamesNormalizing: true, DisablePathNormalizing: true}
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.Header.SetMethod(r.Method)
			req.SetRequestURI(r.URL.RequestURI())
			req.Header.SetHost(r.Host)
			for k, vs := range r.Header {
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			if r.ContentLength != 0 {
				b, _ := io.ReadAll(r.Body)
				req.SetBody(b)
			}
			if err := hc.DoTimeout(req, resp, 15*time.Second); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			for k, v := range resp.Header.All() {
				switch string(k) {
				case "Content-Length", "Connection":
					continue
				}
				w.Header().Add(string(k), string(v))
			}
			w.WriteHeader(resp.StatusCode())
			_, _ = w.Write(resp.Body())
		})
	default:
		return fmt.Errorf("bench: unknown candidate %q (known: %v)", mode, Candidates)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
