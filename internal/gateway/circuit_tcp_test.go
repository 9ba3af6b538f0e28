package gateway_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestTCPMaxConnections: a TCP route's cluster with max_connections 1
// (DestinationRule tcp.maxConnections) carries one connection at a time:
// a second is closed at once, recorded as pool_overflow and counted as
// upstream_cx_overflow, as Envoy's tcp_proxy does; once the first ends,
// a new one goes through.
func TestTCPMaxConnections(t *testing.T) {
	echo := startTCPEchoServer(t)
	cp := startControlPlane(t, "")
	w, addr := startTCPGateway(t, cp.addr)
	_, ps, _ := net.SplitHostPort(addr)
	var port uint32
	fmt.Sscan(ps, &port)
	cp.set(tcpListenerOf(port, [2]string{"echo", ""}), edsCluster("echo", func(c *cluster.Cluster) {
		c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{MaxConnections: wrapperspb.UInt32(1)}}}
	}), assignment("echo", ep{u: echo}))
	var first net.Conn
	waitFor(t, "the first connection echoes", func() bool {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 2)
		if _, err := c.Write([]byte("hi")); err != nil {
			c.Close()
			return false
		}
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
			c.Close()
			return false
		}
		first = c
		return true
	})
	// The first is open: the second is closed without an echo.
	waitFor(t, "the second closed as overflow", func() bool {
		b, _ := roundTrip(addr, []byte("x"))
		m := w.metrics(t)
		const series = `sextant_gateway_circuit_overflow_total{cluster="echo",kind="upstream_cx_overflow"} `
		return len(b) == 0 && strings.Contains(m, series) && !strings.Contains(m, series+"0")
	})
	waitFor(t, "its record", func() bool {
		for _, c := range w.calls(t, "echo") {
			if c.Reason == "pool_overflow" {
				return true
			}
		}
		return false
	})
	_ = first.SetDeadline(time.Time{})
	first.Close()
	waitFor(t, "a connection after the first ended", func() bool {
		b, err := roundTrip(addr, []byte("again"))
		return err == nil && string(b) == "again"
	})
}
