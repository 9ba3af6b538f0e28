package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Test helpers: mkNode("n1", "4", "8Gi", "110", labels...) and mkPod.

func mkNode(name, cpu, mem, pods string, kv ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse(pods)}
	if cpu != "" {
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return n
}

func withTaints(n *corev1.Node, ts ...corev1.Taint) *corev1.Node { n.Spec.Taints = ts; return n }

func withAlloc(n *corev1.Node, name, q string) *corev1.Node {
	n.Status.Allocatable[corev1.ResourceName(name)] = resource.MustParse(q)
	return n
}

func unschedulable(n *corev1.Node) *corev1.Node { n.Spec.Unschedulable = true; return n }

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func mkPod(name string, requests corev1.ResourceList, labels ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests}}}}}
	for i := 0; i+1 < len(labels); i += 2 {
		p.Labels[labels[i]] = labels[i+1]
	}
	return p
}

func on(node string, p *corev1.Pod) *corev1.Pod { p.Spec.NodeName = node; return p }

type pluginCase struct {
	name     string
	nodes    []*corev1.Node
	existing []*corev1.Pod // placed first (use on() to choose their node)
	pod      *corev1.Pod
	want     string // node name, or the whole unschedulable message
}

func runCases(t *testing.T, cases []pluginCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{})
			tx := s.Begin()
			for _, n := range tc.nodes {
				rec, err := CompileNode(n, "")
				if err != nil {
					t.Fatal(err)
				}
				tx.UpsertNodes([]*Node{rec})
			}
			tx.Commit(1)
			ref := &refScheduler{nodes: tc.nodes}
			for _, p := range append(tc.existing, tc.pod) {
				w, err := CompilePod(p, "")
				if err != nil {
					t.Fatal(err)
				}
				refNode, refMsg := ref.decide(p)
				res, _, err := s.Place([]*Workload{w}, func([]Op) (int64, error) { return 2, nil })
				if err != nil {
					t.Fatal(err)
				}
				got := res[0].Node
				if got == "" {
					got = res[0].Unschedulable
				}
				wantRef := refNode
				if wantRef == "" {
					wantRef = refMsg
				}
				if got != wantRef {
					t.Fatalf("%s: engine %q, reference %q", p.Name, got, wantRef)
				}
				if p == tc.pod {
					if got != tc.want {
						t.Fatalf("got %q, want %q", got, tc.want)
					}
				} else if res[0].Node == "" {
					t.Fatalf("existing pod %s not placed: %s", p.Name, res[0].Unschedulable)
				} else {
					placed := p.DeepCopy()
					placed.Spec.NodeName = res[0].Node
					ref.pods = append(ref.pods, placed)
				}
			}
		})
	}
}

// TestEnoughRequests follows NodeResourcesFit's rules.
func TestEnoughRequests(t *testing.T) {
	two := func() []*corev1.Node {
		return []*corev1.Node{mkNode("a", "1", "1Gi", "110"), mkNode("b", "2", "2Gi", "110")}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := mkPod("p", rl("cpu", "500m"))
	sidecar.Spec.InitContainers = []corev1.Container{{Name: "s", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: rl("cpu", "600m")}}}
	initMax := mkPod("p", rl("cpu", "100m"))
	initMax.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "3")}}}
	overhead := mkPod("p", rl("cpu", "1900m"))
	overhead.Spec.Overhead = rl("cpu", "200m")
	runCases(t, []pluginCase{
		{name: "a node short of cpu is rejected", nodes: two(), pod: mkPod("p", rl("cpu", "1500m")), want: "b"},
		{name: "a node short of cpu and memory counts under both", nodes: two(), pod: mkPod("p", rl("cpu", "3", "memory", "3Gi")),
			want: "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory."},
		{name: "reserved requests count", nodes: two(), existing: []*corev1.Pod{on("b", mkPod("e", rl("cpu", "1500m")))}, pod: mkPod("p", rl("cpu", "800m")), want: "a"},
		{name: "too many pods", nodes: []*corev1.Node{mkNode("a", "1", "1Gi", "1")}, existing: []*corev1.Pod{on("a", mkPod("e", nil))}, pod: mkPod("p", nil),
			want: "0/1 nodes are available: 1 Too many pods."},
		{name: "an init container needs its own request at most", nodes: two(), pod: initMax, want: "0/2 nodes are available: 2 Insufficient cpu."},
		{name: "a sidecar adds to the containers", nodes: two(), pod: sidecar, want: "b"},
		{name: "overhead is added", nodes: two(), pod: overhead, want: "0/2 nodes are available: 2 Insufficient cpu."},
		{name: "extended resources must be allocatable", nodes: []*corev1.Node{mkNode("a", "4", "4Gi", "110"), withAlloc(mkNode("b", "1", "1Gi", "110"), "example.com/gpu", "1")},
			pod: mkPod("p", rl("example.com/gpu", "1")), want: "b"},
		{name: "extended resource shortage is named", nodes: []*corev1.Node{withAlloc(mkNode("a", "4", "4Gi", "110"), "example.com/gpu", "1")},
			pod: mkPod("p", rl("example.com/gpu", "2")), want: "0/1 nodes are available: 1 Insufficient example.com/gpu."},
		{name: "a pod requesting nothing checks only the pod count", nodes: []*corev1.Node{mkNode("a", "", "", "2")}, pod: mkPod("p", nil), want: "a"},
	})
}

