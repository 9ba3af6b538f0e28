package gateway

import (
	"fmt"

	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// RBAC's metadata matchers: the gateway's only dynamic metadata is the JWT
// filter's (jwtauthn.go), a verified token's payload, which Istio's
// request principals and request.auth.* conditions match. A matcher on
// another filter's metadata is refused: nothing would ever set it.

type matchMetadata struct {
	key    string   // the payload_in_metadata key: the path's first segment
	path   []string // below it, into the payload
	value  valueMatch
	invert bool
}

// valueMatch is a compiled ValueMatcher.
type valueMatch struct {
	kind    uint8
	str     headerMatch  // valString
	boolean bool         // valBool
	inner   []valueMatch // valList (one: one_of), valOr
	present bool         // valPresent
}

const (
	valString = iota
	valBool
	valPresent
	valList
	valOr
	valNull
)

const maxValueDepth = 8

func compileMetadata(m *matcher.MetadataMatcher, path string) (rbacMatcher, error) {
	if m.GetFilter() != jwtFilterName {
		return nil, fieldErr(path, "not supported by the gateway for filter %q (its only dynamic metadata is %s's: a verified token's payload)", m.GetFilter(), jwtFilterName)
	}
	if len(m.GetPath()) == 0 {
		return nil, fieldErr(path+".path", "empty")
	}
	out := &matchMetadata{invert: m.GetInvert()}
	for i, seg := range m.GetPath() {
		k := seg.GetKey()
		if k == "" {
			return nil, fieldErr(fmt.Sprintf("%s.path[%d].key", path, i), "required")
		}
		if i == 0 {
			out.key = k
		} else {
			out.path = append(out.path, k)
		}
	}
	if m.GetValue() == nil {
		return nil, fieldErr(path+".value", "required")
	}
	v, err := compileValue(m.GetValue(), path+".value", 0)
	out.value = v
	return out, err
}

func compileValue(v *matcher.ValueMatcher, path string, depth int) (valueMatch, error) {
	if depth > maxValueDepth {
		return valueMatch{}, fieldErr(path, "nested deeper than %d", maxValueDepth)
	}
	switch p := v.GetMatchPattern().(type) {
	case *matcher.ValueMatcher_StringMatch:
		sm, err := decodeStringMatcher(p.StringMatch, path+".string_match")
		return valueMatch{kind: valString, str: sm}, err
	case *matcher.ValueMatcher_BoolMatch:
		return valueMatch{kind: valBool, boolean: p.BoolMatch}, nil
	case *matcher.ValueMatcher_PresentMatch:
		return valueMatch{kind: valPresent, present: p.PresentMatch}, nil
	case *matcher.ValueMatcher_NullMatch_:
		return valueMatch{kind: valNull}, nil
	case *matcher.ValueMatcher_ListMatch:
		one := p.ListMatch.GetOneOf()
		if one == nil {
			return valueMatch{}, fieldErr(path+".list_match.one_of", "required")
		}
		in, err := compileValue(one, path+".list_match.one_of", depth+1)
		return valueMatch{kind: valList, inner: []valueMatch{in}}, err
	case *matcher.ValueMatcher_OrMatch:
		out := valueMatch{kind: valOr}
		for i, c := range p.OrMatch.GetValueMatchers() {
			in, err := compileValue(c, fmt.Sprintf("%s.or_match.value_matchers[%d]", path, i), depth+1)
			if err != nil {
				return out, err
			}
			out.inner = append(out.inner, in)
		}
		if len(out.inner) < 2 {
			return out, fieldErr(path+".or_match.value_matchers", "want at least 2")
		}
		return out, nil
	case nil:
		return valueMatch{}, fieldErr(path+".match_pattern", "required")
	default:
		return valueMatch{}, fieldErr(path, "%T: %v by the gateway", p, errUnsupported)
	}
}

func (m *matchMetadata) match(r *rbacReq) bool {
	if r.rp != nil {
		return r.rp.miss("JWT claims (not kept)")
	}
	var v any
	found := false
	if r.jwtPayload != nil && r.jwtKey == m.key {
		v, found = r.jwtPayload, true
		for _, k := range m.path {
			obj, ok := v.(map[string]any)
			if !ok {
				found = false
				break
			}
			if v, ok = obj[k]; !ok {
				found = false
				break
			}
		}
	}
	return m.value.match(v, found) != m.invert
}

// match: Envoy's ValueMatcher over a JSON value (found: present at all).
func (vm *valueMatch) match(v any, found bool) bool {
	switch vm.kind {
	case valPresent:
		return found == vm.present
	case valNull:
		return found && v == nil
	case valString:
		s, ok := v.(string)
		return found && ok && matchStr(&vm.str, s)
	case valBool:
		b, ok := v.(bool)
		return found && ok && b == vm.boolean
	case valList:
		l, ok := v.([]any)
		if !found || !ok {
			return false
		}
		for _, e := range l {
			if vm.inner[0].match(e, true) {
				return true
			}
		}
		return false
	default: // valOr
		for i := range vm.inner {
			if vm.inner[i].match(v, found) {
				return true
			}
		}
		return false
	}
}
