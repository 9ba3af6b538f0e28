package placement

import (
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextant-mesh/sextant/internal/label"
)

// compileSelector converts a Kubernetes label selector; nil matches nothing.
func compileSelector(ls *metav1.LabelSelector, path string) (Selector, error) {
	if ls == nil {
		return Selector{Nothing: true}, nil
	}
	var reqs label.Selector
	for _, k := range slices.Sorted(maps.Keys(ls.MatchLabels)) {
		if msgs := content.IsLabelKey(k); len(msgs) > 0 {
			return Selector{}, fieldErr(join(join(path, "matchLabels"), k), "invalid label key: %s", msgs[0])
		}
		if msgs := content.IsLabelValue(ls.MatchLabels[k]); len(msgs) > 0 {
			return Selector{}, fieldErr(join(join(path, "matchLabels"), k), "invalid label value: %s", msgs[0])
		}
		reqs = append(reqs, label.Requirement{Key: k, Op: label.Equals, Values: []string{ls.MatchLabels[k]}})
	}
	for i, e := range ls.MatchExpressions {
		p := index(join(path, "matchExpressions"), i)
		if msgs := content.IsLabelKey(e.Key); len(msgs) > 0 {
			return Selector{}, fieldErr(join(p, "key"), "%s", msgs[0])
		}
		var op label.Op
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
			if len(e.Values) == 0 {
				return Selector{}, fieldErr(join(p, "values"), "must be specified when operator is In or NotIn")
			}
			op = label.In
			if e.Operator == metav1.LabelSelectorOpNotIn {
				op = label.NotIn
			}
		case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
			if len(e.Values) > 0 {
				return Selector{}, fieldErr(join(p, "values"), "may not be specified when operator is Exists or DoesNotExist")
			}
			op = label.Exists
			if e.Operator == metav1.LabelSelectorOpDoesNotExist {
				op = label.NotExists
			}
		default:
			return Selector{}, fieldErr(join(p, "operator"), "not a valid selector operator %q (want In, NotIn, Exists or DoesNotExist)", e.Operator)
		}
		for j, v := range e.Values {
			if msgs := content.IsLabelValue(v); len(msgs) > 0 {
				return Selector{}, fieldErr(index(join(p, "values"), j), "%s", msgs[0])
			}
		}
		reqs = append(reqs, label.Requirement{Key: e.Key, Op: op, Values: slices.Clone(e.Values)})
	}
	return Selector{Reqs: reqs}, nil
}

// mergeKeys adds matchLabelKeys (key in (pod's value)) and
// mismatchLabelKeys (key notin (pod's value)) as the API server does.
func mergeKeys(s *Selector, pod label.Labels, match, mismatch []string, path string) error {
	for i, k := range match {
		if msgs := content.IsLabelKey(k); len(msgs) > 0 {
			return fieldErr(index(join(path, "matchLabelKeys"), i), "%s", msgs[0])
		}
		if v, ok := pod.Get(k); ok && !s.Nothing {
			s.Reqs = append(s.Reqs, label.Requirement{Key: k, Op: label.In, Values: []string{v}})
		}
	}
	for i, k := range mismatch {
		if msgs := content.IsLabelKey(k); len(msgs) > 0 {
			return fieldErr(index(join(path, "mismatchLabelKeys"), i), "%s", msgs[0])
		}
		if v, ok := pod.Get(k); ok && !s.Nothing {
			s.Reqs = append(s.Reqs, label.Requirement{Key: k, Op: label.NotIn, Values: []string{v}})
		}
	}
	return nil
}

