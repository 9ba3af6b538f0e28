package main

import (
	"strings"
	"testing"
	"time"
)

// TestSidecarFlagsRefused: each bad flag of sextant sidecar is refused
// before anything starts, naming the flag and what is wrong.
func TestSidecarFlagsRefused(t *testing.T) {
	good := func() sidecarFlags {
		return sidecarFlags{service: "shop/orders", appHost: "127.0.0.1", appPort: 8080, meshListen: "127.0.0.1:15006", outbound: "127.0.0.1:15001", ttl: 10 * time.Second,
			istioMetrics: true, istioMaxSeries: 100}
	}
	for _, c := range []struct {
		name, want string
		edit       func(*sidecarFlags)
	}{
		{"no service", "--service: required", func(f *sidecarFlags) { f.service = "" }},
		{"bad service", `--service "a/b/c"`, func(f *sidecarFlags) { f.service = "a/b/c" }},
		{"no app port", "--app-port 0", func(f *sidecarFlags) { f.appPort = 0 }},
		{"app host a name", `--app-host "localhost": want an IP address`, func(f *sidecarFlags) { f.appHost = "localhost" }},
		{"mesh port on every interface", "not on every interface", func(f *sidecarFlags) { f.meshListen = "0.0.0.0:15006" }},
		{"mesh address without a port", `--mesh-listen "127.0.0.1"`, func(f *sidecarFlags) { f.meshListen = "127.0.0.1" }},
		{"one port for both", "give each its own port", func(f *sidecarFlags) { f.outbound = f.meshListen }},
		{"label without =", `--label "app": want key=value`, func(f *sidecarFlags) { f.labels = []string{"app"} }},
		{"outbound port without =", `--outbound-port "orders.shop": want NAME=PORT`, func(f *sidecarFlags) { f.servicePorts = []string{"orders.shop"} }},
		{"outbound port not a port", `port "x": want 1 to 65535`, func(f *sidecarFlags) { f.servicePorts = []string{"orders.shop=x"} }},
		{"no Istio series", "--istio-metrics-max-series 0", func(f *sidecarFlags) { f.istioMaxSeries = 0 }},
		{"TTL under a second", "--ttl 500ms: want whole seconds", func(f *sidecarFlags) { f.ttl = 500 * time.Millisecond }},
		{"outbound port a URL", "is not a service's host name", func(f *sidecarFlags) { f.servicePorts = []string{"http://orders=9080"} }},
	} {
		f := good()
		c.edit(&f)
		if _, err := f.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	f := good()
	f.labels = []string{"app=orders", "version=v2"}
	f.servicePorts = []string{"orders.shop:8080=9080"}
	in, err := f.check()
	if err != nil {
		t.Fatal(err)
	}
	if in.Namespace != "shop" || in.Service != "orders" || in.Host != "127.0.0.1" || in.Port != 15006 || in.Version != "v2" ||
		in.Metadata["app"] != "orders" || f.serviceAccount != "orders" || in.TTLSeconds != 10 {
		t.Errorf("instance %+v, service account %q", in, f.serviceAccount)
	}
}
