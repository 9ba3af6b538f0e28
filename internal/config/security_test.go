package config

import (
	"errors"
	"os"
	"strings"
	"testing"

	security "istio.io/api/security/v1beta1"

	"github.com/sextant-mesh/sextant/internal/label"
)

func TestDecodeSecurity(t *testing.T) {
	data, err := os.ReadFile("testdata/security.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 5 {
		t.Fatalf("got %d objects, want 5", len(objs))
	}
	for _, o := range objs {
		if !IsSecurity(o.Kind) {
			t.Errorf("%s is not a security kind", o.Key)
		}
		enc := string(o.Encode())
		if !strings.HasPrefix(enc, `{"apiVersion":"security.istio.io/v1",`) {
			t.Errorf("%s encodes as %s", o.Key, enc)
		}
		back, err := DecodeRecord([]byte(enc))
		if err != nil || string(back.Encode()) != enc {
			t.Errorf("%s: round trip: %v", o.Key, err)
		}
		if k, err := ParseKey(o.Key.String()); err != nil || k != o.Key {
			t.Errorf("ParseKey(%s): %v %v", o.Key, k, err)
		}
	}
	ap := objs[3].AuthorizationPolicy
	if got := ap.Rules[0].When[0].Values; len(got) != 2 || got[1] != "globex*" {
		t.Errorf("when values %v", got)
	}
}

// TestDecodeSecurityErrors: every problem names its field; what no data
// plane of Sextant's can enforce is refused as not supported, never
// ignored.
func TestDecodeSecurityErrors(t *testing.T) {
	const ap = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: orders}\nspec:\n"
	const pa = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: orders}\nspec:\n"
	const ra = "apiVersion: security.istio.io/v1beta1\nkind: RequestAuthentication\nmetadata: {name: p, namespace: orders}\nspec:\n"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"unknown field", ap + "  rules: [{from: [{source: {principalz: [x]}}]}]\n", "spec.rules[0].from[0].source.principalz", ErrUnknownField, `did you mean "principals"`},
		{"unknown top field", ap + "  actions: DENY\n", "spec.actions", ErrUnknownField, `did you mean "action"`},
		{"request principals", ap + "  rules: [{from: [{source: {requestPrincipals: ['a*b*']}}]}]\n", "spec.rules[0].from[0].source.requestPrincipals[0]", ErrInvalid, "may only start or end"},
		{"targetRef", ap + "  targetRef: {kind: Gateway, name: gw}\n", "spec.targetRef", ErrNotSupported, "not supported"},
		{"custom", ap + "  action: CUSTOM\n", "spec.action", ErrNotSupported, "CUSTOM"},
		{"bad action", ap + "  action: PERMIT\n", "spec.action", ErrInvalid, "ALLOW, DENY, AUDIT"},
		{"jwt condition", ap + "  rules: [{when: [{key: 'request.auth.claims[]', values: [x]}]}]\n", "spec.rules[0].when[0].key", ErrInvalid, "request.auth.claims[NAME]"},
		{"sni condition", ap + "  rules: [{when: [{key: connection.sni, values: [x]}]}]\n", "spec.rules[0].when[0].key", ErrNotSupported, "request.auth.claims[NAME]"},
		{"grpc header", ap + "  rules: [{when: [{key: 'request.headers[grpc-timeout]', values: [x]}]}]\n", "spec.rules[0].when[0].key", ErrInvalid, "grpc-"},
		{"condition without values", ap + "  rules: [{when: [{key: source.ip}]}]\n", "spec.rules[0].when[0]", ErrInvalid, "values or notValues"},
		{"bad ip", ap + "  rules: [{from: [{source: {ipBlocks: [10.0.0.0/33]}}]}]\n", "spec.rules[0].from[0].source.ipBlocks[0]", ErrInvalid, "CIDR"},
		{"bad port", ap + "  rules: [{to: [{operation: {ports: [http]}}]}]\n", "spec.rules[0].to[0].operation.ports[0]", ErrInvalid, "1..65535"},
		{"path template", ap + "  rules: [{to: [{operation: {paths: ['/a/{*}']}}]}]\n", "spec.rules[0].to[0].operation.paths[0]", ErrNotSupported, "templates"},
		{"relative path", ap + "  rules: [{to: [{operation: {paths: [orders.Orders/Get]}}]}]\n", "spec.rules[0].to[0].operation.paths[0]", ErrInvalid, "starts with /"},
		{"inner wildcard", ap + "  rules: [{from: [{source: {principals: ['cluster.local/*/sa/x']}}]}]\n", "spec.rules[0].from[0].source.principals[0]", ErrInvalid, "may only start or end"},
		{"empty source", ap + "  rules: [{from: [{source: {}}]}]\n", "spec.rules[0].from[0].source", ErrInvalid, "at least one"},
		{"missing operation", ap + "  rules: [{to: [{}]}]\n", "spec.rules[0].to[0].operation", ErrInvalid, "required"},
		{"bad selector", ap + "  selector: {matchLabels: {'a b': x}}\n", "spec.selector.matchLabels[a b]", ErrInvalid, "label key"},
		{"bad mode", pa + "  mtls: {mode: STRICTER}\n", "spec.mtls.mode", ErrInvalid, "STRICT"},
		{"port level without selector", pa + "  portLevelMtls: {8080: {mode: STRICT}}\n", "spec.portLevelMtls", ErrInvalid, "needs a selector"},
		{"port key", pa + "  selector: {matchLabels: {app: a}}\n  portLevelMtls: {http: {mode: STRICT}}\n", "spec.portLevelMtls[http]", ErrInvalid, "number"},
		{"port zero", pa + "  selector: {matchLabels: {app: a}}\n  portLevelMtls: {0: {mode: STRICT}}\n", "spec.portLevelMtls[0]", ErrInvalid, "1..65535"},
		{"wrong group", "apiVersion: networking.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec: {}\n", "apiVersion", ErrInvalid, "security.istio.io/v1"},
		{"v1alpha3", "apiVersion: security.istio.io/v1alpha3\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec: {}\n", "apiVersion", ErrInvalid, "v1beta1 is read as v1"},
		{"ra targetRef", ra + "  targetRef: {kind: Gateway, name: gw}\n", "spec.targetRef", ErrNotSupported, "selector.matchLabels"},
		{"ra no issuer", ra + "  jwtRules: [{jwksUri: 'https://x/k'}]\n", "spec.jwtRules[0].issuer", ErrInvalid, "required"},
		{"ra no keys", ra + "  jwtRules: [{issuer: a}]\n", "spec.jwtRules[0].jwksUri", ErrInvalid, "jwksUri or jwks"},
		{"ra both keys", ra + "  jwtRules: [{issuer: a, jwksUri: 'https://x/k', jwks: '{}'}]\n", "spec.jwtRules[0].jwks", ErrInvalid, "only one"},
		{"ra bad uri", ra + "  jwtRules: [{issuer: a, jwksUri: 'ftp://x/k'}]\n", "spec.jwtRules[0].jwksUri", ErrInvalid, "http://"},
		{"ra bad jwks", ra + "  jwtRules: [{issuer: a, jwks: '{\"keys\": []}'}]\n", "spec.jwtRules[0].jwks", ErrInvalid, "no usable public signing key"},
		{"ra dup issuer", ra + "  jwtRules: [{issuer: a, jwksUri: 'https://x/k'}, {issuer: a, jwksUri: 'https://x/k'}]\n", "spec.jwtRules[1].issuer", ErrInvalid, "jwtRules[0]"},
		{"ra bad header", ra + "  jwtRules: [{issuer: a, jwksUri: 'https://x/k', fromHeaders: [{name: 'x y'}]}]\n", "spec.jwtRules[0].fromHeaders[0].name", ErrInvalid, "header name"},
		{"ra bad claim header", ra + "  jwtRules: [{issuer: a, jwksUri: 'https://x/k', outputClaimToHeaders: [{header: x-sub}]}]\n", "spec.jwtRules[0].outputClaimToHeaders[0].claim", ErrInvalid, "required"},
		{"ra timeout", ra + "  jwtRules: [{issuer: a, jwksUri: 'https://x/k', timeout: 2m}]\n", "spec.jwtRules[0].timeout", ErrInvalid, "at most 1m"},
		{"ra space delimited", ra + "  jwtRules: [{issuer: a, jwksUri: 'https://x/k', spaceDelimitedClaims: [scope]}]\n", "spec.jwtRules[0].spaceDelimitedClaims", ErrNotSupported, "lists of strings"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.yaml))
			var list Errors
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("got %v, want field errors", err)
			}
			for _, fe := range list {
				if fe.Path == c.path && errors.Is(fe, c.err) && strings.Contains(fe.Msg, c.msg) {
					return
				}
			}
			t.Fatalf("got %v; want path %q (%v) containing %q", err, c.path, c.err, c.msg)
		})
	}
}