func TestTaintTolerationFilter(t *testing.T) {
	gpu := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	exec := corev1.Taint{Key: "spot", Effect: corev1.TaintEffectNoExecute}
	soft := corev1.Taint{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}
	tolerant := func(ts ...corev1.Toleration) *corev1.Pod { p := mkPod("p", nil); p.Spec.Tolerations = ts; return p }
	runCases(t, []pluginCase{
		{name: "an untolerated NoSchedule taint rejects and is named", nodes: []*corev1.Node{withTaints(mkNode("a", "1", "1Gi", "9"), gpu)}, pod: mkPod("p", nil),
			want: "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."},
		{name: "the first untolerated taint is the one named", nodes: []*corev1.Node{withTaints(mkNode("a", "1", "1Gi", "9"), exec, gpu)}, pod: mkPod("p", nil),
			want: "0/1 nodes are available: 1 node(s) had untolerated taint {spot: }."},
		{name: "an Equal toleration of key and value admits", nodes: []*corev1.Node{withTaints(mkNode("a", "1", "1Gi", "9"), gpu)},
			pod: tolerant(corev1.Toleration{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}), want: "a"},
		{name: "a toleration of another effect does not admit", nodes: []*corev1.Node{withTaints(mkNode("a", "1", "1Gi", "9"), gpu)},
			pod:  tolerant(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}),
			want: "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}."},
		{name: "an empty key with Exists tolerates everything", nodes: []*corev1.Node{withTaints(mkNode("a", "1", "1Gi", "9"), gpu, exec)},
			pod: tolerant(corev1.Toleration{Operator: corev1.TolerationOpExists}), want: "a"},
		{name: "PreferNoSchedule does not filter but scores lower", nodes: []*corev1.Node{withTaints(mkNode("a", "1", "1Gi", "9"), soft), mkNode("b", "1", "1Gi", "9")},
			pod: mkPod("p", nil), want: "b"},
	})
}

func TestNodeUnschedulableAndNodeName(t *testing.T) {
	tol := mkPod("p", nil)
	tol.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	named := mkPod("p", nil)
	named.Spec.NodeName = "b"
	runCases(t, []pluginCase{
		{name: "an unschedulable node is rejected", nodes: []*corev1.Node{unschedulable(mkNode("a", "1", "1Gi", "9"))}, pod: mkPod("p", nil),
			want: "0/1 nodes are available: 1 node(s) were unschedulable."},
		{name: "tolerating the unschedulable taint admits", nodes: []*corev1.Node{unschedulable(mkNode("a", "1", "1Gi", "9"))}, pod: tol, want: "a"},
		{name: "nodeName binds to that node only", nodes: []*corev1.Node{mkNode("a", "4", "4Gi", "9"), mkNode("b", "1", "1Gi", "9"), mkNode("c", "1", "1Gi", "9")}, pod: named, want: "b"},
	})
}

