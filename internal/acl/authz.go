package acl

import (
	"strings"
)

// grants is the union of a token's policies, compiled for the check.
type grants struct {
	admin    bool
	all      [numResources]Access            // rules for "*"
	exact    map[string][numResources]Access // rules for one namespace
	prefixes []prefixGrant                   // rules for "prefix*"
}

type prefixGrant struct {
	prefix string
	g      [numResources]Access
}

func (g *grants) add(p *Policy) {
	if p.Admin {
		g.admin = true
	}
	for _, r := range p.Rules {
		switch name, isPrefix := strings.CutSuffix(r.Namespace, "*"); {
		case r.Namespace == "*":
			g.all = maxGrants(g.all, r.Grants)
		case isPrefix:
			for i := range g.prefixes {
				if g.prefixes[i].prefix == name {
					g.prefixes[i].g = maxGrants(g.prefixes[i].g, r.Grants)
					goto next
				}
			}
			g.prefixes = append(g.prefixes, prefixGrant{prefix: name, g: r.Grants})
		default:
			if g.exact == nil {
				g.exact = make(map[string][numResources]Access)
			}
			g.exact[r.Namespace] = maxGrants(g.exact[r.Namespace], r.Grants)
		}
	next:
	}
}

func maxGrants(a, b [numResources]Access) [numResources]Access {
	for i := range a {
		a[i] = max(a[i], b[i])
	}
	return a
}

// allows reports whether g holds p.
func (g *grants) allows(p Permission) bool {
	if g.admin {
		return true
	}
	if p.Resource == ACL || int(p.Resource) >= numResources {
		return false
	}
	need := max(p.Access, Read)
	if g.all[p.Resource] >= need {
		return true
	}
	if p.Namespace == "" {
		return false
	}
	if a, ok := g.exact[p.Namespace]; ok && a[p.Resource] >= need {
		return true
	}
	for i := range g.prefixes {
		if g.prefixes[i].g[p.Resource] >= need && strings.HasPrefix(p.Namespace, g.prefixes[i].prefix) {
			return true
		}
	}
	return false
}

// any reports whether g holds acc on res in at least one namespace.
func (g *grants) any(res Resource, acc Access) bool {
	if g.admin || g.all[res] >= acc {
		return true
	}
	for _, a := range g.exact {
		if a[res] >= acc {
			return true
		}
	}
	for _, pg := range g.prefixes {
		if pg.g[res] >= acc {
			return true
		}
	}
	return false
}

// principal is a token as the check sees it.
type principal struct {
	token  *Token
	grants grants
}

// snapshot is the compiled state of every token and policy, rebuilt on
// every change of either and swapped in whole.
type snapshot struct {
	tokens   map[string]*principal // by accessor
	policies map[string]*Policy    // by name, the built-in included
}

var builtinAdmin = &Policy{Name: BuiltinAdmin, Description: "Grants everything, tokens and policies included.", Admin: true, Builtin: true}

func buildSnapshot(tokens map[string]*Token, policies map[string]*Policy) *snapshot {
	s := &snapshot{tokens: make(map[string]*principal, len(tokens)), policies: make(map[string]*Policy, len(policies)+1)}
	for k, p := range policies {
		s.policies[k] = p
	}
	s.policies[BuiltinAdmin] = builtinAdmin
	for acc, t := range tokens {
		pr := &principal{token: t}
		for _, name := range t.Policies {
			if p := s.policies[name]; p != nil {
				pr.grants.add(p)
			}
			// A link to a deleted policy grants nothing; a policy created
			// again under the name grants again (links are by name).
		}
		s.tokens[acc] = pr
	}
	return s
}
