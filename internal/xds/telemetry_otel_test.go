package xds

import (
	"testing"

	otelalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"

	"github.com/sextant-mesh/sextant/internal/accesslog"
	"github.com/sextant-mesh/sextant/internal/config"
)

// TestOTelAccessLogConfig: the otel provider is Envoy's OpenTelemetry
// access logger as Istio writes it, valid by Envoy's own rules: Istio's
// text format as the body, sent to the collector's cluster.
func TestOTelAccessLogConfig(t *testing.T) {
	name, a, err := accessLogConfig(config.ProviderOTelLogs)
	if err != nil {
		t.Fatal(err)
	}
	oc := new(otelalsv3.OpenTelemetryAccessLogConfig)
	if err := a.UnmarshalTo(oc); err != nil {
		t.Fatal(err)
	}
	if err := oc.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	if name != OTelAccessLogName || oc.GetBody().GetStringValue() != accesslog.TextFormat ||
		oc.GetCommonConfig().GetGrpcService().GetEnvoyGrpc().GetClusterName() != OTelCollectorCluster ||
		oc.GetCommonConfig().GetLogName() != accesslog.LogName {
		t.Fatalf("%s: %v", name, oc)
	}
}
