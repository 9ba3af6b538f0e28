package placement

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sextant-mesh/sextant/internal/label"
)

func TestDecodeNodesYAML(t *testing.T) {
	body, err := os.ReadFile("testdata/nodes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := DecodeNodes(body, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 {
		t.Fatalf("got %d nodes", len(nodes))
	}
	n1, n2 := nodes[0], nodes[1]
	want := Resources{CPU: 4000, Memory: 16 << 30, Scalars: []Scalar{{"example.com/gpu", 2}, {"hugepages-2Mi", 1 << 30}}}
	if diff := cmp.Diff(want, n1.Allocatable); diff != "" {
		t.Errorf("n1 allocatable (-want +got):\n%s", diff)
	}
	if n1.Pods != 110 || len(n1.Taints) != 1 || n1.Taints[0] != (Taint{"dedicated", "gpu", "NoSchedule"}) {
		t.Errorf("n1 = %+v", n1)
	}
	if v, _ := n1.Labels.Get("topology.kubernetes.io/zone"); v != "a" {
		t.Errorf("n1 zone label = %q", v)
	}
	if !n2.Unschedulable || n2.Allocatable.CPU != 1500 || n2.Allocatable.Memory != 1<<30 || n2.Pods != 10 {
		t.Errorf("n2 = %+v", n2)
	}
}

