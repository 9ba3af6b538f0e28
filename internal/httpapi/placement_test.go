package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/placement"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// The placement endpoints of docs/api.md, against the real scheduler in a
// real registry on a real pebble store.

func newPlacementServer(t *testing.T) *testServer {
	t.Helper()
	s := placement.New(placement.Config{Workers: 2})
	t.Cleanup(s.Close) // after the server's cleanup, which runs first
	return newTestServer(t, registry.Options{Engine: commit.Options{Tables: s.Tables()}})
}

// send is do with a Content-Type.
func (s *testServer) send(method, path, contentType, body string) response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return response{resp.StatusCode, resp.Header, []byte(b.String())}
}

// node renders a Node; extra is spliced into its top level (`"spec":{...}`).
func node(name, cpu, mem string, labels map[string]string, extra string) string {
	l, _ := json.Marshal(labels)
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":%q,"labels":%s},"status":{"allocatable":{"cpu":%q,"memory":%q,"pods":"110"}}%s}`,
		name, l, cpu, mem, extra)
}

// pod renders a Pod asking for cpu; extra is spliced into its spec.
func pod(name, cpu string, labels map[string]string, extra string) string {
	l, _ := json.Marshal(labels)
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":%s},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":%q}}}]%s}}`,
		name, l, cpu, extra)
}

func list(items ...string) string {
	return `{"apiVersion":"v1","kind":"List","items":[` + strings.Join(items, ",") + `]}`
}

type nodeItemOut struct {
	Node struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name            string            `json:"name"`
			Labels          map[string]string `json:"labels"`
			ResourceVersion string            `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			Taints []struct {
				Key    string `json:"key"`
				Value  string `json:"value"`
				Effect string `json:"effect"`
			} `json:"taints"`
			Unschedulable bool `json:"unschedulable"`
		} `json:"spec"`
		Status struct {
			Allocatable map[string]string `json:"allocatable"`
		} `json:"status"`
	} `json:"node"`
	Requested  map[string]string `json:"requested"`
	Placements int               `json:"placements"`
}

type nodeListOut struct {
	Revision      int64         `json:"revision"`
	Items         []nodeItemOut `json:"items"`
	NextPageToken string        `json:"next_page_token"`
}

type placeOut struct {
	Revision int64 `json:"revision"`
	DryRun   bool  `json:"dry_run"`
	Results  []struct {
		Namespace     string `json:"namespace"`
		Name          string `json:"name"`
		Node          string `json:"node"`
		Unschedulable string `json:"unschedulable"`
	} `json:"results"`
}

type placementOut struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Node      string            `json:"node"`
	Labels    map[string]string `json:"labels"`
	Requests  map[string]string `json:"requests"`
	Revision  int64             `json:"revision"`
}

type placementListOut struct {
	Revision      int64          `json:"revision"`
	Items         []placementOut `json:"items"`
	NextPageToken string         `json:"next_page_token"`
}

