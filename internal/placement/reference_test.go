package placement

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// refScheduler is the brute-force reference: kube-scheduler's default
// plugins written the slow, obvious way over Kubernetes objects, using
// Kubernetes' own helpers (node affinity, taints, pod requests, label
// selectors) wherever they exist. Every node is checked against every pod.
type refScheduler struct {
	nodes []*corev1.Node // creation order: the tie-break
	pods  []*corev1.Pod  // placed; Spec.NodeName is the node
}

func (r *refScheduler) podsOn(node string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range r.pods {
		if p.Spec.NodeName == node {
			out = append(out, p)
		}
	}
	return out
}

func q(rl corev1.ResourceList, name corev1.ResourceName) int64 {
	v, ok := rl[name]
	if !ok {
		return 0
	}
	if name == corev1.ResourceCPU {
		return v.MilliValue()
	}
	return v.Value()
}

func refRequests(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}

func refNonZero(p *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{NonMissingContainerRequests: corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(100, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(200*1024*1024, resource.DecimalSI),
	}})
}

func refSelector(ls *metav1.LabelSelector, podLabels map[string]string, match, mismatch []string) labels.Selector {
	if ls == nil {
		return labels.Nothing()
	}
	ls = ls.DeepCopy()
	for _, k := range match {
		if v, ok := podLabels[k]; ok {
			ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
		}
	}
	for _, k := range mismatch {
		if v, ok := podLabels[k]; ok {
			ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpNotIn, Values: []string{v}})
		}
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		panic(err)
	}
	return s
}

type refTerm struct {
	namespaces []string
	nsSel      labels.Selector // nil: none
	sel        labels.Selector
	key        string
	weight     int64
}

func refTerms(owner *corev1.Pod, ts []corev1.PodAffinityTerm, wts []corev1.WeightedPodAffinityTerm) []refTerm {
	var out []refTerm
	conv := func(t *corev1.PodAffinityTerm, w int64) {
		rt := refTerm{sel: refSelector(t.LabelSelector, owner.Labels, t.MatchLabelKeys, t.MismatchLabelKeys), key: t.TopologyKey, weight: w}
		rt.namespaces = t.Namespaces
		if t.NamespaceSelector != nil {
			s, _ := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
			rt.nsSel = s
		}
		if len(t.Namespaces) == 0 && t.NamespaceSelector == nil {
			rt.namespaces = []string{ns(owner)}
		}
		out = append(out, rt)
	}
	for i := range ts {
		conv(&ts[i], 0)
	}
	for i := range wts {
		conv(&wts[i].PodAffinityTerm, int64(wts[i].Weight))
	}
	return out
}

func ns(p *corev1.Pod) string {
	if p.Namespace == "" {
		return "default"
	}
	return p.Namespace
}

func (t *refTerm) matches(p *corev1.Pod) bool {
	nsOK := slices.Contains(t.namespaces, ns(p)) ||
		(t.nsSel != nil && t.nsSel.Matches(labels.Set{corev1.LabelMetadataName: ns(p)}))
	return nsOK && t.sel.Matches(labels.Set(p.Labels))
}

type podTerms struct {
	req, anti, pref, prefAnti []refTerm
}

func termsOf(p *corev1.Pod) podTerms {
	var t podTerms
	if a := p.Spec.Affinity; a != nil {
		if a.PodAffinity != nil {
			t.req = refTerms(p, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, nil)
			t.pref = refTerms(p, nil, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		}
		if a.PodAntiAffinity != nil {
			t.anti = refTerms(p, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, nil)
			t.prefAnti = refTerms(p, nil, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		}
	}
	return t
}

type refSpread struct {
	c                         corev1.TopologySpreadConstraint
	sel                       labels.Selector
	honorAffinity, honorTaint bool
}

func spreadOf(p *corev1.Pod, action corev1.UnsatisfiableConstraintAction) []refSpread {
	var out []refSpread
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != action {
			continue
		}
		rs := refSpread{c: c, sel: refSelector(c.LabelSelector, p.Labels, c.MatchLabelKeys, nil), honorAffinity: true}
		if c.NodeAffinityPolicy != nil {
			rs.honorAffinity = *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
		}
		if c.NodeTaintsPolicy != nil {
			rs.honorTaint = *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
		}
		out = append(out, rs)
	}
	return out
}

func doNotSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

func (r *refScheduler) countMatching(node string, sel labels.Selector, namespace string) int64 {
	var n int64
	for _, p := range r.podsOn(node) {
		if ns(p) == namespace && sel.Matches(labels.Set(p.Labels)) {
			n++
		}
	}
	return n
}

func hasKeys(n *corev1.Node, cs []refSpread) bool {
	for _, c := range cs {
		if _, ok := n.Labels[c.c.TopologyKey]; !ok {
			return false
		}
	}
	return true
}

func (r *refScheduler) spreadEligible(p *corev1.Pod, c refSpread, n *corev1.Node) bool {
	if c.honorAffinity {
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); !ok {
			return false
		}
	}
	if c.honorTaint {
		if _, bad := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), n.Spec.Taints, p.Spec.Tolerations, doNotSchedule, false); bad {
			return false
		}
	}
	return true
}

