package placement

import (
	"math"

	"github.com/bits-and-blooms/bitset"
	corev1 "k8s.io/api/core/v1"
)

// Default profile score weights.
const (
	weightTaint        = 3
	weightNodeAffinity = 2
	weightSpread       = 2
	weightInterPod     = 2
	weightFit          = 1
	weightBalanced     = 1

	maxNodeScore          = 100
	hardPodAffinityWeight = 1
	hostnameKey           = corev1.LabelHostname
)

// podClass identifies what the cached resource score depends on.
type podClass struct {
	nzCPU, nzMem, cpu, mem int64
}

// leastRequested is LeastAllocated for one resource.
func leastRequested(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * maxNodeScore / capacity
}

// resourceScore is NodeResourcesFit (LeastAllocated over cpu and memory,
// weight 1 each, on non-zero requests) plus BalancedAllocation (on actual
// requests; skipped for a pod that requests neither).
func resourceScore(r *nodeRes, w *Workload) int64 {
	var sum, weights int64
	if r.allocCPU != 0 {
		sum += leastRequested(r.nzCPU+w.NonZeroCPU, r.allocCPU)
		weights++
	}
	if r.allocMem != 0 {
		sum += leastRequested(r.nzMem+w.NonZeroMemory, r.allocMem)
		weights++
	}
	var score int64
	if weights > 0 {
		score = weightFit * (sum / weights)
	}
	if w.Requests.CPU == 0 && w.Requests.Memory == 0 {
		return score
	}
	var fr [2]float64
	n := 0
	if r.allocCPU != 0 {
		fr[n] = min(float64(r.reqCPU+w.Requests.CPU)/float64(r.allocCPU), 1)
		n++
	}
	if r.allocMem != 0 {
		fr[n] = min(float64(r.reqMem+w.Requests.Memory)/float64(r.allocMem), 1)
		n++
	}
	std := 0.0
	if n == 2 {
		std = math.Abs((fr[0] - fr[1]) / 2)
	}
	return score + weightBalanced*int64((1-std)*float64(maxNodeScore))
}

// scorer holds one decision's per-node component scores, indexed like
// the feasible list.
type scorer struct {
	feas  []uint32
	total []int64
}

// score picks the best feasible node: every feasible node is scored by
// each default plugin, normalised as kube-scheduler does, weighted and
// summed; the highest total wins, the lowest slot (earliest node) on ties.
func (e *engine) score(w *Workload, cand *bitset.BitSet, fs *filterState) uint32 {
	n := int(cand.Count())
	if n == 1 {
		s, _ := cand.NextSet(0)
		return uint32(s)
	}
	feas := make([]uint32, 0, n)
	forEach(cand, func(s uint32) { feas = append(feas, s) })
	total := make([]int64, n)

	class := podClass{w.NonZeroCPU, w.NonZeroMemory, w.Requests.CPU, w.Requests.Memory}
	if class != e.class {
		e.class = class
		e.gen++
		if e.gen == 0 {
			e.gen = 1
		}
	}
	e.pool.run(n, e.pool.parts(n, 1), func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			r := &e.res[feas[i]]
			if r.scoreGen != e.gen {
				r.score = int32(resourceScore(r, w))
				r.scoreGen = e.gen
			}
			total[i] = int64(r.score)
		}
	})
	e.taintScore(w, feas, total)
	e.nodeAffinityScore(w, cand, feas, total)
	if len(w.spread) > 0 {
		e.spreadScore(w, fs, feas, total)
	}
	e.interPodScore(w, feas, total)

	best := 0
	for i := 1; i < n; i++ {
		if total[i] > total[best] {
			best = i
		}
	}
	return feas[best]
}

