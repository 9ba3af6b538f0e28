package placement

import (
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/go-logr/logr"

	"github.com/sextant-mesh/sextant/internal/label"
)

// discard is the logger kube's toleration helper wants; it logs only for
// numeric operators, which the default profile leaves off.
var discard = logr.Discard()

// Workload is a Pod compiled for scheduling: what kube-scheduler's default
// plugins read, validated, with selectors and requests precomputed.
type Workload struct {
	Key
	Labels        label.Labels
	NodeName      string
	Requests      Resources
	NonZeroCPU    int64
	NonZeroMemory int64

	nodeSelector   label.Selector // spec.nodeSelector; nil: none
	required       []nodeTerm     // ORed; nil: no required node affinity
	nodeNames      []string       // NodeAffinity PreFilter: names its terms pin (sorted), or nil
	namesConflict  bool           // every term pins names, and they do not intersect
	preferred      []preferredTerm
	tolerations    []corev1.Toleration
	spread         []spreadConstraint
	Affinity       *PodAffinity
	tolerateUnsch  bool // tolerates node.kubernetes.io/unschedulable:NoSchedule
	hasNodeAffReqs bool // nodeSelector or required node affinity present

	src *corev1.Pod // what was decoded, for tests against a reference
}

// Placement returns the record binding the workload to node.
func (w *Workload) Placement(node string) *Placement {
	return &Placement{Key: w.Key, Node: node, Labels: w.Labels, Requests: w.Requests,
		NonZeroCPU: w.NonZeroCPU, NonZeroMemory: w.NonZeroMemory, Affinity: w.Affinity}
}

// nodeTerm is one NodeSelectorTerm: label requirements, numeric ones (Gt,
// Lt) and metadata.name ones. An empty term matches nothing.
type nodeTerm struct {
	reqs   label.Selector
	num    []numReq
	fields []fieldReq
	empty  bool
}

type numReq struct {
	key string
	gt  bool // Gt, else Lt
	v   int64
}

type fieldReq struct {
	in     bool // In, else NotIn
	values []string
}

type preferredTerm struct {
	weight int64
	nodeTerm
}

type spreadConstraint struct {
	maxSkew       int32
	topologyKey   string
	hard          bool // DoNotSchedule
	selector      Selector
	minDomains    int32
	honorAffinity bool
	honorTaints   bool
}

// CompileNode validates a Kubernetes Node and returns its record (Seq 0:
// the scheduler assigns it). path prefixes error paths ("" or items[i]).
func CompileNode(n *corev1.Node, path string) (*Node, error) {
	out := &Node{Name: n.Name, Unschedulable: n.Spec.Unschedulable}
	if n.Name == "" {
		return nil, fieldErr(join(path, "metadata.name"), "required")
	}
	if msgs := content.IsDNS1123Subdomain(n.Name); len(msgs) > 0 {
		return nil, fieldErr(join(path, "metadata.name"), "%s", msgs[0])
	}
	l, err := compileLabels(n.Labels, join(path, "metadata.labels"))
	if err != nil {
		return nil, err
	}
	out.Labels = l
	seen := map[[2]string]bool{}
	for i, t := range n.Spec.Taints {
		p := index(join(path, "spec.taints"), i)
		if msgs := content.IsLabelKey(t.Key); len(msgs) > 0 {
			return nil, fieldErr(join(p, "key"), "%s", msgs[0])
		}
		if msgs := content.IsLabelValue(t.Value); len(msgs) > 0 {
			return nil, fieldErr(join(p, "value"), "%s", msgs[0])
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fieldErr(join(p, "effect"), "must be NoSchedule, PreferNoSchedule or NoExecute, got %q", t.Effect)
		}
		k := [2]string{t.Key, string(t.Effect)}
		if seen[k] {
			return nil, fieldErr(p, "taints must be unique by key and effect (%s:%s)", t.Key, t.Effect)
		}
		seen[k] = true
		out.Taints = append(out.Taints, Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	ap := join(path, "status.allocatable")
	for _, name := range slices.Sorted(maps.Keys(n.Status.Allocatable)) {
		q := n.Status.Allocatable[name]
		v, err := quantity(name, q, join(ap, string(name)))
		if err != nil {
			return nil, err
		}
		switch {
		case name == corev1.ResourceCPU:
			out.Allocatable.CPU = v
		case name == corev1.ResourceMemory:
			out.Allocatable.Memory = v
		case name == corev1.ResourceEphemeralStorage:
			out.Allocatable.EphemeralStorage = v
		case name == corev1.ResourcePods:
			out.Pods = v
		case isScalarResource(name):
			out.Allocatable.Scalars = append(out.Allocatable.Scalars, Scalar{Name: string(name), Value: v})
		}
	}
	out.Allocatable.Scalars = sortScalars(out.Allocatable.Scalars)
	return out, nil
}

func compileLabels(m map[string]string, path string) (label.Labels, error) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if msgs := content.IsLabelKey(k); len(msgs) > 0 {
			return label.Labels{}, fieldErr(join(path, k), "invalid label key: %s", msgs[0])
		}
		if msgs := content.IsLabelValue(m[k]); len(msgs) > 0 {
			return label.Labels{}, fieldErr(join(path, k), "invalid label value: %s", msgs[0])
		}
	}
	return label.FromMap(m), nil
}