// filters returns the reasons of the first filter that rejects n, or nil.
func (r *refScheduler) filters(p *corev1.Pod, n *corev1.Node) []string {
	logger := logr.Discard()
	if n.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(logger, p.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
		return []string{reasonUnschedulable}
	}
	if p.Spec.NodeName != "" && p.Spec.NodeName != n.Name {
		return []string{reasonNodeName}
	}
	if t, bad := corev1helpers.FindMatchingUntoleratedTaint(logger, n.Spec.Taints, p.Spec.Tolerations, doNotSchedule, false); bad {
		return []string{fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)}
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); !ok {
		return []string{reasonNodeAffinity}
	}
	// NodeResourcesFit
	var fails []string
	on := r.podsOn(n.Name)
	if int64(len(on))+1 > q(n.Status.Allocatable, corev1.ResourcePods) {
		fails = append(fails, reasonTooManyPods)
	}
	req := refRequests(p)
	used := corev1.ResourceList{}
	for _, o := range on {
		for k, v := range refRequests(o) {
			u := used[k]
			u.Add(v)
			used[k] = u
		}
	}
	zero := true
	for k, v := range req {
		if !v.IsZero() && (k == corev1.ResourceCPU || k == corev1.ResourceMemory || k == corev1.ResourceEphemeralStorage || isScalarResource(k)) {
			zero = false
		}
	}
	if !zero {
		names := slices.Sorted(func(yield func(corev1.ResourceName) bool) {
			for k := range req {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range names {
			if k != corev1.ResourceCPU && k != corev1.ResourceMemory && k != corev1.ResourceEphemeralStorage && !isScalarResource(k) {
				continue
			}
			want := q(req, k)
			if want > 0 && want > q(n.Status.Allocatable, k)-q(used, k) {
				fails = append(fails, "Insufficient "+string(k))
			}
		}
	}
	if len(fails) > 0 {
		return fails
	}
	// PodTopologySpread (DoNotSchedule)
	hard := spreadOf(p, corev1.DoNotSchedule)
	for _, c := range hard {
		counts := map[string]int64{}
		for _, m := range r.nodes {
			if !hasKeys(m, hard) || !r.spreadEligible(p, c, m) {
				continue
			}
			counts[m.Labels[c.c.TopologyKey]] += r.countMatching(m.Name, c.sel, ns(p))
		}
		v, ok := n.Labels[c.c.TopologyKey]
		if !ok {
			return []string{reasonSpreadLabel}
		}
		minv := int64(math.MaxInt32)
		for _, x := range counts {
			minv = min(minv, x)
		}
		if c.c.MinDomains != nil && len(counts) < int(*c.c.MinDomains) {
			minv = 0
		}
		self := int64(0)
		if c.sel.Matches(labels.Set(p.Labels)) {
			self = 1
		}
		if counts[v]+self-minv > int64(c.c.MaxSkew) {
			return []string{reasonSpread}
		}
	}
	// InterPodAffinity
	t := termsOf(p)
	if len(t.req) > 0 {
		pairs := map[[2]string]int64{}
		for _, o := range r.pods {
			all := true
			for i := range t.req {
				all = all && t.req[i].matches(o)
			}
			if !all {
				continue
			}
			on := r.node(o.Spec.NodeName)
			for _, rt := range t.req {
				if v, ok := on.Labels[rt.key]; ok {
					pairs[[2]string{rt.key, v}]++
				}
			}
		}
		ok, exist := true, true
		for _, rt := range t.req {
			v, has := n.Labels[rt.key]
			if !has {
				ok = false
				break
			}
			if pairs[[2]string{rt.key, v}] <= 0 {
				exist = false
			}
		}
		if ok && !exist {
			self := true
			for i := range t.req {
				self = self && t.req[i].matches(p)
			}
			ok = len(pairs) == 0 && self
		}
		if !ok {
			return []string{reasonAffinity}
		}
	}
	for _, rt := range t.anti {
		v, has := n.Labels[rt.key]
		if !has {
			continue
		}
		for _, o := range r.pods {
			if rt.matches(o) && r.node(o.Spec.NodeName).Labels[rt.key] == v {
				if _, h := r.node(o.Spec.NodeName).Labels[rt.key]; h {
					return []string{reasonAntiAffinity}
				}
			}
		}
	}
	for _, o := range r.pods {
		on := r.node(o.Spec.NodeName)
		for _, rt := range termsOf(o).anti {
			if !rt.matches(p) {
				continue
			}
			ov, has := on.Labels[rt.key]
			if has && n.Labels[rt.key] == ov {
				if _, h := n.Labels[rt.key]; h {
					return []string{reasonExistingAnti}
				}
			}
		}
	}
	return nil
}

func (r *refScheduler) node(name string) *corev1.Node {
	for _, n := range r.nodes {
		if n.Name == name {
			return n
		}
	}
	panic("no node " + name)
}

// decide returns the chosen node name, or "" and the FitError message.
func (r *refScheduler) decide(p *corev1.Pod) (string, string) {
	if len(r.nodes) == 0 {
		return "", noNodesAvailable
	}
	reasons := map[string]int{}
	var names map[string]bool // NodeAffinity PreFilter
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		all := true
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var tn map[string]bool
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn {
					s := map[string]bool{}
					for _, v := range f.Values {
						if tn == nil || tn[v] {
							s[v] = true
						}
					}
					tn = s
				}
			}
			if tn == nil {
				all = false
				break
			}
			if names == nil {
				names = map[string]bool{}
			}
			for k := range tn {
				names[k] = true
			}
		}
		if !all {
			names = nil
		} else if len(names) == 0 {
			return "", fmt.Sprintf("0/%d nodes are available: %s.", len(r.nodes), reasonNamesConflict)
		}
	}
	var feasible []*corev1.Node
	for _, n := range r.nodes {
		if names != nil && !names[n.Name] {
			reasons[reasonPreFilterNodeAffinity]++
			continue
		}
		if rs := r.filters(p, n); rs != nil {
			for _, x := range rs {
				reasons[x]++
			}
			continue
		}
		feasible = append(feasible, n)
	}
	if len(feasible) == 0 {
		return "", fitError(len(r.nodes), reasons)
	}
	scores := r.scores(p, feasible)
	best := 0
	for i := range feasible {
		if scores[i] > scores[best] {
			best = i
		}
	}
	return feasible[best].Name, ""
}