func TestPutNode(t *testing.T) {
	s := newPlacementServer(t)
	var ans struct {
		Revision int64 `json:"revision"`
	}
	r := s.must("PUT", "/v1/nodes/n1", node("n1", "2", "4Gi", map[string]string{"zone": "a"}, ""), &ans)
	if ans.Revision != 1 || r.header.Get("X-Sextant-Revision") != "1" {
		t.Fatalf("revision %d, header %q", ans.Revision, r.header.Get("X-Sextant-Revision"))
	}
	yamlNode := "apiVersion: v1\nkind: Node\nmetadata:\n  name: n2\nspec:\n  taints:\n  - {key: dedicated, value: gpu, effect: NoSchedule}\nstatus:\n  allocatable: {cpu: 500m, memory: 1Gi, pods: 10}\n"
	if r := s.send("PUT", "/v1/nodes/n2", "application/yaml", yamlNode); r.status != 200 {
		t.Fatalf("YAML node: %d %s", r.status, r.body)
	}
	var it nodeItemOut
	s.must("GET", "/v1/nodes/n2", "", &it)
	if it.Node.Kind != "Node" || it.Node.Metadata.ResourceVersion != "2" || len(it.Node.Spec.Taints) != 1 ||
		it.Node.Status.Allocatable["cpu"] != "500m" || it.Node.Status.Allocatable["pods"] != "10" {
		t.Fatalf("node n2 = %+v", it)
	}
	// Re-putting the same node changes nothing and takes no revision.
	s.must("PUT", "/v1/nodes/n1", node("n1", "2", "4Gi", map[string]string{"zone": "a"}, ""), &ans)
	if ans.Revision != 2 {
		t.Fatalf("unchanged put answered revision %d, want 2", ans.Revision)
	}

	cases := []struct {
		name, path, body, field string
		status                  int
		code                    string
	}{
		{"the path and the body name different nodes", "/v1/nodes/other", node("n1", "1", "1Gi", nil, ""), "metadata.name", 400, "invalid_argument"},
		{"a List is not a Node", "/v1/nodes/n1", list(node("n1", "1", "1Gi", nil, "")), "kind", 400, "invalid_argument"},
		{"a bad quantity names its path", "/v1/nodes/n1", node("n1", "1.5x", "1Gi", nil, ""), "status.allocatable.cpu", 400, "invalid_argument"},
		{"a misspelt field names its path", "/v1/nodes/n1", node("n1", "1", "1Gi", nil, `"spec":{"unschedulabel":true}`), "spec.unschedulabel", 400, "invalid_argument"},
		{"a bad taint effect names its path", "/v1/nodes/n1", node("n1", "1", "1Gi", nil, `"spec":{"taints":[{"key":"a","effect":"Never"}]}`), "spec.taints[0].effect", 400, "invalid_argument"},
		{"another apiVersion", "/v1/nodes/n1", strings.Replace(node("n1", "1", "1Gi", nil, ""), `"v1"`, `"v2"`, 1), "apiVersion", 400, "invalid_argument"},
		{"malformed JSON", "/v1/nodes/n1", `{"apiVersion":"v1","kind":"Node",`, "", 400, "invalid_argument"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			s.expectError(s.do("PUT", c.path, c.body), c.status, c.code, c.field)
		})
	}
	s.t = t
	if r := s.do("PATCH", "/v1/nodes/n1", "{}"); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("PATCH: %d", r.status)
	}
}

func TestApplyNodesIsAtomic(t *testing.T) {
	s := newPlacementServer(t)
	var ans struct {
		Revision int64    `json:"revision"`
		Names    []string `json:"names"`
		Changed  []string `json:"changed"`
		Created  []string `json:"created"`
	}
	s.must("POST", "/v1/nodes", list(node("a", "1", "1Gi", nil, ""), node("b", "1", "1Gi", nil, "")), &ans)
	if ans.Revision != 1 || fmt.Sprint(ans.Names) != "[a b]" || fmt.Sprint(ans.Changed) != "[a b]" || fmt.Sprint(ans.Created) != "[a b]" {
		t.Fatalf("answer %+v", ans)
	}
	// One bad item: the whole List is refused and nothing is written.
	bad := list(node("c", "1", "1Gi", nil, ""), node("a", "2", "1Gi", nil, ""), node("d", "1", "1Gi", nil, ""), node("e", "1.5x", "1Gi", nil, ""))
	s.expectError(s.do("POST", "/v1/nodes", bad), 400, "invalid_argument", "items[3].status.allocatable.cpu")
	s.expectError(s.do("POST", "/v1/nodes", list(node("c", "1", "1Gi", nil, ""), node("c", "1", "1Gi", nil, ""))), 400, "invalid_argument", "items[1].metadata.name")
	s.expectError(s.do("POST", "/v1/nodes", list()), 400, "invalid_argument", "items")
	var nodes nodeListOut
	s.must("GET", "/v1/nodes", "", &nodes)
	if nodes.Revision != 1 || len(nodes.Items) != 2 || nodes.Items[0].Node.Status.Allocatable["cpu"] != "1" {
		t.Fatalf("after refused Lists: %+v", nodes)
	}
	s.must("POST", "/v1/nodes", list(node("a", "1", "1Gi", nil, ""), node("b", "3", "1Gi", nil, "")), &ans)
	if ans.Revision != 2 || fmt.Sprint(ans.Changed) != "[b]" || ans.Created == nil || len(ans.Created) != 0 {
		t.Fatalf("re-apply: %+v", ans)
	}
	yamlList := "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-y}\n  status:\n    allocatable: {cpu: 1, memory: 1Gi, pods: 1x}\n"
	r := s.send("POST", "/v1/nodes", "application/yaml", yamlList)
	s.expectError(r, 400, "invalid_argument", "items[0].status.allocatable.pods")
}

