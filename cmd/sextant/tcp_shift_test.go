package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// tcpEcho is Istio's tcp-echo server: it answers each line with its
// prefix ("one", "two") and the line, and closes once the client has
// closed its side.
type tcpEcho struct {
	ln   net.Listener
	port int
	wg   sync.WaitGroup
}

func startTCPEcho(t *testing.T, prefix string) *tcpEcho {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &tcpEcho{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if line != "" {
						if _, err := io.WriteString(c, prefix+" "+line); err != nil {
							return
						}
					}
					if err != nil {
						return // EOF: the client is done; closing ends our side
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); e.wg.Wait() })
	return e
}

// TestTCPTrafficShifting runs Istio's TCP traffic-shifting task
// (istio.io/latest/docs/tasks/traffic-management/tcp-traffic-shifting/)
// through the real server and gateway: tcp-echo v1 and v2 behind a Gateway
// TCP server, all to v1 first, then the task's 80/20 VirtualService. 200
// connections each send a line and half-close (CloseWrite); each still
// reads its echo, and the share of v2 is within binomial bounds. An idle
// connection is closed after the DestinationRule's tcp idleTimeout, and
// the gateway's call log holds one record per connection, with its bytes.
func TestTCPTrafficShifting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a gateway")
	}
	httpAddr, xdsAddr, proxy, admin, tcpAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	_, tcpPortS, _ := net.SplitHostPort(tcpAddr)
	tcpPort, _ := strconv.Atoi(tcpPortS)
	ctx, cancel := context.WithCancel(context.Background())
	serverDone, gatewayDone := make(chan error, 1), make(chan error, 1)
	data := t.TempDir()
	go func() {
		serverDone <- runServer(ctx, serverFlags{data: data, http: httpAddr, xds: xdsAddr, logFormat: "text",
			logLevel: "error", logSize: 1 << 16, drain: 5 * time.Second})
	}()
	base := "http://" + httpAddr
	waitTrue(t, 60*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	gctx, gcancel := context.WithCancel(context.Background())
	go func() {
		gatewayDone <- runGateway(gctx, gatewayFlags{xds: xdsAddr, listen: proxy, admin: admin,
			data: filepath.Join(t.TempDir(), "gw"), node: "tcp-shift-gateway",
			tcpListen: []string{tcpAddr}, maxBody: 1 << 20, retainAge: time.Hour, retainBytes: 1 << 30, drain: 5 * time.Second,
			logFormat: "text", logLevel: "error"})
	}()
	t.Cleanup(func() {
		gcancel()
		if err := <-gatewayDone; err != nil {
			t.Errorf("gateway: %v", err)
		}
		cancel()
		if err := <-serverDone; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	api, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := startTCPEcho(t, "one"), startTCPEcho(t, "two")
	c := context.Background()
	if _, err := api.Register(c,
		client.Instance{ID: "tcp-echo-v1", Service: "tcp-echo", Host: "127.0.0.1", Port: v1.port, Version: "v1", Metadata: map[string]string{"version": "v1"}},
		client.Instance{ID: "tcp-echo-v2", Service: "tcp-echo", Host: "127.0.0.1", Port: v2.port, Version: "v2", Metadata: map[string]string{"version": "v2"}},
	); err != nil {
		t.Fatal(err)
	}
	// samples/tcp-echo/tcp-echo-all-v1.yaml, on the test's port, with the
	// DestinationRule's tcp idle timeout.
	gwYAML := fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: tcp-echo-gateway}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: %d, name: tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: tcp-echo-destination}
spec:
  host: tcp-echo
  trafficPolicy: {connectionPool: {tcp: {idleTimeout: 3s}}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`, tcpPort)
	vs := func(routes string) string {
		return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: tcp-echo}
spec:
  hosts: ["*"]
  gateways: [tcp-echo-gateway]
  tcp:
  - match: [{port: %d}]
    route:
%s`, tcpPort, routes)
	}
	allV1 := vs("    - destination: {host: tcp-echo, port: {number: 9000}, subset: v1}\n")
	if _, err := api.ApplyConfig(c, []byte(gwYAML+"---\n"+allV1), false); err != nil {
		t.Fatal(err)
	}
	// echo sends a line, half-closes, and reads the answer to EOF.
	echo := func(msg string) (string, error) {
		conn, err := net.DialTimeout("tcp", tcpAddr, 5*time.Second)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(conn, msg+"\n"); err != nil {
			return "", err
		}
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			return "", err
		}
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	waitTrue(t, 30*time.Second, func() bool { got, err := echo("hello"); return err == nil && got == "one hello\n" })
	for i := range 10 {
		if got, err := echo("world"); err != nil || got != "one world\n" {
			t.Fatalf("all to v1, connection %d: %q %v", i, got, err)
		}
	}

	// samples/tcp-echo/tcp-echo-20-v2.yaml.
	shift := vs("    - destination: {host: tcp-echo, port: {number: 9000}, subset: v1}\n      weight: 80\n" +
		"    - destination: {host: tcp-echo, port: {number: 9000}, subset: v2}\n      weight: 20\n")
	if _, err := api.ApplyConfig(c, []byte(shift), false); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 30*time.Second, func() bool { got, err := echo("x"); return err == nil && got == "two x\n" })
	const n = 200
	counts := map[string]int{}
	for i := range n {
		msg := fmt.Sprintf("message %d", i)
		got, err := echo(msg)
		if err != nil || !strings.HasSuffix(got, " "+msg+"\n") {
			t.Fatalf("connection %d: %q %v", i, got, err)
		}
		counts[strings.Fields(got)[0]]++
	}
	// Binomial(200, 0.2): mean 40, sd 5.7; ±5 sd.
	if counts["one"]+counts["two"] != n || counts["two"] < 12 || counts["two"] > 68 {
		t.Errorf("80/20: %v", counts)
	}
	t.Logf("80/20 over %d connections: %v", n, counts)

	// Idle: a connection that sends nothing after its echo is closed after
	// the idle timeout (3s), not before.
	conn, err := net.DialTimeout("tcp", tcpAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(conn, "idle\n")
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasSuffix(line, " idle\n") {
		t.Fatalf("idle connection's echo: %q %v", line, err)
	}
	start := time.Now()
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("read on an idle connection returned a byte")
	}
	if d := time.Since(start); d < 2*time.Second || d > 20*time.Second {
		t.Errorf("idle connection closed after %v, want about 3s", d)
	}

	// One call record per connection, with its bytes: the forwarded ones
	// complete, and those waitTrue made before the endpoints arrived
	// no_healthy_endpoint.
	type call struct {
		Subset   string `json:"subset"`
		Route    string `json:"route"`
		Reason   string `json:"reason"`
		BytesIn  int    `json:"bytes_in"`
		BytesOut int    `json:"bytes_out"`
		Latency  int64  `json:"latency_us"`
	}
	var logged struct {
		Calls []call `json:"calls"`
	}
	wantIdle := 1
	waitTrue(t, 20*time.Second, func() bool {
		logged.Calls = nil
		if err := json.Unmarshal([]byte(getJSON(t, "http://"+admin+"/v1/calls?service=default/tcp-echo&from=0&limit=100000")), &logged); err != nil {
			t.Fatal(err)
		}
		idle := 0
		for _, k := range logged.Calls {
			if k.Reason == "idle_timeout" {
				idle++
			}
		}
		// The idle connection's record is written once the gateway has
		// closed it: after the client saw the close.
		return len(logged.Calls) >= n+10+wantIdle && idle >= wantIdle
	})
	bySubset, idle, exact := map[string]int{}, 0, 0
	for _, k := range logged.Calls {
		bySubset[k.Subset]++
		if k.Reason == "idle_timeout" {
			idle++
			continue
		}
		if k.Reason == "no_healthy_endpoint" && k.BytesIn == 0 && k.BytesOut == 0 {
			continue // a try of waitTrue's before the endpoints arrived
		}
		if k.Reason != "" {
			t.Errorf("record %+v: reason %q", k, k.Reason)
		}
		if k.BytesIn > 0 && k.BytesOut == k.BytesIn+4 { // "one " / "two "
			exact++
		}
	}
	if idle != wantIdle || exact < n+10 {
		t.Errorf("records: %d idle (want %d), %d with both byte counts right (want >= %d): %v", idle, wantIdle, exact, n+10, bySubset)
	}
	if bySubset["v2"] < counts["two"] {
		t.Errorf("records by subset %v, connections %v", bySubset, counts)
	}
}