func (r *refScheduler) scores(p *corev1.Pod, feasible []*corev1.Node) []int64 {
	total := make([]int64, len(feasible))
	add := func(w int64, s []int64) {
		for i := range total {
			total[i] += w * s[i]
		}
	}
	// NodeResourcesFit (LeastAllocated) and BalancedAllocation
	fit, bal := make([]int64, len(feasible)), make([]int64, len(feasible))
	nz, req := refNonZero(p), refRequests(p)
	bestEffort := q(req, corev1.ResourceCPU) == 0 && q(req, corev1.ResourceMemory) == 0
	for i, n := range feasible {
		nodeNZ, nodeReq := corev1.ResourceList{}, corev1.ResourceList{}
		for _, o := range r.podsOn(n.Name) {
			for k, v := range refNonZero(o) {
				u := nodeNZ[k]
				u.Add(v)
				nodeNZ[k] = u
			}
			for k, v := range refRequests(o) {
				u := nodeReq[k]
				u.Add(v)
				nodeReq[k] = u
			}
		}
		var sum, ws int64
		var fr []float64
		for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			alloc := q(n.Status.Allocatable, k)
			if alloc == 0 {
				continue
			}
			sum += leastRequested(q(nodeNZ, k)+q(nz, k), alloc)
			ws++
			fr = append(fr, math.Min(float64(q(nodeReq, k)+q(req, k))/float64(alloc), 1))
		}
		if ws > 0 {
			fit[i] = sum / ws
		}
		if !bestEffort {
			std := 0.0
			if len(fr) == 2 {
				std = math.Abs((fr[0] - fr[1]) / 2)
			}
			bal[i] = int64((1 - std) * 100)
		}
	}
	add(1, fit)
	add(1, bal)
	// TaintToleration
	var prefTol []corev1.Toleration
	for _, t := range p.Spec.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			prefTol = append(prefTol, t)
		}
	}
	taint := make([]int64, len(feasible))
	for i, n := range feasible {
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectPreferNoSchedule && !corev1helpers.TolerationsTolerateTaint(logr.Discard(), prefTol, &t, false) {
				taint[i]++
			}
		}
	}
	add(3, defaultNormalize(taint, true))
	// NodeAffinity preferred
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
		pt, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		if err != nil {
			panic(err)
		}
		s := make([]int64, len(feasible))
		for i, n := range feasible {
			s[i] = pt.Score(n)
		}
		add(2, defaultNormalize(s, false))
	}
	add(2, r.spreadScores(p, feasible))
	add(2, r.interPodScores(p, feasible))
	return total
}

