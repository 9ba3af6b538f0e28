package config

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

func TestDecodeSidecar(t *testing.T) {
	data, err := os.ReadFile("testdata/sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 {
		t.Fatalf("got %d objects, want 3", len(objs))
	}
	for _, o := range objs {
		enc := string(o.Encode())
		if !strings.HasPrefix(enc, `{"apiVersion":"networking.istio.io/v1","kind":"Sidecar",`) {
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
}

// TestDecodeSidecarErrors: every problem names its field; what Sextant
// cannot do is refused by name, with why.
func TestDecodeSidecarErrors(t *testing.T) {
	const sc = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: shop}\nspec:\n"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"unknown field", sc + "  egress: [{hostz: ['./*']}]\n", "spec.egress[0].hostz", ErrUnknownField, `did you mean "hosts"`},
		{"ingress", sc + "  ingress: [{port: {number: 80}, defaultEndpoint: '127.0.0.1:8080'}]\n  egress: [{hosts: ['./*']}]\n", "spec.ingress", ErrNotSupported, "inbound listener"},
		{"inbound pool", sc + "  inboundConnectionPool: {http: {http1MaxPendingRequests: 1}}\n  egress: [{hosts: ['./*']}]\n", "spec.inboundConnectionPool", ErrNotSupported, "not supported"},
		{"bind", sc + "  egress: [{bind: 127.0.0.1, hosts: ['./*']}]\n", "spec.egress[0].bind", ErrNotSupported, "one proxy listener"},
		{"captureMode", sc + "  egress: [{captureMode: NONE, hosts: ['./*']}]\n", "spec.egress[0].captureMode", ErrNotSupported, "sextant sidecar capture"},
		{"egressProxy", sc + "  outboundTrafficPolicy: {mode: ALLOW_ANY, egressProxy: {host: egress}}\n  egress: [{hosts: ['./*']}]\n", "spec.outboundTrafficPolicy.egressProxy", ErrNotSupported, "egress proxy"},
		{"bad mode", sc + "  outboundTrafficPolicy: {mode: OPEN}\n  egress: [{hosts: ['./*']}]\n", "spec.outboundTrafficPolicy.mode", ErrInvalid, "REGISTRY_ONLY"},
		{"no egress", sc + "  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n", "spec.egress", ErrInvalid, "at least one egress listener"},
		{"no hosts", sc + "  egress: [{port: {number: 80}}]\n", "spec.egress[0].hosts", ErrInvalid, "at least one host"},
		{"no slash", sc + "  egress: [{hosts: [orders]}]\n", "spec.egress[0].hosts[0]", ErrInvalid, "want namespace/host"},
		{"bad namespace", sc + "  egress: [{hosts: ['Shop/*']}]\n", "spec.egress[0].hosts[0]", ErrInvalid, `namespace "Shop"`},
		{"inner wildcard", sc + "  egress: [{hosts: ['./a.*.com']}]\n", "spec.egress[0].hosts[0]", ErrInvalid, "leading"},
		{"port in host", sc + "  egress: [{hosts: ['./orders:80']}]\n", "spec.egress[0].hosts[0]", ErrInvalid, "':'"},
		{"port 0", sc + "  egress: [{port: {number: 0}, hosts: ['./*']}]\n", "spec.egress[0].port.number", ErrInvalid, "1..65535"},
		{"two ports", sc + "  egress: [{port: {number: 80}, hosts: ['./*']}, {port: {number: 80}, hosts: ['*/*']}]\n", "spec.egress[1].port.number", ErrInvalid, "another egress listener"},
		{"two catch-alls", sc + "  egress: [{hosts: ['./*']}, {hosts: ['*/*']}]\n", "spec.egress[1]", ErrInvalid, "only one egress listener may leave out port"},
		{"protocol", sc + "  egress: [{port: {number: 80, protocol: FTP}, hosts: ['./*']}]\n", "spec.egress[0].port.protocol", ErrInvalid, `"FTP"`},
		{"targetPort", sc + "  egress: [{port: {number: 80, targetPort: 81}, hosts: ['./*']}]\n", "spec.egress[0].port.targetPort", ErrNotSupported, "target port"},
		{"selector key", sc + "  workloadSelector: {labels: {'a b': x}}\n  egress: [{hosts: ['./*']}]\n", "spec.workloadSelector.labels[a b]", ErrInvalid, "not a label key"},
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

// TestSidecarScope: Istio's precedence (the workload's, the namespace's,
// the mesh's) and what each egress host imports.
func TestSidecarScope(t *testing.T) {
	data, _ := os.ReadFile("testdata/sidecar.yaml")
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	se, err := Decode([]byte("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: istio-system}\nspec: {hosts: [api.partner.io], resolution: DNS, ports: [{number: 80, name: http, protocol: HTTP}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := NewSidecars("", append(objs, se...))
	web := label.FromMap(map[string]string{"app": "web"})
	svc := func(ns, name string) naming.ServiceKey { return naming.ServiceKey{Namespace: ns, Name: name} }
	partner, _ := ResolveHost("api.partner.io", "default")
	type imp struct {
		s    naming.ServiceKey
		port uint32
		want bool
	}
	for _, c := range []struct {
		name     string
		w        Workload
		sidecar  string
		registry bool
		imports  []imp
	}{
		{"mesh default", Workload{Namespace: "web"}, "Sidecar/istio-system/default", false, []imp{
			{svc("web", "front"), 0, true}, {svc("istio-system", "ca"), 0, true}, {svc("shop", "orders"), 0, false},
			// A ServiceEntry's host is in the entry's namespace.
			{partner, 0, true},
		}},
		{"namespace default", Workload{Namespace: "shop"}, "Sidecar/shop/default", true, []imp{
			{svc("shop", "orders"), 0, true}, {svc("shop", "payments"), 0, false}, {svc("istio-system", "ca"), 0, false},
			{svc("example.com", "api"), 0, true}, {svc("com", "example"), 0, false},
		}},
		{"workload", Workload{Namespace: "shop", Labels: web}, "Sidecar/shop/web", false, []imp{
			{svc("shop", "payments"), 8080, true}, {svc("shop", "payments"), 0, true}, {svc("shop", "payments"), 9090, false},
			{svc("billing", "invoices"), 9090, true}, {svc("shop", "orders"), 0, false},
		}},
		// The selector applies in its namespace only.
		{"selector elsewhere", Workload{Namespace: "billing", Labels: web}, "Sidecar/istio-system/default", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := v.For(c.w)
			if sc == nil || sc.Key.String() != c.sidecar {
				t.Fatalf("For(%v) = %v, want %s", c.w, sc, c.sidecar)
			}
			if sc.RegistryOnly() != c.registry {
				t.Errorf("RegistryOnly = %v", sc.RegistryOnly())
			}
			for _, i := range c.imports {
				if got := sc.Imports(i.s, v.Namespace(i.s), i.port); got != i.want {
					t.Errorf("Imports(%s, port %d) = %v, want %v", i.s, i.port, got, i.want)
				}
			}
		})
	}
	if sc := NewSidecars("", nil).For(Workload{Namespace: "shop"}); sc != nil || !sc.Imports(svc("a", "b"), "a", 0) {
		t.Errorf("no Sidecar: %v, want nil importing everything", sc)
	}
}

func TestParseSidecarHost(t *testing.T) {
	for in, want := range map[string]SidecarHost{
		"./*": {"shop", "*"}, "*/*": {"*", "*"}, "~/*": {"", "*"}, "istio-system/*": {"istio-system", "*"},
		"*/*.example.com": {"*", "*.example.com"}, "prod/orders.prod.svc.cluster.local": {"prod", "orders.prod.svc.cluster.local"},
	} {
		if got, err := ParseSidecarHost(in, "shop"); err != nil || got != want {
			t.Errorf("ParseSidecarHost(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "*", "/", "./", "a/b/c", "./a..b", "./*a", "./a*", "./A", "../x", "./" + strings.Repeat("a", 64)} {
		if _, err := ParseSidecarHost(in, "shop"); err == nil {
			t.Errorf("ParseSidecarHost(%q): no error", in)
		}
	}
}

// FuzzParseSidecarHost: no input panics, and what parses matches itself.
func FuzzParseSidecarHost(f *testing.F) {
	for _, s := range []string{"./*", "*/*.example.com", "~/*", "istio-system/*", "prod/orders.prod.svc.cluster.local", "a/b/c", "./a*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseSidecarHost(s, "shop")
		if err != nil || h.Namespace == "" || h.DNS == "*" || strings.HasPrefix(h.DNS, "*.") {
			return
		}
		if !h.matches(h.Namespace, []string{h.DNS}) {
			t.Fatalf("%q does not match its own host", s)
		}
	})
}
