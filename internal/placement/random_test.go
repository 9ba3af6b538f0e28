package placement

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gen makes random small clusters and pods that exercise every filter and
// score, with few label values so that constraints collide often.
type gen struct{ r *rand.Rand }

func (g gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g gen) chance(p float64) bool    { return g.r.Float64() < p }

func (g gen) node(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if g.chance(0.9) {
		n.Labels["zone"] = g.pick("a", "b", "c")
	}
	if g.chance(0.6) {
		n.Labels["rack"] = g.pick("r1", "r2")
	}
	if g.chance(0.5) {
		n.Labels["size"] = strconv.Itoa(g.r.IntN(10))
	}
	if g.chance(0.2) {
		n.Labels["gpu"] = "true"
	}
	for _, eff := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute} {
		if g.chance(0.12) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: g.pick("dedicated", "spot"), Value: g.pick("", "gpu", "x"), Effect: eff})
		}
	}
	if len(n.Spec.Taints) == 2 && n.Spec.Taints[0].Key == n.Spec.Taints[1].Key && n.Spec.Taints[0].Effect == n.Spec.Taints[1].Effect {
		n.Spec.Taints = n.Spec.Taints[:1]
	}
	n.Spec.Unschedulable = g.chance(0.08)
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(g.pick("1", "2", "4", "1500m")),
		corev1.ResourceMemory: resource.MustParse(g.pick("1Gi", "2Gi", "4Gi")),
		corev1.ResourcePods:   resource.MustParse(g.pick("3", "5", "110")),
	}
	if g.chance(0.3) {
		n.Status.Allocatable["example.com/gpu"] = resource.MustParse(g.pick("1", "2"))
	}
	if g.chance(0.1) {
		delete(n.Status.Allocatable, corev1.ResourceMemory)
	}
	return n
}

func (g gen) requests() corev1.ResourceList {
	rl := corev1.ResourceList{}
	if g.chance(0.8) {
		rl[corev1.ResourceCPU] = resource.MustParse(g.pick("0", "100m", "250m", "500m", "1"))
	}
	if g.chance(0.7) {
		rl[corev1.ResourceMemory] = resource.MustParse(g.pick("0", "64Mi", "256Mi", "1Gi"))
	}
	if g.chance(0.1) {
		rl["example.com/gpu"] = resource.MustParse("1")
	}
	return rl
}

func (g gen) selector() *metav1.LabelSelector {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return &metav1.LabelSelector{}
	case 2:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{g.pick("x", "y"), "z"}}}}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": g.pick("x", "y", "z")}}
}

func (g gen) nodeTerm(fields bool) corev1.NodeSelectorTerm {
	var t corev1.NodeSelectorTerm
	for range g.r.IntN(3) {
		switch g.r.IntN(6) {
		case 0:
			t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{g.pick("a", "b", "c")}})
		case 1:
			t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{g.pick("a", "b")}})
		case 2:
			t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: g.pick("gpu", "rack"), Operator: corev1.NodeSelectorOpExists})
		case 3:
			t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: g.pick("gpu", "rack"), Operator: corev1.NodeSelectorOpDoesNotExist})
		case 4:
			t.MatchExpressions = append(t.MatchExpressions, corev1.NodeSelectorRequirement{Key: "size", Operator: corev1.NodeSelectorOperator(g.pick("Gt", "Lt")), Values: []string{strconv.Itoa(g.r.IntN(10))}})
		case 5:
			if fields {
				t.MatchFields = append(t.MatchFields, corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOperator(g.pick("In", "NotIn")), Values: []string{"n" + strconv.Itoa(g.r.IntN(8))}})
			}
		}
	}
	return t
}

func (g gen) podTerm() corev1.PodAffinityTerm {
	t := corev1.PodAffinityTerm{LabelSelector: g.selector(), TopologyKey: g.pick("zone", corev1.LabelHostname, "rack")}
	if t.LabelSelector == nil && g.chance(0.5) {
		t.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": g.pick("x", "y")}}
	}
	switch g.r.IntN(8) {
	case 0:
		t.Namespaces = []string{g.pick("default", "other")}
	case 1:
		t.NamespaceSelector = &metav1.LabelSelector{}
	case 2:
		t.MatchLabelKeys = []string{"tier"}
	case 3:
		t.MismatchLabelKeys = []string{"tier"}
	}
	return t
}

