package acl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/cockroachdb/pebble.(*DB).maybeScheduleFlush"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"))
}

// newTestGuard runs a guard over a real registry on a pebble store in a
// temp dir.
func newTestGuard(t testing.TB, opts Options) (*Guard, *commit.Engine) {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g := New(opts)
	reg, err := commit.Open(st, commit.Options{Tables: g.Tables()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(); st.Close() })
	return g, reg
}

func TestBootstrapOnce(t *testing.T) {
	g, reg := newTestGuard(t, Options{Enabled: true})
	ctx := context.Background()
	tok, secret, err := g.Bootstrap(ctx, reg, "")
	if err != nil || tok.Revision == 0 || secret == "" {
		t.Fatalf("bootstrap: %v", err)
	}
	_, _, err = g.Bootstrap(ctx, reg, "again")
	var e *Error
	if !errors.Is(err, ErrBootstrapped) || !errors.As(err, &e) || e.Status() != 409 {
		t.Fatalf("second bootstrap: %v, want ErrBootstrapped (409)", err)
	}
	// Deleting the bootstrap token does not open bootstrap again.
	if _, err := g.DeleteToken(ctx, reg, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Bootstrap(ctx, reg, ""); !errors.Is(err, ErrBootstrapped) {
		t.Fatalf("bootstrap after deleting the first token: %v", err)
	}
}

func TestConcurrentBootstrapsOneWins(t *testing.T) {
	g, reg := newTestGuard(t, Options{Enabled: true})
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() { _, _, err := g.Bootstrap(context.Background(), reg, ""); errs <- err }()
	}
	won := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrBootstrapped):
			t.Fatalf("bootstrap: %v", err)
		}
	}
	if won != 1 || len(g.Tokens()) != 1 {
		t.Fatalf("%d bootstraps won, %d tokens; want exactly one", won, len(g.Tokens()))
	}
}

