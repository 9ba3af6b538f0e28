package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	benchgw "github.com/sextant-mesh/sextant/internal/bench/gateway"
)

// runGateway as the binary runs it: configured over ADS, proxying, writing
// call records, and returning cleanly when its context ends (SIGTERM).
func TestRunGatewayServesAndStops(t *testing.T) {
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") })}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(uln)
	defer up.Close()
	cp, err := benchgw.NewControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if err := cp.Publish("adaptive", []string{uln.Addr().String()}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	proxy, admin := free(), free()
	f := gatewayFlags{xds: cp.Addr(), listen: proxy, admin: admin, data: filepath.Join(t.TempDir(), "gw"),
		node: benchgw.NodeID, service: "sextant-gateway", maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30,
		drain: 5 * time.Second, logFormat: "text", logLevel: "error"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runGateway(ctx, f) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + proxy + "/x")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) == "upstream" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway never proxied")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/v1/calls?service=bench&from=0", admin))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"endpoint":"`+uln.Addr().String()+`"`) {
		t.Fatalf("/v1/calls: %s", b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runGateway: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("runGateway did not stop")
	}
}
