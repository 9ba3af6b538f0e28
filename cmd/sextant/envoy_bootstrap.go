package main

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// xdsClusterName is the bootstrap's static cluster of the xDS server, as
// Istio names it.
const xdsClusterName = "xds-grpc"

func init() { rootCmd.AddCommand(newEnvoyCmd()) }

func newEnvoyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "envoy",
		Short: "Run Envoy as a sidecar or gateway of the mesh",
	}
	cmd.AddCommand(newEnvoyBootstrapCmd())
	return cmd
}

// envoyBootstrapArgs are the bootstrap command's flags.
type envoyBootstrapArgs struct {
	node, xds, token, namespace, account, format, sds string
	otelCollector                                     string // HOST:PORT of the otel provider's collector
	admin                                             int
	labels                                            map[string]string // the node's LABELS: routes by sourceLabels
}

// newEnvoyBootstrapCmd prints an Envoy bootstrap for a node of the mesh.
func newEnvoyBootstrapCmd() *cobra.Command {
	var a envoyBootstrapArgs
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Print an Envoy bootstrap (YAML or JSON) for a node: ADS to the server's xDS",
		Long: `Print the bootstrap an Envoy reads (envoy -c FILE) to join the mesh:
the node (its id: an Istio sidecar id, sidecar~IP~POD.NS~NS.svc.cluster.local,
or a gateway's router~... is understood), its NAMESPACE and SERVICE_ACCOUNT
metadata (its workload identity), clusters and listeners over ADS from the
server's --xds, and the static cluster "xds-grpc" that reaches it over HTTP/2.
The server serves the node the Envoy variant of its resources, and its
workload certificate and roots over SDS ("default", "ROOTCA";
docs/security.md, "Envoy over SDS"). With --token, every ADS stream carries
it (authorization: Bearer ...): the bootstrap then holds a secret, keep it
0600. With --sds unix://PATH the certificate comes from a local agent
("sextant identity agent --sds") by the static cluster "sds-grpc", as
Istio's sidecars read istio-agent's. Nothing is asked of the server.`,
		Example: `  sextant envoy bootstrap --service-account web \
      --node sidecar~10.0.0.5~web-1.shop~shop.svc.cluster.local > envoy.yaml
  envoy -c envoy.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := envoyBootstrap(a)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&a.node, "node", "", "the node id (an Istio sidecar~IP~POD.NS~NS.svc.cluster.local id, or any name)")
	fl.StringVar(&a.xds, "xds", "127.0.0.1:7402", "the server's xDS address (its --xds), HOST:PORT")
	fl.StringVar(&a.token, "token", "", "ACL token sent on the ADS stream (needs push:read everywhere, identity:write on the namespace for its certificate)")
	fl.StringVar(&a.namespace, "namespace", "", "the workload's namespace (default: the Istio node id's, else default)")
	fl.StringVar(&a.account, "service-account", "default", "the workload's service account (its SPIFFE ID's sa)")
	fl.StringVarP(&a.format, "output", "o", "yaml", "yaml or json")
	fl.IntVar(&a.admin, "admin-port", 15000, "Envoy's admin port on 127.0.0.1 (0: no admin interface)")
	fl.StringToStringVar(&a.labels, "labels", nil, "the workload's labels, KEY=VALUE,... (sent as the node's LABELS: VirtualService routes by sourceLabels)")
	fl.StringVar(&a.otelCollector, "otel-collector", "", `the OpenTelemetry collector (OTLP/gRPC, HOST:PORT) of the access logs a Telemetry's "otel" provider turns on: the static cluster `+xds.OTelCollectorCluster)
	fl.StringVar(&a.sds, "sds", "", `read the workload certificate from a local agent's SDS socket, unix://PATH ("sextant identity agent --sds"), not from the server`)
	_ = cmd.MarkFlagRequired("node")
	return cmd
}

// envoyBootstrap builds and encodes the bootstrap of a.
func envoyBootstrap(a envoyBootstrapArgs) ([]byte, error) {
	b, err := buildEnvoyBootstrap(a)
	if err != nil {
		return nil, err
	}
	js, err := protojson.MarshalOptions{Indent: "  "}.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	switch a.format {
	case "json":
		return append(js, '\n'), nil
	case "yaml", "":
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return nil, fmt.Errorf("envoy bootstrap: %w", err)
		}
		return y, nil
	}
	return nil, fmt.Errorf("envoy bootstrap: --output %q: want yaml or json", a.format)
}

