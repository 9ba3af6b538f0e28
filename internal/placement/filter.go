package placement

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/bits-and-blooms/bitset"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextant-mesh/sextant/internal/label"
)

// kube-scheduler's reasons, word for word.
const (
	reasonPreFilterNodeAffinity = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
	reasonNamesConflict         = "pod affinity terms conflict"
	reasonUnschedulable         = "node(s) were unschedulable"
	reasonNodeName              = "node(s) didn't match the requested node name"
	reasonNodeAffinity          = "node(s) didn't match Pod's node affinity/selector"
	reasonTooManyPods           = "Too many pods"
	reasonSpread                = "node(s) didn't match pod topology spread constraints"
	reasonSpreadLabel           = reasonSpread + " (missing required label)"
	reasonAffinity              = "node(s) didn't match pod affinity rules"
	reasonAntiAffinity          = "node(s) didn't match pod anti-affinity rules"
	reasonExistingAnti          = "node(s) didn't satisfy existing pods anti-affinity rules"
	noNodesAvailable            = "no nodes available to schedule pods"
)

func reasonTaint(t *corev1.Taint) string {
	return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
}

// fitError renders kube-scheduler's FitError: "0/N nodes are available:"
// then "count reason" for each reason, then ".". Reasons are listed by
// count, largest first, ties by reason text (the API's order; kube-scheduler
// sorts the "count reason" strings, so "19000 ..." precedes "31000 ...").
func fitError(total int, reasons map[string]int) string {
	type reason struct {
		text  string
		count int
	}
	rs := make([]reason, 0, len(reasons))
	for r, n := range reasons {
		rs = append(rs, reason{r, n})
	}
	slices.SortFunc(rs, func(a, b reason) int {
		if a.count != b.count {
			return b.count - a.count
		}
		return strings.Compare(a.text, b.text)
	})
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r.count) + " " + r.text
	}
	return fmt.Sprintf("0/%d nodes are available: %s.", total, strings.Join(parts, ", "))
}

