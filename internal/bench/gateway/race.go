package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/calllog"
	gw "github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// RaceProxy returns the balancer bench Config.Proxy that replays the race
// through a real gateway: for each policy it starts a loopback control plane
// and an in-process gateway (call recording on) whose only cluster is the
// providers with that policy, and routes every call through it. timeout is
// the route timeout (the bench's per-call timeout).
func RaceProxy(timeout time.Duration) func(ctx context.Context, policy string, providers []string) (string, func(), error) {
	return func(ctx context.Context, policy string, providers []string) (string, func(), error) {
		p, err := startInProcess(proxyConfig{policy: policy, endpoints: providers, timeout: timeout}, true)
		if err != nil {
			return "", nil, err
		}
		return p.url, p.stop, nil
	}
}

// inProcess is a gateway in this process, configured over loopback ADS.
type inProcess struct {
	addr, url string
	stop      func()
}

// startInProcess starts a control plane serving pc and a gateway on it,
// and waits until the gateway routes.
func startInProcess(pc proxyConfig, record bool) (*inProcess, error) {
	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	if err := cp.set(pc); err != nil {
		cp.stop()
		return nil, err
	}
	g, err := attachRecording(cp, record)
	if err != nil {
		cp.stop()
		return nil, err
	}
	stopGW := g.stop
	g.stop = func() { stopGW(); cp.stop() }
	if err := waitRouted(g.url); err != nil {
		g.stop()
		return nil, err
	}
	return g, nil
}

// attach starts an in-process gateway (call recording on) following cp.
func attach(cp *controlPlane) (*inProcess, error) { return attachRecording(cp, true) }

func attachRecording(cp *controlPlane, record bool) (*inProcess, error) {
	dir, err := os.MkdirTemp("", "sextant-bench-gateway-")
	if err != nil {
		return nil, err
	}
	var lg *calllog.Log
	opts := gw.Options{}
	if record {
		if lg, err = calllog.Open(calllog.Options{Dir: dir}); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		opts.Recorder = lg
	}
	closeLog := func() {
		if lg != nil {
			_ = lg.Close()
		}
		os.RemoveAll(dir)
	}
	g := gw.New(opts)
	conn, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		closeLog()
		return nil, err
	}
	xc, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: NodeID}, Types: gw.XDSTypes(), Handler: g})
	if err != nil {
		conn.Close()
		closeLog()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	xdone := make(chan struct{})
	go func() { defer close(xdone); _ = xc.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		<-xdone
		conn.Close()
		closeLog()
		return nil, err
	}
	sdone := make(chan struct{})
	go func() { defer close(sdone); _ = g.Serve(ln) }()
	stop := func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = g.Shutdown(sctx)
		<-sdone
		cancel()
		<-xdone
		conn.Close()
		closeLog()
	}
	addr := ln.Addr().String()
	return &inProcess{addr: addr, url: "http://" + addr + "/", stop: stop}, nil
}

// waitRouted waits until the gateway has a route (any answer but the
// gateway's own "no config" 503/404).
func waitRouted(url string) error { return waitRoutedWith(&http.Client{Timeout: 2 * time.Second}, url) }

// waitRoutedTLS is waitRouted over HTTPS with the bench's self-signed
// certificate.
func waitRoutedTLS(url string) error {
	return waitRoutedWith(&http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, url) // the bench's own certificate
}

func waitRoutedWith(c *http.Client, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			r := resp.Header.Get(gw.ErrorHeader)
			if r != "no_route" && r != "no_healthy_endpoint" && r != "cluster_not_found" {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("bench: gateway at %s got no config in 10s", url)
}
