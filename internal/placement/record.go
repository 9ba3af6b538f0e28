package placement

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sextant-mesh/sextant/internal/label"
)

// Record kinds, as the store names its key spaces.
const (
	KindNodes      = "nodes"
	KindPlacements = "placements"
)

// Resources is an amount of each resource kube-scheduler accounts for: cpu
// in millicores, the others in their base units (bytes, counts).
type Resources struct {
	CPU              int64
	Memory           int64
	EphemeralStorage int64
	Scalars          []Scalar // extended resources and hugepages, sorted by name, no zeros
}

// Scalar is an amount of one named resource (an extended resource such as
// example.com/gpu, or hugepages-2Mi).
type Scalar struct {
	Name  string
	Value int64
}

// Scalar returns the amount of the named scalar resource.
func (r *Resources) Scalar(name string) int64 {
	i, ok := slices.BinarySearchFunc(r.Scalars, name, func(s Scalar, n string) int { return strings.Compare(s.Name, n) })
	if !ok {
		return 0
	}
	return r.Scalars[i].Value
}

// Taint is a node taint (Kubernetes' key, value and effect).
type Taint struct {
	Key    string
	Value  string
	Effect corev1.TaintEffect
}

// Node is a host as the scheduler keeps it and as it is stored: the record
// of kind "nodes", keyed by Name.
type Node struct {
	Name string
	// Seq orders nodes by creation: among equally scored nodes the one with
	// the lowest Seq wins. It is kept when a node is replaced.
	Seq           uint64
	Labels        label.Labels
	Taints        []Taint
	Unschedulable bool
	Allocatable   Resources
	Pods          int64 // allocatable pods
	// Revision is the store revision of the record's last put (0 until it
	// is stored). It is not part of the record's encoding.
	Revision int64
}

// Key is the record key of a placement: namespace/name.
type Key struct {
	Namespace string
	Name      string
}

func (k Key) String() string { return k.Namespace + "/" + k.Name }

func (k Key) compare(o Key) int {
	if c := strings.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

// Placement is a workload bound to a node: the record of kind
// "placements", keyed by namespace/name. It holds what later decisions
// need: the resources reserved and the workload's inter-pod terms (other
// pods' affinity is judged against them).
type Placement struct {
	Key
	Node     string
	Labels   label.Labels
	Requests Resources // what the node reserves (kube-scheduler's Requested)
	// NonZeroCPU and NonZeroMemory count a container without a request as
	// 100m and 200Mi, for scoring only (kube-scheduler's NonZeroRequested).
	NonZeroCPU    int64
	NonZeroMemory int64
	Affinity      *PodAffinity // nil when the workload has no inter-pod terms
	// Revision is the store revision of the record (0 until it is stored).
	// It is not part of the record's encoding.
	Revision int64
}

// PodAffinity holds a workload's inter-pod affinity and anti-affinity
// terms, compiled.
type PodAffinity struct {
	Required      []AffinityTerm
	RequiredAnti  []AffinityTerm
	Preferred     []WeightedTerm
	PreferredAnti []WeightedTerm
}

func (a *PodAffinity) empty() bool {
	return a == nil || len(a.Required)+len(a.RequiredAnti)+len(a.Preferred)+len(a.PreferredAnti) == 0
}

// AffinityTerm is one pod (anti-)affinity term: pods in Namespaces (or in a
// namespace NamespaceSelector matches) whose labels match Selector, in the
// same TopologyKey domain.
type AffinityTerm struct {
	Namespaces        []string // sorted
	NamespaceSelector *Selector
	Selector          Selector
	TopologyKey       string
}

// WeightedTerm is a preferred term.
type WeightedTerm struct {
	Weight int32
	AffinityTerm
}

// Selector is a Kubernetes label selector: a nil LabelSelector matches
// nothing, an empty one everything.
type Selector struct {
	Nothing bool
	Reqs    label.Selector
}

// Matches reports whether labels satisfy the selector.
func (s *Selector) Matches(labels label.Getter) bool {
	return !s.Nothing && s.Reqs.Matches(labels)
}

func (s *Selector) String() string {
	if s.Nothing {
		return "<nothing>"
	}
	return s.Reqs.String()
}

// namespaceLabels is what a namespace selector is matched against: Sextant
// keeps no Namespace objects, so a namespace has only the label Kubernetes
// sets on every namespace.
type namespaceLabels string

func (n namespaceLabels) Get(key string) (string, bool) {
	if key == corev1.LabelMetadataName {
		return string(n), true
	}
	return "", false
}

// matchesNamespace reports whether ns is one of the term's namespaces.
func (t *AffinityTerm) matchesNamespace(ns string) bool {
	if _, ok := slices.BinarySearch(t.Namespaces, ns); ok {
		return true
	}
	return t.NamespaceSelector != nil && t.NamespaceSelector.Matches(namespaceLabels(ns))
}

// Matches reports whether a pod of namespace ns with labels matches the term.
func (t *AffinityTerm) Matches(ns string, labels label.Getter) bool {
	return t.matchesNamespace(ns) && t.Selector.Matches(labels)
}

// key is a canonical text of the term, for grouping equal terms.
func (t *AffinityTerm) key() string {
	var b strings.Builder
	b.WriteString(strings.Join(t.Namespaces, ","))
	b.WriteByte('|')
	if t.NamespaceSelector != nil {
		b.WriteString(t.NamespaceSelector.String())
	} else {
		b.WriteString("-")
	}
	b.WriteByte('|')
	b.WriteString(t.Selector.String())
	b.WriteByte('|')
	b.WriteString(t.TopologyKey)
	return b.String()
}
