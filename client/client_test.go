package client

// These tests run the client against httptest servers whose handlers answer
// as docs/api.md says. They are small fakes written to the contract for
// unit-testing the client only; the real server is tested in its own packages.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorded is one request as the server saw it.
type recorded struct {
	Method, Path, RawQuery, Body string
}

// cannedServer answers every request with status and body, recording it.
func cannedServer(t *testing.T, status int, body string) (*Client, *recorded) {
	t.Helper()
	rec := &recorded{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		*rec = recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(b)}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.http.CloseIdleConnections)
	return c, rec
}

func TestNew(t *testing.T) {
	tests := []struct {
		name, in, base, err string
	}{
		{name: "plain", in: "http://127.0.0.1:7400", base: "http://127.0.0.1:7400"},
		{name: "trailing slash", in: "http://h:1/", base: "http://h:1"},
		{name: "no scheme", in: "127.0.0.1:7400", base: "http://127.0.0.1:7400"},
		{name: "prefix", in: "https://h/reg/", base: "https://h/reg"},
		{name: "empty", in: "", err: "client: empty server URL"},
		{name: "bad scheme", in: "ftp://h", err: "scheme must be http or https"},
		{name: "no host", in: "http://", err: "has no host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("New(%q) error = %v, want %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.BaseURL() != tt.base {
				t.Errorf("BaseURL = %q, want %q", c.BaseURL(), tt.base)
			}
		})
	}
}

