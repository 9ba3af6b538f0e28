package main

import (
	"strings"
	"testing"
)

// Bad Istio metrics flags are refused before the gateway starts,
// naming the flag. (Flags built in code leave the metrics off, and then
// their limit is not read: other tests build gatewayFlags{} so.)
func TestGatewayIstioMetricsFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		f    gatewayFlags
		want string
	}{
		{gatewayFlags{listen: "127.0.0.1:0", logFormat: "text", logLevel: "info", istioMetrics: true, istioReporters: []string{"source", "client"}, istioMaxSeries: 10}, `--istio-metrics-reporters: "client" is not a reporter`},
		{gatewayFlags{listen: "127.0.0.1:0", logFormat: "text", logLevel: "info", istioMetrics: true, istioReporters: []string{"destination"}, istioMaxSeries: 0}, "--istio-metrics-max-series 0"},
		{gatewayFlags{listen: "127.0.0.1:0", logFormat: "text", logLevel: "info", locality: "r1//a"}, `--locality: locality: invalid: "r1//a"`},
	} {
		err := runGateway(t.Context(), c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.f, err, c.want)
		}
	}
}
