package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/debian"
	"github.com/sextant-mesh/sextant/internal/dnsapi"
)

// TestDNSEndToEnd: the real dig (Debian's dnsutils) and Go's resolver ask a
// real "sextant server --dns" for A and SRV records, over UDP and TCP; a
// deregistered instance, and one whose TTL expired, are gone from the next
// answer.
func TestDNSEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real server")
	}
	dig := ensureDig(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	addr, dnsAddr := freeAddr(t), freeDNSAddr(t)
	srv := startServer(t, bin, t.TempDir(), addr, "--dns", dnsAddr, "--dns-ttl", "1s", "--dns-datacenter", "east")
	defer stopServer(t, srv)
	host, port, _ := net.SplitHostPort(dnsAddr)

	register := func(body string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/instances", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("register: %s", resp.Status)
		}
	}
	register(`{"instances":[
		{"id":"a","service":"orders","host":"10.0.0.1","port":8080,"metadata":{"tag/primary":""}},
		{"id":"b","service":"orders","host":"10.0.0.2","port":8081,"weight":50},
		{"id":"p","namespace":"prod","service":"orders","host":"10.9.0.1","port":9090}]}`)

	// digShort runs dig +short and returns its lines, sorted.
	digShort := func(args ...string) []string {
		t.Helper()
		args = append([]string{"@" + host, "-p", port, "+short", "+time=5", "+tries=2"}, args...)
		var lines []string
		for line := range strings.Lines(runDig(t, dig, args...)) {
			if line = strings.TrimSpace(line); line != "" {
				lines = append(lines, line)
			}
		}
		slices.Sort(lines)
		return lines
	}
	for _, transport := range []string{"+notcp", "+tcp"} {
		if got, want := digShort(transport, "orders.service.consul", "A"), []string{"10.0.0.1", "10.0.0.2"}; !slices.Equal(got, want) {
			t.Errorf("dig %s A: %q, want %q", transport, got, want)
		}
		if got, want := digShort(transport, "ORDERS.prod.svc.sextant", "A"), []string{"10.9.0.1"}; !slices.Equal(got, want) {
			t.Errorf("dig %s sextant A: %q, want %q", transport, got, want)
		}
		if got, want := digShort(transport, "primary.orders.service.east.consul", "A"), []string{"10.0.0.1"}; !slices.Equal(got, want) {
			t.Errorf("dig %s tag A: %q, want %q", transport, got, want)
		}
		want := []string{"1 100 8080 0a000001.addr.dc1.consul.", "1 50 8081 0a000002.addr.dc1.consul."}
		if got := digShort(transport, "orders.service.dc1.consul", "SRV"); !slices.Equal(got, want) {
			t.Errorf("dig %s SRV: %q, want %q", transport, got, want)
		}
	}
	// The additional section carries the targets' addresses.
	full := runDig(t, dig, "@"+host, "-p", port, "+time=5", "+tries=2", "orders.service.consul", "SRV")
	for _, want := range []string{"status: NOERROR", "flags: qr aa", "0a000001.addr.east.consul. 1 IN A\t10.0.0.1", "ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 3"} {
		if !strings.Contains(strings.Join(strings.Fields(full), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("dig SRV lacks %q:\n%s", want, full)
		}
	}
	nx := runDig(t, dig, "@"+host, "-p", port, "+time=5", "+tries=2", "nosuch.service.consul", "A")
	if !strings.Contains(nx, "status: NXDOMAIN") || !strings.Contains(nx, "IN\tSOA") {
		t.Errorf("dig of an unknown service: want NXDOMAIN with an SOA\n%s", nx)
	}

	// Go's resolver, dialing the server for every query (UDP, and TCP
	// when it needs to).
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, dnsAddr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lookupHost := func(name string) []string {
		t.Helper()
		got, err := res.LookupHost(ctx, name)
		if err != nil {
			t.Fatalf("LookupHost %s: %v", name, err)
		}
		slices.Sort(got)
		return got
	}
	if got, want := lookupHost("orders.service.consul."), []string{"10.0.0.1", "10.0.0.2"}; !slices.Equal(got, want) {
		t.Errorf("Go LookupHost: %v, want %v", got, want)
	}
	// _orders._tcp.service.consul. (RFC 2782), then each target.
	_, srvs, err := res.LookupSRV(ctx, "orders", "tcp", "service.consul.")
	if err != nil {
		t.Fatal(err)
	}
	var hostports []string
	for _, s := range srvs {
		ips := lookupHost(s.Target)
		hostports = append(hostports, fmt.Sprintf("%s:%d/%d", strings.Join(ips, ","), s.Port, s.Weight))
	}
	slices.Sort(hostports)
	if want := []string{"10.0.0.1:8080/100", "10.0.0.2:8081/50"}; !slices.Equal(hostports, want) {
		t.Errorf("Go LookupSRV: %v, want %v", hostports, want)
	}
	if _, err := res.LookupHost(ctx, "nosuch.service.consul."); !isNotFound(err) {
		t.Errorf("Go LookupHost of an unknown service: %v, want not found", err)
	}

	// A deregistered instance is gone from the next answer.
	req, _ := http.NewRequest(http.MethodDelete, "http://"+addr+"/v1/instances/b", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("deregister: %s", resp.Status)
	}
	if got, want := digShort("orders.service.consul", "A"), []string{"10.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("dig A after deregistering b: %q, want %q", got, want)
	}
	if got, want := lookupHost("orders.service.consul."), []string{"10.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("Go LookupHost after deregistering b: %v, want %v", got, want)
	}

	// An instance whose TTL expires (3 x 2s without a heartbeat) turns
	// unhealthy: gone from the answer after that, by dig and by Go.
	register(`{"id":"c","service":"orders","host":"10.0.0.3","port":8082,"ttl_seconds":2}`)
	if got := digShort("orders.service.consul", "A"); !slices.Contains(got, "10.0.0.3") {
		t.Errorf("dig A after registering c: %q, want 10.0.0.3 in it", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for slices.Contains(digShort("orders.service.consul", "A"), "10.0.0.3") {
		if time.Now().After(deadline) {
			t.Fatal("c still answered 30s after its TTL of 2s stopped being renewed")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, want := lookupHost("orders.service.consul."), []string{"10.0.0.1"}; !slices.Equal(got, want) {
		t.Errorf("Go LookupHost after c turned unhealthy: %v, want %v", got, want)
	}
}

func isNotFound(err error) bool {
	dnsErr, ok := err.(*net.DNSError)
	return ok && dnsErr.IsNotFound
}

// freeDNSAddr is a loopback address whose port is free over UDP and TCP.
func freeDNSAddr(t *testing.T) string {
	t.Helper()
	s, err := dnsapi.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// stopServer stops a server started by startServer, killing it if it
// does not stop within 30s.
func stopServer(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("server exited: %v", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Error("server did not stop within 30s of SIGTERM")
	}
}

// runDig runs dig with args (for at most 30s) and returns its output.
func runDig(t *testing.T, dig string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, dig, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("dig %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// ensureDig returns dig's path, installing Debian's dnsutils when dig is
// missing and this process may (package debian); otherwise the test fails,
// saying what to install.
func ensureDig(t *testing.T) string {
	t.Helper()
	path, err := debian.Ensure("dig", "dnsutils")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDNSFlags: a DNS address in use fails the start with an error naming
// --dns, before the store opens; a bad DNS option names its flag.
func TestDNSFlags(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	data := filepath.Join(t.TempDir(), "data")
	err = runServer(context.Background(), serverFlags{data: data, http: freeAddr(t), dns: pc.LocalAddr().String(),
		logFormat: "text", logLevel: "error", logSize: 1 << 16, drain: time.Second, auditLog: "off"})
	if err == nil || !strings.HasPrefix(err.Error(), "--dns "+pc.LocalAddr().String()+": ") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("DNS address in use: %v, want an error naming --dns and the address", err)
	}
	if files, err := os.ReadDir(data); err != nil || len(files) != 0 {
		t.Errorf("the store was opened before the DNS address was found in use: %v %v", files, err)
	}
	for _, tc := range []struct {
		f    serverFlags
		flag string
	}{
		{serverFlags{dnsTTL: 1500 * time.Millisecond}, "--dns-ttl"},
		{serverFlags{dnsTTL: -time.Second}, "--dns-ttl"},
		{serverFlags{dnsDatacenter: "East"}, "--dns-datacenter"},
		{serverFlags{dnsConsulNamespace: "no/such"}, "--dns-consul-namespace"},
	} {
		if err := tc.f.validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+": ") {
			t.Errorf("%+v: %v, want an error naming %s", tc.f, err, tc.flag)
		}
	}
}
