package placement

import (
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/label"
)

// A matcher counts, per node slot, the placed pods that match a filter
// (namespaces and selector; a conjunction of several for pod affinity's
// "matches all terms"). It is built once, on the first decision that needs
// it, from the pods of the namespaces it names, then kept up to date by
// every placement and removal: a decision reads counts, it never scans pods.
type matcher struct {
	filters []AffinityTerm // TopologyKey unused
	counts  []int32        // by slot
	total   int
	used    uint64
}

func (m *matcher) matches(p *Placement) bool {
	for i := range m.filters {
		if !m.filters[i].Matches(p.Namespace, p.Labels) {
			return false
		}
	}
	return true
}

// maxMatchers bounds the cache; the least recently used is dropped.
const maxMatchers = 256

type matcherCache struct {
	m    map[string]*matcher
	tick uint64
}

func (c *matcherCache) account(p *Placement, slot uint32, d int32) {
	for _, m := range c.m {
		if m.matches(p) {
			m.counts[slot] += d
			m.total += int(d)
		}
	}
}

func filterKey(filters []AffinityTerm) string {
	var b strings.Builder
	for i := range filters {
		t := filters[i]
		t.TopologyKey = ""
		b.WriteString(t.key())
		b.WriteByte(';')
	}
	return b.String()
}

// get returns the matcher of filters, building it if needed.
func (e *engine) matcher(filters []AffinityTerm) *matcher {
	c := &e.matchers
	c.tick++
	k := filterKey(filters)
	if m := c.m[k]; m != nil {
		m.used = c.tick
		return m
	}
	if len(c.m) >= maxMatchers {
		var oldK string
		var old *matcher
		for k, m := range c.m {
			if old == nil || m.used < old.used {
				oldK, old = k, m
			}
		}
		delete(c.m, oldK)
	}
	m := &matcher{filters: filters, counts: make([]int32, len(e.nodes)), used: c.tick}
	count := func(p *Placement) {
		if m.matches(p) {
			m.counts[e.byName[p.Node]]++
			m.total++
		}
	}
	// Pods of the named namespaces only, unless a namespace selector
	// widens the filter.
	if nsList, ok := namespacesOf(filters); ok {
		for _, ns := range nsList {
			for _, p := range e.byNS[ns] {
				count(p)
			}
		}
	} else {
		for _, p := range e.placements {
			count(p)
		}
	}
	c.m[k] = m
	return m
}

// namespacesOf returns the namespaces a pod must be in to pass filters, or
// false when a namespace selector makes that open.
func namespacesOf(filters []AffinityTerm) ([]string, bool) {
	var out []string
	for i := range filters {
		if filters[i].NamespaceSelector != nil {
			continue
		}
		if out == nil || len(filters[i].Namespaces) < len(out) {
			out = filters[i].Namespaces
		}
	}
	return out, out != nil
}

// Term groups count existing pods' inter-pod terms: pods carrying the same
// term (kind, weight, namespaces, selector, key) share one group with a
// count per slot, so a decision asks each distinct term once whether it
// matches the incoming pod, not each pod.
type termKind uint8

const (
	kindRequired termKind = iota
	kindRequiredAnti
	kindPreferred
	kindPreferredAnti
)

type termGroup struct {
	kind   termKind
	weight int32
	term   AffinityTerm
	counts []int32 // by slot
	total  int
}

type termGroups struct {
	m map[string]*termGroup
}

func (g *termGroups) account(p *Placement, slot uint32, d int32, slots int) {
	a := p.Affinity
	add := func(kind termKind, w int32, t *AffinityTerm) {
		k := strconv.Itoa(int(kind)) + "|" + strconv.Itoa(int(w)) + "|" + t.key()
		tg := g.m[k]
		if tg == nil {
			if d < 0 {
				return
			}
			tg = &termGroup{kind: kind, weight: w, term: *t, counts: make([]int32, slots)}
			g.m[k] = tg
		}
		tg.counts[slot] += d
		tg.total += int(d)
		if tg.total == 0 {
			delete(g.m, k)
		}
	}
	for i := range a.Required {
		add(kindRequired, 0, &a.Required[i])
	}
	for i := range a.RequiredAnti {
		add(kindRequiredAnti, 0, &a.RequiredAnti[i])
	}
	for i := range a.Preferred {
		add(kindPreferred, a.Preferred[i].Weight, &a.Preferred[i].AffinityTerm)
	}
	for i := range a.PreferredAnti {
		add(kindPreferredAnti, a.PreferredAnti[i].Weight, &a.PreferredAnti[i].AffinityTerm)
	}
}

// domainIndex maps each slot to its value (domain) of one topology key.
type domainIndex struct {
	of     []int32  // by slot; -1: the node has no such label
	values []string // by domain id
}

// domains returns the index of key, building it from the label index.
func (e *engine) domains(key string) *domainIndex {
	if d := e.topo[key]; d != nil && len(d.of) == len(e.nodes) {
		return d
	}
	d := &domainIndex{of: make([]int32, len(e.nodes))}
	for i := range d.of {
		d.of[i] = -1
	}
	e.labels.Values(key, func(v string, p *label.Posting) bool {
		id := int32(len(d.values))
		d.values = append(d.values, v)
		if b := p.Bits(); b != nil {
			for s, ok := b.NextSet(0); ok; s, ok = b.NextSet(s + 1) {
				if int(s) < len(d.of) {
					d.of[s] = id
				}
			}
		} else {
			for _, s := range p.List() {
				if int(s) < len(d.of) {
					d.of[s] = id
				}
			}
		}
		return true
	})
	e.topo[key] = d
	return d
}