func TestSecurityResolution(t *testing.T) {
	data, _ := os.ReadFile("testdata/security.yaml")
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSecurity("", objs)
	orders := label.FromMap(map[string]string{"app": "orders"})
	for _, c := range []struct {
		w    Workload
		want security.PeerAuthentication_MutualTLS_Mode
	}{
		{Workload{Namespace: "web", Port: 8080}, security.PeerAuthentication_MutualTLS_STRICT},                     // the mesh's
		{Workload{Namespace: "legacy", Port: 8080}, security.PeerAuthentication_MutualTLS_PERMISSIVE},              // its namespace's
		{Workload{Namespace: "orders", Labels: orders, Port: 8080}, security.PeerAuthentication_MutualTLS_STRICT},  // UNSET inherits the mesh's
		{Workload{Namespace: "orders", Labels: orders, Port: 9090}, security.PeerAuthentication_MutualTLS_DISABLE}, // its port's
		{Workload{Namespace: "orders", Port: 9090}, security.PeerAuthentication_MutualTLS_STRICT},                  // not selected
	} {
		if got := s.MTLSMode(c.w); got != c.want {
			t.Errorf("%+v: %s, want %s", c.w, got, c.want)
		}
	}
	if got := NewSecurity("", nil).MTLSMode(Workload{Namespace: "a"}); got != security.PeerAuthentication_MutualTLS_PERMISSIVE {
		t.Errorf("no policy: %s, want PERMISSIVE (Istio's default)", got)
	}
	names := func(os []*Object) (out []string) {
		for _, o := range os {
			out = append(out, o.Name)
		}
		return out
	}
	if got := names(s.Authorization(Workload{Namespace: "orders", Labels: orders})); strings.Join(got, ",") != "no-admin,orders" {
		t.Errorf("orders workload: %v", got)
	}
	if got := names(s.Authorization(Workload{Namespace: "orders"})); strings.Join(got, ",") != "no-admin" {
		t.Errorf("another orders workload: %v", got)
	}
	if got := names(s.Authorization(Workload{Namespace: "web", Labels: orders})); len(got) != 0 {
		t.Errorf("a web workload: %v", got)
	}
	// A root namespace policy with a selector selects in every namespace.
	root := &Object{Key: Key{KindAuthorizationPolicy, "mesh", "all"}, AuthorizationPolicy: &security.AuthorizationPolicy{}}
	if got := names(NewSecurity("mesh", []*Object{root}).Authorization(Workload{Namespace: "web"})); len(got) != 1 {
		t.Errorf("root namespace policy: %v", got)
	}
}
