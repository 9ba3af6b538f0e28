package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// delegateRoot routes /reviews (with a root header set and a timeout) to
// the delegate reviews-routes in namespace team, and the rest to orders.
const delegateRoot = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: root}
spec:
  hosts: [shop]
  http:
  - name: reviews
    match: [{uri: {prefix: /reviews}}]
    timeout: 3s
    headers: {request: {set: {x-root: "1"}}}
    delegate: {name: reviews-routes, namespace: team}
  - route: [{destination: {host: orders}}]
`

const delegateLeaf = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-routes, namespace: team}
spec:
  http:
  - name: v2
    match: [{uri: {prefix: /reviews/v2}, headers: {end-user: {exact: jason}}}]
    route: [{destination: {host: reviews, subset: v2}}]
  - name: bad
    match: [{uri: {prefix: /ratings}}]
    route: [{destination: {host: reviews, subset: v3}}]
  - name: rest
    timeout: 1s
    route: [{destination: {host: reviews, subset: v1}}]
`

// TestMergeDelegates: Istio's merge. The delegate's routes replace the
// root's delegate route in place, each match merged with the root's
// (uri from the delegate, headers from both), a route whose match is not
// within the root's left out, the root's timeout and headers inherited
// where the delegate sets none, names joined, short hosts read in the
// delegate's namespace.
func TestMergeDelegates(t *testing.T) {
	root, leaf := mustDecode(t, delegateRoot), mustDecode(t, delegateLeaf)
	get := func(k Key) *Object {
		if k == leaf.Key {
			return leaf
		}
		return nil
	}
	m, notes := MergeDelegates(root, get)
	if len(notes) != 1 || !strings.Contains(notes[0], "route 1: its matches are not within the root route's") {
		t.Errorf("notes: %q", notes)
	}
	h := m.VirtualService.Http
	if len(h) != 3 {
		t.Fatalf("%d routes, want 3: %v", len(h), h)
	}
	if h[0].Name != "reviews-v2" || h[0].Match[0].Uri.GetPrefix() != "/reviews/v2" || h[0].Match[0].Headers["end-user"].GetExact() != "jason" ||
		h[0].Timeout.AsDuration().Seconds() != 3 || h[0].Headers.GetRequest().GetSet()["x-root"] != "1" {
		t.Errorf("first: %v", h[0])
	}
	if d := h[0].Route[0].Destination; d.Host != "reviews.team" || d.Subset != "v2" {
		t.Errorf("destination %v: want reviews.team v2", d)
	}
	if h[1].Name != "reviews-rest" || h[1].Match[0].Uri.GetPrefix() != "/reviews" || h[1].Timeout.AsDuration().Seconds() != 1 {
		t.Errorf("second: %v", h[1])
	}
	if h[2].Delegate != nil || h[2].Route[0].Destination.Host != "orders" {
		t.Errorf("third: %v", h[2])
	}
	if root.VirtualService.Http[0].Delegate == nil || len(root.VirtualService.Http) != 2 || leaf.VirtualService.Http[0].Route[0].Destination.Host != "reviews" {
		t.Error("MergeDelegates changed its inputs")
	}
	// Without the delegate, the route is left out and said so.
	m, notes = MergeDelegates(root, func(Key) *Object { return nil })
	if len(m.VirtualService.Http) != 1 || len(notes) != 1 || !strings.Contains(notes[0], "VirtualService/team/reviews-routes does not exist") {
		t.Errorf("absent delegate: %v %q", m.VirtualService.Http, notes)
	}
	// One with hosts is no delegate.
	m, notes = MergeDelegates(root, func(Key) *Object { return root })
	if len(m.VirtualService.Http) != 1 || len(notes) != 1 || !strings.Contains(notes[0], "is no delegate") {
		t.Errorf("delegate with hosts: %q", notes)
	}
}

