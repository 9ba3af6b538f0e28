package config

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

// A ServiceEntry with a workloadSelector takes its endpoints from the
// registry: every instance of its namespace whose labels match, registered
// (sextant instance register, a sync) or a WorkloadEntry's, followed as
// they come and go by the push engine's endpoint path.

// EntrySelection is what an entry's workloadSelector selects: instances
// of Namespace matching Selector, each on every one of Ports.
type EntrySelection struct {
	Namespace string
	Selector  label.Selector
	Ports     []EntryPort
}

// EntryPort is one port of a ServiceEntry.
type EntryPort struct {
	Number     uint32 // the entry's port (a route's destination port)
	Name       string
	TargetPort uint32 // 0: Number
	HTTP2      bool   // protocol GRPC or HTTP2
}

// Port is the port instance in serves p on: a WorkloadEntry's port of p's
// name, else p's targetPort (or number) for a WorkloadEntry's instance (as
// Istio), else the instance's own registered port. 0: none (a registered
// instance without a port).
func (p *EntryPort) Port(in *instance.Instance) uint32 {
	if !IsWorkloadInstance(in) {
		return uint32(max(in.Port, 0))
	}
	if n, ok := WorkloadPort(in, p.Name); ok {
		return n
	}
	if p.TargetPort != 0 {
		return p.TargetPort
	}
	return p.Number
}

// FirstPort is the entry's first port: a cluster of no port is on it.
func (s *EntrySelection) FirstPort() *EntryPort {
	if len(s.Ports) == 0 {
		return nil
	}
	return &s.Ports[0]
}

// PortFor is the entry's port number n, or nil.
func (s *EntrySelection) PortFor(n uint32) *EntryPort {
	for i := range s.Ports {
		if s.Ports[i].Number == n {
			return &s.Ports[i]
		}
	}
	return nil
}

func validateEntrySelector(c errs, path string, se *networking.ServiceEntry) {
	p := join(path, "workloadSelector")
	validateSelector(c, join(p, "labels"), se.WorkloadSelector.Labels)
	if len(se.WorkloadSelector.Labels) == 0 {
		// Every instance of the namespace is not what anyone means.
		c.add(join(p, "labels"), ErrInvalid, "at least one label is required")
	}
	if len(se.Endpoints) > 0 {
		c.add(join(path, "endpoints"), ErrInvalid, "only one of endpoints and workloadSelector may be given (as in Istio)")
	}
	if se.Resolution != networking.ServiceEntry_STATIC {
		c.add(join(path, "resolution"), ErrNotSupported, "%s: with workloadSelector Sextant takes STATIC only: the selected instances' addresses are the endpoints", se.Resolution)
	}
}

// selectedEntry fills e, the entry of o with a workloadSelector.
func selectedEntry(e *EntryService, o *Object) {
	se := o.ServiceEntry
	sel := &EntrySelection{Namespace: o.Namespace}
	keys := make([]string, 0, len(se.WorkloadSelector.Labels))
	for k := range se.WorkloadSelector.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		sel.Selector = append(sel.Selector, label.Requirement{Key: k, Op: label.Equals, Values: []string{se.WorkloadSelector.Labels[k]}})
	}
	for _, sp := range se.Ports {
		proto := strings.ToUpper(sp.Protocol)
		sel.Ports = append(sel.Ports, EntryPort{Number: sp.Number, Name: sp.Name, TargetPort: sp.TargetPort, HTTP2: proto == "GRPC" || proto == "HTTP2"})
	}
	e.Selected = sel
}