func nodeAff(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func TestNodeAffinityFilter(t *testing.T) {
	nodes := func() []*corev1.Node {
		return []*corev1.Node{mkNode("a", "1", "1Gi", "9", "zone", "x", "size", "3"), mkNode("b", "1", "1Gi", "9", "zone", "y", "size", "8"), mkNode("c", "1", "1Gi", "9")}
	}
	withSel := mkPod("p", nil)
	withSel.Spec.NodeSelector = map[string]string{"zone": "y"}
	gt := mkPod("p", nil)
	gt.Spec.Affinity = nodeAff(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "size", Operator: corev1.NodeSelectorOpGt, Values: []string{"5"}}}})
	notIn := mkPod("p", nil)
	notIn.Spec.Affinity = nodeAff(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"x", "y"}}}})
	ored := mkPod("p", nil)
	ored.Spec.Affinity = nodeAff(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"q"}}}},
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "size", Operator: corev1.NodeSelectorOpLt, Values: []string{"4"}}}})
	both := mkPod("p", nil)
	both.Spec.NodeSelector = map[string]string{"zone": "x"}
	both.Spec.Affinity = nodeAff(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "size", Operator: corev1.NodeSelectorOpGt, Values: []string{"5"}}}})
	pinned := mkPod("p", nil)
	pinned.Spec.Affinity = nodeAff(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"c"}}}})
	pinnedBusy := mkPod("p", rl("cpu", "2"))
	pinnedBusy.Spec.Affinity = pinned.Spec.Affinity
	runCases(t, []pluginCase{
		{name: "nodeSelector must match", nodes: nodes(), pod: withSel, want: "b"},
		{name: "Gt compares integers", nodes: nodes(), pod: gt, want: "b"},
		{name: "NotIn matches a node without the label", nodes: nodes(), pod: notIn, want: "c"},
		{name: "terms are ORed", nodes: nodes(), pod: ored, want: "a"},
		{name: "nodeSelector and affinity must both match", nodes: nodes(), pod: both,
			want: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."},
		{name: "metadata.name pins the node", nodes: nodes(), pod: pinned, want: "c"},
		{name: "nodes outside the pinned names are counted by the pre-filter", nodes: nodes(), pod: pinnedBusy,
			want: "0/3 nodes are available: 2 node(s) didn't satisfy plugin(s) [NodeAffinity], 1 Insufficient cpu."},
	})
}

func spread(p *corev1.Pod, key string, skew int32, hard bool, sel map[string]string) *corev1.Pod {
	w := corev1.ScheduleAnyway
	if hard {
		w = corev1.DoNotSchedule
	}
	p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
		MaxSkew: skew, TopologyKey: key, WhenUnsatisfiable: w, LabelSelector: &metav1.LabelSelector{MatchLabels: sel}})
	return p
}

