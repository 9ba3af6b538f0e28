package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// caller sends requests to a real stack with a token.
type caller struct {
	t    *testing.T
	base string
	hc   *http.Client
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (c caller) do(method, path, body, token string) answer {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// must sends a request that must answer 200 and decodes its body into v.
func (c caller) must(method, path, body, token string, v any) {
	c.t.Helper()
	a := c.do(method, path, body, token)
	if a.status != 200 {
		c.t.Fatalf("%s %s: %d %s", method, path, a.status, a.body)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(a.body), v); err != nil {
			c.t.Fatal(err)
		}
	}
}

type tokenAnswer struct {
	AccessorID string `json:"accessor_id"`
	Secret     string `json:"secret"`
}

// world is an ACL'd stack with tokens of every kind the tests need.
type world struct {
	caller
	srv                               *apitest.Server
	audit                             *syncBuffer
	admin, readA, writeA, otherB, bad tokenAnswer
}

func newWorld(t *testing.T, opts acl.Options) *world {
	t.Helper()
	audit := &syncBuffer{}
	opts.Enabled = true
	opts.Audit = slog.New(slog.NewJSONHandler(audit, nil))
	srv := apitest.StartWith(t, apitest.Options{ACL: opts})
	w := &world{caller: caller{t: t, base: srv.URL, hc: srv.Client()}, srv: srv, audit: audit}
	w.must("POST", "/v1/acl/bootstrap", `{"description":"root"}`, "", &w.admin)
	for name, rule := range map[string]string{
		"a-read":  `{"namespace":"a","instances":"read","config":"read","push":"read","placements":"read"}`,
		"a-write": `{"namespace":"a","instances":"write","config":"write","placements":"write"}`,
		"b-write": `{"namespace":"b","instances":"write","config":"write","placements":"write"}`,
	} {
		w.must("POST", "/v1/acl/policies", `{"name":"`+name+`","rules":[`+rule+`]}`, w.admin.Secret, nil)
	}
	w.readA = w.token("a-read")
	w.writeA = w.token("a-write")
	w.otherB = w.token("b-write")
	// A well-formed token nobody was given: the admin's accessor, a wrong secret.
	w.bad = tokenAnswer{Secret: w.admin.Secret[:len(w.admin.Secret)-8] + "00000000"}
	if w.bad.Secret == w.admin.Secret {
		w.bad.Secret = w.admin.Secret[:len(w.admin.Secret)-8] + "11111111"
	}
	return w
}

func (w *world) token(policies ...string) tokenAnswer {
	w.t.Helper()
	var tok tokenAnswer
	b, _ := json.Marshal(map[string]any{"policies": policies})
	w.must("POST", "/v1/acl/tokens", string(b), w.admin.Secret, &tok)
	return tok
}

// fixtures (re)creates what the endpoint table reads and deletes.
func (w *world) fixtures() {
	w.must("POST", "/v1/instances", `{"instances":[
		{"id":"ia","namespace":"a","service":"s","host":"10.0.0.1","port":80},
		{"id":"ia2","namespace":"a","service":"s","host":"10.0.0.2","port":80},
		{"id":"ib","namespace":"b","service":"s","host":"10.0.0.3","port":80}]}`, w.admin.Secret, nil)
	w.must("POST", "/v1/config:apply", vsIn("a", "orders", "orders")+"---\n"+drIn("a", "tmp", "orders"), w.admin.Secret, nil)
	w.do("DELETE", "/v1/placements/a/p-new", "", w.admin.Secret)
	w.do("PUT", "/v1/nodes/n1", testNode("n1"), w.admin.Secret)
	w.do("POST", "/v1/placements", testPod("a", "p1"), w.admin.Secret)
	w.do("POST", "/v1/placements", testPod("b", "pb"), w.admin.Secret)
	w.do("DELETE", "/v1/acl/policies/tmp", "", w.admin.Secret)
	w.do("PUT", "/v1/acl/policies/tmp2", `{"admin":true}`, w.admin.Secret)
	if a := w.do("POST", "/v1/acl/policies", `{"name":"tmp2","admin":true}`, w.admin.Secret); a.status != 200 && a.status != 409 {
		w.t.Fatalf("fixture tmp2: %d %s", a.status, a.body)
	}
}

// TestEndpointPermissions is the table of every endpoint against every
// kind of caller: no token, a bad token, a token of another namespace, a
// read-only token, a write token and an admin token.
func TestEndpointPermissions(t *testing.T) {
	w := newWorld(t, acl.Options{})
	type row struct {
		method, path, body string
		// no token, bad token, other namespace, read, write, admin
		want [6]int
	}
	throwaway := "" // a token to delete, made fresh for each caller
	rows := []row{
		{"POST", "/v1/instances", `{"id":"new","namespace":"a","service":"s","host":"10.0.0.9","port":80}`, [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/instances?namespace=a", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/v1/instances", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"POST", "/v1/instances:deregister", `{"ids":["ia2"]}`, [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/instances/ia", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"DELETE", "/v1/instances/ia2", "", [6]int{401, 401, 403, 403, 200, 200}},
		{"POST", "/v1/heartbeats", `{"ids":["ia"]}`, [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/namespaces", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"GET", "/v1/namespaces/a/services", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/v1/namespaces/a/services/s/instances", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/v1/namespaces/a/services/s/instances?index=1&wait=1ms", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/v1/changes", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"GET", "/v1/sd/prometheus", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"GET", "/v1/sd/prometheus?namespace=a", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/metrics", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"POST", "/v1/config:apply", vsIn("a", "orders", "orders"), [6]int{401, 401, 403, 403, 200, 200}},
		{"POST", "/v1/config:apply?dry_run=true", vsIn("a", "orders", "orders"), [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/config?namespace=a", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/v1/config", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"GET", "/v1/config?index=1&wait=1ms", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"GET", "/v1/config/vs/a/orders", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"PUT", "/v1/config/vs/a/orders", vsIn("a", "orders", "orders"), [6]int{401, 401, 403, 403, 200, 200}},
		{"DELETE", "/v1/config/dr/a/tmp", "", [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/push/status", "", [6]int{401, 401, 403, 403, 403, 404}}, // no control plane in apitest
		{"PUT", "/v1/nodes/n2", testNode("n2"), [6]int{401, 401, 403, 403, 403, 200}},
		{"POST", "/v1/nodes", `{"apiVersion":"v1","kind":"List","items":[` + testNode("n3") + `]}`, [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/v1/nodes", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/v1/nodes/n1", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"DELETE", "/v1/nodes/n3", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"POST", "/v1/placements", testPod("a", "p-new"), [6]int{401, 401, 403, 403, 200, 200}},
		{"POST", "/v1/placements?dry_run=true", testPod("a", "p-dry"), [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/placements?namespace=a", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"GET", "/v1/placements", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"GET", "/v1/placements/a/p1", "", [6]int{401, 401, 403, 200, 200, 200}},
		{"DELETE", "/v1/placements/a/p1", "", [6]int{401, 401, 403, 403, 200, 200}},
		{"GET", "/v1/acl/self", "", [6]int{401, 401, 200, 200, 200, 200}},
		{"POST", "/v1/acl/bootstrap", "", [6]int{409, 401, 409, 409, 409, 409}},
		{"POST", "/v1/acl/tokens", `{"policies":["a-read"]}`, [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/v1/acl/tokens", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/v1/acl/tokens/" + w.readA.AccessorID, "", [6]int{401, 401, 403, 403, 403, 200}},
		{"DELETE", "/v1/acl/tokens/{throwaway}", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"POST", "/v1/acl/policies", `{"name":"tmp","admin":true}`, [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/v1/acl/policies", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/v1/acl/policies/a-read", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"PUT", "/v1/acl/policies/a-read", `{"rules":[{"namespace":"a","instances":"read"}]}`, [6]int{401, 401, 403, 403, 403, 200}},
		{"DELETE", "/v1/acl/policies/tmp2", "", [6]int{401, 401, 403, 403, 403, 200}},
		{"GET", "/healthz", "", [6]int{200, 200, 200, 200, 200, 200}},
		{"GET", "/readyz", "", [6]int{200, 200, 200, 200, 200, 200}},
	}
	callers := []struct {
		name  string
		token *tokenAnswer
	}{{"no token", nil}, {"bad token", &w.bad}, {"other namespace", &w.otherB}, {"read", &w.readA}, {"write", &w.writeA}, {"admin", &w.admin}}
	for _, r := range rows {
		for i, c := range callers {
			t.Run(r.method+" "+r.path+"/"+c.name, func(t *testing.T) {
				w.t = t
				w.fixtures()
				path := r.path
				if strings.Contains(path, "{throwaway}") {
					throwaway = w.token("a-read").AccessorID
					path = strings.Replace(path, "{throwaway}", throwaway, 1)
				}
				tok := ""
				if c.token != nil {
					tok = c.token.Secret
				}
				a := w.do(r.method, path, r.body, tok)
				if a.status != r.want[i] {
					t.Fatalf("%d, want %d: %s", a.status, r.want[i], a.body)
				}
				if a.status >= 400 {
					var e struct {
						Error struct{ Code, Message string }
					}
					if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error.Message == "" {
						t.Fatalf("error body %q is not the API's", a.body)
					}
					want := map[int]string{401: "unauthenticated", 403: "permission_denied", 404: "not_found", 409: "conflict"}[a.status]
					if e.Error.Code != want {
						t.Fatalf("code %q, want %q", e.Error.Code, want)
					}
					if a.status == 403 && !strings.Contains(e.Error.Message, "lacks ") {
						t.Fatalf("403 message %q does not name the missing permission", e.Error.Message)
					}
				}
			})
		}
	}
	w.t = t

	// Listings across namespaces show only what the caller may read.
	var list struct {
		Instances []struct{ ID, Namespace string }
	}
	w.must("GET", "/v1/instances", "", w.otherB.Secret, &list)
	for _, in := range list.Instances {
		if in.Namespace != "b" {
			t.Fatalf("token of namespace b lists %s/%s", in.Namespace, in.ID)
		}
	}
	// Prometheus service discovery too: a reader of a discovers a's
	// instances, and asking for b by name is refused.
	var groups []struct{ Labels map[string]string }
	w.must("GET", "/v1/sd/prometheus?healthy_only=false", "", w.readA.Secret, &groups)
	var sd []string
	for _, g := range groups {
		sd = append(sd, g.Labels["__meta_sextant_namespace"]+"/"+g.Labels["__meta_sextant_instance_id"])
		if g.Labels["__meta_sextant_namespace"] != "a" {
			t.Fatalf("prometheus SD for a reader of a: %v", sd)
		}
	}
	if !slices.Contains(sd, "a/ia") {
		t.Fatalf("prometheus SD for a reader of a misses a/ia: %v", sd)
	}
	if a := w.do("GET", "/v1/sd/prometheus?namespace=b", "", w.readA.Secret); a.status != 403 || !strings.Contains(a.body, `instances:read on namespace \"b\"`) {
		t.Fatalf("prometheus SD of b for a reader of a: %d %s", a.status, a.body)
	}
	var nss struct{ Namespaces []string }
	w.must("GET", "/v1/namespaces", "", w.readA.Secret, &nss)
	if fmt.Sprint(nss.Namespaces) != "[a]" {
		t.Fatalf("namespaces for a reader of a: %v", nss.Namespaces)
	}
	var feed struct {
		Changes []struct {
			Instance *struct{ Namespace string }
		}
	}
	w.must("GET", "/v1/changes?limit=10000", "", w.readA.Secret, &feed)
	for _, ch := range feed.Changes {
		if ch.Instance != nil && ch.Instance.Namespace != "a" {
			t.Fatalf("change feed for a reader of a carries namespace %s", ch.Instance.Namespace)
		}
	}
	if len(feed.Changes) == 0 {
		t.Fatal("the reader of a sees no change at all")
	}
	// A VirtualService in a cannot route b's service; a token of b sees
	// none of a's config in a listing.
	a := w.do("POST", "/v1/config:apply", vsIn("a", "steal", "orders.b"), w.writeA.Secret)
	if a.status != 403 || !strings.Contains(a.body, `config:write on namespace \"b\"`) {
		t.Fatalf("routing another namespace's host: %d %s", a.status, a.body)
	}
	var cfgs struct {
		Items []struct{ Metadata struct{ Namespace string } }
	}
	w.must("GET", "/v1/config", "", w.otherB.Secret, &cfgs)
	for _, it := range cfgs.Items {
		if it.Metadata.Namespace != "b" {
			t.Fatalf("token of b lists config of %s", it.Metadata.Namespace)
		}
	}
	// A register cannot take over an id of another namespace.
	a = w.do("POST", "/v1/instances", `{"id":"ib","namespace":"a","service":"s","host":"10.0.0.3","port":80}`, w.writeA.Secret)
	if a.status != 403 || !strings.Contains(a.body, `namespace \"b\"`) {
		t.Fatalf("moving b's instance into a: %d %s", a.status, a.body)
	}
}

func TestAnonymousRead(t *testing.T) {
	w := newWorld(t, acl.Options{AnonymousRead: true})
	w.fixtures()
	for _, r := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/v1/instances", "", 200},
		{"GET", "/v1/namespaces/b/services/s/instances", "", 200},
		{"GET", "/v1/changes", "", 200},
		{"POST", "/v1/instances", `{"namespace":"a","service":"s","host":"10.0.0.9","port":80}`, 401},
		{"DELETE", "/v1/instances/ia", "", 401},
		{"GET", "/v1/acl/tokens", "", 401},
		// Not even secrets' metadata.
		{"GET", "/v1/secrets", "", 401},
		{"GET", "/v1/secrets?namespace=a", "", 401},
		{"GET", "/v1/secrets/a/x", "", 401},
	} {
		if a := w.do(r.method, r.path, r.body, ""); a.status != r.want {
			t.Errorf("anonymous %s %s: %d, want %d: %s", r.method, r.path, a.status, r.want, a.body)
		}
	}
	if a := w.do("POST", "/v1/instances", `{"namespace":"a","service":"s","host":"10.0.0.9","port":80}`, ""); !strings.Contains(a.body, "instances:write") {
		t.Errorf("the refusal does not name the permission: %s", a.body)
	}
}

func TestRevokedTokenRefusedAtOnce(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.fixtures()
	tok := w.token("a-write")
	var cur struct{ Revision int64 }
	w.must("GET", "/v1/namespaces/a/services/s/instances", "", tok.Secret, &cur)
	// A blocking query of the token is waiting when it is revoked.
	blocked := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/namespaces/a/services/s/instances?index=%d&wait=30s", w.base, cur.Revision), nil)
		req.Header.Set("Authorization", "Bearer "+tok.Secret)
		resp, err := w.hc.Do(req)
		if err != nil {
			blocked <- 0
			return
		}
		resp.Body.Close()
		blocked <- resp.StatusCode
	}()
	for w.srv.Registry.Catalog().Waiters() == 0 {
		time.Sleep(time.Millisecond)
	}
	w.must("DELETE", "/v1/acl/tokens/"+tok.AccessorID, "", w.admin.Secret, nil)
	// The very next request is refused: no cache, no delay.
	if a := w.do("GET", "/v1/instances/ia", "", tok.Secret); a.status != 401 {
		t.Fatalf("request after revocation: %d %s", a.status, a.body)
	}
	// The waiting query answers with the refusal when it wakes (the
	// service changes), not with data.
	w.must("POST", "/v1/instances", `{"namespace":"a","service":"s","host":"10.0.0.7","port":80}`, w.admin.Secret, nil)
	if status := <-blocked; status != 401 {
		t.Fatalf("blocking query of a revoked token: %d", status)
	}
}

func TestBootstrapTwice(t *testing.T) {
	w := newWorld(t, acl.Options{})
	a := w.do("POST", "/v1/acl/bootstrap", "", "")
	if a.status != 409 || !strings.Contains(a.body, "already bootstrapped") {
		t.Fatalf("second bootstrap: %d %s", a.status, a.body)
	}
}

func TestTokensSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	srv := apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}, Dir: dir})
	c := caller{t: t, base: srv.URL, hc: srv.Client()}
	var admin, tok tokenAnswer
	c.must("POST", "/v1/acl/bootstrap", "", "", &admin)
	c.must("POST", "/v1/acl/policies", `{"name":"p","rules":[{"namespace":"a","instances":"write"}]}`, admin.Secret, nil)
	c.must("POST", "/v1/acl/tokens", `{"policies":["p"]}`, admin.Secret, &tok)
	var revoked tokenAnswer
	c.must("POST", "/v1/acl/tokens", `{"policies":["p"]}`, admin.Secret, &revoked)
	c.must("DELETE", "/v1/acl/tokens/"+revoked.AccessorID, "", admin.Secret, nil)
	srv.Close()

	srv = apitest.StartWith(t, apitest.Options{ACL: acl.Options{Enabled: true}, Dir: dir})
	c = caller{t: t, base: srv.URL, hc: srv.Client()}
	c.must("POST", "/v1/instances", `{"namespace":"a","service":"s","host":"10.0.0.1","port":80}`, tok.Secret, nil)
	if a := c.do("POST", "/v1/instances", `{"namespace":"b","service":"s","host":"10.0.0.1","port":80}`, tok.Secret); a.status != 403 {
		t.Fatalf("policy after restart: %d %s", a.status, a.body)
	}
	if a := c.do("GET", "/v1/instances", "", revoked.Secret); a.status != 401 {
		t.Fatalf("revoked token after restart: %d", a.status)
	}
	if a := c.do("POST", "/v1/acl/bootstrap", "", ""); a.status != 409 {
		t.Fatalf("bootstrap after restart: %d %s", a.status, a.body)
	}
	c.must("GET", "/v1/acl/tokens", "", admin.Secret, nil)
}

// TestFloodDoesNotStarveOthers floods writes from one token and checks
// that another token's writes all pass meanwhile: none is refused.
func TestFloodDoesNotStarveOthers(t *testing.T) {
	w := newWorld(t, acl.Options{WriteRate: acl.Rate{PerSecond: 40, Burst: 20}})
	flooder := w.token("a-write")
	victim := w.token("a-write")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var limited, passed atomic.Int64
	var retryAfter atomic.Value
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000 && ctx.Err() == nil; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", w.base+"/v1/instances",
					strings.NewReader(fmt.Sprintf(`{"namespace":"a","service":"flood","host":"10.1.%d.%d","port":80}`, g, i%250+1)))
				req.Header.Set("Authorization", "Bearer "+flooder.Secret)
				resp, err := w.hc.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 429:
					limited.Add(1)
					retryAfter.Store(resp.Header.Get("Retry-After"))
				case 200:
					passed.Add(1)
				}
			}
		}()
	}
	// Meanwhile the victim writes 30 times at about 20/s, under its limit.
	for i := range 30 {
		a := w.do("POST", "/v1/instances", fmt.Sprintf(`{"namespace":"a","service":"victim","host":"10.2.0.%d","port":80}`, i+1), victim.Secret)
		if a.status != 200 {
			t.Errorf("victim write %d: %d %s", i, a.status, a.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if limited.Load() == 0 {
		t.Fatal("the flood was never limited")
	}
	if ra, _ := retryAfter.Load().(string); ra == "" || ra == "0" {
		t.Fatalf("429 without a Retry-After (%q)", ra)
	}
	t.Logf("flooder: %d passed, %d limited", passed.Load(), limited.Load())
	// Refusals are audited at most about once a second, not once each.
	if n := strings.Count(w.audit.String(), `"result":"rate_limited"`); n == 0 || int64(n) > limited.Load()/10+5 {
		t.Fatalf("%d rate_limited audit records for %d refusals", n, limited.Load())
	}
}

// TestNoSecretInLogsOrErrors sends every kind of good and bad token and
// checks that no secret appears in an answer, an audit record or a log.
func TestNoSecretInLogsOrErrors(t *testing.T) {
	w := newWorld(t, acl.Options{WriteRate: acl.Rate{PerSecond: 0.1, Burst: 30}})
	w.fixtures()
	secrets := []string{w.admin.Secret, w.readA.Secret, w.writeA.Secret, w.otherB.Secret, w.bad.Secret}
	var bodies strings.Builder
	for _, s := range append(secrets, "sxt_short", "not-a-token-at-all-but-long", w.readA.Secret+"x") {
		for _, r := range [][2]string{{"GET", "/v1/instances/ia"}, {"POST", "/v1/instances"}, {"DELETE", "/v1/instances/ib"}, {"GET", "/v1/acl/tokens"}} {
			a := w.do(r[0], r[1], `{"namespace":"b","service":"s","host":"10.0.0.4","port":80}`, s)
			bodies.WriteString(a.body)
			bodies.WriteString(fmt.Sprint(a.header))
		}
	}
	var list strings.Builder
	a := w.do("GET", "/v1/acl/tokens", "", w.admin.Secret)
	list.WriteString(a.body)
	for _, s := range secrets {
		hexSecret := s[len(s)-64:]
		for what, text := range map[string]string{"answers": bodies.String(), "audit": w.audit.String(), "token list": list.String()} {
			if strings.Contains(text, hexSecret) {
				t.Errorf("a secret appears in the %s", what)
			}
		}
	}
	if !strings.Contains(w.audit.String(), `"result":"unauthenticated"`) || !strings.Contains(w.audit.String(), `"result":"denied"`) {
		t.Fatalf("the audit lacks the refusals:\n%s", w.audit.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// vsIn is a VirtualService named name in namespace ns routing host.
func vsIn(ns, name, host string) string {
	return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s}\nspec:\n  hosts: [%q]\n  http:\n  - route: [{destination: {host: %q}}]\n", name, ns, host, host)
}

// drIn is a DestinationRule named name in namespace ns for host.
func drIn(ns, name, host string) string {
	return fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: %s, namespace: %s}\nspec:\n  host: %q\n", name, ns, host)
}

func testNode(name string) string {
	return `{"apiVersion":"v1","kind":"Node","metadata":{"name":"` + name + `"},"status":{"allocatable":{"cpu":"64","memory":"256Gi","pods":"1000"}}}`
}

func testPod(ns, name string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"` + ns + `","name":"` + name + `"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"10m"}}}]}}`
}