func TestListNodes(t *testing.T) {
	s := newPlacementServer(t)
	var items []string
	for i := range 7 {
		items = append(items, node(fmt.Sprintf("n%d", i), "2", "2Gi", map[string]string{"zone": fmt.Sprint("z", i%2)}, ""))
	}
	s.must("POST", "/v1/nodes", list(items...), nil)
	s.must("POST", "/v1/placements", pod("p", "1500m", nil, `"nodeName":"n3"`), nil)

	var all nodeListOut
	r := s.must("GET", "/v1/nodes", "", &all)
	if len(all.Items) != 7 || all.NextPageToken != "" || all.Revision != 2 || r.header.Get("X-Sextant-Revision") != "2" {
		t.Fatalf("all = %+v", all)
	}
	n3 := all.Items[3]
	if n3.Node.Metadata.Name != "n3" || n3.Requested["cpu"] != "1500m" || n3.Placements != 1 || n3.Node.Metadata.ResourceVersion != "1" ||
		n3.Node.Metadata.Labels["zone"] != "z1" || n3.Node.APIVersion != "v1" {
		t.Fatalf("n3 = %+v", n3)
	}
	var got []string
	token := ""
	for range 10 {
		var page nodeListOut
		s.must("GET", "/v1/nodes?selector=zone%3Dz0&limit=2&page_token="+token, "", &page)
		for _, it := range page.Items {
			got = append(got, it.Node.Metadata.Name)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if fmt.Sprint(got) != "[n0 n2 n4 n6]" {
		t.Fatalf("zone=z0 paged: %v", got)
	}
	got = nil
	for range 10 {
		var page nodeListOut
		s.must("GET", "/v1/nodes?limit=3&page_token="+token, "", &page)
		for _, it := range page.Items {
			got = append(got, it.Node.Metadata.Name)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if fmt.Sprint(got) != "[n0 n1 n2 n3 n4 n5 n6]" {
		t.Fatalf("paged: %v", got)
	}
	s.expectError(s.do("GET", "/v1/nodes?selector=zone%3D%3D%3D", ""), 400, "invalid_argument", "selector")
	s.expectError(s.do("GET", "/v1/nodes?limit=0", ""), 400, "invalid_argument", "limit")
	s.expectError(s.do("GET", "/v1/nodes?page_token=!!", ""), 400, "invalid_argument", "page_token")
	s.expectError(s.do("GET", "/v1/nodes/missing", ""), 404, "not_found", "name")
}

func TestDeleteNodeReleases(t *testing.T) {
	s := newPlacementServer(t)
	s.must("POST", "/v1/nodes", list(node("a", "1", "1Gi", nil, ""), node("b", "1", "1Gi", nil, "")), nil)
	s.must("POST", "/v1/placements", list(pod("p2", "100m", nil, `"nodeName":"a"`), pod("p1", "100m", nil, `"nodeName":"a"`), pod("q", "100m", nil, `"nodeName":"b"`)), nil)
	var ans struct {
		Revision int64     `json:"revision"`
		Released []keyJSON `json:"released"`
	}
	s.must("DELETE", "/v1/nodes/a", "", &ans)
	if ans.Revision != 3 || fmt.Sprint(ans.Released) != "[{default p1} {default p2}]" {
		t.Fatalf("delete: %+v", ans)
	}
	var ps placementListOut
	s.must("GET", "/v1/placements", "", &ps)
	if len(ps.Items) != 1 || ps.Items[0].Name != "q" {
		t.Fatalf("placements after delete: %+v", ps)
	}
	s.expectError(s.do("DELETE", "/v1/nodes/a", ""), 404, "not_found", "")
	s.must("DELETE", "/v1/nodes/b", "", &ans)
	if fmt.Sprint(ans.Released) != "[{default q}]" {
		t.Fatalf("delete b: %+v", ans)
	}
}

func TestPlace(t *testing.T) {
	s := newPlacementServer(t)
	gpu := `"spec":{"taints":[{"key":"dedicated","value":"gpu","effect":"NoSchedule"}]}`
	s.must("POST", "/v1/nodes", list(
		node("small-1", "1", "1Gi", map[string]string{"disk": "ssd"}, ""),
		node("small-2", "1", "1Gi", map[string]string{"disk": "ssd"}, ""),
		node("small-3", "1", "1Gi", map[string]string{"disk": "ssd"}, ""),
		node("gpu-1", "8", "8Gi", map[string]string{"disk": "ssd"}, gpu),
		node("gpu-2", "8", "8Gi", map[string]string{"disk": "ssd"}, gpu),
		node("hdd-1", "8", "8Gi", map[string]string{"disk": "hdd"}, ""),
	), nil)

	var ans placeOut
	r := s.must("POST", "/v1/placements", pod("web-0", "600m", map[string]string{"app": "web"}, `"nodeSelector":{"disk":"ssd"}`), &ans)
	if ans.Revision != 2 || len(ans.Results) != 1 || ans.Results[0].Namespace != "default" || ans.Results[0].Name != "web-0" ||
		ans.Results[0].Node != "small-1" || r.header.Get("X-Sextant-Revision") != "2" {
		t.Fatalf("single pod: %+v", ans)
	}
	// A List is placed in order, each pod seeing the ones before it: three
	// more fill small-2 and small-3, the last fits nowhere.
	var items []string
	for i := 1; i <= 3; i++ {
		items = append(items, pod(fmt.Sprint("web-", i), "600m", map[string]string{"app": "web"}, `"nodeSelector":{"disk":"ssd"}`))
	}
	s.must("POST", "/v1/placements", list(items...), &ans)
	want := "0/6 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) didn't match Pod's node affinity/selector."
	if ans.Revision != 3 || ans.Results[0].Node != "small-2" || ans.Results[1].Node != "small-3" || ans.Results[2].Unschedulable != want {
		t.Fatalf("List: %+v\nwant the last: %s", ans, want)
	}
	// Already placed: 409 naming the item; nothing of the request is placed.
	s.expectError(s.do("POST", "/v1/placements", pod("web-0", "1m", nil, "")), 409, "conflict", "metadata.name")
	s.expectError(s.do("POST", "/v1/placements", list(pod("new", "1m", nil, ""), pod("web-1", "1m", nil, ""))), 409, "conflict", "items[1].metadata.name")
	// A malformed item rejects the whole request.
	s.expectError(s.do("POST", "/v1/placements", list(pod("new", "1m", nil, ""), pod("x", "1.5x", nil, ""))), 400, "invalid_argument", "items[1].spec.containers[0].resources.requests.cpu")
	s.expectError(s.do("POST", "/v1/placements", list(pod("new", "1m", nil, ""), pod("x", "1m", nil, `"schedulingGates":[{"name":"g"}]`))), 400, "invalid_argument", "items[1].spec.schedulingGates")
	s.expectError(s.do("POST", "/v1/placements", list(pod("new", "1m", nil, ""), pod("x", "1m", nil, `"nodeSelectr":{}`))), 400, "invalid_argument", "items[1].spec.nodeSelectr")
	s.expectError(s.do("POST", "/v1/placements", list(pod("new", "1m", nil, ""), pod("new", "1m", nil, ""))), 400, "invalid_argument", "items[1].metadata.name")
	s.expectError(s.do("POST", "/v1/placements", list()), 400, "invalid_argument", "items")
	s.expectError(s.do("POST", "/v1/placements?dry_run=maybe", pod("new", "1m", nil, "")), 400, "invalid_argument", "dry_run")
	var ps placementListOut
	s.must("GET", "/v1/placements", "", &ps)
	if len(ps.Items) != 3 || ps.Revision != 3 {
		t.Fatalf("refused requests placed something: %+v", ps)
	}
	// A dry run says where a pod would go and reserves nothing.
	s.must("POST", "/v1/placements?dry_run=true", pod("probe", "100m", nil, `"tolerations":[{"key":"dedicated","operator":"Exists"}]`), &ans)
	if !ans.DryRun || ans.Revision != 3 || ans.Results[0].Node == "" {
		t.Fatalf("dry run: %+v", ans)
	}
	s.expectError(s.do("GET", "/v1/placements/default/probe", ""), 404, "not_found", "name")
	// YAML, in another namespace.
	y := "apiVersion: v1\nkind: Pod\nmetadata: {name: db-0, namespace: prod, labels: {app: db}}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: 2, memory: 1Gi}}\n"
	r = s.send("POST", "/v1/placements", "application/yaml", y)
	if r.status != 200 {
		t.Fatalf("YAML pod: %d %s", r.status, r.body)
	}
	r.decode(t, &ans)
	if ans.Results[0].Namespace != "prod" || ans.Results[0].Node != "hdd-1" {
		t.Fatalf("YAML pod: %+v", ans)
	}
}

func TestListAndDeletePlacements(t *testing.T) {
	s := newPlacementServer(t)
	s.must("POST", "/v1/nodes", list(node("a", "4", "4Gi", nil, ""), node("b", "4", "4Gi", nil, "")), nil)
	var items []string
	for i := range 5 {
		items = append(items, pod(fmt.Sprint("w", i), "500m", map[string]string{"app": "web", "i": fmt.Sprint(i % 2)}, fmt.Sprintf(`"nodeName":%q`, []string{"a", "b"}[i%2])))
	}
	s.must("POST", "/v1/placements", list(items...), nil)
	y := "apiVersion: v1\nkind: Pod\nmetadata: {name: d, namespace: prod}\nspec: {nodeName: b, containers: [{name: c}]}\n"
	if r := s.send("POST", "/v1/placements", "application/yaml", y); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	names := func(q string) string {
		var out []string
		token := ""
		for range 10 {
			var page placementListOut
			s.must("GET", "/v1/placements?limit=2&"+q+"&page_token="+token, "", &page)
			for _, p := range page.Items {
				out = append(out, p.Namespace+"/"+p.Name+"@"+p.Node)
			}
			if token = page.NextPageToken; token == "" {
				break
			}
		}
		return fmt.Sprint(out)
	}
	for q, want := range map[string]string{
		"":                      "[default/w0@a default/w1@b default/w2@a default/w3@b default/w4@a prod/d@b]",
		"namespace=prod":        "[prod/d@b]",
		"node=b":                "[default/w1@b default/w3@b prod/d@b]",
		"selector=i%3D1":        "[default/w1@b default/w3@b]",
		"node=a&selector=i%3D0": "[default/w0@a default/w2@a default/w4@a]",
		"node=missing":          "[]",
	} {
		if got := names(q); got != want {
			t.Errorf("?%s: %s, want %s", q, got, want)
		}
	}
	var one placementOut
	s.must("GET", "/v1/placements/default/w1", "", &one)
	if one.Node != "b" || one.Labels["app"] != "web" || one.Requests["cpu"] != "500m" || one.Revision != 2 {
		t.Fatalf("w1 = %+v", one)
	}
	var del struct {
		Revision int64  `json:"revision"`
		Node     string `json:"node"`
	}
	s.must("DELETE", "/v1/placements/default/w1", "", &del)
	if del.Revision != 4 || del.Node != "b" {
		t.Fatalf("delete: %+v", del)
	}
	var it nodeItemOut
	s.must("GET", "/v1/nodes/b", "", &it)
	if it.Requested["cpu"] != "500m" || it.Placements != 2 {
		t.Fatalf("node b after the delete: %+v", it)
	}
	s.expectError(s.do("DELETE", "/v1/placements/default/w1", ""), 404, "not_found", "")
	s.expectError(s.do("GET", "/v1/placements?selector=a%3D%3D%3D", ""), 400, "invalid_argument", "selector")
	s.expectError(s.do("GET", "/v1/placements?limit=10001", ""), 400, "invalid_argument", "limit")
}

// TestPlacementNotEnabled: a server without the scheduler's tables says so.
func TestPlacementNotEnabled(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.expectError(s.do("GET", "/v1/nodes", ""), 404, "not_found", "")
	s.expectError(s.do("POST", "/v1/placements", pod("p", "1", nil, "")), 404, "not_found", "")
}

// TestConcurrentPlacersNeverOvercommit: many HTTP clients placing at once
// on a small cluster: exactly the capacity is placed, no node holds more
// than it has, and every answer agrees with what is stored.
func TestConcurrentPlacersNeverOvercommit(t *testing.T) {
	s := newPlacementServer(t)
	s.must("POST", "/v1/nodes", list(node("a", "1", "1Gi", nil, ""), node("b", "1", "1Gi", nil, ""), node("c", "1", "1Gi", nil, ""), node("d", "1", "1Gi", nil, "")), nil)
	const clients, each = 24, 4
	var mu sync.Mutex
	placed := map[string]string{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				body := pod(fmt.Sprintf("c%d-%d", c, i), "250m", nil, "")
				if i%2 == 1 { // some requests are Lists of two
					body = list(pod(fmt.Sprintf("c%d-%d", c, i), "250m", nil, ""), pod(fmt.Sprintf("c%d-%db", c, i), "250m", nil, ""))
				}
				req, _ := http.NewRequest("POST", s.url+"/v1/placements", strings.NewReader(body))
				resp, err := s.srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var ans placeOut
				err = json.NewDecoder(resp.Body).Decode(&ans)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					t.Errorf("status %d: %v", resp.StatusCode, err)
					return
				}
				mu.Lock()
				for _, r := range ans.Results {
					if r.Node != "" {
						placed[r.Name] = r.Node
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(placed) != 16 {
		t.Fatalf("%d placed, want 16 (4 of 250m per 1-cpu node)", len(placed))
	}
	var nodes nodeListOut
	s.must("GET", "/v1/nodes", "", &nodes)
	for _, it := range nodes.Items {
		if it.Requested["cpu"] != "1" || it.Placements != 4 {
			t.Fatalf("node %s: requested %v, %d placements", it.Node.Metadata.Name, it.Requested, it.Placements)
		}
	}
	var ps placementListOut
	s.must("GET", "/v1/placements", "", &ps)
	for _, p := range ps.Items {
		if placed[p.Name] != p.Node {
			t.Fatalf("%s stored on %s, answered %q", p.Name, p.Node, placed[p.Name])
		}
	}
}

// FuzzPlacementBodies: whatever a client sends as a Node, a List of Nodes,
// a Pod or a List of Pods (JSON or YAML), the answer is either accepted
// or a 400 invalid_argument with a message.
func FuzzPlacementBodies(f *testing.F) {
	for _, s := range []string{
		node("n", "1", "1Gi", map[string]string{"a": "b"}, ""),
		list(node("n", "1", "1Gi", nil, ""), node("m", "1.5x", "1Gi", nil, "")),
		pod("p", "100m", map[string]string{"app": "x"}, `"nodeSelector":{"a":"b"}`),
		list(pod("p", "1", nil, ""), pod("q", "1", nil, `"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"zone","labelSelector":{"matchLabels":{"a":"b"}}}]}}`)),
		"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n",
		`{"apiVersion":"v1","kind":"List","items":null}`, `{"kind":"Pod"}`, `[]`, `null`, ``, `{"items":[{}],"kind":"List","apiVersion":"v1"}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, yamlBody bool) {
		check := func(err error) {
			if err == nil {
				return
			}
			var ae *apiError
			if !errors.As(placementError(err), &ae) || ae.status != http.StatusBadRequest || ae.code != "invalid_argument" || ae.msg == "" {
				t.Fatalf("error %v is not a 400 invalid_argument with a message", err)
			}
		}
		_, err := placement.DecodeNodes(body, yamlBody)
		check(err)
		_, err = placement.DecodeNode(body, yamlBody)
		check(err)
		_, err = placement.DecodePods(body, yamlBody)
		check(err)
		isList(body, yamlBody)
	})
}
