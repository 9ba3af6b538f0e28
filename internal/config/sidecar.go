package config

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// KindSidecar is Istio's Sidecar: which services the workloads it applies
// to may call (egress hosts), and what happens to a call to any other
// (outboundTrafficPolicy). A subscriber is sent only what its Sidecar
// imports (docs/controlplane.md, "Sidecar: what a workload is sent").
const KindSidecar = "Sidecar"

func init() {
	kindGroups[KindSidecar] = Group
	allow(&networking.Sidecar{}, "workload_selector", "egress", "outbound_traffic_policy")
	allow(&networking.IstioEgressListener{}, "port", "hosts")
	allow(&networking.SidecarPort{}, "number", "protocol", "name")
	allow(&networking.OutboundTrafficPolicy{}, "mode")
	for f, why := range map[string]string{
		"Sidecar.ingress":                       "Sextant's sidecar serves one inbound listener, the mesh port, to the workload's registered address (sextant sidecar --app); inbound listeners per port are not configurable",
		"Sidecar.inbound_connection_pool":       "the inbound listener has no connection pool to set",
		"IstioEgressListener.bind":              "Sextant's gateway serves one proxy listener (--listen), not one per egress listener",
		"IstioEgressListener.capture_mode":      "capture is set up outside the config (sextant sidecar capture), for the one proxy listener",
		"SidecarPort.target_port":               "only inbound listeners have a target port",
		"OutboundTrafficPolicy.egress_proxy":    "calls to hosts outside the registry are not forwarded to an egress proxy",
		"IstioIngressListener.default_endpoint": "ingress listeners are not supported",
	} {
		notSupportedNotes[protoreflect.FullName("istio.networking.v1alpha3."+f)] = why
	}
}

// SidecarHost is one parsed egress host of a Sidecar, "namespace/dnsName".
type SidecarHost struct {
	// Namespace is a namespace name, "*" (any), or "" for "~" (none:
	// nothing is imported). "." is resolved to the Sidecar's own.
	Namespace string
	// DNS is "*" (every host), "*.suffix" (hosts ending in .suffix), or
	// an exact host name.
	DNS string
}

// ParseSidecarHost parses an egress host as Istio reads it: "ns/host",
// "./host" (the Sidecar's namespace ns), "*/host" (any namespace), "~/host"
// (no namespace: imports nothing). host is "*", "*.suffix" or a DNS name,
// lower case, without a port.
func ParseSidecarHost(s, ns string) (SidecarHost, error) {
	n, dns, ok := strings.Cut(s, "/")
	if !ok {
		return SidecarHost{}, fmt.Errorf("%q: want namespace/host (./host for the Sidecar's namespace, */host for any)", s)
	}
	switch {
	case n == ".":
		n = ns
	case n == "*":
	case n == "~":
		n = ""
	case !naming.ValidName(n):
		return SidecarHost{}, fmt.Errorf("%q: namespace %q: want a namespace name, \".\", \"*\" or \"~\"", s, n)
	}
	if err := checkSidecarDNS(dns); err != nil {
		return SidecarHost{}, fmt.Errorf("%q: %w", s, err)
	}
	return SidecarHost{Namespace: n, DNS: dns}, nil
}

func checkSidecarDNS(dns string) error {
	if dns == "*" {
		return nil
	}
	name := strings.TrimPrefix(dns, "*.")
	if name == "" || len(dns) > 253 {
		return fmt.Errorf("host %q: want *, *.suffix or a DNS name", dns)
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q: empty or too long label", dns)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host %q: %q is not allowed in a host (lower-case letters, digits, '-', '.'; a wildcard only as a leading \"*.\")", dns, c)
			}
		}
	}
	return nil
}

// matches reports whether h admits a service in namespace ns named by any
// of names.
func (h SidecarHost) matches(ns string, names []string) bool {
	if h.Namespace == "" || (h.Namespace != "*" && h.Namespace != ns) {
		return false
	}
	if h.DNS == "*" {
		return true
	}
	for _, n := range names {
		if suffix, ok := strings.CutPrefix(h.DNS, "*"); ok {
			if strings.HasSuffix(n, suffix) {
				return true
			}
		} else if n == h.DNS {
			return true
		}
	}
	return false
}

