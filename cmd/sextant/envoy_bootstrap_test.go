package main

import (
	"bytes"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/sextant-mesh/sextant/internal/envoycheck"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestEnvoyBootstrap runs "sextant envoy bootstrap" as users do (the
// command tree), in YAML and JSON: the output decodes as Envoy's
// Bootstrap, passes ValidateAll() (its typed configs too), and carries the
// node's identity metadata, ADS to --xds and the token. Bad flags are
// refused naming what is wrong.
func TestEnvoyBootstrap(t *testing.T) {
	const node = "sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local"
	for _, format := range []string{"yaml", "json"} {
		var out bytes.Buffer
		cmd := newEnvoyCmd() // a fresh command: cobra keeps flag values between runs
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"bootstrap", "--node", node, "--xds", "10.0.0.1:7402", "--token", "sxt_test", "--service-account", "web", "--labels", "app=web,version=v2", "-o", format})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		js := out.Bytes()
		if format == "yaml" {
			var err error
			if js, err = yaml.YAMLToJSON(js); err != nil {
				t.Fatalf("yaml: %v\n%s", err, out.String())
			}
		}
		b := &bootstrapv3.Bootstrap{}
		if err := protojson.Unmarshal(js, b); err != nil {
			t.Fatalf("%s: not a Bootstrap: %v\n%s", format, err, out.String())
		}
		if errs := envoycheck.Validate("bootstrap", b); len(errs) > 0 {
			t.Errorf("%s: %v", format, errs)
		}
		md := b.Node.GetMetadata().GetFields()
		if b.Node.GetId() != node || md["NAMESPACE"].GetStringValue() != "shop" || md["SERVICE_ACCOUNT"].GetStringValue() != "web" ||
			md["LABELS"].GetStructValue().GetFields()["version"].GetStringValue() != "v2" {
			t.Errorf("%s: node %v", format, b.Node)
		}
		ads := b.DynamicResources.GetAdsConfig().GetGrpcServices()
		if len(ads) != 1 || ads[0].GetEnvoyGrpc().GetClusterName() != xdsClusterName || ads[0].GetInitialMetadata()[0].GetValue() != "Bearer sxt_test" {
			t.Errorf("%s: ADS %v", format, ads)
		}
		x := b.StaticResources.GetClusters()[0]
		if sa := x.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress(); sa.GetAddress() != "10.0.0.1" || sa.GetPortValue() != 7402 {
			t.Errorf("%s: xds cluster endpoint %v", format, sa)
		}
	}
	// With a local agent: the sds-grpc cluster to its socket, and the
	// metadata that makes the server name it.
	var out bytes.Buffer
	cmd := newEnvoyCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"bootstrap", "--node", node, "--sds", "unix:///run/sextant/web/sds.sock", "-o", "json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(out.Bytes(), b); err != nil {
		t.Fatal(err)
	}
	if errs := envoycheck.Validate("bootstrap", b); len(errs) > 0 {
		t.Error(errs)
	}
	cl := b.StaticResources.GetClusters()
	if len(cl) != 2 || cl[1].Name != xds.AgentSDSCluster ||
		cl[1].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetPipe().GetPath() != "/run/sextant/web/sds.sock" ||
		b.Node.GetMetadata().GetFields()["SEXTANT_SDS"].GetStringValue() != "agent" {
		t.Errorf("--sds: clusters %v, node %v", cl, b.Node)
	}
	// With the otel provider's collector: its cluster, by name.
	out.Reset()
	cmd = newEnvoyCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"bootstrap", "--node", node, "--otel-collector", "otel.observability:4317", "-o", "json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	b = &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(out.Bytes(), b); err != nil {
		t.Fatal(err)
	}
	if errs := envoycheck.Validate("bootstrap", b); len(errs) > 0 {
		t.Error(errs)
	}
	cl = b.StaticResources.GetClusters()
	if len(cl) != 2 || cl[1].Name != xds.OTelCollectorCluster || cl[1].GetType() != clusterv3.Cluster_STRICT_DNS ||
		cl[1].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue() != 4317 {
		t.Errorf("--otel-collector: clusters %v", cl)
	}
	for args, want := range map[string]string{
		"--node n --sds /tmp/sds.sock":     `--sds "/tmp/sds.sock"`,
		"--node n --xds nowhere":           `--xds "nowhere"`,
		"--node n --xds 10.0.0.1:0":        "port in 1..65535",
		"--node n --otel-collector otel":   `--otel-collector "otel"`,
		"--node n -o toml":                 `--output "toml"`,
		"--node n --admin-port 70000":      "--admin-port 70000",
		"--node n --xds xds.example.com:1": "",
	} {
		var out bytes.Buffer
		cmd := newEnvoyCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"bootstrap"}, strings.Fields(args)...))
		err := cmd.Execute()
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", args, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error naming %s", args, err, want)
		}
	}
}
