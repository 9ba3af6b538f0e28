package httpapi

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/registry"
)

func seed(s *testServer) {
	s.must("POST", "/v1/instances", batch(
		`{"id":"i1","service":"web","host":"h","port":1,"metadata":{"zone":"z1","env":"prod"}}`,
		`{"id":"i2","service":"web","host":"h","port":2,"metadata":{"zone":"z2","env":"prod"}}`,
		`{"id":"i3","service":"web","host":"h","port":3,"metadata":{"zone":"z3"}}`,
		`{"id":"i0","service":"web","host":"h","port":4,"metadata":{"zone":"z1","env":"dev"},"isolated":true}`,
		`{"id":"j1","service":"api","host":"h","port":1,"metadata":{"zone":"z1"}}`,
		`{"id":"k1","namespace":"other","service":"web","host":"h","port":1}`,
	), nil)
}

func TestQueryService(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	seed(s)
	tests := []struct {
		selector string
		healthy  string
		want     string
	}{
		{"", "", "[i0 i1 i2 i3]"},
		{"", "true", "[i1 i2 i3]"}, // isolated is never healthy_only
		{"zone=z1", "", "[i0 i1]"},
		{"zone==z1", "false", "[i0 i1]"},
		{"zone!=z1", "", "[i2 i3]"},
		{"zone in (z1,z3)", "", "[i0 i1 i3]"},
		{"zone notin (z1,z3)", "", "[i2]"},
		{"env", "", "[i0 i1 i2]"},
		{"!env", "", "[i3]"},
		{"env=prod,zone!=z2", "", "[i1]"},
		{"env!=prod", "", "[i0 i3]"}, // absent key matches !=
		{"zone=nowhere", "", "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.selector+"/"+tt.healthy, func(t *testing.T) {
			s.t = t
			v := url.Values{}
			if tt.selector != "" {
				v.Set("selector", tt.selector)
			}
			if tt.healthy != "" {
				v.Set("healthy_only", tt.healthy)
			}
			var q queryAnswer
			r := s.must("GET", "/v1/namespaces/default/services/web/instances?"+v.Encode(), "", &q)
			if got := fmt.Sprint(ids(q.Instances)); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if q.Revision != 1 || r.header.Get("X-Sextant-Revision") != "1" {
				t.Fatalf("revision %d / header %q, want 1", q.Revision, r.header.Get("X-Sextant-Revision"))
			}
		})
	}
	s.t = t
	var q queryAnswer
	s.must("GET", "/v1/namespaces/default/services/unknown/instances", "", &q)
	if q.Revision != 0 || q.Instances == nil || len(q.Instances) != 0 {
		t.Fatalf("unknown service: %+v, want revision 0 and an empty list", q)
	}
	bad := []struct{ query, field string }{
		{"selector=" + url.QueryEscape("zone in (z1"), "selector"},
		{"selector=" + url.QueryEscape("a=b=c"), "selector"},
		{"healthy_only=yes", "healthy_only"},
		{"index=-1", "index"},
		{"index=x", "index"},
		{"index=1&wait=forever", "wait"},
		{"index=1&wait=6m", "wait"},
	}
	for _, b := range bad {
		s.expectError(s.do("GET", "/v1/namespaces/default/services/web/instances?"+b.query, ""), 400, "invalid_argument", b.field)
	}
	s.expectError(s.do("GET", "/v1/namespaces/Bad/services/web/instances", ""), 400, "invalid_argument", "namespace")
	s.expectError(s.do("GET", "/v1/namespaces/default/services/bad_/instances", ""), 400, "invalid_argument", "service")
}