func notSupported(path string) *FieldError {
	return fieldErr(path, "not supported")
}

// CompilePod validates the scheduling part of a Pod and compiles it. A
// scheduling field Sextant does not implement is "not supported"; fields
// that do not affect scheduling are ignored. path prefixes error paths.
func CompilePod(p *corev1.Pod, path string) (*Workload, error) {
	spec := &p.Spec
	sp := join(path, "spec")
	w := &Workload{Key: Key{Namespace: p.Namespace, Name: p.Name}, NodeName: spec.NodeName, src: p}
	if w.Namespace == "" {
		w.Namespace = metav1.NamespaceDefault
	}
	if w.Name == "" {
		return nil, fieldErr(join(path, "metadata.name"), "required")
	}
	if msgs := content.IsDNS1123Subdomain(w.Name); len(msgs) > 0 {
		return nil, fieldErr(join(path, "metadata.name"), "%s", msgs[0])
	}
	if msgs := content.IsDNS1123Label(w.Namespace); len(msgs) > 0 {
		return nil, fieldErr(join(path, "metadata.namespace"), "%s", msgs[0])
	}
	l, err := compileLabels(p.Labels, join(path, "metadata.labels"))
	if err != nil {
		return nil, err
	}
	w.Labels = l
	if err := unsupportedFields(spec, sp); err != nil {
		return nil, err
	}
	if err := w.compileRequests(spec, sp); err != nil {
		return nil, err
	}
	if len(spec.NodeSelector) > 0 {
		np := join(sp, "nodeSelector")
		if _, err := compileLabels(spec.NodeSelector, np); err != nil {
			return nil, err
		}
		for _, k := range slices.Sorted(maps.Keys(spec.NodeSelector)) {
			w.nodeSelector = append(w.nodeSelector, label.Requirement{Key: k, Op: label.Equals, Values: []string{spec.NodeSelector[k]}})
		}
	}
	w.hasNodeAffReqs = spec.NodeSelector != nil
	if a := spec.Affinity; a != nil {
		if err := w.compileNodeAffinity(a.NodeAffinity, join(sp, "affinity.nodeAffinity")); err != nil {
			return nil, err
		}
		if err := w.compilePodAffinity(p, a, join(sp, "affinity")); err != nil {
			return nil, err
		}
	}
	if err := w.compileTolerations(spec.Tolerations, join(sp, "tolerations")); err != nil {
		return nil, err
	}
	if err := w.compileSpread(p, join(sp, "topologySpreadConstraints")); err != nil {
		return nil, err
	}
	return w, nil
}

