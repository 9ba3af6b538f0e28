package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/envoycheck"
	"github.com/sextant-mesh/sextant/internal/ingress"
	"github.com/sextant-mesh/sextant/internal/secret/secrettest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// everyTLSMode is config with every TLS mode Sextant translates: a
// DestinationRule per client mode (ISTIO_MUTUAL, SIMPLE with and without
// a credential, MUTUAL, DISABLE), PeerAuthentications STRICT, PERMISSIVE
// and DISABLE (port level) over registered workloads, and a Gateway with
// SIMPLE, MUTUAL and ISTIO_MUTUAL servers routing to a mesh service.
const everyTLSMode = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders, namespace: shop}
spec:
  host: orders
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
    connectionPool: {tcp: {maxConnections: 1}, http: {http1MaxPendingRequests: 1, maxRequestsPerConnection: 1, maxRetries: 2}}
  subsets:
  - {name: v1, labels: {version: v1}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: pinned, namespace: shop}
spec:
  host: pinned
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL, subjectAltNames: ["spiffe://cluster.local/ns/shop/sa/pinned"]}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: shop}
spec:
  host: plain
  trafficPolicy:
    tls: {mode: DISABLE}
    connectionPool:
      tcp: {maxConnections: 10, maxConnectionDuration: 1h, tcpKeepalive: {probes: 3, time: 60s, interval: 10s}}
      http: {h2UpgradePolicy: UPGRADE, idleTimeout: 30s, http2MaxRequests: 100, maxConcurrentStreams: 50, maxRequestsPerConnection: 1000}
    retryBudget: {percent: 30, minRetryConcurrency: 2}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ext, namespace: shop}
spec:
  host: ext
  trafficPolicy: {tls: {mode: SIMPLE, sni: ext.example.com}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: extcred, namespace: shop}
spec:
  host: extcred
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: ext-ca, sni: extcred.example.com}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: mtlsup, namespace: shop}
spec:
  host: mtlsup
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: client-cert}}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: orders-strict, namespace: shop}
spec:
  selector: {matchLabels: {app: orders}}
  mtls: {mode: STRICT}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: shop, namespace: shop}
spec:
  mtls: {mode: PERMISSIVE}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: plain-port, namespace: shop}
spec:
  selector: {matchLabels: {app: plain}}
  mtls: {mode: STRICT}
  portLevelMtls: {9003: {mode: DISABLE}}
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  jwtRules:
  - issuer: testing@secure.istio.io
    jwks: '{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}'
    outputClaimToHeaders: [{header: x-jwt-sub, claim: sub}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: jwt-claims, namespace: shop}
spec:
  action: DENY
  rules:
  - from: [{source: {notRequestPrincipals: ["*"]}}]
    to: [{operation: {paths: [/admin*]}}]
  - when: [{key: "request.auth.claims[groups]", values: [banned]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders, namespace: shop}
spec:
  hosts: [orders]
  http:
  - match: [{headers: {x-canary: {exact: "1"}}}]
    route: [{destination: {host: orders, subset: v1}}]
  - route: [{destination: {host: orders}, weight: 90}, {destination: {host: plain}, weight: 10}]
    retries: {attempts: 2, retryOn: 5xx, retryRemoteLocalities: true}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: edge}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [shop.example.com]
    tls: {mode: SIMPLE, credentialName: shop-cert}
  - port: {number: 8443, name: https, protocol: HTTPS}
    hosts: [partners.example.com]
    tls: {mode: MUTUAL, credentialName: partner-cert}
  - port: {number: 9443, name: https-mesh, protocol: HTTPS}
    hosts: [mesh.example.com]
    tls: {mode: ISTIO_MUTUAL}
  - port: {number: 31400, name: tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge, namespace: edge}