// taintScore is TaintToleration: untolerated PreferNoSchedule taints,
// fewer is better (normalised in reverse). Without any such taint every
// node scores the same, so nothing is added.
func (e *engine) taintScore(w *Workload, feas []uint32, total []int64) {
	var untol []bool
	for id := range e.taints.list {
		te := &e.taints.list[id]
		if te.n == 0 || te.t.Effect != corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if untol == nil {
			untol = make([]bool, len(e.taints.list))
		}
		untol[id] = !tolerates(preferNoScheduleTolerations(w.tolerations), &te.t)
	}
	if untol == nil {
		return
	}
	counts := make([]int64, len(feas))
	var maxc int64
	for i, s := range feas {
		for _, id := range e.nodeTaints[s] {
			if untol[id] {
				counts[i]++
			}
		}
		maxc = max(maxc, counts[i])
	}
	for i := range feas {
		sc := int64(maxNodeScore)
		if maxc > 0 {
			sc = maxNodeScore - maxNodeScore*counts[i]/maxc
		}
		total[i] += weightTaint * sc
	}
}

func preferNoScheduleTolerations(ts []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range ts {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			out = append(out, t)
		}
	}
	return out
}

// nodeAffinityScore is NodeAffinity's preferred terms: the sum of the
// weights of matching terms, normalised to the highest.
func (e *engine) nodeAffinityScore(w *Workload, cand *bitset.BitSet, feas []uint32, total []int64) {
	if len(w.preferred) == 0 {
		return
	}
	raw := make([]int64, len(feas))
	for i := range w.preferred {
		t := &w.preferred[i]
		m := e.termMatch(&t.nodeTerm, cand)
		for j, s := range feas {
			if m.Test(uint(s)) {
				raw[j] += t.weight
			}
		}
	}
	var maxv int64
	for _, v := range raw {
		maxv = max(maxv, v)
	}
	if maxv == 0 {
		return
	}
	for j := range feas {
		total[j] += weightNodeAffinity * (maxNodeScore * raw[j] / maxv)
	}
}

// spreadScore is PodTopologySpread's score over the ScheduleAnyway
// constraints (kube-scheduler's PreScore, Score and NormalizeScore).
func (e *engine) spreadScore(w *Workload, fs *filterState, feas []uint32, total []int64) {
	var soft []*spreadConstraint
	for i := range w.spread {
		if !w.spread[i].hard {
			soft = append(soft, &w.spread[i])
		}
	}
	if len(soft) == 0 {
		return
	}
	doms := make([]*domainIndex, len(soft))
	for i, c := range soft {
		doms[i] = e.domains(c.topologyKey)
	}
	hasAll := func(s uint32) bool {
		for _, d := range doms {
			if d.of[s] < 0 {
				return false
			}
		}
		return true
	}
	ignored := make([]bool, len(feas))
	nIgnored := 0
	inFeas := make([][]bool, len(soft)) // domains holding a scored node
	size := make([]int, len(soft))
	for i := range soft {
		inFeas[i] = make([]bool, len(doms[i].values))
	}
	for j, s := range feas {
		if !hasAll(s) {
			ignored[j] = true
			nIgnored++
			continue
		}
		for i, c := range soft {
			if c.topologyKey == hostnameKey {
				continue
			}
			if d := doms[i].of[s]; !inFeas[i][d] {
				inFeas[i][d] = true
				size[i]++
			}
		}
	}
	weight := make([]float64, len(soft))
	matchers := make([]*matcher, len(soft))
	pairs := make([][]int64, len(soft))
	for i, c := range soft {
		sz := size[i]
		if c.topologyKey == hostnameKey {
			sz = len(feas) - nIgnored
		}
		weight[i] = math.Log(float64(sz + 2))
		matchers[i] = e.matcher([]AffinityTerm{{Namespaces: []string{w.Namespace}, Selector: c.selector}})
		pairs[i] = make([]int64, len(doms[i].values))
	}
	needPairs := false // hostname constraints count per node; the others per domain
	for _, c := range soft {
		needPairs = needPairs || c.topologyKey != hostnameKey
	}
	if needPairs {
		e.spreadPairs(soft, doms, inFeas, matchers, pairs, fs)
	}
	raw := make([]int64, len(feas))
	minv, maxv := int64(math.MaxInt64), int64(0)
	for j, s := range feas {
		if ignored[j] {
			continue
		}
		var sc float64
		for i, c := range soft {
			var cnt int64
			if c.topologyKey == hostnameKey {
				cnt = int64(matchers[i].counts[s])
			} else {
				cnt = pairs[i][doms[i].of[s]]
			}
			sc += float64(cnt)*weight[i] + float64(c.maxSkew-1)
		}
		raw[j] = int64(math.Round(sc))
		minv, maxv = min(minv, raw[j]), max(maxv, raw[j])
	}
	for j := range feas {
		if ignored[j] {
			continue
		}
		sc := int64(maxNodeScore)
		if maxv != 0 {
			sc = maxNodeScore * (maxv + minv - raw[j]) / maxv
		}
		total[j] += weightSpread * sc
	}
}