// unsupportedFields rejects scheduling inputs of plugins Sextant does not
// run (DynamicResources, SchedulingGates, NodePorts, the volume plugins,
// pod-level resources, gang scheduling).
func unsupportedFields(spec *corev1.PodSpec, sp string) error {
	switch {
	case len(spec.SchedulingGates) > 0:
		return notSupported(join(sp, "schedulingGates"))
	case len(spec.ResourceClaims) > 0:
		return notSupported(join(sp, "resourceClaims"))
	case spec.Resources != nil:
		return notSupported(join(sp, "resources"))
	case spec.SchedulingGroup != nil:
		return notSupported(join(sp, "schedulingGroup"))
	}
	for _, cs := range []struct {
		name string
		cs   []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i := range cs.cs {
			c := &cs.cs[i]
			cp := index(join(sp, cs.name), i)
			if len(c.Resources.Claims) > 0 {
				return notSupported(join(cp, "resources.claims"))
			}
			for j, port := range c.Ports {
				if port.HostPort != 0 {
					return notSupported(join(index(join(cp, "ports"), j), "hostPort"))
				}
			}
		}
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		vp := index(join(sp, "volumes"), i)
		switch {
		case v.PersistentVolumeClaim != nil:
			return notSupported(join(vp, "persistentVolumeClaim"))
		case v.Ephemeral != nil:
			return notSupported(join(vp, "ephemeral"))
		case v.GCEPersistentDisk != nil:
			return notSupported(join(vp, "gcePersistentDisk"))
		case v.AWSElasticBlockStore != nil:
			return notSupported(join(vp, "awsElasticBlockStore"))
		case v.RBD != nil:
			return notSupported(join(vp, "rbd"))
		case v.ISCSI != nil:
			return notSupported(join(vp, "iscsi"))
		case v.CSI != nil:
			return notSupported(join(vp, "csi"))
		}
	}
	return nil
}

func (w *Workload) compileRequests(spec *corev1.PodSpec, sp string) error {
	vals := map[*corev1.ResourceList]rvec{}
	conv := func(rl *corev1.ResourceList, path string, container bool) error {
		v := rvec{}
		for _, name := range slices.Sorted(maps.Keys(*rl)) {
			p := join(path, string(name))
			if container && !containerResource(name) {
				return fieldErr(p, "not a resource a container can request (cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource domain/name)")
			}
			x, err := quantity(name, (*rl)[name], p)
			if err != nil {
				return err
			}
			v[name] = x
		}
		vals[rl] = v
		return nil
	}
	for _, cs := range []struct {
		name string
		cs   []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}} {
		for i := range cs.cs {
			if err := conv(&cs.cs[i].Resources.Requests, join(index(join(sp, cs.name), i), "resources.requests"), true); err != nil {
				return err
			}
		}
	}
	if err := conv(&spec.Overhead, join(sp, "overhead"), false); err != nil {
		return err
	}
	w.Requests = podRequests(spec, vals, false).resources()
	nz := podRequests(spec, vals, true)
	w.NonZeroCPU, w.NonZeroMemory = nz[corev1.ResourceCPU], nz[corev1.ResourceMemory]
	return nil
}