// forEach calls fn for every set bit of b, in ascending order.
func forEach(b *bitset.BitSet, fn func(s uint32)) {
	for wi, w := range b.Words() {
		for w != 0 {
			fn(uint32(wi<<6 + bits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
}

func unionPosting(b *bitset.BitSet, p *label.Posting) {
	if pb := p.Bits(); pb != nil {
		b.InPlaceUnion(pb)
		return
	}
	for _, s := range p.List() {
		b.Set(uint(s))
	}
}

// cut removes the slots of set from cand and counts them under reason.
func cut(cand, set *bitset.BitSet, reason string, reasons map[string]int) {
	if n := cand.IntersectionCardinality(set); n > 0 {
		reasons[reason] += int(n)
		cand.InPlaceDifference(set)
	}
}

// keepOnly removes the slots of cand outside keep, counting them.
func keepOnly(cand, keep *bitset.BitSet, reason string, reasons map[string]int) {
	if n := cand.DifferenceCardinality(keep); n > 0 {
		reasons[reason] += int(n)
		cand.InPlaceIntersection(keep)
	}
}

// termMatch returns the slots of universe a node selector term matches.
func (e *engine) termMatch(t *nodeTerm, universe *bitset.BitSet) *bitset.BitSet {
	if t.empty {
		return bitset.New(universe.Len())
	}
	m := e.labels.Match(t.reqs, universe)
	for _, r := range t.num {
		ok := bitset.New(m.Len())
		e.labels.Values(r.key, func(v string, p *label.Posting) bool {
			if r.match(v) {
				unionPosting(ok, p)
			}
			return true
		})
		m.InPlaceIntersection(ok)
	}
	for _, f := range t.fields {
		s, found := e.byName[f.values[0]]
		if f.in {
			keep := bitset.New(m.Len())
			if found {
				keep.Set(uint(s))
			}
			m.InPlaceIntersection(keep)
		} else if found {
			m.Clear(uint(s))
		}
	}
	return m
}

// nodeAffinityMatch returns the live nodes the workload's nodeSelector and
// required node affinity accept (kube's RequiredNodeAffinity.Match).
func (e *engine) nodeAffinityMatch(w *Workload) *bitset.BitSet {
	m := e.live.Clone()
	if len(w.nodeSelector) > 0 {
		m = e.labels.Match(w.nodeSelector, m)
	}
	if w.required != nil {
		u := bitset.New(m.Len())
		for i := range w.required {
			u.InPlaceUnion(e.termMatch(&w.required[i], m))
		}
		m = u
	}
	return m
}

// decision is one workload's outcome: a slot, or kube-scheduler's message.
type decision struct {
	slot int32
	msg  string
}

// filterState is what the filters learned that scoring reuses.
type filterState struct {
	affinity   *bitset.BitSet // nodes matching nodeSelector/required affinity (nil: all)
	untolTaint []bool         // by taint id: NoSchedule/NoExecute taint not tolerated
	untolNodes *bitset.BitSet // nodes with such a taint
}

// decide runs the default profile's filters in kube-scheduler's order,
// each over the nodes still feasible, counting every rejected node under
// the first filter that rejects it, then scores the feasible nodes. It
// returns the chosen slot, or -1 and the FitError text.
func (e *engine) decide(w *Workload) (int32, string) {
	var fs filterState
	reasons := map[string]int{}
	cand, msg := e.staticFilter(w, &fs, reasons)
	if cand == nil {
		return -1, msg
	}
	if e.fastPath(w) {
		if slot, ok := e.decideBuckets(w, cand); ok {
			return int32(slot), ""
		}
	}
	e.fit(w, cand, reasons)
	if len(w.spread) > 0 {
		e.spreadFilter(w, &fs, cand, reasons)
	}
	if w.Affinity != nil || len(e.groups.m) > 0 {
		e.interPodFilter(w, cand, reasons)
	}
	if !cand.Any() {
		return -1, fitError(e.nlive, reasons)
	}
	return int32(e.score(w, cand, &fs)), ""
}

// staticFilter runs the filters that depend on the node alone (its name,
// labels, taints, unschedulable flag), answered from indexes.
func (e *engine) staticFilter(w *Workload, fs *filterState, reasons map[string]int) (*bitset.BitSet, string) {
	total := e.nlive
	if total == 0 {
		return nil, noNodesAvailable
	}
	if w.namesConflict {
		return nil, fmt.Sprintf("0/%d nodes are available: %s.", total, reasonNamesConflict)
	}
	cand := e.live.Clone()
	if w.nodeNames != nil { // NodeAffinity PreFilter: only the named nodes are evaluated
		keep := bitset.New(cand.Len())
		for _, n := range w.nodeNames {
			if s, ok := e.byName[n]; ok {
				keep.Set(uint(s))
			}
		}
		cand.InPlaceIntersection(keep)
		if absent := total - int(cand.Count()); absent > 0 {
			reasons[reasonPreFilterNodeAffinity] += absent
		}
	}
	if !w.tolerateUnsch { // NodeUnschedulable
		cut(cand, e.unsched, reasonUnschedulable, reasons)
	}
	if w.NodeName != "" { // NodeName
		keep := bitset.New(cand.Len())
		if s, ok := e.byName[w.NodeName]; ok {
			keep.Set(uint(s))
		}
		keepOnly(cand, keep, reasonNodeName, reasons)
	}
	// TaintToleration: the union of the node sets of every untolerated
	// NoSchedule/NoExecute taint; a node is counted under its first one.
	fs.untolTaint = make([]bool, len(e.taints.list))
	fs.untolNodes = bitset.New(cand.Len())
	for id := range e.taints.list {
		te := &e.taints.list[id]
		if te.n == 0 || te.t.Effect == corev1.TaintEffectPreferNoSchedule || tolerates(w.tolerations, &te.t) {
			continue
		}
		fs.untolTaint[id] = true
		fs.untolNodes.InPlaceUnion(te.nodes)
	}
	if cand.IntersectionCardinality(fs.untolNodes) > 0 {
		forEach(cand.Intersection(fs.untolNodes), func(s uint32) {
			for _, id := range e.nodeTaints[s] {
				if fs.untolTaint[id] {
					reasons[reasonTaint(&e.taints.list[id].t)]++
					return
				}
			}
		})
		cand.InPlaceDifference(fs.untolNodes)
	}
	if w.hasNodeAffReqs { // NodeAffinity
		fs.affinity = e.nodeAffinityMatch(w)
		keepOnly(cand, fs.affinity, reasonNodeAffinity, reasons)
	}
	return cand, ""
}

// fit is NodeResourcesFit: pods count, then (unless the pod requests
// nothing) cpu, memory, ephemeral-storage and each scalar resource; a node
// short of several is counted under each.
func (e *engine) fit(w *Workload, cand *bitset.BitSet, reasons map[string]int) {
	req := &w.Requests
	zero := req.CPU == 0 && req.Memory == 0 && req.EphemeralStorage == 0 && len(req.Scalars) == 0
	cols := make([]*scalarCol, len(req.Scalars))
	for i, s := range req.Scalars {
		cols[i] = e.scalars[s.Name]
	}
	words := cand.Words()
	parts := e.pool.parts(len(words), 64)
	counts := make([][]int, parts) // per chunk: pods, cpu, memory, ephemeral, then each scalar
	e.pool.run(len(words), parts, func(chunk, lo, hi int) {
		c := make([]int, 4+len(req.Scalars))
		counts[chunk] = c
		for wi := lo; wi < hi; wi++ {
			word := words[wi]
			for word != 0 {
				tz := bits.TrailingZeros64(word)
				word &= word - 1
				s := wi<<6 + tz
				r := &e.res[s]
				bad := false
				if r.pods+1 > r.allocPods {
					c[0]++
					bad = true
				}
				if !zero {
					if req.CPU > 0 && req.CPU > r.allocCPU-r.reqCPU {
						c[1]++
						bad = true
					}
					if req.Memory > 0 && req.Memory > r.allocMem-r.reqMem {
						c[2]++
						bad = true
					}
					if req.EphemeralStorage > 0 && req.EphemeralStorage > r.allocEph-r.reqEph {
						c[3]++
						bad = true
					}
					for i, sc := range req.Scalars {
						var free int64
						if col := cols[i]; col != nil {
							free = col.alloc[s] - col.req[s]
						}
						if sc.Value > free {
							c[4+i]++
							bad = true
						}
					}
				}
				if bad {
					words[wi] &^= 1 << tz
				}
			}
		}
	})
	var nPods, nCPU, nMem, nEph int
	nScalar := make([]int, len(req.Scalars))
	for _, c := range counts {
		nPods, nCPU, nMem, nEph = nPods+c[0], nCPU+c[1], nMem+c[2], nEph+c[3]
		for i := range nScalar {
			nScalar[i] += c[4+i]
		}
	}
	for _, x := range []struct {
		n int
		r string
	}{{nPods, reasonTooManyPods}, {nCPU, "Insufficient cpu"}, {nMem, "Insufficient memory"}, {nEph, "Insufficient ephemeral-storage"}} {
		if x.n > 0 {
			reasons[x.r] += x.n
		}
	}
	for i, n := range nScalar {
		if n > 0 {
			reasons["Insufficient "+req.Scalars[i].Name] += n
		}
	}
}

// eligible reports whether slot counts for a spread constraint (its
// node-inclusion policies), given the keys every constraint needs.
func (c *spreadConstraint) eligible(s uint32, fs *filterState) bool {
	if c.honorAffinity && fs.affinity != nil && !fs.affinity.Test(uint(s)) {
		return false
	}
	if c.honorTaints && fs.untolNodes.Test(uint(s)) {
		return false
	}
	return true
}

// spreadCounts returns, for constraint c, the matching pods per domain
// over eligible nodes and which domains have an eligible node. keys are
// the domain indexes of every constraint in the set (a node must have all).
func (e *engine) spreadCounts(w *Workload, c *spreadConstraint, doms []*domainIndex, self *domainIndex, fs *filterState) ([]int64, []bool) {
	m := e.matcher([]AffinityTerm{{Namespaces: []string{w.Namespace}, Selector: c.selector}})
	cnt := make([]int64, len(self.values))
	present := make([]bool, len(self.values))
	forEach(e.live, func(s uint32) {
		for _, d := range doms {
			if d.of[s] < 0 {
				return
			}
		}
		if !c.eligible(s, fs) {
			return
		}
		d := self.of[s]
		present[d] = true
		cnt[d] += int64(m.counts[s])
	})
	return cnt, present
}

// spreadFilter is PodTopologySpread's filter over the DoNotSchedule
// constraints: skew = matching pods in the node's domain + self - the
// global minimum (0 below minDomains domains) must not exceed maxSkew.
func (e *engine) spreadFilter(w *Workload, fs *filterState, cand *bitset.BitSet, reasons map[string]int) {
	var hard []*spreadConstraint
	for i := range w.spread {
		if w.spread[i].hard {
			hard = append(hard, &w.spread[i])
		}
	}
	if len(hard) == 0 {
		return
	}
	doms := make([]*domainIndex, len(hard))
	for i, c := range hard {
		doms[i] = e.domains(c.topologyKey)
	}
	type state struct {
		cnt  []int64
		min  int64
		self int64
	}
	st := make([]state, len(hard))
	for i, c := range hard {
		cnt, present := e.spreadCounts(w, c, doms, doms[i], fs)
		minv, domains := int64(math.MaxInt32), 0
		for d, ok := range present {
			if ok {
				domains++
				minv = min(minv, cnt[d])
			}
		}
		if int32(domains) < c.minDomains {
			minv = 0
		}
		var self int64
		if c.selector.Matches(w.Labels) {
			self = 1
		}
		st[i] = state{cnt: cnt, min: minv, self: self}
	}
	var nLabel, nSkew int
	words := cand.Words()
	for wi, word := range words {
		for word != 0 {
			tz := bits.TrailingZeros64(word)
			word &= word - 1
			s := wi<<6 + tz
			for i, c := range hard {
				d := doms[i].of[s]
				if d < 0 {
					nLabel++
					words[wi] &^= 1 << tz
					break
				}
				if st[i].cnt[d]+st[i].self-st[i].min > int64(c.maxSkew) {
					nSkew++
					words[wi] &^= 1 << tz
					break
				}
			}
		}
	}
	if nLabel > 0 {
		reasons[reasonSpreadLabel] += nLabel
	}
	if nSkew > 0 {
		reasons[reasonSpread] += nSkew
	}
}

// domainsWith marks the domains (of key) of the slots where counts > 0.
func (e *engine) domainsWith(counts []int32, dom *domainIndex) ([]int64, bool) {
	out := make([]int64, len(dom.values))
	any := false
	for s, c := range counts {
		if c == 0 {
			continue
		}
		if d := dom.of[s]; d >= 0 {
			out[d] += int64(c)
			any = true
		}
	}
	return out, any
}

// interPodFilter is InterPodAffinity's filter: the pod's required
// affinity, then its required anti-affinity, then existing pods' required
// anti-affinity toward it.
func (e *engine) interPodFilter(w *Workload, cand *bitset.BitSet, reasons map[string]int) {
	a := w.Affinity
	if a == nil {
		a = &PodAffinity{}
	}
	type forbid struct {
		dom *domainIndex
		bad []int64
	}
	var existing []forbid
	for _, g := range e.groups.m {
		if g.kind != kindRequiredAnti || !g.term.Matches(w.Namespace, w.Labels) {
			continue
		}
		dom := e.domains(g.term.TopologyKey)
		if bad, any := e.domainsWith(g.counts, dom); any {
			existing = append(existing, forbid{dom, bad})
		}
	}
	var aff []forbid // counts of pods matching all terms, per term's domain
	anyPair, selfMatch := false, true
	if len(a.Required) > 0 {
		m := e.matcher(a.Required)
		for i := range a.Required {
			dom := e.domains(a.Required[i].TopologyKey)
			cnt, any := e.domainsWith(m.counts, dom)
			anyPair = anyPair || any
			aff = append(aff, forbid{dom, cnt})
			selfMatch = selfMatch && a.Required[i].Matches(w.Namespace, w.Labels)
		}
	}
	var anti []forbid
	for i := range a.RequiredAnti {
		m := e.matcher(a.RequiredAnti[i : i+1])
		dom := e.domains(a.RequiredAnti[i].TopologyKey)
		if bad, any := e.domainsWith(m.counts, dom); any {
			anti = append(anti, forbid{dom, bad})
		}
	}
	if len(aff) == 0 && len(anti) == 0 && len(existing) == 0 {
		return
	}
	var nAff, nAnti, nExisting int
	words := cand.Words()
	for wi, word := range words {
	next:
		for word != 0 {
			tz := bits.TrailingZeros64(word)
			word &= word - 1
			s := wi<<6 + tz
			if len(aff) > 0 {
				ok, podsExist := true, true
				for _, f := range aff {
					d := f.dom.of[s]
					if d < 0 {
						ok = false
						break
					}
					if f.bad[d] <= 0 {
						podsExist = false
					}
				}
				if ok && !podsExist {
					ok = !anyPair && selfMatch
				}
				if !ok {
					nAff++
					words[wi] &^= 1 << tz
					continue
				}
			}
			for _, f := range anti {
				if d := f.dom.of[s]; d >= 0 && f.bad[d] > 0 {
					nAnti++
					words[wi] &^= 1 << tz
					continue next
				}
			}
			for _, f := range existing {
				if d := f.dom.of[s]; d >= 0 && f.bad[d] > 0 {
					nExisting++
					words[wi] &^= 1 << tz
					continue next
				}
			}
		}
	}
	if nAff > 0 {
		reasons[reasonAffinity] += nAff
	}
	if nAnti > 0 {
		reasons[reasonAntiAffinity] += nAnti
	}
	if nExisting > 0 {
		reasons[reasonExistingAnti] += nExisting
	}
}
