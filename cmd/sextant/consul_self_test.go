package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestConsulServersInDNS: a server with --consul-api is Consul's service
// consul in DNS too (consul.service.consul, SRV with its Consul API's
// port), as Consul's servers are, and leaves it when it stops: started
// again without --consul-api on the same data, the name is gone.
func TestConsulServersInDNS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real server")
	}
	dig := ensureDig(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir, addr, consulAddr, dnsAddr := t.TempDir(), freeAddr(t), freeAddr(t), freeDNSAddr(t)
	host, port, _ := net.SplitHostPort(dnsAddr)
	_, consulPort, _ := net.SplitHostPort(consulAddr)
	srv := startServer(t, bin, dir, addr, "--consul-api", consulAddr, "--dns", dnsAddr)
	query := func(typ string) string {
		t.Helper()
		return strings.TrimSpace(runDig(t, dig, "@"+host, "-p", port, "+short", "+time=5", "+tries=2", "consul.service.consul", typ))
	}
	// The server registers itself as it starts serving: wait for it.
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got = query("SRV"); got != "" {
			break
		}
	}
	if !strings.HasSuffix(got, " "+consulPort+" 7f000001.addr.dc1.consul.") {
		t.Errorf("consul.service.consul SRV: %q, want this server's Consul API port %s on 127.0.0.1", got, consulPort)
	}
	if got := query("A"); got != "127.0.0.1" {
		t.Errorf("consul.service.consul A: %q, want 127.0.0.1", got)
	}
	stopServer(t, srv)

	srv = startServer(t, bin, dir, addr, "--dns", dnsAddr)
	defer stopServer(t, srv)
	if got := query("A"); got != "" {
		t.Errorf("consul.service.consul after the server that served Consul's API stopped: %q, want nothing", got)
	}
}