spec:
  hosts: [shop.example.com, partners.example.com, mesh.example.com]
  gateways: [edge]
  http:
  - route: [{destination: {host: orders.shop.svc.cluster.local}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: edge-tcp, namespace: edge}
spec:
  hosts: ["*"]
  gateways: [edge]
  tcp:
  - match: [{port: 31400, sourceSubnet: 10.0.0.0/8}]
    route: [{destination: {host: orders.shop.svc.cluster.local, subset: v1}}]
  - match: [{port: 31400}]
    route:
    - {destination: {host: orders.shop.svc.cluster.local, subset: v1}, weight: 80}
    - {destination: {host: plain.shop.svc.cluster.local}, weight: 20}
`

// xdsNode is one kind of subscriber of the validation check.
type xdsNode struct {
	name  string
	node  *corev3.Node
	rules envoycheck.Rules
}

// TestXDSServedPassesEnvoyChecks is the xDS validation check: against the
// real server with config using every TLS mode, an Envoy sidecar (Istio
// node id and metadata), an Envoy gateway (router node id), Sextant's
// gateway and a grpc-go node each subscribe over a real ADS stream to
// every cluster and listener, the inbound listeners of the registered
// workloads, and, following references, to every EDS, RDS and SDS name;
// everything each was served passes envoycheck.Check (go-control-plane's
// ValidateAll, reference integrity, Envoy's own rules for Envoy nodes):
// zero violations. No Envoy binary can be had on this machine (no Debian
// package, no downloads), so Envoy's rules are encoded in envoycheck, each
// with the Envoy source it comes from.
func TestXDSServedPassesEnvoyChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: the real server and ADS streams")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, xdsAddr := startServerXDS(t)
	for _, s := range []struct {
		ns, name string
		withCA   bool
	}{{"shop", "ext-ca", true}, {"shop", "client-cert", true}, {"edge", "shop-cert", false}, {"edge", "partner-cert", true}} {
		cert, key := secrettest.Pair(t, time.Now().Add(time.Hour), s.name+".example.com")
		sec := client.TLSSecret{Namespace: s.ns, Name: s.name, Type: "tls", Cert: string(cert), Key: string(key)}
		if s.withCA {
			sec.CA = string(cert)
		}
		if _, err := api.PutSecret(ctx, sec, false); err != nil {
			t.Fatal(err)
		}
	}
	for i, svc := range []string{"orders", "pinned", "plain", "ext", "extcred", "mtlsup"} {
		in := client.Instance{Namespace: "shop", Service: svc, Host: "127.0.0.1", Port: 9001 + i, Metadata: map[string]string{"app": svc, "version": "v1"}}
		if _, err := api.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.ApplyConfig(ctx, []byte(everyTLSMode), false); err != nil {
		t.Fatal(err)
	}
	inbound := []string{xds.ServerListenerPrefix + "127.0.0.1:9001", xds.ServerListenerPrefix + "127.0.0.1:9002",
		xds.ServerListenerPrefix + "127.0.0.1:9003", "orders.shop:9001"}

	meta := func(kv map[string]any) *structpb.Struct { s, _ := structpb.NewStruct(kv); return s }
	nodes := []xdsNode{
		{"envoy sidecar", &corev3.Node{Id: "sidecar~127.0.0.1~web-1.shop~shop.svc.cluster.local", UserAgentName: "envoy",
			Metadata: meta(map[string]any{"NAMESPACE": "shop", "SERVICE_ACCOUNT": "web", "ISTIO_VERSION": "1.24.0"})}, envoycheck.Rules{Envoy: true}},
		{"envoy sidecar with agent", &corev3.Node{Id: "sidecar~127.0.0.1~web-2.shop~shop.svc.cluster.local", UserAgentName: "envoy",
			Metadata: meta(map[string]any{"NAMESPACE": "shop", "SERVICE_ACCOUNT": "web", "SEXTANT_SDS": "agent"})}, envoycheck.Rules{Envoy: true, AgentCluster: xds.AgentSDSCluster}},
		{"envoy gateway", &corev3.Node{Id: "router~127.0.0.1~gw-1.edge~edge.svc.cluster.local", UserAgentName: "envoy"}, envoycheck.Rules{Envoy: true}},
		{"sextant gateway", &corev3.Node{Id: "gw", Cluster: "sextant-gateway", UserAgentName: "sextant-gateway"}, envoycheck.Rules{}},
		{"grpc-go", &corev3.Node{Id: "web-2", UserAgentName: "gRPC Go", Metadata: meta(map[string]any{"NAMESPACE": "shop"})}, envoycheck.Rules{}},
	}
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	for _, n := range nodes {
		t.Run(strings.ReplaceAll(n.name, " ", "-"), func(t *testing.T) {
			served := subscribeAll(ctx, t, ads, n.node, inbound)
			if len(served.Clusters) < 6 || len(served.Listeners) < 4 || len(served.Routes) == 0 {
				t.Fatalf("served too little to check: %d clusters, %d listeners, %d routes", len(served.Clusters), len(served.Listeners), len(served.Routes))
			}
			if n.rules.Envoy && n.rules.AgentCluster == "" && (served.Secrets[xds.CertificateName] == nil || served.Secrets[xds.RootCertName] == nil) {
				t.Errorf("an Envoy node was not served its workload certificate and roots: %v", keysOf(served.Secrets))
			}
			if strings.Contains(n.name, "gateway") && served.Listeners[ingress.ListenerName(31400)] == nil {
				t.Errorf("the Gateway's TCP listener was not served: %v", keysOf(served.Listeners))
			}
			violations := envoycheck.Check(served, n.rules)
			for _, v := range violations {
				t.Error(v)
			}
			t.Logf("%s: %d clusters, %d endpoints, %d listeners, %d routes, %d secrets checked: %d violations",
				n.name, len(served.Clusters), len(served.Endpoints), len(served.Listeners), len(served.Routes), len(served.Secrets), len(violations))
		})
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// subscribeAll subscribes node over one state-of-the-world ADS stream to
// every cluster and listener (wildcard) and the listeners named in extra,
// then to every EDS, RDS and SDS name what it got refers to, until a
// round brings nothing new; it returns what was served.
func subscribeAll(ctx context.Context, t *testing.T, ads discoverygrpc.AggregatedDiscoveryServiceClient, node *corev3.Node, extra []string) *envoycheck.Served {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	served := envoycheck.NewServed()
	type state struct{ version, nonce string }
	asked := map[string][]string{}
	last := map[string]state{}
	send := func(typ string, names []string) {
		req := &discoverygrpc.DiscoveryRequest{TypeUrl: typ, ResourceNames: names, VersionInfo: last[typ].version, ResponseNonce: last[typ].nonce}
		if len(asked) == 0 {
			req.Node = node
		}
		asked[typ] = names
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	send(xds.TypeCluster.URL(), nil)
	send(xds.TypeListener.URL(), append([]string{"*"}, extra...))
	responses := make(chan *discoverygrpc.DiscoveryResponse, 16)
	go func() {
		defer close(responses)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case responses <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	quiet := time.NewTimer(3 * time.Second)
	defer quiet.Stop()
	for {
		select {
		case r, ok := <-responses:
			if !ok {
				t.Fatal("stream ended")
			}
			for _, a := range r.Resources {
				m, err := a.UnmarshalNew()
				if err != nil {
					t.Fatal(err)
				}
				if err := served.Add(m); err != nil {
					t.Fatal(err)
				}
			}
			last[r.TypeUrl] = state{version: r.VersionInfo, nonce: r.Nonce}
			send(r.TypeUrl, asked[r.TypeUrl]) // ACK
			refs := served.References()
			for typ, names := range map[string][]string{xds.TypeEndpoint.URL(): refs.Endpoints, xds.TypeRoute.URL(): refs.Routes, xds.TypeSecret.URL(): refs.Secrets} {
				if len(names) > 0 && strings.Join(names, ",") != strings.Join(asked[typ], ",") {
					send(typ, names)
				}
			}
			quiet.Reset(3 * time.Second)
		case <-quiet.C:
			return served
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}
