package main

import (
	"net"
)

// consulSelfAddr is the address a server lists itself at as Consul's
// service consul: its --consul-api listener's, or, when that listens on
// every interface, the first address another machine could reach (the
// loopback one if there is none).
func consulSelfAddr(addr net.Addr) (string, int) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "127.0.0.1", 0
	}
	if !tcp.IP.IsUnspecified() {
		return tcp.IP.String(), tcp.Port
	}
	host := "127.0.0.1"
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
				host = n.IP.String()
				break
			}
		}
	}
	return host, tcp.Port
}