func TestTokenAndPolicyWrites(t *testing.T) {
	g, reg := newTestGuard(t, Options{Enabled: true})
	ctx := context.Background()
	_, _, err := g.CreateToken(ctx, reg, &TokenRequest{Policies: []string{"missing"}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "policies[0]" {
		t.Fatalf("token with an unknown policy: %v", err)
	}
	p := &Policy{Name: "p", Rules: []Rule{mustRule(t, "orders:instances=write")}}
	if _, err := g.PutPolicy(ctx, reg, p, true); err != nil {
		t.Fatal(err)
	}
	if _, err := g.PutPolicy(ctx, reg, p, true); !errors.Is(err, ErrExists) {
		t.Fatalf("create twice: %v", err)
	}
	if _, err := g.PutPolicy(ctx, reg, &Policy{Name: "q", Admin: true}, false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replace a missing policy: %v", err)
	}
	if _, err := g.DeletePolicy(ctx, reg, BuiltinAdmin); err == nil {
		t.Fatal("deleted the built-in policy")
	}
	tok, secret, err := g.CreateToken(ctx, reg, &TokenRequest{Policies: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	st := &state{g: g}
	if e := g.authenticate(st, secret, true, false); e != nil {
		t.Fatal(e)
	}
	write := Permission{Instances, Write, "orders"}
	if err := g.check(st, write); err != nil {
		t.Fatal(err)
	}
	// Replacing the policy takes effect at once.
	if _, err := g.PutPolicy(ctx, reg, &Policy{Name: "p", Rules: []Rule{mustRule(t, "orders:instances=read")}}, false); err != nil {
		t.Fatal(err)
	}
	if err := g.check(st, write); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("after narrowing the policy: %v", err)
	}
	if _, err := g.DeletePolicy(ctx, reg, "p"); err != nil {
		t.Fatal(err)
	}
	if err := g.check(st, Permission{Instances, Read, "orders"}); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("after deleting the policy: %v", err)
	}
	if _, err := g.DeleteToken(ctx, reg, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if err := g.check(st, write); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("after revocation: %v", err)
	}
	if _, err := g.DeleteToken(ctx, reg, tok.AccessorID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

// TestWrapForAdopters is the path a new API takes: Wrap a handler that
// calls Require; refusals answer the API's error body; a handler that is
// not wrapped fails closed.
func TestWrapForAdopters(t *testing.T) {
	var logs syncBuffer
	g, reg := newTestGuard(t, Options{Enabled: true, Audit: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	if _, err := g.PutPolicy(ctx, reg, &Policy{Name: "cfg", Rules: []Rule{mustRule(t, "orders:config=write")}}, true); err != nil {
		t.Fatal(err)
	}
	_, secret, err := g.CreateToken(ctx, reg, &TokenRequest{Policies: []string{"cfg"}})
	if err != nil {
		t.Fatal(err)
	}
	h := func(w http.ResponseWriter, r *http.Request) {
		for i := range 20 { // a batch touching many namespaces
			if err := Require(r, Permission{Resource: Config, Access: Read, Namespace: fmt.Sprint("orders", i)}); err == nil {
				t.Error("read of another namespace allowed")
			}
		}
		if err := Require(r, Permission{Resource: Config, Access: Write, Namespace: r.PathValue("ns")}); err != nil {
			WriteError(w, err)
			return
		}
		w.Write([]byte("{}"))
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /v1/config/{ns}", g.Wrap("PUT /v1/config", http.HandlerFunc(h)))
	mux.HandleFunc("PUT /unwrapped/{ns}", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	put := func(path, token string) (int, string) {
		req, _ := http.NewRequest("PUT", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		path, token string
		status      int
		code        string
	}{
		{"/v1/config/orders", "", 401, "unauthenticated"},
		{"/v1/config/orders", "Basic x", 401, "unauthenticated"},
		{"/v1/config/billing", secret, 403, "permission_denied"},
		{"/v1/config/orders", secret, 200, ""},
		{"/unwrapped/orders", secret, 500, "internal"},
	} {
		status, body := put(tt.path, tt.token)
		if status != tt.status || (tt.code != "" && !strings.Contains(body, `"code":"`+tt.code+`"`)) {
			t.Errorf("PUT %s: %d %s, want %d %s", tt.path, status, body, tt.status, tt.code)
		}
	}
	var rec struct {
		Namespace []string `json:"namespace"`
		More      bool     `json:"more_namespaces"`
		Result    string   `json:"result"`
	}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, `"result":"ok"`) {
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(rec.Namespace) != maxAuditNamespaces || !rec.More {
		t.Fatalf("audit of a request touching 21 namespaces: %+v", rec)
	}
}

// TestRecordsFromAnotherServer applies token and policy records as a
// follower of a shared store sees another server's writes (bytes only, no
// writer's object) and checks that the guard honours them, and their
// deletion, at once.
func TestRecordsFromAnotherServer(t *testing.T) {
	g := New(Options{Enabled: true})
	cat := catalog.New(catalog.Options{})
	for k, tbl := range g.Tables() {
		cat.Register(k, tbl)
	}
	p := &Policy{Name: "p", Rules: []Rule{mustRule(t, "orders:instances=write")}}
	tok, secret, err := newToken("remote", []string{"p"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	err = cat.Apply([]store.Change{
		{Revision: 1, Ops: []store.Op{{Kind: store.Policies, Key: "p", Value: encodePolicy(p)}}},
		{Revision: 2, Ops: []store.Op{{Kind: store.Tokens, Key: tok.AccessorID, Value: encodeToken(tok)},
			{Kind: store.System, Key: BootstrapKey, Value: []byte(`{"at":"2026-11-22T10:00:00Z"}`)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := &state{g: g}
	if e := g.authenticate(st, secret, true, false); e != nil {
		t.Fatal(e)
	}
	if err := g.check(st, Permission{Instances, Write, "orders"}); err != nil {
		t.Fatal(err)
	}
	if got, ok := g.Token(tok.AccessorID); !ok || got.Revision != 2 {
		t.Fatalf("token as applied: %+v", got)
	}
	if v, rev, ok := cat.Table(store.System).Record(BootstrapKey); !ok || rev != 2 || v.(*catalog.Blob).Key != BootstrapKey {
		t.Fatalf("bootstrap marker: %v %d %v", v, rev, ok)
	}
	if err := cat.Apply([]store.Change{{Revision: 3, Ops: []store.Op{{Kind: store.Tokens, Key: tok.AccessorID}}}}); err != nil {
		t.Fatal(err)
	}
	if err := g.check(st, Permission{Instances, Write, "orders"}); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("after the remote delete: %v", err)
	}
	// A corrupt record fails the apply, changing nothing.
	bad := store.Change{Revision: 4, Ops: []store.Op{{Kind: store.Tokens, Key: "x", Value: []byte{1, '{'}}}}
	if err := cat.Apply([]store.Change{bad}); err == nil || cat.Revision() != 3 {
		t.Fatalf("corrupt record: %v, revision %d", err, cat.Revision())
	}
}