// TestStringMatchConflict: Istio's subset rules for one field.
func TestStringMatchConflict(t *testing.T) {
	exact := func(s string) *networking.StringMatch {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: s}}
	}
	prefix := func(s string) *networking.StringMatch {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: s}}
	}
	regex := func(s string) *networking.StringMatch {
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: s}}
	}
	for _, tc := range []struct {
		name       string
		root, leaf *networking.StringMatch
		conflict   bool
	}{
		{"either unset", nil, exact("/a"), false},
		{"leaf unset", prefix("/a"), nil, false},
		{"same exact", exact("/a"), exact("/a"), false},
		{"other exact", exact("/a"), exact("/b"), true},
		{"exact root, prefix leaf", exact("/a"), prefix("/a"), true},
		{"prefix within", prefix("/a"), prefix("/a/b"), false},
		{"prefix wider", prefix("/a/b"), prefix("/a"), true},
		{"exact within prefix", prefix("/a"), exact("/a/c"), false},
		{"exact outside prefix", prefix("/a"), exact("/b"), true},
		{"regex root", regex(".*"), exact("/a"), true},
		{"regex leaf", prefix("/"), regex(".*"), true},
	} {
		if got := stringMatchConflict(tc.root, tc.leaf); got != tc.conflict {
			t.Errorf("%s: conflict %v, want %v", tc.name, got, tc.conflict)
		}
	}
}

// TestDelegateValidation: what Istio refuses of delegates and roots.
func TestDelegateValidation(t *testing.T) {
	head := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: d}\nspec:\n"
	for _, tc := range []struct{ name, in, path, msg string }{
		{"delegate with gateways", head + "  gateways: [gw]\n  http: [{route: [{destination: {host: orders}}]}]\n", "spec.gateways", "no gateways"},
		{"delegate delegating", head + "  http: [{delegate: {name: x}}]\n", "spec.http[0].delegate", "cannot delegate further"},
		{"delegate with tcp", head + "  tcp: [{route: [{destination: {host: orders}}]}]\n", "spec.tcp", "HTTP routes only"},
		{"bad name", head + "  hosts: [orders]\n  http: [{delegate: {name: X_1}}]\n", "spec.http[0].delegate.name", "want the name"},
		{"redirect beside", head + "  hosts: [orders]\n  http: [{delegate: {name: x}, redirect: {uri: /a}}]\n", "spec.http[0].delegate", "may not be set with redirect"},
	} {
		_, err := Decode([]byte(tc.in))
		var list Errors
		if !errors.As(err, &list) || !slices.ContainsFunc(list, func(e *FieldError) bool {
			return e.Path == tc.path && strings.Contains(e.Msg, tc.msg) && errors.Is(e, ErrInvalid)
		}) {
			t.Errorf("%s: %v, want %s: ...%s", tc.name, err, tc.path, tc.msg)
		}
	}
	// A root and its delegate decode.
	if _, err := Decode([]byte(delegateRoot + "---\n" + delegateLeaf)); err != nil {
		t.Fatal(err)
	}
}

// TestIndexDelegates: the index serves a root's merged routes and
// recomputes the root's hosts when its delegate comes, changes and goes.
func TestIndexDelegates(t *testing.T) {
	ix := NewIndex()
	root, leaf := mustDecode(t, delegateRoot), mustDecode(t, delegateLeaf)
	shop := naming.ServiceKey{Namespace: "default", Name: "shop"}
	reviews := naming.ServiceKey{Namespace: "team", Name: "reviews"}
	ix.Put(root)
	if n := len(ix.VirtualService(shop).VirtualService.Http); n != 1 {
		t.Fatalf("without its delegate: %d routes, want 1", n)
	}
	if w := ix.Warnings(root); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "does not exist") }) {
		t.Errorf("warnings: %q", w)
	}
	if touched := ix.Put(leaf); !slices.Contains(touched, shop) || !slices.Contains(touched, reviews) {
		t.Errorf("putting the delegate touched %v, want shop and reviews", touched)
	}
	if n := len(ix.VirtualService(shop).VirtualService.Http); n != 3 {
		t.Fatalf("with its delegate: %d routes, want 3", n)
	}
	if got := ix.DestinationsOf(reviews); len(got) != 2 || got[0].Subset != "v1" || got[1].Subset != "v2" {
		t.Errorf("destinations of reviews: %v", got)
	}
	if got := ix.RoutesTo(reviews); !slices.Equal(got, []naming.ServiceKey{shop}) {
		t.Errorf("routes to reviews: %v", got)
	}
	if touched := ix.Delete(leaf.Key); !slices.Contains(touched, shop) {
		t.Errorf("deleting the delegate touched %v", touched)
	}
	if n := len(ix.VirtualService(shop).VirtualService.Http); n != 1 || len(ix.DestinationsOf(reviews)) != 0 {
		t.Fatalf("after the delegate left: %d routes, destinations %v", n, ix.DestinationsOf(reviews))
	}
	if ix.Get(root.Key) != root {
		t.Error("Get does not return the object put")
	}
}