func TestDecodePodYAML(t *testing.T) {
	body, err := os.ReadFile("testdata/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := DecodePods(body, true)
	if err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	if w.Key != (Key{"default", "web-1"}) {
		t.Errorf("key = %v", w.Key)
	}
	// max(sum(containers)=500m, init=1000m) + overhead 10m; memory 256Mi.
	if w.Requests.CPU != 1010 || w.Requests.Memory != 256<<20 {
		t.Errorf("requests = %+v", w.Requests)
	}
	// Non-zero: the init container has no memory request, so it counts 200Mi.
	if w.NonZeroCPU != 1010 || w.NonZeroMemory != 256<<20 {
		t.Errorf("non-zero = %d, %d", w.NonZeroCPU, w.NonZeroMemory)
	}
	if len(w.spread) != 1 || w.Affinity == nil || len(w.Affinity.RequiredAnti) != 1 || len(w.preferred) != 1 || !w.hasNodeAffReqs {
		t.Errorf("workload = %+v", w)
	}
}

// TestDecodeErrors checks that bad input is refused with the path of the
// field at fault, for JSON and YAML alike.
func TestDecodeErrors(t *testing.T) {
	node := func(alloc string) string {
		return `{"apiVersion":"v1","kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}},{"metadata":{"name":"d"},"status":{"allocatable":` + alloc + `}}]}`
	}
	pod := func(spec string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":` + spec + `}`
	}
	for _, tc := range []struct {
		name, body string
		pods       bool
		path, msg  string
	}{
		{"bad quantity in a list item", node(`{"cpu":"1.5x"}`), false, "items[3].status.allocatable.cpu", "invalid value"},
		{"negative quantity", node(`{"memory":"-1Gi"}`), false, "items[3].status.allocatable.memory", "greater than or equal to 0"},
		{"unknown field in a list item", `{"apiVersion":"v1","kind":"List","items":[{"metadata":{"name":"a"},"spec":{"unschedulabel":true}}]}`, false, "items[0].spec.unschedulabel", "unknown field"},
		{"wrong type", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"},"spec":{"unschedulable":"yes"}}`, false, "spec.unschedulable", "must be of type boolean"},
		{"missing node name", `{"apiVersion":"v1","kind":"Node"}`, false, "metadata.name", "required"},
		{"bad taint effect", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"},"spec":{"taints":[{"key":"k","effect":"Never"}]}}`, false, "spec.taints[0].effect", "NoSchedule"},
		{"wrong apiVersion", `{"apiVersion":"v2","kind":"Node"}`, false, "apiVersion", "v1"},
		{"wrong kind", `{"apiVersion":"v1","kind":"Pod"}`, false, "kind", `this is a Pod (v1), not a Node or a List of them: Pods go to "sextant place"`},
		{"a VirtualService", `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"a"},"spec":{"hosts":["a"]}}`, true,
			"kind", `this is a VirtualService (networking.istio.io/v1), not a Pod or a List of them: routing config goes to "sextant config apply"`},
		{"a VirtualService in a List", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"a"},"spec":{"host":"a"}}]}`, true,
			"items[0].kind", `this is a VirtualService (networking.istio.io/v1), not a Pod: routing config goes to "sextant config apply"`},
		{"a Node in a List of Pods", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"a"}}]}`, true,
			"items[0].kind", `this is a Node (v1), not a Pod: Nodes go to "sextant nodes apply"`},
		{"a Pod in a List of Nodes", `{"apiVersion":"v1","kind":"List","items":[{"metadata":{"name":"a"}},{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[]}}]}`, false,
			"items[1].kind", `this is a Pod (v1), not a Node: Pods go to "sextant place"`},
		{"duplicate node in a list", `{"apiVersion":"v1","kind":"List","items":[{"metadata":{"name":"a"}},{"metadata":{"name":"a"}}]}`, false, "items[1].metadata.name", "also at items[0]"},
		{"scheduling gates not supported", pod(`{"schedulingGates":[{"name":"g"}]}`), true, "spec.schedulingGates", "not supported"},
		{"resource claims not supported", pod(`{"resourceClaims":[{"name":"c"}]}`), true, "spec.resourceClaims", "not supported"},
		{"host port not supported", pod(`{"containers":[{"name":"c","ports":[{"containerPort":80,"hostPort":80}]}]}`), true, "spec.containers[0].ports[0].hostPort", "not supported"},
		{"pvc not supported", pod(`{"volumes":[{"name":"v","persistentVolumeClaim":{"claimName":"x"}}]}`), true, "spec.volumes[0].persistentVolumeClaim", "not supported"},
		{"bad operator", pod(`{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"Near","values":["x"]}]}]}}}}`), true,
			"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator", "not a valid selector operator"},
		{"Gt wants an integer", pod(`{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"k","operator":"Gt","values":["x"]}]}]}}}}`), true,
			"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]", "integer"},
		{"bad request quantity", pod(`{"containers":[{"name":"c","resources":{"requests":{"cpu":"1.5x"}}}]}`), true, "spec.containers[0].resources.requests.cpu", "invalid value"},
		{"unknown request name", pod(`{"containers":[{"name":"c","resources":{"requests":{"gpu":"1"}}}]}`), true, "spec.containers[0].resources.requests.gpu", "not a resource"},
		{"fractional extended resource", pod(`{"containers":[{"name":"c","resources":{"requests":{"example.com/gpu":"500m"}}}]}`), true, "spec.containers[0].resources.requests.example.com/gpu", "integer"},
		{"zero maxSkew", pod(`{"topologySpreadConstraints":[{"maxSkew":0,"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule"}]}`), true, "spec.topologySpreadConstraints[0].maxSkew", "greater than zero"},
		{"empty topology key", pod(`{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{}}]}}}`), true,
			"spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "can not be empty"},
		{"weight out of range", pod(`{"affinity":{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":101,"podAffinityTerm":{"topologyKey":"z"}}]}}}`), true,
			"spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "1-100"},
		{"toleration operator", pod(`{"tolerations":[{"key":"k","operator":"Like"}]}`), true, "spec.tolerations[0].operator", "not a valid toleration operator"},
		{"unknown pod field", pod(`{"nodeSelecter":{"a":"b"}}`), true, "spec.nodeSelecter", "unknown field"},
		{"duplicate field", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","name":"q"}}`, true, "metadata.name", "duplicate field"},
		{"bad label value", pod(`{"nodeSelector":{"zone":"a b"}}`), true, "spec.nodeSelector.zone", "invalid label value"},
		{"malformed JSON", `{"apiVersion":"v1",`, true, "", "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.pods {
				_, err = DecodePods([]byte(tc.body), false)
			} else {
				_, err = DecodeNodes([]byte(tc.body), false)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want a *FieldError", err)
			}
			if fe.Path != tc.path || !strings.Contains(fe.Msg, tc.msg) {
				t.Errorf("got %q: %q, want %q: ...%s...", fe.Path, fe.Msg, tc.path, tc.msg)
			}
		})
	}
}

