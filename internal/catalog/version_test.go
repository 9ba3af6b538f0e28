package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// TestVersionLabel: an instance's version is its label "version" for
// selectors, whether the service was loaded from stored records (a
// restart) or the instance committed since, while its metadata (stored and
// answered) stays what was registered. Replicas with equal metadata and
// version share one label set, as they share their metadata.
func TestVersionLabel(t *testing.T) {
	mk := func(id, version string, md map[string]string) []byte {
		in := &instance.Instance{ID: id, Namespace: "default", Service: "orders", Host: "10.0.0.1", Port: 8080,
			Version: version, Weight: 100, Metadata: label.FromMap(md), Healthy: true}
		return in.AppendBinary(nil)
	}
	app := map[string]string{"app": "orders"}
	recs := [][]byte{
		mk("a", "v2", app), mk("b", "v2", app), mk("c", "v2", app),
		mk("d", "v1", app),
		mk("e", "", map[string]string{"app": "orders", "version": "v3"}),
		mk("f", "", app),
		mk("g", "v2", map[string]string{"app": "orders", "version": "v2"}),
	}
	var all []*instance.Instance
	for _, r := range recs {
		in, err := instance.Decode(r, 1)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, in)
	}
	c := newCatalog(Options{})
	loadInstances(c, 1, all)
	in := &instance.Instance{ID: "h", Namespace: "default", Service: "orders", Host: "10.0.0.2", Port: 8080,
		Version: "v2", Weight: 100, Metadata: label.FromMap(app), Healthy: true}
	if err := c.Apply([]store.Change{{Revision: 2, Ops: []store.Op{{Kind: store.Instances, Key: in.ID, Value: []byte{}, Object: in}}}}); err != nil {
		t.Fatal(err)
	}
	svc := c.instancesTable().Lookup(naming.ServiceKey{Namespace: "default", Name: "orders"})
	for _, tc := range []struct{ sel, want string }{
		{"version=v2", "a b c g h"},
		{"version=v1", "d"},
		{"version=v3", "e"},
		{"version in (v1,v3)", "d e"},
		{"!version", "f"},
		{"app=orders,version!=v2", "d e f"},
	} {
		sel, err := label.Parse(tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range svc.Select(sel, false) {
			got = append(got, in.ID)
		}
		if !slices.Equal(got, strings.Fields(tc.want)) {
			t.Errorf("%s: got %v, want %s", tc.sel, got, tc.want)
		}
	}
	a, h := c.instancesTable().Get("a"), c.instancesTable().Get("h")
	if _, ok := a.Metadata.Get("version"); ok {
		t.Fatalf("the version was copied into the metadata: %v", a.Metadata.Map())
	}
	var answer struct{ Metadata map[string]string }
	if err := json.Unmarshal(a.JSON(), &answer); err != nil || fmt.Sprint(answer.Metadata) != fmt.Sprint(app) {
		t.Fatalf("answered metadata %v (%v), want %v", answer.Metadata, err, app)
	}
	// The decoder holds a set from its second sighting: b's and c's
	// metadata are one set.
	b, cc := c.instancesTable().Get("b"), c.instancesTable().Get("c")
	la, lb := a.Labels(), b.Labels()
	if !la.Equal(label.FromMap(map[string]string{"app": "orders", "version": "v2"})) {
		t.Fatalf("labels of a: %v", la.Map())
	}
	if !sameStorage(b.Metadata, cc.Metadata) || !sameStorage(lb, cc.Labels()) {
		t.Fatal("replicas' labels (equal stored metadata and version) are not shared")
	}
	if lh := h.Labels(); !lh.Equal(la) {
		t.Fatalf("labels of h: %v", lh.Map())
	}
	if g := c.instancesTable().Get("g"); !sameStorage(g.Labels(), g.Metadata) {
		t.Fatal("metadata already holding the version was copied")
	}
}

func sameStorage(a, b label.Labels) bool {
	ka, _ := a.At(0)
	kb, _ := b.At(0)
	return unsafe.StringData(ka) == unsafe.StringData(kb)
}

// BenchmarkBuildSet: the label index a restart builds for a service of
// 50,000 instances decoded from their records (metadata interned, 500
// distinct sets), without and with a version: the version's labels are
// derived once per instance and shared by replicas (label.WithSets).
func BenchmarkBuildSet(b *testing.B) {
	for _, version := range []string{"", "v2"} {
		b.Run("version="+version, func(b *testing.B) {
			recs := make([][]byte, 50_000)
			for i := range recs {
				in := benchInstance(i%500, "s")
				in.ID, in.Version = fmt.Sprintf("id-%08d", i), version
				recs[i] = in.AppendBinary(nil)
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				items := make([]*instance.Instance, len(recs))
				for i, r := range recs {
					in, err := instance.Decode(r, 1)
					if err != nil {
						b.Fatal(err)
					}
					items[i] = in
				}
				b.StartTimer()
				buildSet(items)
			}
		})
	}
}