func TestRequests(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		answer string
		call   func(c *Client) (any, error)
		want   recorded
		result any
	}{
		{
			name:   "register with weight 0",
			answer: `{"revision":7,"ids":["a"]}`,
			call: func(c *Client) (any, error) {
				return c.Register(ctx, Instance{ID: "a", Service: "orders", Host: "10.0.0.1", Port: 80, Weight: Weight(0)})
			},
			want:   recorded{Method: "POST", Path: "/v1/instances", Body: `{"instances":[{"id":"a","service":"orders","host":"10.0.0.1","port":80,"weight":0}]}`},
			result: RegisterResult{Revision: 7, IDs: []string{"a"}},
		},
		{
			name:   "deregister batch",
			answer: `{"revision":9,"not_found":["b"]}`,
			call: func(c *Client) (any, error) {
				rev, nf, err := c.Deregister(ctx, "a", "b")
				return fmt.Sprint(rev, nf), err
			},
			want:   recorded{Method: "POST", Path: "/v1/instances:deregister", Body: `{"ids":["a","b"]}`},
			result: "9 [b]",
		},
		{
			name:   "deregister one escapes the id",
			answer: `{"revision":10}`,
			call:   func(c *Client) (any, error) { return c.DeregisterOne(ctx, "a/b c") },
			want:   recorded{Method: "DELETE", Path: "/v1/instances/a%2Fb%20c"},
			result: uint64(10),
		},
		{
			name:   "heartbeat",
			answer: `{"not_found":[]}`,
			call:   func(c *Client) (any, error) { return c.Heartbeat(ctx, "x", "y") },
			want:   recorded{Method: "POST", Path: "/v1/heartbeats", Body: `{"ids":["x","y"]}`},
			result: []string{},
		},
		{
			name:   "get",
			answer: `{"id":"a","namespace":"default","service":"s","host":"h","port":1,"weight":0,"healthy":true,"revision":3,"created_at":"2026-11-22T10:00:00.123456789Z","updated_at":"2026-11-22T10:00:05Z"}`,
			call:   func(c *Client) (any, error) { return c.Get(ctx, "a") },
			want:   recorded{Method: "GET", Path: "/v1/instances/a"},
			result: Instance{ID: "a", Namespace: "default", Service: "s", Host: "h", Port: 1, Weight: Weight(0), Healthy: true, Revision: 3,
				CreatedAt: time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC), UpdatedAt: time.Date(2026, 11, 22, 10, 0, 5, 0, time.UTC)},
		},
		{
			name:   "query plain",
			answer: `{"revision":0,"instances":[]}`,
			call:   func(c *Client) (any, error) { return c.Query(ctx, "", "orders", QueryOptions{}) },
			want:   recorded{Method: "GET", Path: "/v1/namespaces/default/services/orders/instances"},
			result: QueryResult{Instances: []Instance{}},
		},
		{
			name:   "query blocking with selector",
			answer: `{"revision":5,"instances":[{"id":"a","service":"s","host":"h","port":1,"healthy":false}]}`,
			call: func(c *Client) (any, error) {
				return c.Query(ctx, "prod", "orders", QueryOptions{Selector: "zone in (a,b),!canary", HealthyOnly: true, Index: 4, Wait: 2 * time.Second})
			},
			want:   recorded{Method: "GET", Path: "/v1/namespaces/prod/services/orders/instances", RawQuery: "selector=zone+in+%28a%2Cb%29%2C%21canary&healthy_only=true&index=4&wait=2s"},
			result: QueryResult{Revision: 5, Instances: []Instance{{ID: "a", Service: "s", Host: "h", Port: 1}}},
		},
		{
			name:   "query index 0 still blocks",
			answer: `{"revision":0,"instances":[]}`,
			call:   func(c *Client) (any, error) { return c.Query(ctx, "n", "s", QueryOptions{Wait: time.Minute}) },
			want:   recorded{Method: "GET", Path: "/v1/namespaces/n/services/s/instances", RawQuery: "index=0&wait=1m0s"},
			result: QueryResult{Instances: []Instance{}},
		},
		{
			name:   "list",
			answer: `{"revision":2,"instances":[],"next_page_token":"t2"}`,
			call: func(c *Client) (any, error) {
				return c.List(ctx, ListOptions{Namespace: "n", Service: "s", Selector: "a=b", Limit: 10, PageToken: "t1"})
			},
			want:   recorded{Method: "GET", Path: "/v1/instances", RawQuery: "namespace=n&service=s&selector=a%3Db&limit=10&page_token=t1"},
			result: ListResult{Revision: 2, Instances: []Instance{}, NextPageToken: "t2"},
		},
		{
			name:   "namespaces",
			answer: `{"revision":4,"namespaces":["default","prod"]}`,
			call:   func(c *Client) (any, error) { return c.Namespaces(ctx) },
			want:   recorded{Method: "GET", Path: "/v1/namespaces"},
			result: NamespacesResult{Revision: 4, Namespaces: []string{"default", "prod"}},
		},
		{
			name:   "services",
			answer: `{"revision":4,"services":[{"namespace":"prod","name":"orders","instances":3,"healthy":2,"revision":4}]}`,
			call:   func(c *Client) (any, error) { return c.Services(ctx, "prod") },
			want:   recorded{Method: "GET", Path: "/v1/namespaces/prod/services"},
			result: ServicesResult{Revision: 4, Services: []Service{{Namespace: "prod", Name: "orders", Instances: 3, Healthy: 2, Revision: 4}}},
		},
		{
			name:   "changes",
			answer: `{"revision":12,"changes":[{"revision":11,"op":"upsert","instance":{"id":"a","service":"s","host":"h","port":1,"healthy":true,"revision":11}},{"revision":12,"op":"delete","id":"b"}],"more":true}`,
			call:   func(c *Client) (any, error) { return c.Changes(ctx, 10, 500) },
			want:   recorded{Method: "GET", Path: "/v1/changes", RawQuery: "since=10&limit=500"},
			result: ChangesResult{Revision: 12, More: true, Changes: []Change{
				{Revision: 11, Op: OpUpsert, Instance: &Instance{ID: "a", Service: "s", Host: "h", Port: 1, Healthy: true, Revision: 11}},
				{Revision: 12, Op: OpDelete, ID: "b"},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rec := cannedServer(t, 200, tt.answer)
			got, err := tt.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, *rec); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.result, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegisterNeedsInstances(t *testing.T) {
	c, err := New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(context.Background()); err == nil {
		t.Fatal("Register() with no instances succeeded")
	}
	if _, err := c.Heartbeat(context.Background()); err == nil {
		t.Fatal("Heartbeat() with no ids succeeded")
	}
	if _, _, err := c.Deregister(context.Background()); err == nil {
		t.Fatal("Deregister() with no ids succeeded")
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		want     Error
		is       error
		text     string
		transien bool
	}{
		{
			name:   "invalid with field",
			status: 400,
			body:   `{"error":{"code":"invalid_argument","message":"port out of range","field":"instances[3].port"}}`,
			want:   Error{Status: 400, Code: "invalid_argument", Message: "port out of range", Field: "instances[3].port"},
			is:     ErrInvalidArgument,
			text:   "client: invalid_argument: port out of range (field instances[3].port)",
		},
		{
			name:   "not found",
			status: 404,
			body:   `{"error":{"code":"not_found","message":"no instance \"x\""}}`,
			want:   Error{Status: 404, Code: "not_found", Message: `no instance "x"`},
			is:     ErrNotFound,
			text:   `client: not_found: no instance "x"`,
		},
		{
			name:   "compacted",
			status: 410,
			body:   `{"error":{"code":"compacted","message":"revision 3 is compacted"}}`,
			want:   Error{Status: 410, Code: "compacted", Message: "revision 3 is compacted"},
			is:     ErrCompacted,
			text:   "client: compacted: revision 3 is compacted",
		},
		{
			name:     "unavailable is transient",
			status:   503,
			body:     `{"error":{"code":"unavailable","message":"loading"}}`,
			want:     Error{Status: 503, Code: "unavailable", Message: "loading"},
			is:       ErrUnavailable,
			text:     "client: unavailable: loading",
			transien: true,
		},
		{
			name:   "disk full",
			status: 507,
			body:   `{"error":{"code":"insufficient_storage","message":"the write was refused and nothing was written"}}`,
			want:   Error{Status: 507, Code: "insufficient_storage", Message: "the write was refused and nothing was written"},
			is:     ErrInsufficientStorage,
			text:   "client: insufficient_storage: the write was refused and nothing was written",
		},
		{
			name:     "proxy page falls back to status",
			status:   502,
			body:     "<html>bad gateway</html>",
			want:     Error{Status: 502, Message: "<html>bad gateway</html>"},
			is:       ErrUnavailable,
			text:     "client: http 502: <html>bad gateway</html>",
			transien: true,
		},
		{
			name:   "empty body",
			status: 413,
			want:   Error{Status: 413, Message: "Request Entity Too Large"},
			is:     ErrPayloadTooLarge,
			text:   "client: http 413: Request Entity Too Large",
		},
		{
			name:   "unknown code uses status",
			status: 429,
			body:   `{"error":{"code":"slow_down","message":"later"}}`,
			want:   Error{Status: 429, Code: "slow_down", Message: "later"},
			is:     ErrResourceExhausted,
			text:   "client: slow_down: later",
			// resource_exhausted is transient
			transien: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := cannedServer(t, tt.status, tt.body)
			_, err := c.Get(context.Background(), "x")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if diff := cmp.Diff(tt.want, *e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			if errors.Is(err, ErrConflict) {
				t.Errorf("errors.Is(%v, ErrConflict) = true", err)
			}
			if err.Error() != tt.text {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.text)
			}
			if retryable(err) != tt.transien {
				t.Errorf("retryable = %v, want %v", !tt.transien, tt.transien)
			}
		})
	}
}

func TestListAllFollowsPageTokens(t *testing.T) {
	// pages maps the page_token a request carries to the answer.
	pages := map[string]string{
		"":   `{"revision":9,"instances":[{"id":"a","service":"s","host":"h","port":1}],"next_page_token":"p2"}`,
		"p2": `{"revision":9,"instances":[{"id":"b","service":"s","host":"h","port":2}],"next_page_token":"p3"}`,
		"p3": `{"revision":9,"instances":[{"id":"c","service":"s","host":"h","port":3}],"next_page_token":""}`,
	}
	var tokens []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("page_token")
		tokens = append(tokens, tok)
		if r.URL.Query().Get("namespace") != "n" || r.URL.Query().Get("limit") != "1" {
			http.Error(w, `{"error":{"code":"invalid_argument","message":"options lost between pages"}}`, 400)
			return
		}
		io.WriteString(w, pages[tok])
	}))
	defer srv.Close()
	c, _ := New(srv.URL)
	defer c.http.CloseIdleConnections()

	var ids []string
	err := c.ListAll(context.Background(), ListOptions{Namespace: "n", Limit: 1}, func(p ListResult) error {
		for _, in := range p.Instances {
			ids = append(ids, in.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"", "p2", "p3"}, tokens); diff != "" {
		t.Errorf("page tokens sent (-want +got):\n%s", diff)
	}

	stop := errors.New("stop")
	n := 0
	err = c.ListAll(context.Background(), ListOptions{Namespace: "n", Limit: 1}, func(ListResult) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("ListAll with failing fn: err %v after %d pages, want stop after 1", err, n)
	}
}

func TestListAllRejectsRepeatedToken(t *testing.T) {
	c, _ := cannedServer(t, 200, `{"revision":1,"instances":[],"next_page_token":"same"}`)
	err := c.ListAll(context.Background(), ListOptions{PageToken: "same"}, func(ListResult) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "same page token") {
		t.Fatalf("err = %v, want a repeated-token error", err)
	}
}

func TestDecodeInstanceJSON(t *testing.T) {
	// The struct tags must give the API's field names, also when encoding
	// with encoding/json (the CLI prints instances that way).
	in := Instance{ID: "a", Service: "s", Host: "h", Port: 1, Weight: Weight(0), Metadata: map[string]string{"k": "v"}, TTLSeconds: 5, Healthy: true, Revision: 2}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":"a","service":"s","host":"h","port":1,"weight":0,"metadata":{"k":"v"},"ttl_seconds":5,"healthy":true,"revision":2}`
	if string(b) != want {
		t.Errorf("json.Marshal = %s\nwant %s", b, want)
	}
}