func validateSidecar(c errs, path string, o *Object) {
	sc := o.Sidecar
	validateSelector(c, join(path, "workloadSelector.labels"), sc.GetWorkloadSelector().GetLabels())
	if len(sc.Egress) == 0 {
		c.add(join(path, "egress"), ErrInvalid, "at least one egress listener is required (Sextant scopes only what a workload calls)")
	}
	ports := map[uint32]bool{}
	catchAll := false
	for i, l := range sc.Egress {
		p := index(join(path, "egress"), i)
		if l == nil {
			c.add(p, ErrInvalid, "want an object, got null")
			continue
		}
		if l.Port == nil {
			if catchAll {
				c.add(p, ErrInvalid, "only one egress listener may leave out port (the catch-all)")
			}
			catchAll = true
		} else {
			pp := join(p, "port")
			n := l.Port.Number
			switch {
			case n == 0 || n > 65535:
				c.add(join(pp, "number"), ErrInvalid, "%d: want 1..65535", n)
			case ports[n]:
				c.add(join(pp, "number"), ErrInvalid, "%d: another egress listener has this port", n)
			}
			ports[n] = true
			if pr := strings.ToUpper(l.Port.Protocol); pr != "" && !protocols[pr] {
				c.add(join(pp, "protocol"), ErrInvalid, "%q: want HTTP, HTTPS, GRPC, HTTP2, TCP, TLS, ...", l.Port.Protocol)
			}
		}
		if len(l.Hosts) == 0 {
			c.add(join(p, "hosts"), ErrInvalid, "at least one host is required")
		}
		for j, h := range l.Hosts {
			if _, err := ParseSidecarHost(h, o.Namespace); err != nil {
				c.add(index(join(p, "hosts"), j), ErrInvalid, "%v", err)
			}
		}
	}
}

// SidecarScope is what one Sidecar lets its workloads call, parsed once.
// Scopes are immutable and compared by pointer: workloads with one Sidecar
// share its scope (and the resources trimmed for it).
type SidecarScope struct {
	Key          Key
	obj          *Object // the Sidecar it was parsed from
	registryOnly bool
	listeners    []egressListener
}

type egressListener struct {
	port  uint32 // 0: every port
	hosts []SidecarHost
}

// RegistryOnly reports whether a call to a host the scope does not import
// is refused (outboundTrafficPolicy.mode REGISTRY_ONLY); otherwise it passes
// through (ALLOW_ANY, the mesh's default).
func (sc *SidecarScope) RegistryOnly() bool { return sc.registryOnly }

// Imports reports whether the scope imports service s in namespace ns
// (the service's, or for a ServiceEntry's host the entry's) on port (0:
// any port): some egress listener of that port, or without one, names it.
func (sc *SidecarScope) Imports(s naming.ServiceKey, ns string, port uint32) bool {
	if sc == nil {
		return true
	}
	var names []string
	for _, l := range sc.listeners {
		if l.port != 0 && port != 0 && l.port != port {
			continue
		}
		for _, h := range l.hosts {
			if h.DNS != "*" && names == nil {
				names = Hostnames(s)
			}
			if h.matches(ns, names) {
				return true
			}
		}
	}
	return false
}

// Sidecars is an immutable view of the Sidecars in force: which one applies
// to a workload, and the namespaces of the ServiceEntry hosts (imported by
// the entry's namespace, as Istio does).
type Sidecars struct {
	root    string
	objs    []*Object // key order
	scopes  map[Key]*SidecarScope
	entryNS map[naming.ServiceKey]string

	// mesh holds the root namespace's default scope per workload
	// namespace: its "./" is the workload's namespace, as in Istio.
	mu   sync.Mutex
	mesh map[meshScopeKey]*SidecarScope
}

type meshScopeKey struct {
	key Key
	ns  string
}