// buildEnvoyBootstrap returns the bootstrap of a, checked by its own
// validation rules.
func buildEnvoyBootstrap(a envoyBootstrapArgs) (*bootstrapv3.Bootstrap, error) {
	if a.node == "" {
		return nil, fmt.Errorf("envoy bootstrap: --node is required")
	}
	xdsAddr, err := bootstrapAddr("--xds", a.xds)
	if err != nil {
		return nil, err
	}
	var otelAddr *corev3.Address
	if a.otelCollector != "" {
		if otelAddr, err = bootstrapAddr("--otel-collector", a.otelCollector); err != nil {
			return nil, err
		}
	}
	if a.admin < 0 || a.admin > 65535 {
		return nil, fmt.Errorf("envoy bootstrap: --admin-port %d: want 0..65535", a.admin)
	}
	ns := a.namespace
	if ns == "" {
		ns = "default"
		if in, ok := xds.ParseIstioNodeID(a.node); ok && in.Namespace != "" {
			ns = in.Namespace
		}
	}
	meta := map[string]any{"NAMESPACE": ns, "SERVICE_ACCOUNT": a.account}
	if len(a.labels) > 0 {
		ls := map[string]any{}
		for k, v := range a.labels {
			if !label.ValidKey(k) {
				return nil, fmt.Errorf("envoy bootstrap: --labels %q: not a metadata key: 1..128 of [A-Za-z0-9._/-]", k)
			}
			ls[k] = v
		}
		meta["LABELS"] = ls
	}
	var sdsPath string
	if a.sds != "" {
		if sdsPath, err = parseSDSAddr(a.sds); err != nil {
			return nil, fmt.Errorf("envoy bootstrap: %w", err)
		}
		meta["SEXTANT_SDS"] = "agent" // xds.FlavourEnvoyAgent
	}
	md, err := structpb.NewStruct(meta)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	grpcService := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: xdsClusterName}}}
	if a.token != "" {
		grpcService.InitialMetadata = []*corev3.HeaderValue{{Key: "authorization", Value: "Bearer " + a.token}}
	}
	ads := &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}
	h2, err := anypb.New(&httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: a.node, Cluster: ns, Metadata: md},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{ApiType: corev3.ApiConfigSource_GRPC, TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{grpcService}, SetNodeOnFirstMessageOnly: true},
			CdsConfig: ads,
			LdsConfig: ads,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Clusters: []*clusterv3.Cluster{staticCluster(xdsClusterName, xdsAddr, h2)}},
	}
	if sdsPath != "" {
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, staticCluster(xds.AgentSDSCluster,
			&corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: sdsPath}}}, h2))
	}
	if otelAddr != nil {
		b.StaticResources.Clusters = append(b.StaticResources.Clusters, staticCluster(xds.OTelCollectorCluster, otelAddr, h2))
	}
	if a.admin > 0 {
		b.Admin = &bootstrapv3.Admin{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(a.admin)}}}}}
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %w", err)
	}
	return b, nil
}

// bootstrapAddr reads flag's HOST:PORT.
func bootstrapAddr(flag, v string) (*corev3.Address, error) {
	host, portStr, err := net.SplitHostPort(v)
	if err != nil {
		return nil, fmt.Errorf("envoy bootstrap: %s %q: want HOST:PORT: %w", flag, v, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 || host == "" {
		return nil, fmt.Errorf("envoy bootstrap: %s %q: want HOST:PORT with a port in 1..65535", flag, v)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}, nil
}

// staticCluster is an HTTP/2 (gRPC) cluster of one endpoint at addr:
// STATIC for an IP address or a pipe, STRICT_DNS for a host name.
func staticCluster(name string, addr *corev3.Address, h2 *anypb.Any) *clusterv3.Cluster {
	discovery := clusterv3.Cluster_STATIC
	if sa := addr.GetSocketAddress(); sa != nil {
		if _, err := netip.ParseAddr(sa.GetAddress()); err != nil {
			discovery = clusterv3.Cluster_STRICT_DNS
		}
	}
	return &clusterv3.Cluster{
		Name:                          name,
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: discovery},
		ConnectTimeout:                durationpb.New(time.Second),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{xds.HTTPProtocolOptionsKey: h2},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: addr}}}}}}},
	}
}

// nodeLabels is an xDS node's metadata carrying labels as Istio's proxies
// send them (LABELS), nil without labels.
func nodeLabels(labels map[string]string) *structpb.Struct {
	if len(labels) == 0 {
		return nil
	}
	ls := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range labels {
		ls.Fields[k] = structpb.NewStringValue(v)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{"LABELS": structpb.NewStructValue(ls)}}
}
