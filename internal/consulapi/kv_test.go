package consulapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// newKVStack is newStack with the KV kind served.
func newKVStack(t testing.TB, aclOpts acl.Options, ns string) *stack {
	t.Helper()
	return newKVStackOn(t, apitest.StartWith(t, apitest.Options{ACL: aclOpts}), ns)
}

func newKVStackOn(t testing.TB, s *apitest.Server, ns string, opts ...func(*consulapi.Options)) *stack {
	t.Helper()
	o := consulapi.Options{Namespace: ns, ACL: s.Guard, Addr: "127.0.0.1:8300", Version: "test", KV: s.KV}
	for _, f := range opts {
		f(&o)
	}
	api, err := consulapi.New(s.Registry, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	return &stack{Server: s, consul: srv, api: api}
}

func keysOf(pairs capi.KVPairs) []string {
	var out []string
	for _, p := range pairs {
		out = append(out, p.Key)
	}
	return out
}

// TestKVClient: hashicorp's client puts, gets, lists, lists keys with a
// separator, compares-and-sets (create-only and on ModifyIndex), deletes
// one key (plain and with CAS) and a tree, with flags and raw reads, and
// the indexes are Sextant's revisions.
func TestKVClient(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "shop")
	c := s.client(t, "")
	k := c.KV()

	if p, meta, err := k.Get("missing", nil); err != nil || p != nil || meta.LastIndex == 0 {
		t.Fatalf("get of a missing key: %v %v %+v; want nil, no error, an index", p, err, meta)
	}
	wm, err := k.Put(&capi.KVPair{Key: "app/config/db", Value: []byte("postgres://db:5432"), Flags: 42}, nil)
	if err != nil || wm.RequestTime <= 0 {
		t.Fatalf("put: %v", err)
	}
	p, meta, err := k.Get("app/config/db", nil)
	if err != nil || p == nil {
		t.Fatalf("get: %v %v", p, err)
	}
	if string(p.Value) != "postgres://db:5432" || p.Flags != 42 || p.CreateIndex == 0 || p.ModifyIndex != p.CreateIndex || meta.LastIndex != p.ModifyIndex {
		t.Fatalf("get: %+v meta %+v", p, meta)
	}
	created := p.CreateIndex

	// A replace keeps CreateIndex and moves ModifyIndex; flags are the put's.
	if _, err := k.Put(&capi.KVPair{Key: "app/config/db", Value: []byte("v2")}, nil); err != nil {
		t.Fatal(err)
	}
	p, _, _ = k.Get("app/config/db", nil)
	if string(p.Value) != "v2" || p.Flags != 0 || p.CreateIndex != created || p.ModifyIndex <= created {
		t.Fatalf("after replace: %+v (created %d)", p, created)
	}

	// CAS: create-only, then on the ModifyIndex.
	ok, _, err := k.CAS(&capi.KVPair{Key: "app/config/db", Value: []byte("x"), ModifyIndex: 0}, nil)
	if err != nil || ok {
		t.Fatalf("cas=0 on an existing key: %v %v; want false", ok, err)
	}
	ok, _, err = k.CAS(&capi.KVPair{Key: "app/lock", Value: []byte("me"), ModifyIndex: 0}, nil)
	if err != nil || !ok {
		t.Fatalf("cas=0 on a new key: %v %v; want true", ok, err)
	}
	ok, _, err = k.CAS(&capi.KVPair{Key: "app/config/db", Value: []byte("x"), ModifyIndex: p.ModifyIndex - 1}, nil)
	if err != nil || ok {
		t.Fatalf("cas on a stale index: %v %v; want false", ok, err)
	}
	ok, _, err = k.CAS(&capi.KVPair{Key: "app/config/db", Value: []byte("v3"), ModifyIndex: p.ModifyIndex}, nil)
	if err != nil || !ok {
		t.Fatalf("cas on the current index: %v %v; want true", ok, err)
	}
	if p, _, _ = k.Get("app/config/db", nil); string(p.Value) != "v3" {
		t.Fatalf("after cas: %q", p.Value)
	}
	ok, _, err = k.CAS(&capi.KVPair{Key: "nothing-here", Value: []byte("x"), ModifyIndex: 5}, nil)
	if err != nil || ok {
		t.Fatalf("cas=5 on a missing key: %v %v; want false", ok, err)
	}

	for _, key := range []string{"app/config/cache", "app/config/deep/x", "app/name", "other/a"} {
		if _, err := k.Put(&capi.KVPair{Key: key, Value: []byte(key)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	pairs, meta, err := k.List("app/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"app/config/cache", "app/config/db", "app/config/deep/x", "app/lock", "app/name"}; !slices.Equal(keysOf(pairs), want) {
		t.Fatalf("list app/: %v, want %v", keysOf(pairs), want)
	}
	if meta.LastIndex < p.ModifyIndex {
		t.Fatalf("list index %d below a listed key's %d", meta.LastIndex, p.ModifyIndex)
	}
	keys, _, err := k.Keys("app/", "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"app/config/", "app/lock", "app/name"}; !slices.Equal(keys, want) {
		t.Fatalf("keys app/ sep /: %v, want %v", keys, want)
	}
	keys, _, _ = k.Keys("", "", nil)
	if len(keys) != 6 {
		t.Fatalf("all keys: %v", keys)
	}
	if pairs, _, err := k.List("nope/", nil); err != nil || len(pairs) != 0 {
		t.Fatalf("list of an empty prefix: %v %v", pairs, err)
	}

	// Raw: the bytes alone.
	code, body, h := s.raw(t, "GET", "/v1/kv/app/name?raw", "")
	if code != 200 || body != "app/name" || h.Get("X-Consul-Index") == "" {
		t.Fatalf("raw: %d %q %v", code, body, h)
	}
	code, _, h = s.raw(t, "GET", "/v1/kv/nope", "")
	if code != 404 || h.Get("X-Consul-Index") == "" {
		t.Fatalf("missing key: %d, index %q; want 404 with an index", code, h.Get("X-Consul-Index"))
	}

	// Delete with CAS, plain, then a tree.
	p, _, _ = k.Get("app/lock", nil)
	ok, _, err = k.DeleteCAS(&capi.KVPair{Key: "app/lock", ModifyIndex: p.ModifyIndex + 1}, nil)
	if err != nil || ok {
		t.Fatalf("delete-cas on a stale index: %v %v; want false", ok, err)
	}
	ok, _, err = k.DeleteCAS(&capi.KVPair{Key: "app/lock", ModifyIndex: p.ModifyIndex}, nil)
	if err != nil || !ok {
		t.Fatalf("delete-cas: %v %v; want true", ok, err)
	}
	if _, err := k.Delete("app/name", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Delete("never-was", nil); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
	if _, err := k.DeleteTree("app/config/", nil); err != nil {
		t.Fatal(err)
	}
	keys, _, _ = k.Keys("", "", nil)
	if !slices.Equal(keys, []string{"other/a"}) {
		t.Fatalf("after deletes: %v, want [other/a]", keys)
	}

	// Sextant's own revisions: a KV write and an instance write share one
	// sequence.
	before := s.Registry.Catalog().Revision()
	if _, err := k.Put(&capi.KVPair{Key: "rev", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := k.Get("rev", nil); int64(p.ModifyIndex) != before+1 {
		t.Fatalf("ModifyIndex %d, want the next revision %d", p.ModifyIndex, before+1)
	}
}

// TestKVBadRequests: bad parameters, keys and sizes answer clear errors;
// a value of 512 KiB is accepted and one byte more refused with 413;
// sessions' parameters are refused, not ignored.
func TestKVBadRequests(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	big := bytes.Repeat([]byte("v"), kv.MaxValueSize)
	if _, err := c.KV().Put(&capi.KVPair{Key: "big", Value: big}, nil); err != nil {
		t.Fatalf("put of %d bytes: %v", len(big), err)
	}
	if p, _, err := c.KV().Get("big", nil); err != nil || !bytes.Equal(p.Value, big) {
		t.Fatalf("get of the big value: %v", err)
	}
	_, err := c.KV().Put(&capi.KVPair{Key: "too-big", Value: append(big, 'x')}, nil)
	if err == nil || !strings.Contains(err.Error(), "413") || !strings.Contains(err.Error(), "524289 bytes; at most 524288") {
		t.Fatalf("put of one byte over: %v; want 413 naming the sizes", err)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"PUT", "/v1/kv/k?flags=-1", "x", 400, "flags"},
		{"PUT", "/v1/kv/k?cas=abc", "x", 400, "cas"},
		{"PUT", "/v1/kv/", "x", 400, "missing key name"},
		{"PUT", "/v1/kv/" + strings.Repeat("k", kv.MaxKeyLen+1), "x", 400, "at most 383"},
		{"PUT", "/v1/kv/k?acquire=abc", "x", 400, `invalid session "abc"`},
		{"PUT", "/v1/kv/k?acquire=", "x", 400, "not a session id"},
		{"PUT", "/v1/kv/k?acquire=a&release=a", "x", 400, "one of them"},
		{"GET", "/v1/kv/", "", 400, "missing key name"},
		{"GET", "/v1/kv/k?index=x", "", 400, "index"},
		{"GET", "/v1/kv/k?dc=dc9", "", 400, "dc9"},
		{"DELETE", "/v1/kv/k?recurse&cas=3", "", 400, "cas"},
		{"POST", "/v1/kv/k", "", 405, "not allowed"},
	} {
		code, body, _ := s.raw(t, tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s %.60s: %d %q; want %d naming %q", tc.method, tc.path, code, body, tc.code, tc.msg)
		}
	}
	if keys, _, _ := c.KV().Keys("", "", nil); !slices.Equal(keys, []string{"big"}) {
		t.Errorf("keys after refused writes: %v; want [big] alone", keys)
	}
}

// TestKVBlocking: a blocking Get wakes on a Put of its key (not on
// another key's) with the new index, and times out with the index it
// sent; a blocking List wakes on a write under its prefix.
func TestKVBlocking(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	k := c.KV()
	if _, err := k.Put(&capi.KVPair{Key: "watched", Value: []byte("1")}, nil); err != nil {
		t.Fatal(err)
	}
	_, meta, err := k.Get("watched", nil)
	if err != nil {
		t.Fatal(err)
	}
	idx := meta.LastIndex

	// Times out: nothing changed; the index sent comes back.
	start := time.Now()
	p, meta, err := k.Get("watched", &capi.QueryOptions{WaitIndex: idx, WaitTime: 300 * time.Millisecond})
	if err != nil || meta.LastIndex != idx || string(p.Value) != "1" {
		t.Fatalf("timed-out get: %v %+v %v; want index %d", p, meta, err, idx)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("blocking get answered after %v, before its wait", d)
	}

	type got struct {
		p     *capi.KVPair
		index uint64
		err   error
	}
	res := make(chan got, 1)
	go func() {
		p, meta, err := k.Get("watched", &capi.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
		res <- got{p, meta.LastIndex, err}
	}()
	// Wait until it waits, then change another key: it keeps waiting.
	cat := s.Registry.Catalog()
	for deadline := time.Now().Add(30 * time.Second); cat.Waiters() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the blocking get did not wait within 30s")
		}
	}
	if _, err := k.Put(&capi.KVPair{Key: "watched-not", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-res:
		t.Fatalf("woke on another key's put: %+v", g)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := k.Put(&capi.KVPair{Key: "watched", Value: []byte("2")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-res:
		if g.err != nil || g.p == nil || string(g.p.Value) != "2" || g.index <= idx || g.index != g.p.ModifyIndex {
			t.Fatalf("woken get: %+v %v", g.p, g.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking get did not wake on its key's put within 30s")
	}

	// A delete wakes a waiter on the key, which answers 404 with a new index.
	_, meta, _ = k.Get("watched", nil)
	idx = meta.LastIndex
	go func() {
		p, meta, err := k.Get("watched", &capi.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
		res <- got{p, meta.LastIndex, err}
	}()
	if _, err := k.Delete("watched", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-res:
		if g.err != nil || g.p != nil || g.index <= idx {
			t.Fatalf("get woken by a delete: %+v index %d %v; want none, index > %d", g.p, g.index, g.err, idx)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking get did not wake on its key's delete within 30s")
	}

	// A prefix: times out with its index when nothing under it changes,
	// wakes on a put under it.
	_, meta, err = k.List("dir/", nil)
	if err != nil {
		t.Fatal(err)
	}
	idx = meta.LastIndex
	if _, err := k.Put(&capi.KVPair{Key: "elsewhere", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	_, meta, err = k.List("dir/", &capi.QueryOptions{WaitIndex: idx, WaitTime: 200 * time.Millisecond})
	if err != nil || meta.LastIndex != idx {
		t.Fatalf("timed-out list: %+v %v; want index %d", meta, err, idx)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var listed capi.KVPairs
	var listIndex uint64
	go func() {
		defer wg.Done()
		var meta *capi.QueryMeta
		listed, meta, err = k.List("dir/", &capi.QueryOptions{WaitIndex: idx, WaitTime: time.Minute})
		if meta != nil {
			listIndex = meta.LastIndex
		}
	}()
	if _, err := k.Put(&capi.KVPair{Key: "dir/a", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err != nil || len(listed) != 1 || listed[0].Key != "dir/a" || listIndex <= idx {
		t.Fatalf("woken list: %v index %d %v", keysOf(listed), listIndex, err)
	}
}

// TestKVACL: Consul's key:read and key:write are the kv resource of the
// served namespace; a token granting other resources gets none.
func TestKVACL(t *testing.T) {
	s := newKVStack(t, acl.Options{Enabled: true}, "shop")
	admin := s.do(t, "POST", "/v1/acl/bootstrap", `{}`, "")
	token := func(name, rule string) string {
		s.do(t, "POST", "/v1/acl/policies", `{"name":"`+name+`","rules":[`+rule+`]}`, admin)
		return s.do(t, "POST", "/v1/acl/tokens", `{"policies":["`+name+`"]}`, admin)
	}
	reader := token("r", `{"namespace":"shop","kv":"read"}`)
	writer := token("w", `{"namespace":"shop","kv":"write"}`)
	other := token("o", `{"namespace":"other","kv":"write"}`)
	star := token("i", `{"namespace":"*","instances":"write","config":"write"}`)

	if _, err := s.client(t, writer).KV().Put(&capi.KVPair{Key: "a", Value: []byte("1")}, nil); err != nil {
		t.Fatalf("writer: %v", err)
	}
	if p, _, err := s.client(t, reader).KV().Get("a", nil); err != nil || string(p.Value) != "1" {
		t.Fatalf("reader get: %v %v", p, err)
	}
	for name, tok := range map[string]string{"reader": reader, "other namespace": other, "instances and config on *": star, "anonymous": ""} {
		if _, err := s.client(t, tok).KV().Put(&capi.KVPair{Key: "a", Value: []byte("2")}, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s put: %v; want 403", name, err)
		}
		if _, err := s.client(t, tok).KV().Delete("a", nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s delete: %v; want 403", name, err)
		}
	}
	for name, tok := range map[string]string{"other namespace": other, "instances and config on *": star, "anonymous": ""} {
		if _, _, err := s.client(t, tok).KV().Get("a", nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s get: %v; want 403", name, err)
		}
	}
}

// TestKVRestart: entries outlive a restart of the stack on the same
// store, with their indexes and flags.
func TestKVRestart(t *testing.T) {
	dir := t.TempDir()
	s1 := apitest.StartWith(t, apitest.Options{Dir: dir})
	st1 := newKVStackOn(t, s1, "default")
	k := st1.client(t, "").KV()
	if _, err := k.Put(&capi.KVPair{Key: "keep/a", Value: []byte("alpha"), Flags: 7}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Put(&capi.KVPair{Key: "keep/a", Value: []byte("beta"), Flags: 8}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Put(&capi.KVPair{Key: "gone", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Delete("gone", nil); err != nil {
		t.Fatal(err)
	}
	before, _, err := k.Get("keep/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	s1.Close()

	s2 := apitest.StartWith(t, apitest.Options{Dir: dir})
	k2 := newKVStackOn(t, s2, "default").client(t, "").KV()
	after, _, err := k2.Get("keep/a", nil)
	if err != nil || after == nil {
		t.Fatalf("after restart: %v %v", after, err)
	}
	if string(after.Value) != "beta" || after.Flags != 8 || after.CreateIndex != before.CreateIndex || after.ModifyIndex != before.ModifyIndex || after.CreateIndex >= after.ModifyIndex {
		t.Fatalf("after restart %+v, before %+v", after, before)
	}
	if keys, _, _ := k2.Keys("", "", nil); !slices.Equal(keys, []string{"keep/a"}) {
		t.Fatalf("keys after restart: %v", keys)
	}
}

// TestKVConcurrentCAS: many clients increment one counter with CAS; no
// increment is lost (each success read the value it replaced).
func TestKVConcurrentCAS(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	k := s.client(t, "").KV()
	if _, err := k.Put(&capi.KVPair{Key: "n", Value: []byte("0")}, nil); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bounded: a CAS that never wins fails the count below, not the
			// test's deadline.
			for done, tries := 0, 0; done < each && tries < 1000; tries++ {
				p, _, err := k.Get("n", nil)
				if err != nil {
					errs <- err
					return
				}
				n, _ := strconv.Atoi(string(p.Value))
				ok, _, err := k.CAS(&capi.KVPair{Key: "n", Value: []byte(strconv.Itoa(n + 1)), ModifyIndex: p.ModifyIndex}, nil)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					done++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p, _, _ := k.Get("n", nil); string(p.Value) != strconv.Itoa(workers*each) {
		t.Fatalf("counter %q, want %d", p.Value, workers*each)
	}
}

// do calls Sextant's own API and returns the secret of the token it
// answers, if any.
func (s *stack) do(t *testing.T, method, path, body, token string) string {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Secret string }
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
	json.NewDecoder(resp.Body).Decode(&out)
	return out.Secret
}