func (w *Workload) compileNodeAffinity(na *corev1.NodeAffinity, path string) error {
	if na == nil {
		return nil
	}
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		rp := join(path, "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms")
		if len(req.NodeSelectorTerms) == 0 {
			return fieldErr(rp, "must have at least one node selector term")
		}
		w.hasNodeAffReqs = true
		w.required = make([]nodeTerm, 0, len(req.NodeSelectorTerms))
		var names map[string]bool // NodeAffinity PreFilter: union over terms of each term's pinned names
		allPinned := true
		for i := range req.NodeSelectorTerms {
			t, err := compileNodeTerm(&req.NodeSelectorTerms[i], index(rp, i))
			if err != nil {
				return err
			}
			w.required = append(w.required, t)
			var termNames map[string]bool
			for _, f := range req.NodeSelectorTerms[i].MatchFields {
				if f.Operator != corev1.NodeSelectorOpIn {
					continue
				}
				s := map[string]bool{}
				for _, v := range f.Values {
					if termNames == nil || termNames[v] {
						s[v] = true
					}
				}
				termNames = s
			}
			if termNames == nil {
				allPinned = false
				continue
			}
			if names == nil {
				names = map[string]bool{}
			}
			maps.Copy(names, termNames)
		}
		if allPinned {
			w.nodeNames = slices.Sorted(maps.Keys(names))
			w.namesConflict = len(w.nodeNames) == 0
			if w.nodeNames == nil {
				w.nodeNames = []string{}
			}
		}
	}
	for i := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		pt := &na.PreferredDuringSchedulingIgnoredDuringExecution[i]
		pp := index(join(path, "preferredDuringSchedulingIgnoredDuringExecution"), i)
		if pt.Weight < 1 || pt.Weight > 100 {
			return fieldErr(join(pp, "weight"), "must be in the range 1-100, got %d", pt.Weight)
		}
		t, err := compileNodeTerm(&pt.Preference, join(pp, "preference"))
		if err != nil {
			return err
		}
		w.preferred = append(w.preferred, preferredTerm{weight: int64(pt.Weight), nodeTerm: t})
	}
	return nil
}

func compileNodeTerm(t *corev1.NodeSelectorTerm, path string) (nodeTerm, error) {
	var out nodeTerm
	out.empty = len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0
	for i, r := range t.MatchExpressions {
		p := index(join(path, "matchExpressions"), i)
		if msgs := content.IsLabelKey(r.Key); len(msgs) > 0 {
			return out, fieldErr(join(p, "key"), "%s", msgs[0])
		}
		switch r.Operator {
		case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
			if len(r.Values) == 0 {
				return out, fieldErr(join(p, "values"), "must be specified when operator is In or NotIn")
			}
			for j, v := range r.Values {
				if msgs := content.IsLabelValue(v); len(msgs) > 0 {
					return out, fieldErr(index(join(p, "values"), j), "%s", msgs[0])
				}
			}
			op := label.In
			if r.Operator == corev1.NodeSelectorOpNotIn {
				op = label.NotIn
			}
			out.reqs = append(out.reqs, label.Requirement{Key: r.Key, Op: op, Values: slices.Clone(r.Values)})
		case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				return out, fieldErr(join(p, "values"), "may not be specified when operator is Exists or DoesNotExist")
			}
			op := label.Exists
			if r.Operator == corev1.NodeSelectorOpDoesNotExist {
				op = label.NotExists
			}
			out.reqs = append(out.reqs, label.Requirement{Key: r.Key, Op: op})
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			if len(r.Values) != 1 {
				return out, fieldErr(join(p, "values"), "must be specified single value when operator is Gt or Lt")
			}
			v, err := strconv.ParseInt(r.Values[0], 10, 64)
			if err != nil {
				return out, fieldErr(index(join(p, "values"), 0), "must be an integer for Gt and Lt, got %q", r.Values[0])
			}
			out.num = append(out.num, numReq{key: r.Key, gt: r.Operator == corev1.NodeSelectorOpGt, v: v})
		default:
			return out, fieldErr(join(p, "operator"), "not a valid selector operator %q (want In, NotIn, Exists, DoesNotExist, Gt or Lt)", r.Operator)
		}
	}
	for i, r := range t.MatchFields {
		p := index(join(path, "matchFields"), i)
		if r.Key != metav1.ObjectNameField {
			return out, fieldErr(join(p, "key"), "not a valid field selector key %q (want metadata.name)", r.Key)
		}
		if r.Operator != corev1.NodeSelectorOpIn && r.Operator != corev1.NodeSelectorOpNotIn {
			return out, fieldErr(join(p, "operator"), "not a valid field selector operator %q (want In or NotIn)", r.Operator)
		}
		if len(r.Values) != 1 {
			return out, fieldErr(join(p, "values"), "must have one element")
		}
		out.fields = append(out.fields, fieldReq{in: r.Operator == corev1.NodeSelectorOpIn, values: slices.Clone(r.Values)})
	}
	return out, nil
}
