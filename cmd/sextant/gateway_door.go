package main

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// adminOrigins are the web origins whose pages may read the gateway's
// admin API (CORS): the web console's, which is the registry server's
// (--registry; on a loopback host, under each of its loopback names, as a
// browser may have opened it by any), and --admin-cors-origin.
func adminOrigins(f gatewayFlags) ([]string, error) {
	var out []string
	for _, o := range f.adminOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("--admin-cors-origin %q: want scheme://host[:port], as a browser sends it in Origin", o)
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	if f.registry == "" {
		return out, nil
	}
	u, err := url.Parse(f.registry)
	if err != nil || u.Host == "" {
		return out, nil // --registry's own check names it
	}
	own := u.Scheme + "://" + u.Host
	out = append(out, own)
	host, port := u.Hostname(), u.Port()
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		for _, n := range []string{"localhost", "127.0.0.1", "[::1]"} {
			if o := u.Scheme + "://" + n + portSuffix(port); !strings.EqualFold(o, own) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func portSuffix(port string) string {
	if port == "" {
		return ""
	}
	return ":" + port
}
