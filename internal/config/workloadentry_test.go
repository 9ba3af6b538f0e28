package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
)

const weDoc = `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: details-vm, namespace: bookinfo}
spec:
  address: 10.0.0.9
  ports: {http: 9080, metrics: 15090}
  labels: {app: details-legacy, version: v2}
  locality: us-east/zone-a
  serviceAccount: details
`

func TestDecodeWorkloadEntry(t *testing.T) {
	objs, err := Decode([]byte(weDoc))
	if err != nil {
		t.Fatal(err)
	}
	o := objs[0]
	enc := string(o.Encode())
	if !strings.HasPrefix(enc, `{"apiVersion":"networking.istio.io/v1","kind":"WorkloadEntry",`) {
		t.Errorf("encodes as %s", enc)
	}
	if back, err := DecodeRecord([]byte(enc)); err != nil || string(back.Encode()) != enc {
		t.Errorf("round trip: %v", err)
	}
	if k, err := ParseKey(o.Key.String()); err != nil || k != o.Key {
		t.Errorf("ParseKey(%s): %v %v", o.Key, k, err)
	}
	in := WorkloadInstance(o)
	if err := instance.Prepare(-1, in); err != nil {
		t.Fatalf("the instance does not pass the registry's validation: %v", err)
	}
	if in.ID != "we:bookinfo:details-vm" || in.Namespace != "bookinfo" || in.Service != "details-legacy" || in.Host != "10.0.0.9" ||
		in.Port != 9080 || in.Weight != instance.DefaultWeight || !in.Healthy || in.Version != "v2" {
		t.Errorf("instance = %+v", in)
	}
	want := map[string]string{
		"app": "details-legacy", "version": "v2", instance.OwnerLabel: "WorkloadEntry/bookinfo/details-vm",
		"sextant.io/port.http": "9080", "sextant.io/port.metrics": "15090",
		"topology.kubernetes.io/region": "us-east", "topology.kubernetes.io/zone": "zone-a",
		MetaServiceAccount: "details",
	}
	if d := cmp.Diff(want, in.Metadata.Map()); d != "" {
		t.Errorf("metadata (-want +got):\n%s", d)
	}
	if !IsWorkloadInstance(in) {
		t.Errorf("IsWorkloadInstance = false")
	}
	if n, ok := WorkloadPort(in, "metrics"); !ok || n != 15090 {
		t.Errorf("WorkloadPort(metrics) = %d %v", n, ok)
	}

	// Without ports: a port-less instance; without labels: named after
	// the object; a weight as given.
	objs, err = Decode([]byte("apiVersion: networking.istio.io/v1beta1\nkind: WorkloadEntry\nmetadata: {name: vm1}\nspec: {address: vm1.example.com, weight: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in = WorkloadInstance(objs[0])
	if _, noPort := in.Metadata.Get(instance.NoPortLabel); in.Service != "vm1" || in.Port != 0 || !noPort || in.Weight != 3 || in.Host != "vm1.example.com" {
		t.Errorf("port-less instance = %+v", in)
	}
	if err := instance.Prepare(-1, in); err != nil {
		t.Errorf("port-less: %v", err)
	}
}

// TestDecodeWorkloadEntryErrors: each problem names its field.
func TestDecodeWorkloadEntryErrors(t *testing.T) {
	const we = "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm}\nspec:\n"
	for _, c := range []struct {
		name, yaml, path string
		err              error
		msg              string
	}{
		{"no address", we + "  labels: {app: a}\n", "spec.address", ErrInvalid, "required"},
		{"bad address", we + "  address: unix:///var/run/a.sock\n", "spec.address", ErrInvalid, "unix sockets"},
		{"port zero", we + "  address: 10.0.0.1\n  ports: {http: 0}\n", "spec.ports[http]", ErrInvalid, "1..65535"},
		{"port name", we + "  address: 10.0.0.1\n  ports: {\"a b\": 80}\n", "spec.ports[a b]", ErrInvalid, "port name"},
		{"label key", we + "  address: 10.0.0.1\n  labels: {\"a b\": x}\n", "spec.labels[a b]", ErrInvalid, "not a label key"},
		{"owner label", we + "  address: 10.0.0.1\n  labels: {sextant.io/owner: me}\n", "spec.labels[sextant.io/owner]", ErrInvalid, "set by the server"},
		{"bad service", we + "  address: 10.0.0.1\n  labels: {app: Details_VM}\n", "spec.labels[app]", ErrInvalid, "names the instance's service"},
		{"weight", we + "  address: 10.0.0.1\n  weight: 70000\n", "spec.weight", ErrInvalid, "0..65535"},
		{"locality", we + "  address: 10.0.0.1\n  locality: a//b\n", "spec.locality", ErrInvalid, "region/zone"},
		{"network", we + "  address: 10.0.0.1\n  network: vpc-2\n", "spec.network", ErrNotSupported, "one network"},
		{"service account", we + "  address: 10.0.0.1\n  serviceAccount: \"A B\"\n", "spec.serviceAccount", ErrInvalid, "want"},
		{"unknown field", we + "  address: 10.0.0.1\n  adress: 10.0.0.2\n", "spec.adress", ErrUnknownField, "address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.yaml))
			var list Errors
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("got %v, want Errors", err)
			}
			fe := list[0]
			if fe.Path != c.path || !errors.Is(fe, c.err) || !strings.Contains(fe.Error(), c.msg) {
				t.Errorf("got %v (path %q); want path %q, %v, containing %q", err, fe.Path, c.path, c.err, c.msg)
			}
		})
	}
}

// TestServiceEntrySelection: an entry with a workloadSelector selects
// instances of its namespace; a WorkloadEntry's is reached on its port of
// the entry port's name, else the targetPort, a registered one on its own.
func TestServiceEntrySelection(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: details, namespace: bookinfo}
spec:
  hosts: [details.bookinfo.com]
  location: MESH_INTERNAL
  ports:
  - {number: 80, name: http, protocol: HTTP, targetPort: 8080}
  - {number: 9090, name: grpc, protocol: GRPC}
  resolution: STATIC
  workloadSelector: {labels: {app: details-legacy, tier: back}}
` + "---\n" + weDoc))
	if err != nil {
		t.Fatal(err)
	}
	e := EntryFor(objs[0], EntryHosts(objs[0])[0])
	want := &EntrySelection{Namespace: "bookinfo", Selector: label.Selector{
		{Key: "app", Op: label.Equals, Values: []string{"details-legacy"}},
		{Key: "tier", Op: label.Equals, Values: []string{"back"}},
	}, Ports: []EntryPort{{Number: 80, Name: "http", TargetPort: 8080}, {Number: 9090, Name: "grpc", HTTP2: true}}}
	if d := cmp.Diff(want, e.Selected); d != "" || len(e.Endpoints) != 0 || e.Resolution != ResolveStatic {
		t.Errorf("selection (-want +got):\n%s", d)
	}
	we := WorkloadInstance(objs[1])
	reg := &instance.Instance{ID: "r1", Namespace: "bookinfo", Service: "details", Host: "10.0.0.3", Port: 7000}
	for _, c := range []struct {
		port uint32
		in   *instance.Instance
		want uint32
	}{{80, we, 9080}, {9090, we, 9090}, {80, reg, 7000}} {
		if got := e.Selected.PortFor(c.port).Port(c.in); got != c.want {
			t.Errorf("port %d of %s: %d, want %d", c.port, c.in.ID, got, c.want)
		}
	}
}