// NewSidecars returns the view over objs (the Sidecars and ServiceEntries
// among them), with root the mesh's root namespace ("" for
// DefaultRootNamespace).
func NewSidecars(root string, objs []*Object) *Sidecars {
	if root == "" {
		root = DefaultRootNamespace
	}
	s := &Sidecars{root: root, scopes: map[Key]*SidecarScope{}, entryNS: map[naming.ServiceKey]string{},
		mesh: map[meshScopeKey]*SidecarScope{}}
	for _, o := range objs {
		switch {
		case o.Sidecar != nil:
			s.objs = append(s.objs, o)
			s.scopes[o.Key] = newSidecarScope(o, o.Namespace)
		case o.ServiceEntry != nil:
			for _, k := range EntryHosts(o) {
				s.entryNS[k] = o.Namespace
			}
		}
	}
	slices.SortFunc(s.objs, func(a, b *Object) int { return a.Key.Compare(b.Key) })
	return s
}

// newSidecarScope is o's scope with "./" meaning namespace ns.
func newSidecarScope(o *Object, ns string) *SidecarScope {
	sc := &SidecarScope{Key: o.Key, obj: o}
	if p := o.Sidecar.OutboundTrafficPolicy; p != nil {
		sc.registryOnly = p.Mode == networking.OutboundTrafficPolicy_REGISTRY_ONLY
	}
	for _, l := range o.Sidecar.Egress {
		el := egressListener{port: l.GetPort().GetNumber()}
		for _, h := range l.Hosts {
			if sh, err := ParseSidecarHost(h, ns); err == nil { // validated at apply
				el.hosts = append(el.hosts, sh)
			}
		}
		sc.listeners = append(sc.listeners, el)
	}
	return sc
}

// Carry keeps old's scopes of the Sidecars s holds unchanged (the same
// objects), so that the subscribers they apply to keep their scope, and
// are not sent everything again, when another Sidecar or a ServiceEntry
// changes. Call it before s is shared.
func (s *Sidecars) Carry(old *Sidecars) {
	if old == nil {
		return
	}
	for k, sc := range s.scopes {
		if o := old.scopes[k]; o != nil && o.obj == sc.obj {
			s.scopes[k] = o
		}
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	for k, sc := range old.mesh {
		if n := s.scopes[k.key]; n != nil && n.obj == sc.obj {
			s.mesh[k] = sc
		}
	}
}

// Len is the number of Sidecars in force.
func (s *Sidecars) Len() int {
	if s == nil {
		return 0
	}
	return len(s.objs)
}

// Namespace is the namespace service k is imported by: its own, or for a
// ServiceEntry's host the entry's.
func (s *Sidecars) Namespace(k naming.ServiceKey) string {
	if s != nil {
		if ns, ok := s.entryNS[k]; ok {
			return ns
		}
	}
	return k.Namespace
}

// For returns the scope of workload w as Istio picks its Sidecar: the one
// in w's namespace whose workloadSelector selects w, else the one in w's
// namespace without a selector, else the root namespace's without a
// selector (the mesh's default, whose "./" is w's namespace). Of two at one level the first by name
// counts (Istio: the oldest). nil: no Sidecar applies, everything is
// imported.
func (s *Sidecars) For(w Workload) *SidecarScope {
	if s == nil {
		return nil
	}
	var namespace, mesh *Object
	for _, o := range s.objs {
		sel := o.Sidecar.GetWorkloadSelector().GetLabels()
		switch {
		case len(sel) > 0 && o.Namespace == w.Namespace && selectsLabels(sel, w):
			return s.scopes[o.Key]
		case len(sel) == 0 && o.Namespace == w.Namespace:
			if namespace == nil {
				namespace = o
			}
		case len(sel) == 0 && o.Namespace == s.root:
			if mesh == nil {
				mesh = o
			}
		}
	}
	if namespace != nil {
		return s.scopes[namespace.Key]
	}
	if mesh == nil {
		return nil
	}
	if w.Namespace == s.root {
		return s.scopes[mesh.Key]
	}
	k := meshScopeKey{mesh.Key, w.Namespace}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.mesh[k]
	if sc == nil {
		sc = newSidecarScope(mesh, w.Namespace)
		s.mesh[k] = sc
	}
	return sc
}