// A YAML syntax error names the line of the body it is on (the parser's
// were one early), and a body of several documents is refused rather than
// read in part.
func TestDecodeYAMLSyntax(t *testing.T) {
	for _, c := range []struct{ name, body, msg string }{
		{"parser", "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: a\n bad: 1\n", "invalid YAML: line 6: did not find expected key"},
		{"scanner", "apiVersion: v1\nkind: Node\nmetadata:\n  name: a: b\n", "invalid YAML: line 4: mapping values are not allowed"},
		{"key twice", "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  name: b\n", `line 5: key "name" already set in map`},
		{"two documents", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: b}\n",
			"the YAML body holds 2 documents (at lines 1 and 5)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeNodes([]byte(c.body), true)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Path != "" || !strings.Contains(fe.Msg, c.msg) {
				t.Fatalf("err = %v, want one containing %q", err, c.msg)
			}
		})
	}
}

func TestDecodeYAMLErrorPath(t *testing.T) {
	body := "apiVersion: v1\nkind: List\nitems:\n- metadata: {name: a}\n  status:\n    allocatable: {cpu: 1.5x}\n"
	_, err := DecodeNodes([]byte(body), true)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "items[0].status.allocatable.cpu" {
		t.Fatalf("err = %v", err)
	}
}

// FuzzDecode feeds arbitrary bodies to both decoders: they must return
// workloads/nodes or a *FieldError, never panic, and an accepted pod must
// compile to something the scheduler can place without panicking.
func FuzzDecode(f *testing.F) {
	for _, p := range []string{"testdata/nodes.yaml", "testdata/pod.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}}`), false)
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"metadata":{"name":"a"},"status":{"allocatable":{"cpu":"2","pods":"3"}}}]}`), false)
	s := New(Config{})
	tx := s.Begin()
	nodes, err := DecodeNodes(mustRead(f, "testdata/nodes.yaml"), true)
	if err != nil {
		f.Fatal(err)
	}
	tx.UpsertNodes(nodes)
	tx.Commit(1)
	f.Fuzz(func(t *testing.T, body []byte, yamlBody bool) {
		if ns, err := DecodeNodes(body, yamlBody); err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("DecodeNodes: %T %v", err, err)
			}
		} else {
			for _, n := range ns {
				b, _ := n.MarshalBinary()
				var back Node
				if err := back.UnmarshalBinary(b); err != nil {
					t.Fatalf("node record does not round-trip: %v", err)
				}
			}
		}
		ws, err := DecodePods(body, yamlBody)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("DecodePods: %T %v", err, err)
			}
			return
		}
		tx := s.Begin()
		defer tx.Abort()
		if _, err := tx.Place(ws); err != nil && !errors.Is(err, ErrConflict) {
			t.Fatal(err)
		}
	})
}

func mustRead(f *testing.F, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// TestNodeRendersBack: a decoded node rendered back as Kubernetes JSON
// decodes to the same record.
func TestNodeRendersBack(t *testing.T) {
	body, _ := os.ReadFile("testdata/nodes.yaml")
	nodes, err := DecodeNodes(body, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		j, err := json.Marshal(n.Kubernetes())
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeNodes(j, false)
		if err != nil {
			t.Fatalf("%s: %v", j, err)
		}
		if diff := cmp.Diff(n, back[0], cmp.Comparer(func(a, b label.Labels) bool { return a.Equal(b) })); diff != "" {
			t.Fatalf("%s:\n%s", j, diff)
		}
	}
	r := Resources{CPU: 1500, Memory: 16 << 30}
	j, _ := json.Marshal(r.ResourceList())
	if string(j) != `{"cpu":"1500m","memory":"16Gi"}` {
		t.Fatalf("requested renders as %s", j)
	}
}

func TestPeekType(t *testing.T) {
	for _, tc := range []struct{ in, v, k string }{
		{`{"items":[{"kind":"Pod","x":"a\"}"}],"kind":"List","apiVersion":"v1"}`, "v1", "List"},
		{` { "apiVersion" : "v1" , "kind" : "Node" } `, "v1", "Node"},
		{`{"metadata":{"kind":"x"},"kind":"P\u006fd"}`, "", "Pod"},
		{`{"a":[1,{"b":"]"}],"kind":"Pod"}`, "", "Pod"},
	} {
		tm, err := peekType([]byte(tc.in))
		if err != nil || tm.APIVersion != tc.v || tm.Kind != tc.k {
			t.Errorf("%s: got %+v %v", tc.in, tm, err)
		}
	}
	for _, bad := range []string{`{"kind":"Pod`, `{"kind":`, `{"kind":"Pod\`, `[`, ``} {
		peekType([]byte(bad)) // must not panic; the strict decoder reports the syntax
		if _, err := DecodePods([]byte(bad), false); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
