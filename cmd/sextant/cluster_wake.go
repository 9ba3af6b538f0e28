package main

import (
	"fmt"
	"net"

	"github.com/sextant-mesh/sextant/internal/store/mysql"
)

// wakeAddr turns --cluster-wake into the UDP address the store listens on
// for commit announcements ("": none). auto takes the host of httpAddr
// (where the HTTP API listens), or, when that host is unspecified, the
// local address the route to the database leaves from: an address the
// other servers, which reach the database too, most likely reach.
func wakeAddr(flag, httpAddr, storeURL string) (string, error) {
	switch flag {
	case "off":
		return "", nil
	case "auto":
	default:
		return flag, nil
	}
	host, _, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "", fmt.Errorf("--cluster-wake auto: the HTTP address %q: %w", httpAddr, err)
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return net.JoinHostPort(host, "0"), nil
	}
	cfg, err := mysql.ParseURL(storeURL)
	if err != nil {
		return "", err
	}
	if cfg.Net == "unix" {
		return "127.0.0.1:0", nil // the database is on this host, so are the others
	}
	// A UDP "connection" sends nothing: it only picks the route.
	c, err := net.Dial("udp", cfg.Addr)
	if err != nil {
		return "", fmt.Errorf("--cluster-wake auto: find the address that reaches the database at %s: %w (give --cluster-wake host:port)", cfg.Addr, err)
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	return net.JoinHostPort(ip.String(), "0"), nil
}