func (w *Workload) compileTerm(t *corev1.PodAffinityTerm, path string) (AffinityTerm, error) {
	var out AffinityTerm
	sel, err := compileSelector(t.LabelSelector, join(path, "labelSelector"))
	if err != nil {
		return out, err
	}
	if err := mergeKeys(&sel, w.Labels, t.MatchLabelKeys, t.MismatchLabelKeys, path); err != nil {
		return out, err
	}
	out.Selector = sel
	if t.TopologyKey == "" {
		return out, fieldErr(join(path, "topologyKey"), "can not be empty")
	}
	if msgs := content.IsLabelKey(t.TopologyKey); len(msgs) > 0 {
		return out, fieldErr(join(path, "topologyKey"), "%s", msgs[0])
	}
	out.TopologyKey = t.TopologyKey
	for i, ns := range t.Namespaces {
		if msgs := content.IsDNS1123Label(ns); len(msgs) > 0 {
			return out, fieldErr(index(join(path, "namespaces"), i), "%s", msgs[0])
		}
	}
	if t.NamespaceSelector != nil {
		s, err := compileSelector(t.NamespaceSelector, join(path, "namespaceSelector"))
		if err != nil {
			return out, err
		}
		out.NamespaceSelector = &s
	}
	if len(t.Namespaces) == 0 && t.NamespaceSelector == nil {
		out.Namespaces = []string{w.Namespace}
	} else if len(t.Namespaces) > 0 {
		out.Namespaces = slices.Compact(slices.Sorted(slices.Values(t.Namespaces)))
	}
	return out, nil
}

func (w *Workload) compilePodAffinity(p *corev1.Pod, a *corev1.Affinity, path string) error {
	pa := &PodAffinity{}
	type side struct {
		req  []corev1.PodAffinityTerm
		pref []corev1.WeightedPodAffinityTerm
		out  *[]AffinityTerm
		wout *[]WeightedTerm
		path string
	}
	var sides []side
	if a.PodAffinity != nil {
		sides = append(sides, side{a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, &pa.Required, &pa.Preferred, join(path, "podAffinity")})
	}
	if a.PodAntiAffinity != nil {
		sides = append(sides, side{a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, &pa.RequiredAnti, &pa.PreferredAnti, join(path, "podAntiAffinity")})
	}
	for _, s := range sides {
		for i := range s.req {
			t, err := w.compileTerm(&s.req[i], index(join(s.path, "requiredDuringSchedulingIgnoredDuringExecution"), i))
			if err != nil {
				return err
			}
			*s.out = append(*s.out, t)
		}
		for i := range s.pref {
			pp := index(join(s.path, "preferredDuringSchedulingIgnoredDuringExecution"), i)
			if wt := s.pref[i].Weight; wt < 1 || wt > 100 {
				return fieldErr(join(pp, "weight"), "must be in the range 1-100, got %d", wt)
			}
			t, err := w.compileTerm(&s.pref[i].PodAffinityTerm, join(pp, "podAffinityTerm"))
			if err != nil {
				return err
			}
			*s.wout = append(*s.wout, WeightedTerm{Weight: s.pref[i].Weight, AffinityTerm: t})
		}
	}
	if !pa.empty() {
		w.Affinity = pa
	}
	return nil
}