func (g gen) pod(name string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.pick("", "default", "other"), Labels: map[string]string{}}}
	if g.chance(0.8) {
		p.Labels["app"] = g.pick("x", "y", "z")
	}
	if g.chance(0.4) {
		p.Labels["tier"] = g.pick("web", "db")
	}
	for range 1 + g.r.IntN(2) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: g.requests()}})
	}
	if g.chance(0.15) {
		c := corev1.Container{Name: "i", Resources: corev1.ResourceRequirements{Requests: g.requests()}}
		if g.chance(0.5) {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	if g.chance(0.05) {
		p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}
	}
	if g.chance(0.05) {
		p.Spec.NodeName = "n" + strconv.Itoa(g.r.IntN(10))
	}
	if g.chance(0.2) {
		p.Spec.NodeSelector = map[string]string{"zone": g.pick("a", "b")}
	}
	a := &corev1.Affinity{}
	if g.chance(0.3) {
		a.NodeAffinity = &corev1.NodeAffinity{}
		if g.chance(0.6) {
			ns := &corev1.NodeSelector{}
			for range 1 + g.r.IntN(2) {
				ns.NodeSelectorTerms = append(ns.NodeSelectorTerms, g.nodeTerm(true))
			}
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = ns
		}
		for range g.r.IntN(3) {
			a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: int32(1 + g.r.IntN(100)), Preference: g.nodeTerm(false)})
		}
	}
	if g.chance(0.35) {
		a.PodAffinity = &corev1.PodAffinity{}
		if g.chance(0.4) {
			a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{g.podTerm()}
		}
		for range g.r.IntN(2) {
			a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.WeightedPodAffinityTerm{Weight: int32(1 + g.r.IntN(100)), PodAffinityTerm: g.podTerm()})
		}
	}
	if g.chance(0.35) {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
		if g.chance(0.5) {
			a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{g.podTerm()}
		}
		for range g.r.IntN(2) {
			a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.WeightedPodAffinityTerm{Weight: int32(1 + g.r.IntN(100)), PodAffinityTerm: g.podTerm()})
		}
	}
	if a.NodeAffinity != nil || a.PodAffinity != nil || a.PodAntiAffinity != nil {
		p.Spec.Affinity = a
	}
	for range g.r.IntN(3) {
		t := corev1.Toleration{Key: g.pick("dedicated", "spot", corev1.TaintNodeUnschedulable), Operator: corev1.TolerationOperator(g.pick("Equal", "Exists", "")), Effect: corev1.TaintEffect(g.pick("", "NoSchedule", "PreferNoSchedule", "NoExecute"))}
		if t.Operator != corev1.TolerationOpExists {
			t.Value = g.pick("", "gpu", "x")
		}
		if g.chance(0.1) {
			t = corev1.Toleration{Operator: corev1.TolerationOpExists}
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, t)
	}
	keys := map[[2]string]bool{}
	for range g.r.IntN(3) {
		c := corev1.TopologySpreadConstraint{MaxSkew: int32(1 + g.r.IntN(2)), TopologyKey: g.pick("zone", corev1.LabelHostname, "rack"),
			WhenUnsatisfiable: corev1.UnsatisfiableConstraintAction(g.pick("DoNotSchedule", "ScheduleAnyway")), LabelSelector: g.selector()}
		if keys[[2]string{c.TopologyKey, string(c.WhenUnsatisfiable)}] {
			continue
		}
		keys[[2]string{c.TopologyKey, string(c.WhenUnsatisfiable)}] = true
		if c.WhenUnsatisfiable == corev1.DoNotSchedule && g.chance(0.2) {
			m := int32(2 + g.r.IntN(3))
			c.MinDomains = &m
		}
		if g.chance(0.2) {
			pol := corev1.NodeInclusionPolicy(g.pick("Honor", "Ignore"))
			c.NodeAffinityPolicy = &pol
		}
		if g.chance(0.2) {
			pol := corev1.NodeInclusionPolicy(g.pick("Honor", "Ignore"))
			c.NodeTaintsPolicy = &pol
		}
		if g.chance(0.15) {
			c.MatchLabelKeys = []string{"tier"}
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
	return p
}

// TestRandomAgainstReference places random pods on random small clusters,
// with node replacements and deletions between, and requires every
// decision (node or message) to equal the brute-force reference's.
func TestRandomAgainstReference(t *testing.T) {
	clusters, steps := 150, 40
	placed, refused := 0, map[string]int{}
	if testing.Short() {
		clusters = 40
	}
	for c := range clusters {
		g := gen{rand.New(rand.NewPCG(uint64(c), 7))}
		s := New(Config{})
		if c%2 == 1 { // every loop split over the pool, whatever its size
			s = New(Config{Workers: 3})
			s.pool.from = 1
		}
		ref := &refScheduler{}
		nnodes := 1 + g.r.IntN(9)
		upsert := func(n *corev1.Node) {
			rec, err := CompileNode(n, "")
			if err != nil {
				t.Fatalf("cluster %d: node: %v", c, err)
			}
			tx := s.Begin()
			tx.UpsertNodes([]*Node{rec})
			tx.Commit(0)
			for i, o := range ref.nodes {
				if o.Name == n.Name {
					ref.nodes[i] = n
					return
				}
			}
			ref.nodes = append(ref.nodes, n)
		}
		for i := range nnodes {
			upsert(g.node("n" + strconv.Itoa(i)))
		}
		for step := range steps {
			switch {
			case g.chance(0.05):
				upsert(g.node("n" + strconv.Itoa(g.r.IntN(nnodes+1))))
			case g.chance(0.04) && len(ref.nodes) > 1:
				victim := ref.nodes[g.r.IntN(len(ref.nodes))].Name
				tx := s.Begin()
				if _, err := tx.DeleteNode(victim); err != nil {
					t.Fatal(err)
				}
				tx.Commit(0)
				var nodes []*corev1.Node
				for _, n := range ref.nodes {
					if n.Name != victim {
						nodes = append(nodes, n)
					}
				}
				var pods []*corev1.Pod
				for _, p := range ref.pods {
					if p.Spec.NodeName != victim {
						pods = append(pods, p)
					}
				}
				ref.nodes, ref.pods = nodes, pods
			case g.chance(0.08) && len(ref.pods) > 0:
				i := g.r.IntN(len(ref.pods))
				p := ref.pods[i]
				tx := s.Begin()
				if err := tx.DeletePlacement(Key{ns(p), p.Name}); err != nil {
					t.Fatal(err)
				}
				tx.Commit(0)
				ref.pods = append(ref.pods[:i], ref.pods[i+1:]...)
			}
			pod := g.pod(fmt.Sprintf("p%d", step))
			w, err := CompilePod(pod, "")
			if err != nil {
				t.Fatalf("cluster %d step %d: compile: %v", c, step, err)
			}
			want, wantMsg := ref.decide(pod)
			tx := s.Begin()
			res, err := tx.Place([]*Workload{w})
			if err != nil {
				t.Fatal(err)
			}
			tx.Commit(0)
			if res[0].Node != want || res[0].Unschedulable != wantMsg {
				t.Fatalf("cluster %d step %d: pod %s: got node %q %q, reference %q %q", c, step, pod.Name, res[0].Node, res[0].Unschedulable, want, wantMsg)
			}
			if want == "" {
				refused[wantMsg[strings.Index(wantMsg, ":")+1:]]++
			} else {
				placed++
			}
			if want != "" {
				placed := pod.DeepCopy()
				placed.Spec.NodeName = want
				ref.pods = append(ref.pods, placed)
			}
		}
		s.Close()
	}
	t.Logf("placed %d; %d distinct refusals", placed, len(refused))
	if testing.Verbose() {
		for m, n := range refused {
			t.Logf("%4d x%s", n, m)
		}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 11)) }
