// Package kube is Sextant's door to Kubernetes. Syncer watches a
// cluster's EndpointSlices (with the Pods behind them for their labels and
// the Nodes for their topology) and keeps one registry instance per
// address and port in step with them, owned by "kubernetes" so that
// Sextant's APIs treat them as read-only (registry.OwnedError). Istio reads
// Istio's CRDs as routing config, owned likewise (config.OwnedError), and
// writes each object's result to its status. Mirror writes the registry's
// other services back as selector-less Services with EndpointSlices. It
// does not own the registry, the config table or the push to clients.
package kube

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Owner is the instance.OwnerLabel of the instances this package writes.
const Owner = "kubernetes"

// Metadata keys the sync sets besides the pod's labels.
const (
	ZoneLabel   = "topology.kubernetes.io/zone"
	RegionLabel = "topology.kubernetes.io/region"
	PodLabel    = "kubernetes.io/pod" // the pod's name
)

// ReadyCheck is the check a not-ready endpoint carries, critical: it is how
// an instance that Kubernetes says is not serving is unhealthy in Sextant.
const ReadyCheck = "kubernetes-ready"

// notReady is the check of endpoints that are neither ready nor draining.
// A ttl check because it is the kind nothing probes: a day's TTL, and it
// is critical from the start anyway.
var notReady = []instance.Check{{ID: ReadyCheck, Name: "EndpointSlice condition ready", Type: instance.CheckTTL, TTL: 24 * time.Hour, Status: instance.StatusCritical}}

// objects is what a conversion looks up: the pod an endpoint targets and
// the node it runs on (nil when unknown).
type objects interface {
	pod(namespace, name string) *corev1.Pod
	node(name string) *corev1.Node
}

// Convert returns the instances of an EndpointSlice: one per address and
// port of each endpoint, in the slice's namespace, for the service the
// slice's kubernetes.io/service-name label names. A slice of no service,
// without ports, or an endpoint that fails validation, gives nothing for
// it. The instances have passed instance.Prepare.
func convert(es *discoveryv1.EndpointSlice, objs objects) []*instance.Instance {
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" || len(es.Ports) == 0 {
		return nil
	}
	n := 0
	for i := range es.Endpoints {
		n += len(es.Endpoints[i].Addresses)
	}
	out := make([]*instance.Instance, 0, n*len(es.Ports))
	pairs := make(map[string]string, 8)
	for i := range es.Endpoints {
		ep := &es.Endpoints[i]
		clear(pairs)
		var pod *corev1.Pod
		if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" && objs != nil {
			pod = objs.pod(es.Namespace, ref.Name)
		}
		if pod != nil {
			for k, v := range pod.Labels {
				if validKey(k) && len(pairs) < instance.MaxMetadata-4 {
					pairs[k] = v
				}
			}
			pairs[PodLabel] = pod.Name
		}
		if ep.Zone != nil && *ep.Zone != "" {
			pairs[ZoneLabel] = *ep.Zone
		}
		if ep.NodeName != nil && objs != nil {
			if node := objs.node(*ep.NodeName); node != nil {
				if z, ok := node.Labels[ZoneLabel]; ok && pairs[ZoneLabel] == "" {
					pairs[ZoneLabel] = z
				}
				if r, ok := node.Labels[RegionLabel]; ok {
					pairs[RegionLabel] = r
				}
			}
		}
		pairs[instance.OwnerLabel] = Owner
		md := label.FromMap(pairs)
		ready, draining := health(ep.Conditions)
		for _, addr := range ep.Addresses {
			for _, p := range es.Ports {
				if p.Port == nil {
					continue
				}
				in := &instance.Instance{
					Namespace: es.Namespace,
					Service:   serviceName(svc, es.Ports, p.Name),
					Host:      addr,
					Port:      int(*p.Port),
					Protocol:  protocol(p),
					Weight:    100,
					Isolated:  draining,
					Metadata:  md,
				}
				if !ready && !draining {
					in.Checks = slices.Clone(notReady)
				}
				in.ID = "k8s-" + instance.DefaultID(in.Namespace, in.Service, in.Host, in.Port)
				if instance.Prepare(-1, in) != nil {
					continue // e.g. a version label longer than a version may be
				}
				out = append(out, in)
			}
		}
	}
	return out
}

// health maps an endpoint's conditions: ready is passing; serving and
// terminating is draining (Sextant's isolated: kept, sent no new
// requests); anything else is critical. A nil ready means ready, a nil
// serving means what ready says (the API's documented defaults).
func health(c discoveryv1.EndpointConditions) (ready, draining bool) {
	ready = c.Ready == nil || *c.Ready
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	terminating := c.Terminating != nil && *c.Terminating
	if terminating {
		// A terminating endpoint is never ready for new requests.
		return false, serving
	}
	return ready, false
}

// serviceName is the Sextant service of a port: the Kubernetes service
// itself when it has one port, else "SERVICE.PORTNAME", as a client
// addresses one port of several.
func serviceName(svc string, ports []discoveryv1.EndpointPort, name *string) string {
	if len(ports) <= 1 || name == nil || *name == "" {
		return svc
	}
	return svc + "." + *name
}

// protocol is a port's appProtocol, else the Istio convention of its name
// ("http-web", "grpc"), else "".
func protocol(p discoveryv1.EndpointPort) string {
	if p.AppProtocol != nil {
		switch ap := *p.AppProtocol; ap {
		case "kubernetes.io/h2c":
			return "http2"
		case "kubernetes.io/ws", "kubernetes.io/wss":
			return "http"
		default:
			if !strings.Contains(ap, "/") && len(ap) <= instance.MaxShortField {
				return strings.ToLower(ap)
			}
		}
	}
	if p.Name != nil {
		prefix, _, _ := strings.Cut(*p.Name, "-")
		switch prefix {
		case "http", "http2", "grpc", "https", "tcp", "tls":
			return prefix
		}
	}
	return ""
}

// validKey reports whether a pod label key is a metadata key Sextant
// takes (1..128 bytes of [A-Za-z0-9._/-]); Kubernetes allows longer ones.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '/' || c == '-') {
			return false
		}
	}
	return true
}

// sliceKey is an EndpointSlice's key, "namespace/name".
func sliceKey(es *discoveryv1.EndpointSlice) string { return es.Namespace + "/" + es.Name }
