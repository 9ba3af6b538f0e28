// Package gatewaytest runs Sextant's gateway in a test as an xDS client of
// a control plane, for the end-to-end tests of other packages (the push
// engine's, the Kubernetes sync's).
package gatewaytest

import (
	"context"
	"net"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextant-mesh/sextant/internal/gateway"
	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
)

// Start runs a gateway with node id node, fed by the ADS server at ads,
// on a loopback port, and returns its URL; the test's cleanup stops it.
func Start(t testing.TB, ads, node string) string {
	t.Helper()
	g := gateway.New(gateway.Options{})
	conn, err := grpc.NewClient(ads, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	xc, err := xdsclient.New(conn, xdsclient.Options{Node: &core.Node{Id: node}, Types: gateway.XDSTypes(), Handler: g,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	xdone := make(chan struct{})
	go func() { defer close(xdone); _ = xc.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sdone := make(chan struct{})
	go func() { defer close(sdone); _ = g.Serve(ln) }()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = g.Shutdown(sctx)
		<-sdone
		cancel()
		<-xdone
		conn.Close()
	})
	return "http://" + ln.Addr().String()
}