// TestSingleConstraint follows PodTopologySpread's filter and score.
func TestSingleConstraint(t *testing.T) {
	zones := func() []*corev1.Node {
		return []*corev1.Node{mkNode("a1", "4", "4Gi", "20", "zone", "a"), mkNode("a2", "4", "4Gi", "20", "zone", "a"), mkNode("b1", "4", "4Gi", "20", "zone", "b")}
	}
	app := map[string]string{"app": "web"}
	existingA := []*corev1.Pod{on("a1", mkPod("e1", nil, "app", "web"))}
	minDom := spread(mkPod("p", nil, "app", "web"), "zone", 1, true, app)
	three := int32(3)
	minDom.Spec.TopologySpreadConstraints[0].MinDomains = &three
	runCases(t, []pluginCase{
		{name: "maxSkew 1 sends the pod to the emptier zone", nodes: zones(), existing: existingA, pod: spread(mkPod("p", nil, "app", "web"), "zone", 1, true, app), want: "b1"},
		{name: "a domain at the skew limit is rejected", nodes: zones(),
			existing: []*corev1.Pod{on("a1", mkPod("e1", nil, "app", "web")), on("a2", mkPod("e2", nil, "app", "web"))},
			pod: ignoreAffinity(spread(func() *corev1.Pod {
				p := mkPod("p", nil, "app", "web")
				p.Spec.NodeSelector = map[string]string{"zone": "a"}
				return p
			}(), "zone", 1, true, app)),
			want: "0/3 nodes are available: 2 node(s) didn't match pod topology spread constraints, 1 node(s) didn't match Pod's node affinity/selector."},
		{name: "a node without the topology key is rejected", nodes: append(zones(), mkNode("x", "4", "4Gi", "20")), existing: existingA,
			pod: spread(mkPod("p", nil, "app", "web"), "zone", 1, true, app), want: "b1"},
		{name: "nodeAffinityPolicy Honor counts only the nodes the pod may use", nodes: zones(),
			existing: []*corev1.Pod{on("a1", mkPod("e1", nil, "app", "web")), on("a2", mkPod("e2", nil, "app", "web"))},
			pod: spread(func() *corev1.Pod {
				p := mkPod("p", nil, "app", "web")
				p.Spec.NodeSelector = map[string]string{"zone": "a"}
				return p
			}(), "zone", 1, true, app),
			want: "a1"},
		{name: "below minDomains the global minimum is 0", nodes: zones(),
			existing: []*corev1.Pod{on("a1", mkPod("e1", nil, "app", "web")), on("b1", mkPod("e2", nil, "app", "web"))}, pod: minDom,
			want: "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints."},
		{name: "ScheduleAnyway prefers the emptier zone", nodes: zones(), existing: existingA, pod: spread(mkPod("p", nil, "app", "web"), "zone", 1, false, app), want: "b1"},
		{name: "pods that do not match the selector do not count", nodes: zones(), existing: []*corev1.Pod{on("b1", mkPod("e1", nil, "app", "db"))},
			pod: spread(mkPod("p", nil, "app", "web"), "zone", 1, true, app), want: "a1"},
	})
}

func ignoreAffinity(p *corev1.Pod) *corev1.Pod {
	ignore := corev1.NodeInclusionPolicyIgnore
	for i := range p.Spec.TopologySpreadConstraints {
		p.Spec.TopologySpreadConstraints[i].NodeAffinityPolicy = &ignore
	}
	return p
}

func podAff(req, anti []corev1.PodAffinityTerm) *corev1.Affinity {
	a := &corev1.Affinity{}
	if req != nil {
		a.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: req}
	}
	if anti != nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: anti}
	}
	return a
}

func term(key string, sel map[string]string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: sel}}
}

// TestRequiredAffinitySingleNode follows InterPodAffinity's filter.
func TestRequiredAffinitySingleNode(t *testing.T) {
	zones := func() []*corev1.Node {
		return []*corev1.Node{mkNode("a1", "4", "4Gi", "20", "zone", "a"), mkNode("a2", "4", "4Gi", "20", "zone", "a"), mkNode("b1", "4", "4Gi", "20", "zone", "b")}
	}
	db := map[string]string{"app": "db"}
	withAff := func(a *corev1.Affinity, labels ...string) *corev1.Pod {
		p := mkPod("p", nil, labels...)
		p.Spec.Affinity = a
		return p
	}
	dbOnB := []*corev1.Pod{on("b1", mkPod("e1", nil, "app", "db"))}
	antiOwner := on("a1", mkPod("e1", nil, "app", "db"))
	antiOwner.Spec.Affinity = podAff(nil, []corev1.PodAffinityTerm{term("zone", map[string]string{"app": "web"})})
	runCases(t, []pluginCase{
		{name: "affinity follows the matching pod's zone", nodes: zones(), existing: dbOnB, pod: withAff(podAff([]corev1.PodAffinityTerm{term("zone", db)}, nil)), want: "b1"},
		{name: "affinity with no matching pod rejects every node", nodes: zones(), pod: withAff(podAff([]corev1.PodAffinityTerm{term("zone", db)}, nil)),
			want: "0/3 nodes are available: 3 node(s) didn't match pod affinity rules."},
		{name: "the first pod of a series that matches itself may go anywhere", nodes: zones(),
			pod: withAff(podAff([]corev1.PodAffinityTerm{term("zone", db)}, nil), "app", "db"), want: "a1"},
		{name: "anti-affinity avoids the matching pod's zone", nodes: zones(), existing: []*corev1.Pod{on("a1", mkPod("e1", nil, "app", "db"))},
			pod: withAff(podAff(nil, []corev1.PodAffinityTerm{term("zone", db)})), want: "b1"},
		{name: "an existing pod's anti-affinity keeps the pod out", nodes: zones(), existing: []*corev1.Pod{antiOwner},
			pod: withAff(nil, "app", "web"), want: "b1"},
		{name: "existing anti-affinity is reported", nodes: zones()[:2], existing: []*corev1.Pod{antiOwner},
			pod: withAff(nil, "app", "web"), want: "0/2 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules."},
	})
}