func TestBlockingQuery(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	seed(s)
	path := "/v1/namespaces/default/services/web/instances"

	// An index below the current revision answers at once.
	start := time.Now()
	var q queryAnswer
	s.must("GET", path+"?index=0&wait=10s", "", &q)
	if time.Since(start) > 2*time.Second || q.Revision != 1 {
		t.Fatalf("index 0: revision %d after %v", q.Revision, time.Since(start))
	}

	// A change to the service wakes a waiter; a change elsewhere does not.
	done := make(chan queryAnswer, 1)
	go func() {
		var q queryAnswer
		s.must("GET", path+"?index=1&wait=20s", "", &q)
		done <- q
	}()
	waitFor(t, func() bool { return s.reg.Catalog().Waiters() == 1 })
	s.must("POST", "/v1/instances", `{"id":"z","service":"api","host":"h","port":9}`, nil)
	select {
	case q := <-done:
		t.Fatalf("woken by another service's change: %+v", q)
	case <-time.After(200 * time.Millisecond):
	}
	// A no-op register does not wake it either.
	s.must("POST", "/v1/instances", `{"id":"i3","service":"web","host":"h","port":3,"metadata":{"zone":"z3"}}`, nil)
	select {
	case q := <-done:
		t.Fatalf("woken by a register that changed nothing: %+v", q)
	case <-time.After(200 * time.Millisecond):
	}
	var a registerAnswer
	s.must("POST", "/v1/instances", `{"id":"i9","service":"web","host":"h","port":9}`, &a)
	select {
	case q := <-done:
		if q.Revision != a.Revision || len(q.Instances) != 5 {
			t.Fatalf("woken with %+v, want revision %d and 5 instances", q, a.Revision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking query not woken by a change to its service")
	}

	// wait bounds the hold; the answer is the current state.
	start = time.Now()
	s.must("GET", path+"?index=100&wait=150ms", "", &q)
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("wait=150ms held %v", d)
	}
	if q.Revision != a.Revision {
		t.Fatalf("timed-out query revision %d, want %d", q.Revision, a.Revision)
	}

	// A service that does not exist yet wakes when it is created.
	go func() {
		var q queryAnswer
		s.must("GET", "/v1/namespaces/default/services/later/instances?index=0&wait=20s", "", &q)
		done <- q
	}()
	waitFor(t, func() bool { return s.reg.Catalog().Waiters() == 1 })
	s.must("POST", "/v1/instances", `{"service":"later","host":"h","port":9}`, nil)
	select {
	case q := <-done:
		if len(q.Instances) != 1 {
			t.Fatalf("new service answer %+v", q)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking query on a new service not woken")
	}
}

func TestBlockingQueryLimit(t *testing.T) {
	st := newTestServer(t, registry.Options{})
	st.api.opts.MaxWaiting = 1
	held := make(chan error, 1)
	go func() { // not st.do: a goroutine must not call t.Fatal
		resp, err := st.srv.Client().Get(st.url + "/v1/namespaces/default/services/x/instances?index=5&wait=10s")
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	waitFor(t, func() bool { return st.reg.Catalog().Waiters() == 1 })
	st.expectError(st.do("GET", "/v1/namespaces/default/services/y/instances?index=5&wait=10s", ""), 429, "resource_exhausted", "")
	st.api.Shutdown() // releases the held one at once
	waitFor(t, func() bool { return st.reg.Catalog().Waiters() == 0 })
	if err := <-held; err != nil {
		t.Fatalf("held blocking query: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestListAndPaging(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	seed(s)
	var q queryAnswer
	s.must("GET", "/v1/instances", "", &q)
	if got := fmt.Sprint(ids(q.Instances)); got != "[j1 i0 i1 i2 i3 k1]" || q.NextPageToken != "" {
		t.Fatalf("list all: %s token %q (want namespace, service, id order)", got, q.NextPageToken)
	}
	s.must("GET", "/v1/instances?service=web&healthy_only=true", "", &q)
	if got := fmt.Sprint(ids(q.Instances)); got != "[i1 i2 i3 k1]" {
		t.Fatalf("service=web healthy: %s", got)
	}
	s.must("GET", "/v1/instances?namespace=default&selector=zone%3Dz1", "", &q)
	if got := fmt.Sprint(ids(q.Instances)); got != "[j1 i0 i1]" {
		t.Fatalf("namespace=default zone=z1: %s", got)
	}
	// Page through with limit 2.
	var all []string
	token := ""
	for range 10 {
		s.must("GET", "/v1/instances?limit=2&page_token="+url.QueryEscape(token), "", &q)
		all = append(all, ids(q.Instances)...)
		if token = q.NextPageToken; token == "" {
			break
		}
	}
	if got := fmt.Sprint(all); got != "[j1 i0 i1 i2 i3 k1]" {
		t.Fatalf("paged: %s", got)
	}
	for _, b := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=10001", "limit"}, {"limit=x", "limit"},
		{"page_token=!!", "page_token"}, {"namespace=A", "namespace"}, {"service=-x", "service"},
		{"selector=%3D", "selector"},
	} {
		s.expectError(s.do("GET", "/v1/instances?"+b.query, ""), 400, "invalid_argument", b.field)
	}

	var ns struct {
		Revision   int64    `json:"revision"`
		Namespaces []string `json:"namespaces"`
	}
	s.must("GET", "/v1/namespaces", "", &ns)
	if fmt.Sprint(ns.Namespaces) != "[default other]" || ns.Revision != 1 {
		t.Fatalf("namespaces %+v", ns)
	}
	var sv struct {
		Services []struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Instances int    `json:"instances"`
			Healthy   int    `json:"healthy"`
			Revision  int64  `json:"revision"`
		} `json:"services"`
	}
	s.must("GET", "/v1/namespaces/default/services", "", &sv)
	if got := fmt.Sprintf("%+v", sv.Services); got != "[{Namespace:default Name:api Instances:1 Healthy:1 Revision:1} {Namespace:default Name:web Instances:4 Healthy:3 Revision:1}]" {
		t.Fatalf("services %s", got)
	}
	// An emptied service leaves the listings.
	s.must("POST", "/v1/instances:deregister", `{"ids":["k1"]}`, nil)
	s.must("GET", "/v1/namespaces", "", &ns)
	if fmt.Sprint(ns.Namespaces) != "[default]" {
		t.Fatalf("namespaces after emptying other: %v", ns.Namespaces)
	}
}

type changesAnswer struct {
	Revision int64 `json:"revision"`
	Changes  []struct {
		Revision int64        `json:"revision"`
		Op       string       `json:"op"`
		ID       string       `json:"id"`
		Instance *instanceOut `json:"instance"`
	} `json:"changes"`
	More bool `json:"more"`
}

// TestChangesReproduceRegistry follows /v1/changes through random writes and
// checks that the follower's copy equals a full list at every step.
func TestChangesReproduceRegistry(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	rng := rand.New(rand.NewPCG(7, 7))
	follower := map[string]instanceOut{}
	var since int64
	follow := func() {
		for range 1000 {
			var c changesAnswer
			s.must("GET", "/v1/changes?limit=7&since="+strconv.FormatInt(since, 10), "", &c)
			for _, ch := range c.Changes {
				if ch.Revision <= since {
					t.Fatalf("change at %d not after since %d", ch.Revision, since)
				}
				switch ch.Op {
				case "upsert":
					follower[ch.Instance.ID] = *ch.Instance
				case "delete":
					delete(follower, ch.ID)
				default:
					t.Fatalf("op %q", ch.Op)
				}
			}
			since = c.Revision
			if !c.More {
				return
			}
		}
		t.Fatal("feed never ended")
	}
	for step := range 60 {
		var items []string
		for range 1 + rng.IntN(12) {
			id := "i" + strconv.Itoa(rng.IntN(40))
			items = append(items, fmt.Sprintf(`{"id":%q,"service":"s%d","host":"h","port":%d,"metadata":{"v":"%d"}}`, id, rng.IntN(3), 1+rng.IntN(3), rng.IntN(2)))
		}
		s.must("POST", "/v1/instances", batch(items...), nil)
		if rng.IntN(2) == 0 {
			s.must("POST", "/v1/instances:deregister", fmt.Sprintf(`{"ids":["i%d","i%d"]}`, rng.IntN(40), rng.IntN(40)), nil)
		}
		follow()
		var q queryAnswer
		s.must("GET", "/v1/instances?limit=10000", "", &q)
		want := map[string]instanceOut{}
		for _, in := range q.Instances {
			want[in.ID] = in
		}
		if q.Revision != since {
			t.Fatalf("step %d: follower at %d, list at %d", step, since, q.Revision)
		}
		if diff := cmp.Diff(want, follower); diff != "" {
			t.Fatalf("step %d: follower differs from the registry (-list +follower):\n%s", step, diff)
		}
	}
}

func TestChangesPagingAndCompaction(t *testing.T) {
	s := newTestServer(t, registry.Options{Engine: commit.Options{Catalog: catalog.Options{LogSize: 10}}})
	// Revision 1 has 6 changes: a page never splits a revision.
	s.must("POST", "/v1/instances", batch(inst("s", "h", 1, nil), inst("s", "h", 2, nil), inst("s", "h", 3, nil), inst("s", "h", 4, nil), inst("s", "h", 5, nil), inst("s", "h", 6, nil)), nil)
	s.must("POST", "/v1/instances", inst("s", "h", 7, nil), nil)
	var c changesAnswer
	s.must("GET", "/v1/changes?since=0&limit=2", "", &c)
	if len(c.Changes) != 6 || c.Revision != 1 || !c.More {
		t.Fatalf("limit 2 over a 6-change revision: %d changes, revision %d, more %v", len(c.Changes), c.Revision, c.More)
	}
	s.must("GET", "/v1/changes?since=1", "", &c)
	if len(c.Changes) != 1 || c.Revision != 2 || c.More {
		t.Fatalf("since 1: %+v", c)
	}
	for i := 8; i < 14; i++ {
		s.must("POST", "/v1/instances", inst("s", "h", i, nil), nil)
	}
	s.expectError(s.do("GET", "/v1/changes?since=0", ""), 410, "compacted", "since")
	s.must("GET", "/v1/changes?since=4", "", &c)
	if len(c.Changes) != 4 || c.Revision != 8 {
		t.Fatalf("since 4 after compaction: %d changes, revision %d", len(c.Changes), c.Revision)
	}
	s.must("GET", "/v1/changes?since=8", "", &c)
	if len(c.Changes) != 0 || c.Revision != 8 || c.More {
		t.Fatalf("caught up: %+v", c)
	}
	for _, b := range []string{"since=-1", "since=x", "limit=0", "limit=10001"} {
		r := s.do("GET", "/v1/changes?"+b, "")
		if r.status != 400 {
			t.Fatalf("%s: status %d", b, r.status)
		}
	}
}

// TestBlockingQueryOlderThanIndex: a blocking query answered with a
// revision below its index (the service shrank across a restart, or is
// unknown) carries the server's catalog revision, so a client that saw
// the index elsewhere can tell a current answer from a server behind; an
// answer at or above its index does not.
func TestBlockingQueryOlderThanIndex(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	seed(s)
	cat := strconv.FormatInt(s.reg.Catalog().Revision(), 10)
	for _, c := range []struct{ path, applied string }{
		{"/v1/namespaces/default/services/web/instances?index=0&wait=1ms", ""},
		{"/v1/namespaces/default/services/web/instances?wait=1ms", ""},
		{"/v1/namespaces/default/services/web/instances?index=1000&wait=1ms", cat},
		{"/v1/namespaces/default/services/never/instances?index=1&wait=1ms", cat},
		{"/v1/namespaces/default/services/never/instances", ""},
	} {
		r := s.do("GET", c.path, "")
		if r.status != 200 || r.header.Get(AppliedHeader) != c.applied {
			t.Errorf("%s: status %d, %s %q, want %q", c.path, r.status, AppliedHeader, r.header.Get(AppliedHeader), c.applied)
		}
	}
}
