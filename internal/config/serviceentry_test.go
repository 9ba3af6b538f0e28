package config

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sextant-mesh/sextant/internal/naming"
)

func TestDecodeServiceEntry(t *testing.T) {
	data, err := os.ReadFile("testdata/serviceentry.yaml")
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
		if !strings.HasPrefix(enc, `{"apiVersion":"networking.istio.io/v1","kind":"ServiceEntry",`) {
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
	// The hosts' services, and each one's endpoints per port.
	db := naming.ServiceKey{Namespace: "example", Name: "db.internal"}
	if got := EntryHosts(objs[1]); !cmp.Equal(got, []naming.ServiceKey{db}) {
		t.Errorf("EntryHosts = %v", got)
	}
	got := EntryFor(objs[1], db)
	want := &EntryService{Key: objs[1].Key, Resolution: ResolveStatic, Endpoints: []EntryEndpoint{
		{Address: "10.0.0.7", Port: 15432, ServicePort: 5432, Weight: 3, Labels: map[string]string{"version": "v1"}, Locality: "us-east/zone-a"},
		{Address: "10.0.0.8", Port: 25432, ServicePort: 5432, Weight: 1, Labels: map[string]string{"version": "v2"}},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("EntryFor static (-want +got):\n%s", d)
	}
	ext := naming.ServiceKey{Namespace: "default", Name: "httpbin"}
	got = EntryFor(objs[0], naming.ServiceKey{Namespace: "org", Name: "httpbin"})
	want = &EntryService{Key: objs[0].Key, Resolution: ResolveStrictDNS, Endpoints: []EntryEndpoint{
		{Address: "httpbin.org", Port: 80, ServicePort: 80, Weight: 1},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("EntryFor DNS (-want +got):\n%s", d)
	}
	if EntryFor(objs[0], ext) != nil {
		t.Errorf("EntryFor a service the entry does not name: want nil")
	}
	got = EntryFor(objs[2], naming.ServiceKey{Namespace: "com", Name: "api.example"})
	if got.Resolution != ResolveLogicalDNS || len(got.Endpoints) != 1 || got.Endpoints[0].Address != "lb.example.com" || !got.Endpoints[0].HTTP2 {
		t.Errorf("EntryFor DNS_ROUND_ROBIN = %+v", got)
	}
}

// TestDecodeServiceEntryErrors: every problem names its field, as Istio's
// validation finds them; what Sextant cannot do is refused, never ignored.
func TestDecodeServiceEntryErrors(t *testing.T) {
	const se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: e}\nspec:\n"
	const port = "  ports: [{number: 80, name: http, protocol: HTTP}]\n"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"no hosts", se + port, "spec.hosts", ErrInvalid, "at least one host"},
		{"wildcard", se + "  hosts: ['*.example.com']\n" + port + "  resolution: NONE\n", "spec.hosts[0]", ErrNotSupported, "wildcard"},
		{"upper case", se + "  hosts: [Example.com]\n" + port, "spec.hosts[0]", ErrInvalid, "lower-case"},
		{"no ports", se + "  hosts: [a.example.com]\n", "spec.ports", ErrInvalid, "at least one port"},
		{"port number", se + "  hosts: [a.example.com]\n  ports: [{number: 0, name: http, protocol: HTTP}]\n", "spec.ports[0].number", ErrInvalid, "1..65535"},
		{"port twice", se + "  hosts: [a.example.com]\n  ports: [{number: 80, name: a, protocol: HTTP}, {number: 80, name: b, protocol: HTTP}]\n", "spec.ports[1].number", ErrInvalid, "another port"},
		{"port name", se + "  hosts: [a.example.com]\n  ports: [{number: 80, protocol: HTTP}]\n", "spec.ports[0].name", ErrInvalid, "required"},
		{"protocol", se + "  hosts: [a.example.com]\n  ports: [{number: 80, name: a, protocol: QUIC}]\n", "spec.ports[0].protocol", ErrInvalid, "want one of HTTP"},
		{"address", se + "  hosts: [a.example.com]\n" + port + "  addresses: [10.0.0.300]\n", "spec.addresses[0]", ErrInvalid, "CIDR"},
		{"static without endpoints", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n", "spec.endpoints", ErrInvalid, "STATIC needs at least one endpoint"},
		{"static host name", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  endpoints: [{address: b.example.com}]\n", "spec.endpoints[0].address", ErrInvalid, "needs an IP address"},
		{"round robin endpoints", se + "  hosts: [a.example.com]\n" + port + "  resolution: DNS_ROUND_ROBIN\n  endpoints: [{address: b.example.com}, {address: c.example.com}]\n", "spec.endpoints", ErrInvalid, "at most one endpoint"},
		{"none endpoints", se + "  hosts: [a.example.com]\n" + port + "  endpoints: [{address: 10.0.0.1}]\n", "spec.endpoints", ErrInvalid, "NONE takes no endpoints"},
		{"dynamic dns", se + "  hosts: [a.example.com]\n" + port + "  resolution: DYNAMIC_DNS\n", "spec.resolution", ErrNotSupported, "DYNAMIC_DNS"},
		{"endpoint port name", se + "  hosts: [a.example.com]\n" + port + "  resolution: DNS\n  endpoints: [{address: b.example.com, ports: {https: 443}}]\n", "spec.endpoints[0].ports[https]", ErrInvalid, "not the name of one of the entry's ports"},
		{"endpoint no address", se + "  hosts: [a.example.com]\n" + port + "  resolution: DNS\n  endpoints: [{labels: {a: b}}]\n", "spec.endpoints[0].address", ErrInvalid, "required"},
		{"locality", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  endpoints: [{address: 10.0.0.1, locality: a//b}]\n", "spec.endpoints[0].locality", ErrInvalid, "region/zone"},
		{"network", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  endpoints: [{address: 10.0.0.1, network: n1}]\n", "spec.endpoints[0].network", ErrNotSupported, "not supported"},
		{"workload selector not STATIC", se + "  hosts: [a.example.com]\n" + port + "  workloadSelector: {labels: {app: a}}\n", "spec.resolution", ErrNotSupported, "STATIC only"},
		{"workload selector and endpoints", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  workloadSelector: {labels: {app: a}}\n  endpoints: [{address: 10.0.0.1}]\n", "spec.endpoints", ErrInvalid, "only one of endpoints and workloadSelector"},
		{"workload selector empty", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  workloadSelector: {labels: {}}\n", "spec.workloadSelector.labels", ErrInvalid, "at least one label"},
		{"workload selector bad key", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  workloadSelector: {labels: {\"a b\": x}}\n", "spec.workloadSelector.labels[a b]", ErrInvalid, "not a label key"},
		{"endpoint service account", se + "  hosts: [a.example.com]\n" + port + "  resolution: STATIC\n  endpoints: [{address: 10.0.0.1, serviceAccount: sa}]\n", "spec.endpoints[0].serviceAccount", ErrNotSupported, "not supported"},
		{"export to", se + "  hosts: [a.example.com]\n" + port + "  exportTo: [.]\n", "spec.exportTo[0]", ErrNotSupported, "every client"},
		{"subject alt names", se + "  hosts: [a.example.com]\n" + port + "  subjectAltNames: [spiffe://a]\n", "spec.subjectAltNames", ErrNotSupported, "not supported"},
		{"hosts twice", se + "  hosts: [a.example.com, a.example.com]\n" + port, "spec.hosts[1]", ErrInvalid, "both name service"},
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

// TestIndexServiceEntry: the index knows an entry's hosts as services: a
// Put touches them and the services routing to them, the first entry in
// key order is in force for a host, and a Delete gives the host back.
func TestIndexServiceEntry(t *testing.T) {
	ix := NewIndex()
	api := naming.ServiceKey{Namespace: "com", Name: "api.example"}
	web := naming.ServiceKey{Namespace: "default", Name: "web"}
	entry := func(name, addr string) *Object {
		return mustDecode(t, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: "+name+"}\nspec:\n"+
			"  hosts: [api.example.com]\n  ports: [{number: 443, name: https, protocol: HTTPS}]\n  resolution: STATIC\n"+
			"  endpoints: [{address: "+addr+"}]\n")
	}
	ix.Put(mustDecode(t, vsYAML("default", "web", "web", "api.example.com")))
	b := entry("b", "10.0.0.2")
	if got := ix.Put(b); !cmp.Equal(got, []naming.ServiceKey{api, web}) {
		t.Errorf("Put touched %v, want the entry's host and the service routing to it", got)
	}
	if ix.ServiceEntry(api) != b || ix.Entry(api).Endpoints[0].Address != "10.0.0.2" {
		t.Errorf("entry in force: %v", ix.ServiceEntry(api))
	}
	a := entry("a", "10.0.0.1")
	if w := ix.Warnings(a); len(w) != 1 || !strings.Contains(w[0], "shadows") {
		t.Errorf("warnings %v, want a shadows b", w)
	}
	ix.Put(a)
	if ix.Entry(api).Endpoints[0].Address != "10.0.0.1" {
		t.Errorf("the first entry in key order is not in force")
	}
	if !slices.Contains(ix.Services(), api) {
		t.Errorf("Services() %v lacks %v", ix.Services(), api)
	}
	ix.Delete(a.Key)
	if got := ix.Delete(b.Key); !cmp.Equal(got, []naming.ServiceKey{api, web}) || ix.ServiceEntry(api) != nil {
		t.Errorf("Delete touched %v, entry %v", got, ix.ServiceEntry(api))
	}
}