// TestScores checks the default weights and the tie-break.
func TestScores(t *testing.T) {
	prefNode := mkPod("p", nil)
	prefNode.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
		{Weight: 50, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}
	prefPod := mkPod("p", nil)
	prefPod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
		{Weight: 100, PodAffinityTerm: term(corev1.LabelHostname, map[string]string{"app": "cache"})}}}}
	runCases(t, []pluginCase{
		{name: "equal nodes tie and the first created wins", nodes: []*corev1.Node{mkNode("z", "1", "1Gi", "9"), mkNode("a", "1", "1Gi", "9")}, pod: mkPod("p", rl("cpu", "100m")), want: "z"},
		{name: "LeastAllocated prefers the emptier node", nodes: []*corev1.Node{mkNode("a", "1", "1Gi", "9"), mkNode("b", "1", "1Gi", "9")},
			existing: []*corev1.Pod{on("a", mkPod("e", rl("cpu", "500m", "memory", "500Mi")))}, pod: mkPod("p", rl("cpu", "100m")), want: "b"},
		{name: "BalancedAllocation prefers even use", nodes: []*corev1.Node{mkNode("a", "2", "2Gi", "9"), mkNode("b", "2", "2Gi", "9")},
			existing: []*corev1.Pod{on("a", mkPod("e1", rl("cpu", "1500m", "memory", "0"))), on("b", mkPod("e2", rl("cpu", "1", "memory", "1Gi")))},
			pod:      mkPod("p", rl("cpu", "100m", "memory", "100Mi")), want: "b"},
		{name: "preferred node affinity wins over a little load", nodes: []*corev1.Node{mkNode("a", "1", "1Gi", "9"), mkNode("b", "1", "1Gi", "9", "disk", "ssd")},
			existing: []*corev1.Pod{on("b", mkPod("e", rl("cpu", "200m")))}, pod: prefNode, want: "b"},
		{name: "preferred pod affinity attracts", nodes: []*corev1.Node{mkNode("a", "1", "1Gi", "9"), mkNode("b", "1", "1Gi", "9")},
			existing: []*corev1.Pod{on("b", mkPod("e", rl("cpu", "200m"), "app", "cache"))}, pod: prefPod, want: "b"},
		{name: "reasons are sorted as strings, as kube-scheduler sorts them",
			nodes: []*corev1.Node{unschedulable(mkNode("a", "1", "1Gi", "9")), mkNode("b", "100m", "1Gi", "9"), mkNode("c", "100m", "1Gi", "9")},
			pod:   mkPod("p", rl("cpu", "1")), want: "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) were unschedulable."},
	})
}

// TestFitErrorListsReasonsByCount: the API's order, largest count first,
// ties by reason text.
func TestFitErrorListsReasonsByCount(t *testing.T) {
	got := fitError(50000, map[string]int{
		reasonTaint(&corev1.Taint{Key: "dedicated", Value: "gpu"}): 7000,
		"Insufficient cpu":    31000,
		reasonNodeAffinity:    12000,
		"Insufficient memory": 7000,
	})
	want := "0/50000 nodes are available: 31000 Insufficient cpu, 12000 node(s) didn't match Pod's node affinity/selector, " +
		"7000 Insufficient memory, 7000 node(s) had untolerated taint {dedicated: gpu}."
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
