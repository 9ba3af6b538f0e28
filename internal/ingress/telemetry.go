package ingress

import (
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// WithTelemetry writes the Telemetry in force into the Gateway listeners
// of out (Build's): a port's listener gets what resolves for the
// workload of its first Gateway (its namespace and spec.selector, the
// gateway's labels), as Istio resolves a gateway's Telemetry. It returns
// a warning per listener it could not write.
func WithTelemetry(out [3]map[string]proto.Message, gws []*config.Entry, tel *config.Telemetries) []string {
	ports, order, _ := gatewayPorts(gws)
	byKey := map[config.Key]*config.Object{}
	for _, e := range gws {
		byKey[e.Object.Key] = e.Object
	}
	var warns []string
	for _, n := range order {
		p := ports[n]
		l, _ := out[1][ListenerName(n)].(*listenerv3.Listener)
		if l == nil || len(p.servers) == 0 {
			continue
		}
		gw := byKey[p.servers[0].gw]
		w := config.Workload{Namespace: gw.Namespace, Labels: label.FromMap(gw.Gateway.Selector), Port: n}
		if err := xds.WithTelemetry(l, tel.For(w)); err != nil {
			warns = append(warns, err.Error())
		}
	}
	return warns
}

// ProxyListener is the proxies' listener (xds.ProxyName) on port with the
// mesh's Telemetry (the root namespace's), as the push engine publishes it
// without.
func ProxyListener(port uint32, tel *config.Telemetries) (*listenerv3.Listener, error) {
	l := xds.HTTPListener(xds.ProxyName, port, xds.ProxyName)
	err := xds.WithTelemetry(l, tel.For(config.Workload{Namespace: tel.Root()}))
	return l, err
}