func (w *Workload) compileTolerations(ts []corev1.Toleration, path string) error {
	for i, t := range ts {
		p := index(path, i)
		if t.Key != "" {
			if msgs := content.IsLabelKey(t.Key); len(msgs) > 0 {
				return fieldErr(join(p, "key"), "%s", msgs[0])
			}
		}
		switch t.Operator {
		case corev1.TolerationOpExists:
			if t.Value != "" {
				return fieldErr(join(p, "value"), "value must be empty when operator is Exists")
			}
		case "", corev1.TolerationOpEqual:
			if t.Key == "" {
				return fieldErr(join(p, "operator"), "operator must be Exists when key is empty")
			}
			if msgs := content.IsLabelValue(t.Value); len(msgs) > 0 {
				return fieldErr(join(p, "value"), "%s", msgs[0])
			}
		case corev1.TolerationOpLt, corev1.TolerationOpGt:
			return notSupported(join(p, "operator"))
		default:
			return fieldErr(join(p, "operator"), "not a valid toleration operator %q (want Equal or Exists)", t.Operator)
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return fieldErr(join(p, "effect"), "must be NoSchedule, PreferNoSchedule or NoExecute, got %q", t.Effect)
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			return fieldErr(join(p, "effect"), "effect must be 'NoExecute' when `tolerationSeconds` is set")
		}
	}
	w.tolerations = ts
	w.tolerateUnsch = tolerates(ts, &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	return nil
}

// tolerates is kube-scheduler's TolerationsTolerateTaint with the
// comparison operators off (the default profile).
func tolerates(ts []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range ts {
		if ts[i].ToleratesTaint(discard, taint, false) {
			return true
		}
	}
	return false
}

func (w *Workload) compileSpread(p *corev1.Pod, path string) error {
	seen := map[[2]string]bool{}
	for i := range p.Spec.TopologySpreadConstraints {
		c := &p.Spec.TopologySpreadConstraints[i]
		cp := index(path, i)
		if c.MaxSkew <= 0 {
			return fieldErr(join(cp, "maxSkew"), "must be greater than zero, got %d", c.MaxSkew)
		}
		if c.TopologyKey == "" {
			return fieldErr(join(cp, "topologyKey"), "can not be empty")
		}
		if msgs := content.IsLabelKey(c.TopologyKey); len(msgs) > 0 {
			return fieldErr(join(cp, "topologyKey"), "%s", msgs[0])
		}
		sc := spreadConstraint{maxSkew: c.MaxSkew, topologyKey: c.TopologyKey, honorAffinity: true}
		switch c.WhenUnsatisfiable {
		case corev1.DoNotSchedule:
			sc.hard = true
		case corev1.ScheduleAnyway:
		default:
			return fieldErr(join(cp, "whenUnsatisfiable"), "must be DoNotSchedule or ScheduleAnyway, got %q", c.WhenUnsatisfiable)
		}
		k := [2]string{c.TopologyKey, string(c.WhenUnsatisfiable)}
		if seen[k] {
			return fieldErr(cp, "duplicate constraint for topologyKey %q and whenUnsatisfiable %q", k[0], k[1])
		}
		seen[k] = true
		if c.MinDomains != nil {
			if *c.MinDomains <= 0 {
				return fieldErr(join(cp, "minDomains"), "must be greater than zero, got %d", *c.MinDomains)
			}
			if !sc.hard {
				return fieldErr(join(cp, "minDomains"), "can only use minDomains if whenUnsatisfiable=DoNotSchedule")
			}
			sc.minDomains = *c.MinDomains
		}
		for _, pol := range []struct {
			v     *corev1.NodeInclusionPolicy
			name  string
			honor *bool
		}{{c.NodeAffinityPolicy, "nodeAffinityPolicy", &sc.honorAffinity}, {c.NodeTaintsPolicy, "nodeTaintsPolicy", &sc.honorTaints}} {
			if pol.v == nil {
				continue
			}
			switch *pol.v {
			case corev1.NodeInclusionPolicyHonor:
				*pol.honor = true
			case corev1.NodeInclusionPolicyIgnore:
				*pol.honor = false
			default:
				return fieldErr(join(cp, pol.name), "must be Honor or Ignore, got %q", *pol.v)
			}
		}
		sel, err := compileSelector(c.LabelSelector, join(cp, "labelSelector"))
		if err != nil {
			return err
		}
		if err := mergeKeys(&sel, w.Labels, c.MatchLabelKeys, nil, cp); err != nil {
			return err
		}
		sc.selector = sel
		w.spread = append(w.spread, sc)
	}
	return nil
}

// matchNumeric is Gt/Lt on a label value, false when it is not an integer.
func (r numReq) match(v string) bool {
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return false
	}
	if r.gt {
		return x > r.v
	}
	return x < r.v
}