func defaultNormalize(s []int64, reverse bool) []int64 {
	out := slices.Clone(s)
	var maxv int64
	for _, v := range s {
		maxv = max(maxv, v)
	}
	for i := range out {
		switch {
		case maxv == 0 && reverse:
			out[i] = 100
		case maxv == 0:
		default:
			out[i] = 100 * s[i] / maxv
			if reverse {
				out[i] = 100 - out[i]
			}
		}
	}
	return out
}

func (r *refScheduler) spreadScores(p *corev1.Pod, feasible []*corev1.Node) []int64 {
	out := make([]int64, len(feasible))
	soft := spreadOf(p, corev1.ScheduleAnyway)
	if len(soft) == 0 {
		return out
	}
	ignored := make([]bool, len(feasible))
	domains := make([]map[string]bool, len(soft))
	nIgnored := 0
	for i := range soft {
		domains[i] = map[string]bool{}
	}
	for j, n := range feasible {
		if !hasKeys(n, soft) {
			ignored[j] = true
			nIgnored++
			continue
		}
		for i, c := range soft {
			domains[i][n.Labels[c.c.TopologyKey]] = true
		}
	}
	weight := make([]float64, len(soft))
	counts := make([]map[string]int64, len(soft))
	for i, c := range soft {
		sz := len(domains[i])
		if c.c.TopologyKey == corev1.LabelHostname {
			sz = len(feasible) - nIgnored
		}
		weight[i] = math.Log(float64(sz + 2))
		counts[i] = map[string]int64{}
		for _, m := range r.nodes {
			if !hasKeys(m, soft) || !r.spreadEligible(p, c, m) || !domains[i][m.Labels[c.c.TopologyKey]] {
				continue
			}
			counts[i][m.Labels[c.c.TopologyKey]] += r.countMatching(m.Name, c.sel, ns(p))
		}
	}
	raw := make([]int64, len(feasible))
	minv, maxv := int64(math.MaxInt64), int64(0)
	for j, n := range feasible {
		if ignored[j] {
			continue
		}
		var s float64
		for i, c := range soft {
			var cnt int64
			if c.c.TopologyKey == corev1.LabelHostname {
				cnt = r.countMatching(n.Name, c.sel, ns(p))
			} else {
				cnt = counts[i][n.Labels[c.c.TopologyKey]]
			}
			s += float64(cnt)*weight[i] + float64(c.c.MaxSkew-1)
		}
		raw[j] = int64(math.Round(s))
		minv, maxv = min(minv, raw[j]), max(maxv, raw[j])
	}
	for j := range feasible {
		switch {
		case ignored[j]:
		case maxv == 0:
			out[j] = 100
		default:
			out[j] = 100 * (maxv + minv - raw[j]) / maxv
		}
	}
	return out
}

func (r *refScheduler) interPodScores(p *corev1.Pod, feasible []*corev1.Node) []int64 {
	out := make([]int64, len(feasible))
	topo := map[string]map[string]int64{}
	bump := func(on *corev1.Node, key string, w int64) {
		if v, ok := on.Labels[key]; ok {
			if topo[key] == nil {
				topo[key] = map[string]int64{}
			}
			topo[key][v] += w
		}
	}
	mine := termsOf(p)
	for _, o := range r.pods {
		on := r.node(o.Spec.NodeName)
		for _, t := range mine.pref {
			if t.matches(o) {
				bump(on, t.key, t.weight)
			}
		}
		for _, t := range mine.prefAnti {
			if t.matches(o) {
				bump(on, t.key, -t.weight)
			}
		}
		theirs := termsOf(o)
		for _, t := range theirs.req {
			if t.matches(p) {
				bump(on, t.key, hardPodAffinityWeight)
			}
		}
		for _, t := range theirs.pref {
			if t.matches(p) {
				bump(on, t.key, t.weight)
			}
		}
		for _, t := range theirs.prefAnti {
			if t.matches(p) {
				bump(on, t.key, -t.weight)
			}
		}
	}
	if len(topo) == 0 {
		return out
	}
	raw := make([]int64, len(feasible))
	minv, maxv := int64(math.MaxInt64), int64(math.MinInt64)
	for j, n := range feasible {
		for k, vals := range topo {
			if v, ok := n.Labels[k]; ok {
				raw[j] += vals[v]
			}
		}
		minv, maxv = min(minv, raw[j]), max(maxv, raw[j])
	}
	if maxv-minv > 0 {
		for j := range feasible {
			out[j] = int64(100 * (float64(raw[j]-minv) / float64(maxv-minv)))
		}
	}
	return out
}

var _ = strings.Compare