// interPodScore is InterPodAffinity's score: per topology domain, the
// incoming pod's preferred terms weighed by the matching pods there, plus
// existing pods' required affinity (weight 1) and preferred terms that
// match the incoming pod; then min-max normalised.
func (e *engine) interPodScore(w *Workload, feas []uint32, total []int64) {
	type contrib struct {
		dom *domainIndex
		by  []int64 // by domain
	}
	byKey := map[string]*contrib{}
	add := func(key string, counts []int32, weight int64) {
		c := byKey[key]
		if c == nil {
			dom := e.domains(key)
			c = &contrib{dom: dom, by: make([]int64, len(dom.values))}
			byKey[key] = c
		}
		for s, n := range counts {
			if n == 0 {
				continue
			}
			if d := c.dom.of[s]; d >= 0 {
				c.by[d] += weight * int64(n)
			}
		}
	}
	if a := w.Affinity; a != nil {
		for i := range a.Preferred {
			t := &a.Preferred[i]
			add(t.TopologyKey, e.matcher([]AffinityTerm{t.AffinityTerm}).counts, int64(t.Weight))
		}
		for i := range a.PreferredAnti {
			t := &a.PreferredAnti[i]
			add(t.TopologyKey, e.matcher([]AffinityTerm{t.AffinityTerm}).counts, -int64(t.Weight))
		}
	}
	for _, g := range e.groups.m {
		var wt int64
		switch g.kind {
		case kindRequired:
			wt = hardPodAffinityWeight
		case kindPreferred:
			wt = int64(g.weight)
		case kindPreferredAnti:
			wt = -int64(g.weight)
		default:
			continue
		}
		if g.term.Matches(w.Namespace, w.Labels) {
			add(g.term.TopologyKey, g.counts, wt)
		}
	}
	if len(byKey) == 0 {
		return
	}
	list := make([]*contrib, 0, len(byKey))
	for _, c := range byKey {
		list = append(list, c)
	}
	raw := make([]int64, len(feas))
	minv, maxv := int64(math.MaxInt64), int64(math.MinInt64)
	for j, s := range feas {
		for _, c := range list {
			if d := c.dom.of[s]; d >= 0 {
				raw[j] += c.by[d]
			}
		}
		minv, maxv = min(minv, raw[j]), max(maxv, raw[j])
	}
	if diff := maxv - minv; diff > 0 {
		for j := range feas {
			total[j] += weightInterPod * int64(float64(maxNodeScore)*(float64(raw[j]-minv)/float64(diff)))
		}
	}
}

// spreadPairs sums matching pods per domain over the nodes that count for
// each (non-hostname) soft constraint.
func (e *engine) spreadPairs(soft []*spreadConstraint, doms []*domainIndex, inFeas [][]bool, matchers []*matcher, pairs [][]int64, fs *filterState) {
	hasAll := func(s uint32) bool {
		for _, d := range doms {
			if d.of[s] < 0 {
				return false
			}
		}
		return true
	}
	forEach(e.live, func(s uint32) {
		if !hasAll(s) {
			return
		}
		for i, c := range soft {
			if c.topologyKey == hostnameKey || !c.eligible(s, fs) {
				continue
			}
			if d := doms[i].of[s]; inFeas[i][d] {
				pairs[i][d] += int64(matchers[i].counts[s])
			}
		}
	})
}
