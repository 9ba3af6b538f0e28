package xds

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Flavour is the kind of xDS client a node is: it decides the variant of
// the resources that differ between them (mutual TLS: certificate provider
// instances for proxyless gRPC, SDS secrets for Envoy). There is one
// variant per flavour, encoded once and shared by every node of it.
type Flavour uint8

const (
	// FlavourGRPC is proxyless gRPC (and Sextant's gateway, which reads
	// the same gRFC A29 fields): the default.
	FlavourGRPC Flavour = iota
	// FlavourEnvoy is Envoy, as a sidecar or a gateway, reading its
	// workload certificate by SDS over ADS from the server.
	FlavourEnvoy
	// FlavourEnvoyAgent is Envoy reading it from a local agent ("sextant
	// identity agent --sds"), by SDS over the bootstrap's cluster
	// AgentSDSCluster, as Istio's sidecars read istio-agent's: its node
	// metadata says SEXTANT_SDS: agent.
	FlavourEnvoyAgent
	numFlavours
)

// AgentSDSCluster is the bootstrap's cluster of the local SDS agent's
// unix socket, Istio's name.
const AgentSDSCluster = "sds-grpc"

func (f Flavour) String() string {
	switch f {
	case FlavourEnvoy:
		return "envoy"
	case FlavourEnvoyAgent:
		return "envoy-agent"
	}
	return "grpc"
}

// NodeFlavour tells an Envoy node from a proxyless one, as istiod does,
// first rule that decides:
//
//  1. metadata GENERATOR "grpc" (what istio-agent sets for proxyless gRPC):
//     gRPC;
//  2. user_agent_name "envoy" (Envoy always sends it): Envoy; any other
//     user_agent_name ("gRPC Go", "sextant-gateway"): gRPC;
//  3. a client feature only Envoy sends ("envoy.lrs.supports_send_all_clusters"):
//     Envoy;
//  4. an Istio proxy node id (TYPE~IP~POD.NS~NS.svc.DOMAIN, TYPE sidecar or
//     router) or Istio proxy metadata (ISTIO_VERSION): Envoy;
//  5. else gRPC, what Sextant served before it knew Envoy.
//
// An Envoy node whose metadata says SEXTANT_SDS: agent reads its workload
// certificate from a local agent (FlavourEnvoyAgent).
func NodeFlavour(n *corev3.Node) Flavour {
	f := nodeFlavour(n)
	if f == FlavourEnvoy && n.GetMetadata().GetFields()["SEXTANT_SDS"].GetStringValue() == "agent" {
		return FlavourEnvoyAgent
	}
	return f
}

func nodeFlavour(n *corev3.Node) Flavour {
	md := n.GetMetadata().GetFields()
	if md["GENERATOR"].GetStringValue() == "grpc" {
		return FlavourGRPC
	}
	switch ua := n.GetUserAgentName(); {
	case ua == "envoy":
		return FlavourEnvoy
	case ua != "":
		return FlavourGRPC
	}
	for _, f := range n.GetClientFeatures() {
		if f == "envoy.lrs.supports_send_all_clusters" {
			return FlavourEnvoy
		}
	}
	if _, ok := ParseIstioNodeID(n.GetId()); ok {
		return FlavourEnvoy
	}
	if md["ISTIO_VERSION"].GetStringValue() != "" {
		return FlavourEnvoy
	}
	return FlavourGRPC
}

// IstioNode is an Istio proxy node id: TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN.
type IstioNode struct {
	Type      string // "sidecar" or "router" (a gateway)
	IP        string
	Pod       string
	Namespace string
	Domain    string // "NAMESPACE.svc.cluster.local"
}

// ParseIstioNodeID parses an Istio proxy node id (istiod's
// model.ParseServiceNodeWithMetadata): four parts separated by '~', a
// type of sidecar or router, a non-empty IP, and the namespace from the
// third part (POD.NAMESPACE) or, failing that, the fourth's first label.
func ParseIstioNodeID(id string) (IstioNode, bool) {
	parts := strings.Split(id, "~")
	if len(parts) != 4 || (parts[0] != "sidecar" && parts[0] != "router") || parts[1] == "" || parts[2] == "" {
		return IstioNode{}, false
	}
	n := IstioNode{Type: parts[0], IP: parts[1], Domain: parts[3]}
	pod, ns, ok := strings.Cut(parts[2], ".")
	n.Pod = pod
	if ok && ns != "" {
		n.Namespace = ns
	} else if d, _, _ := strings.Cut(parts[3], "."); d != "" {
		n.Namespace = d
	}
	return n, true
}

// NodeNamespace is the namespace a node says it is in: its metadata's
// NAMESPACE (Istio's name, or "namespace"), else its Istio node id's.
func NodeNamespace(n *corev3.Node) string {
	if ns := nodeNamespace(n.GetMetadata().GetFields()); ns != "" {
		return ns
	}
	if in, ok := ParseIstioNodeID(n.GetId()); ok {
		return in.Namespace
	}
	return ""
}

// NodeServiceAccount is the service account a node asks to be: its
// metadata's SERVICE_ACCOUNT (Istio's), else "default" (Kubernetes').
func NodeServiceAccount(n *corev3.Node) string {
	if sa := n.GetMetadata().GetFields()["SERVICE_ACCOUNT"].GetStringValue(); sa != "" {
		return sa
	}
	return "default"
}
