package consulapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
)

// newSessionStack is newKVStack with the session expiry loop running (as
// cmd/sextant runs it), ticking every 100 ms.
func newSessionStack(t *testing.T) *stack {
	t.Helper()
	s := newKVStack(t, acl.Options{}, "shop")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.KV.RunSessions(ctx, 100*time.Millisecond, nil) }()
	go func() { defer wg.Done(); s.api.RunSessionChecks(ctx, 100*time.Millisecond) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

// pollFor polls cond every 50 ms for up to d.
func pollFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSessionClient: hashicorp's client creates sessions (defaults and
// chosen fields), reads them by id, lists them and by node, renews and
// destroys them, in Consul's shapes.
func TestSessionClient(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	ss := c.Session()

	id, _, err := ss.Create(&capi.SessionEntry{Name: "web-lock", TTL: "30s", Behavior: capi.SessionBehaviorDelete, LockDelay: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 36 || strings.Count(id, "-") != 4 {
		t.Fatalf("session id %q is not a UUID", id)
	}
	e, meta, err := ss.Info(id, nil)
	if err != nil || e == nil {
		t.Fatalf("info: %+v %v", e, err)
	}
	if e.ID != id || e.Name != "web-lock" || e.TTL != "30s" || e.Behavior != "delete" || e.LockDelay != 2*time.Second ||
		e.Node != consulapi.DefaultNode || e.CreateIndex == 0 || meta.LastIndex == 0 || len(e.NodeChecks) != 1 || e.NodeChecks[0] != "serfHealth" {
		t.Fatalf("info: %+v meta %+v", e, meta)
	}
	plain, _, err := ss.CreateNoChecks(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := ss.Info(plain, nil)
	if err != nil || p == nil || p.Behavior != "release" || p.LockDelay != 15*time.Second || p.TTL != "" || len(p.NodeChecks) != 0 {
		t.Fatalf("defaults: %+v %v", p, err)
	}
	list, _, err := ss.List(nil)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	byNode, _, err := ss.Node(consulapi.DefaultNode, nil)
	if err != nil || len(byNode) != 2 {
		t.Fatalf("by node: %d %v", len(byNode), err)
	}
	if other, _, err := ss.Node("elsewhere", nil); err != nil || len(other) != 0 {
		t.Fatalf("another node: %d %v", len(other), err)
	}
	r, _, err := ss.Renew(id, nil)
	if err != nil || r == nil || r.ID != id || r.TTL != "30s" || r.CreateIndex != e.CreateIndex {
		t.Fatalf("renew: %+v %v (before: %+v)", r, err, e)
	}
	if _, err := ss.Destroy(id, nil); err != nil {
		t.Fatal(err)
	}
	if e, _, err := ss.Info(id, nil); err != nil || e != nil {
		t.Fatalf("info of a destroyed session: %+v %v", e, err)
	}
	if r, _, err := ss.Renew(id, nil); err != nil || r != nil {
		t.Fatalf("renew of a destroyed session: %+v %v; want none (404)", r, err)
	}
	// Bad sessions are refused naming what is wrong.
	for _, tc := range []struct {
		e    capi.SessionEntry
		want string
	}{
		{capi.SessionEntry{TTL: "5s"}, "between 10s and 24h0m0s"},
		{capi.SessionEntry{TTL: "soon"}, "not a duration"},
		{capi.SessionEntry{Behavior: "keep"}, "behavior"},
		{capi.SessionEntry{NodeChecks: []string{"service:web"}}, "Missing check 'service:web'"},
		{capi.SessionEntry{LockDelay: 2 * time.Minute}, "lock delay"},
	} {
		if _, _, err := ss.Create(&tc.e, nil); err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create %+v: %v; want 400 naming %q", tc.e, err, tc.want)
		}
	}
}

// TestSessionAcquireRelease: a key is acquired by one session at a time;
// the holder acquires again without a new LockIndex; only the holder
// releases; an unknown session is refused.
func TestSessionAcquireRelease(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	k := c.KV()
	a, _, err := c.Session().CreateNoChecks(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := c.Session().CreateNoChecks(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(sid, value string) bool {
		t.Helper()
		ok, _, err := k.Acquire(&capi.KVPair{Key: "locks/db", Value: []byte(value), Session: sid}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !acquire(a, "a") {
		t.Fatal("the first acquire failed")
	}
	if acquire(b, "b") {
		t.Fatal("a second session acquired a held key")
	}
	p, _, _ := k.Get("locks/db", nil)
	if p == nil || p.Session != a || p.LockIndex != 1 || string(p.Value) != "a" {
		t.Fatalf("held: %+v", p)
	}
	if !acquire(a, "a2") {
		t.Fatal("the holder's second acquire failed")
	}
	if p, _, _ = k.Get("locks/db", nil); p.LockIndex != 1 || string(p.Value) != "a2" {
		t.Fatalf("after the holder's acquire: %+v; want LockIndex 1, its value", p)
	}
	if ok, _, err := k.Release(&capi.KVPair{Key: "locks/db", Session: b}, nil); err != nil || ok {
		t.Fatalf("release by another session: %v %v; want false", ok, err)
	}
	if ok, _, err := k.Release(&capi.KVPair{Key: "locks/db", Value: []byte("free"), Session: a}, nil); err != nil || !ok {
		t.Fatalf("release by the holder: %v %v", ok, err)
	}
	if p, _, _ = k.Get("locks/db", nil); p.Session != "" || p.LockIndex != 1 || string(p.Value) != "free" {
		t.Fatalf("released: %+v", p)
	}
	if !acquire(b, "b") {
		t.Fatal("a released key was not acquired")
	}
	if p, _, _ = k.Get("locks/db", nil); p.Session != b || p.LockIndex != 2 {
		t.Fatalf("acquired again: %+v; want LockIndex 2", p)
	}
	_, _, err = k.Acquire(&capi.KVPair{Key: "locks/other", Session: "6f5a3c2e-0000-4000-8000-000000000000"}, nil)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "invalid session") {
		t.Fatalf("acquire with an unknown session: %v; want 400 naming it", err)
	}
	if p, _, _ := k.Get("locks/other", nil); p != nil {
		t.Fatalf("a refused acquire wrote %+v", p)
	}
}

// TestSessionDestroyBehaviors: destroying a session releases the keys a
// release session holds and deletes those of a delete session, and its
// lock delay keeps another session from acquiring them meanwhile.
func TestSessionDestroyBehaviors(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	k := c.KV()
	ss := c.Session()
	rel, _, err := ss.CreateNoChecks(&capi.SessionEntry{Behavior: "release", LockDelay: time.Minute / 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	del, _, err := ss.CreateNoChecks(&capi.SessionEntry{Behavior: "delete", LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := ss.CreateNoChecks(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, sid := range map[string]string{"r/1": rel, "r/2": rel, "d/1": del} {
		if ok, _, err := k.Acquire(&capi.KVPair{Key: key, Value: []byte("v"), Session: sid}, nil); err != nil || !ok {
			t.Fatalf("acquire %s: %v %v", key, ok, err)
		}
	}
	if _, err := ss.Destroy(rel, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Destroy(del, nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"r/1", "r/2"} {
		p, _, err := k.Get(key, nil)
		if err != nil || p == nil || p.Session != "" || string(p.Value) != "v" {
			t.Fatalf("%s after its release session was destroyed: %+v %v; want kept, unheld", key, p, err)
		}
		// Its 30 s lock delay.
		if ok, _, err := k.Acquire(&capi.KVPair{Key: key, Session: other}, nil); err != nil || ok {
			t.Fatalf("acquire of %s in its lock delay: %v %v; want false", key, ok, err)
		}
	}
	if p, _, err := k.Get("d/1", nil); err != nil || p != nil {
		t.Fatalf("d/1 after its delete session was destroyed: %+v %v; want deleted", p, err)
	}
	// A 1 ms lock delay is over at once.
	pollFor(t, 10*time.Second, "d/1 never acquirable after its 1 ms lock delay", func() bool {
		ok, _, err := k.Acquire(&capi.KVPair{Key: "d/1", Session: other}, nil)
		return err == nil && ok
	})
}

// TestSessionTTLExpiry: a session not renewed is invalidated within twice
// its TTL (and not before its TTL), releasing the key it holds; a renewed
// one lives on.
func TestSessionTTLExpiry(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	k := c.KV()
	ss := c.Session()
	start := time.Now()
	dying, _, err := ss.CreateNoChecks(&capi.SessionEntry{TTL: "10s", LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	renewed, _, err := ss.CreateNoChecks(&capi.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := k.Acquire(&capi.KVPair{Key: "leader", Value: []byte("me"), Session: dying}, nil); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	done := make(chan struct{})
	renewErr := make(chan error, 1)
	go func() { renewErr <- ss.RenewPeriodic("10s", renewed, nil, done) }()
	defer func() { close(done); <-renewErr }()
	pollFor(t, 60*time.Second, "the unrenewed session was never invalidated", func() bool {
		e, _, err := ss.Info(dying, nil)
		return err == nil && e == nil
	})
	if since := time.Since(start); since < 10*time.Second {
		t.Fatalf("invalidated after %v, before its 10 s TTL", since)
	}
	if p, _, err := k.Get("leader", nil); err != nil || p == nil || p.Session != "" {
		t.Fatalf("the key of the expired session: %+v %v; want released", p, err)
	}
	if e, _, err := ss.Info(renewed, nil); err != nil || e == nil {
		t.Fatalf("the renewed session: %+v %v; want alive", e, err)
	}
}

// TestConsulLock: hashicorp's api.Lock with two contenders: one holds at a
// time, the second gets the lock once the first unlocks.
func TestConsulLock(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	l1, err := c.LockKey("service/web/leader")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.LockKey("service/web/leader")
	if err != nil {
		t.Fatal(err)
	}
	lost1, err := l1.Lock(nil)
	if err != nil || lost1 == nil {
		t.Fatalf("lock 1: %v", err)
	}
	got2 := make(chan error, 1)
	go func() { _, err := l2.Lock(nil); got2 <- err }()
	// The second waits while the first holds (its blocking read of the
	// key returns on no change within this time).
	select {
	case err := <-got2:
		t.Fatalf("the second contender locked while the first held: %v", err)
	case <-time.After(time.Second):
	}
	select {
	case <-lost1:
		t.Fatal("the first holder lost its lock while holding it")
	default:
	}
	if err := l1.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got2:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second contender never locked after the first unlocked")
	}
	p, _, err := c.KV().Get("service/web/leader", nil)
	if err != nil || p == nil || p.Session == "" {
		t.Fatalf("the lock key: %+v %v; want held", p, err)
	}
	if err := l2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestConsulLockSessionExpiry: the holder of an api.Lock whose session
// is not renewed (a process killed) loses the lock after its TTL and the
// waiting contender gets it; the holder's lost channel closes.
func TestConsulLockSessionExpiry(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	sid, _, err := c.Session().CreateNoChecks(&capi.SessionEntry{TTL: "10s", LockDelay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l1, err := c.LockOpts(&capi.LockOptions{Key: "jobs/leader", Session: sid})
	if err != nil {
		t.Fatal(err)
	}
	lost1, err := l1.Lock(nil)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.LockKey("jobs/leader")
	if err != nil {
		t.Fatal(err)
	}
	got2 := make(chan error, 1)
	go func() { _, err := l2.Lock(nil); got2 <- err }()
	select {
	case <-lost1:
	case err := <-got2:
		t.Fatalf("the second contender locked before the first lost its lock: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the first holder never lost its lock")
	}
	select {
	case err := <-got2:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second contender never locked after the first's session expired")
	}
	if err := l2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// FuzzSessionCreate: any create body answers without a server error, and
// a session created reads back with the TTL and behaviour asked.
func FuzzSessionCreate(f *testing.F) {
	s := newKVStack(f, acl.Options{}, "default")
	f.Add([]byte(`{"Name":"n","TTL":"10s","Behavior":"delete","LockDelay":"1s"}`))
	f.Add([]byte(`{"LockDelay":15,"NodeChecks":[]}`))
	f.Add([]byte(`{"LockDelay":15000000000,"Checks":["serfHealth"]}`))
	f.Add([]byte(`{"ServiceChecks":[{"ID":"x"}],"TTL":"9s"}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"TTL":"-1s","LockDelay":[1]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.api.ServeHTTP(w, httptest.NewRequest("PUT", "/v1/session/create", bytes.NewReader(body)))
		if w.Code >= 500 {
			t.Fatalf("create %q: %d %s", body, w.Code, w.Body)
		}
		if w.Code != 200 {
			return
		}
		var created struct{ ID string }
		if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil || created.ID == "" {
			t.Fatalf("create %q answered %s", body, w.Body)
		}
		w = httptest.NewRecorder()
		s.api.ServeHTTP(w, httptest.NewRequest("GET", "/v1/session/info/"+created.ID, nil))
		var got []capi.SessionEntry
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got) != 1 || got[0].ID != created.ID {
			t.Fatalf("info of %s created from %q: %s", created.ID, body, w.Body)
		}
		var asked struct{ TTL, Behavior string }
		json.Unmarshal(body, &asked)
		if ttl, err := time.ParseDuration(asked.TTL); err == nil && ttl != 0 && got[0].TTL != asked.TTL {
			t.Fatalf("created from %q: TTL %q", body, got[0].TTL)
		}
		if asked.Behavior != "" && got[0].Behavior != asked.Behavior {
			t.Fatalf("created from %q: behavior %q", body, got[0].Behavior)
		}
	})
}

// TestSessionNamespaces: a session is of the namespace served where it was
// created: another namespace's API neither lists, renews nor destroys it,
// and cannot lock its keys with it.
func TestSessionNamespaces(t *testing.T) {
	shop := newSessionStack(t)
	other := newKVStackOn(t, shop.Server, "billing")
	cs, co := shop.client(t, ""), other.client(t, "")
	id, _, err := cs.Session().CreateNoChecks(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if list, _, err := co.Session().List(nil); err != nil || len(list) != 0 {
		t.Fatalf("billing lists %d sessions (%v); want none of shop's", len(list), err)
	}
	if e, _, err := co.Session().Info(id, nil); err != nil || e != nil {
		t.Fatalf("billing reads shop's session: %+v %v", e, err)
	}
	if r, _, err := co.Session().Renew(id, nil); err != nil || r != nil {
		t.Fatalf("billing renews shop's session: %+v %v", r, err)
	}
	if _, err := co.Session().Destroy(id, nil); err != nil {
		t.Fatal(err)
	}
	if e, _, err := cs.Session().Info(id, nil); err != nil || e == nil {
		t.Fatalf("shop's session after billing's destroy: %+v %v; want alive", e, err)
	}
	if _, _, err := co.KV().Acquire(&capi.KVPair{Key: "k", Session: id}, nil); err == nil || !strings.Contains(err.Error(), "invalid session") {
		t.Fatalf("billing acquires with shop's session: %v; want refused", err)
	}
	if ok, _, err := cs.KV().Acquire(&capi.KVPair{Key: "k", Session: id}, nil); err != nil || !ok {
		t.Fatalf("shop acquires with its session: %v %v", ok, err)
	}
}

// TestSessionACL: Consul's session:write and session:read are the kv
// resource of the served namespace: a kv reader lists sessions but
// cannot create, renew or destroy one; other resources grant nothing.
func TestSessionACL(t *testing.T) {
	s := newKVStack(t, acl.Options{Enabled: true}, "shop")
	admin := s.do(t, "POST", "/v1/acl/bootstrap", `{}`, "")
	token := func(name, rule string) string {
		s.do(t, "POST", "/v1/acl/policies", `{"name":"`+name+`","rules":[`+rule+`]}`, admin)
		return s.do(t, "POST", "/v1/acl/tokens", `{"policies":["`+name+`"]}`, admin)
	}
	reader := token("r", `{"namespace":"shop","kv":"read"}`)
	writer := token("w", `{"namespace":"shop","kv":"write"}`)
	star := token("i", `{"namespace":"*","instances":"write","config":"write"}`)
	id, _, err := s.client(t, writer).Session().CreateNoChecks(&capi.SessionEntry{TTL: "60s"}, nil)
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	if list, _, err := s.client(t, reader).Session().List(nil); err != nil || len(list) != 1 {
		t.Fatalf("reader list: %d %v", len(list), err)
	}
	for name, tok := range map[string]string{"reader": reader, "instances and config on *": star, "anonymous": ""} {
		ss := s.client(t, tok).Session()
		if _, _, err := ss.CreateNoChecks(nil, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s create: %v; want 403", name, err)
		}
		if _, _, err := ss.Renew(id, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s renew: %v; want 403", name, err)
		}
		if _, err := ss.Destroy(id, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s destroy: %v; want 403", name, err)
		}
	}
	for name, tok := range map[string]string{"instances and config on *": star, "anonymous": ""} {
		if _, _, err := s.client(t, tok).Session().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s list: %v; want 403", name, err)
		}
	}
}

// TestConsulSemaphore: hashicorp's api.Semaphore with a limit of 2 and
// four contenders: every contender gets a slot, never more than two at
// once.
func TestConsulSemaphore(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem, err := c.SemaphorePrefix("service/batch/slots", 2)
			if err != nil {
				errs <- err
				return
			}
			lost, err := sem.Acquire(nil)
			if err != nil || lost == nil {
				errs <- fmt.Errorf("acquire: %v (lost channel %v)", err, lost)
				return
			}
			n := holding.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(200 * time.Millisecond)
			holding.Add(-1)
			errs <- sem.Release()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the contenders did not all get a slot within 2 minutes")
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := most.Load(); m > 2 || m < 1 {
		t.Fatalf("%d contenders held a slot at once, limit 2", m)
	}
}

// TestSessionBlockingList: a blocking session list waits for a change of
// the namespace's sessions: a KV write does not wake it, a session
// created does; one whose wait passes answers the index it was sent.
func TestSessionBlockingList(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	_, meta, err := c.Session().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, meta2, err := c.Session().List(&capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 300 * time.Millisecond})
	if err != nil || meta2.LastIndex != meta.LastIndex || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("an idle blocking list: index %d (sent %d) after %v, %v; want it held, the same index", meta2.LastIndex, meta.LastIndex, time.Since(start), err)
	}
	type res struct {
		n   int
		idx uint64
		err error
	}
	woke := make(chan res, 1)
	go func() {
		list, m, err := c.Session().List(&capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute})
		woke <- res{len(list), m.LastIndex, err}
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := c.KV().Put(&capi.KVPair{Key: "unrelated", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-woke:
		t.Fatalf("a KV put woke the session list: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if _, _, err := c.Session().CreateNoChecks(nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-woke:
		if r.err != nil || r.n != 1 || r.idx <= meta.LastIndex {
			t.Fatalf("woken list: %+v (sent index %d)", r, meta.LastIndex)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a session created did not wake the blocking list within 30s")
	}
}

// TestSessionBoundChecks: a session bound to a node check or a service
// check of its node (registered through the catalog) is refused when the
// check is missing or critical, and invalidated, releasing its lock, when
// the check turns critical or is removed; one bound to another check
// keeps its lock meanwhile.
func TestSessionBoundChecks(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	ss := c.Session()
	if _, _, err := ss.Create(&capi.SessionEntry{NodeChecks: []string{"dne"}}, nil); err == nil || !strings.Contains(err.Error(), "Missing check 'dne'") {
		t.Fatalf("bound to a missing check: %v", err)
	}
	register := func(nodeStatus string) {
		t.Helper()
		reg := &capi.CatalogRegistration{Node: "db1", Address: "10.0.0.9",
			Service: &capi.AgentService{ID: "pg1", Service: "pg", Port: 5432},
			Checks: capi.HealthChecks{
				{Node: "db1", CheckID: "db1:alive", Name: "alive", Status: nodeStatus},
				{Node: "db1", CheckID: "pg:alive", Name: "pg", Status: capi.HealthPassing, ServiceID: "pg1"},
			}}
		if _, err := c.Catalog().Register(reg, nil); err != nil {
			t.Fatal(err)
		}
	}
	register(capi.HealthPassing)
	onNode, _, err := ss.Create(&capi.SessionEntry{Node: "db1", NodeChecks: []string{"db1:alive"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	onService, _, err := ss.Create(&capi.SessionEntry{Node: "db1", ServiceChecks: []capi.ServiceCheck{{ID: "pg:alive"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, _, err := ss.Info(onService, nil)
	if err != nil || info == nil || len(info.ServiceChecks) != 1 || info.ServiceChecks[0].ID != "pg:alive" || len(info.NodeChecks) != 1 || info.NodeChecks[0] != "serfHealth" {
		t.Fatalf("info of the session bound to a service check: %+v %v", info, err)
	}
	kvc := c.KV()
	for key, id := range map[string]string{"lock/node": onNode, "lock/service": onService} {
		if ok, _, err := kvc.Acquire(&capi.KVPair{Key: key, Session: id}, nil); !ok || err != nil {
			t.Fatalf("acquire %s: %v %v", key, ok, err)
		}
	}
	holder := func(key string) string {
		p, _, err := kvc.Get(key, nil)
		if err != nil || p == nil {
			t.Fatalf("get %s: %+v %v", key, p, err)
		}
		return p.Session
	}
	register(capi.HealthCritical)
	pollFor(t, 5*time.Second, "the session bound to the critical node check is invalidated", func() bool {
		i, _, _ := ss.Info(onNode, nil)
		return i == nil && holder("lock/node") == ""
	})
	if holder("lock/service") != onService {
		t.Fatal("the session bound to a passing service check lost its lock")
	}
	if _, _, err := ss.Create(&capi.SessionEntry{Node: "db1", NodeChecks: []string{"db1:alive"}}, nil); err == nil || !strings.Contains(err.Error(), "Check 'db1:alive' is in critical state") {
		t.Fatalf("bound to a critical check: %v", err)
	}
	if _, err := c.Catalog().Deregister(&capi.CatalogDeregistration{Node: "db1", CheckID: "pg:alive"}, nil); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 5*time.Second, "the session bound to the removed service check is invalidated", func() bool {
		i, _, _ := ss.Info(onService, nil)
		return i == nil && holder("lock/service") == ""
	})
}

// TestSessionBoundTTLCheck: a session bound to a TTL check of the agent's
// node (registered alone) is invalidated when the check's TTL passes
// unrenewed: no write happens then, the watch's tick finds it.
func TestSessionBoundTTLCheck(t *testing.T) {
	s := newSessionStack(t)
	c := s.client(t, "")
	ag := c.Agent()
	if err := ag.CheckRegister(&capi.AgentCheckRegistration{ID: "deadman", Name: "deadman", AgentServiceCheck: capi.AgentServiceCheck{TTL: "1s", Status: capi.HealthPassing}}); err != nil {
		t.Fatal(err)
	}
	id, _, err := c.Session().Create(&capi.SessionEntry{NodeChecks: []string{"serfHealth", "deadman"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, _, err := c.Session().Info(id, nil); err != nil || e == nil || len(e.NodeChecks) != 2 {
		t.Fatalf("info: %+v %v", e, err)
	}
	pollFor(t, 10*time.Second, "the session bound to the expired TTL check is invalidated", func() bool {
		e, _, _ := c.Session().Info(id, nil)
		return e == nil
	})
}
