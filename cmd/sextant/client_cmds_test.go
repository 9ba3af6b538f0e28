package main

// These tests run the client commands against httptest servers that answer
// with canned bodies in the shape of docs/api.md, and compare the output
// with golden files in testdata/ (go test -run CLI -update-cli-golden to
// rewrite them).

import (
	"bytes"
	"flag"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
)

var updateCLIGolden = flag.Bool("update-cli-golden", false, "rewrite the golden files of the client command tests")

// canned answers "METHOD path?query" with a status and body, and records
// every request body it gets.
type canned struct {
	mu      sync.Mutex
	answers map[string]answer
	bodies  []string
}

type answer struct {
	status int
	body   string
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		key += "?" + r.URL.RawQuery
	}
	c.mu.Lock()
	if len(b) > 0 {
		c.bodies = append(c.bodies, string(b))
	}
	a, ok := c.answers[key]
	c.mu.Unlock()
	if !ok {
		w.WriteHeader(500)
		io.WriteString(w, `{"error":{"code":"internal","message":"test server has no answer for `+key+`"}}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

// runCLI runs a fresh command tree with args against handler and returns
// stdout, stderr and the error the command returned.
func runCLI(t *testing.T, handler http.Handler, stdin string, args ...string) (string, string, error) {
	t.Helper()
	srv := httptest.NewServer(handler)
	defer srv.Close()
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newInstancesCmd(), newServicesCmd(), newWatchCmd())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append(args, "--server", srv.URL))
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *updateCLIGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-cli-golden to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got ---\n%s--- want ---\n%s", path, got, want)
	}
}

const (
	instA = `{"id":"a1","namespace":"prod","service":"orders","host":"10.0.0.1","port":8080,"protocol":"http","version":"v1","weight":100,"metadata":{"zone":"z1","env":"prod"},"ttl_seconds":5,"healthy":true,"revision":41,"created_at":"2026-11-22T10:00:00.123456789Z","updated_at":"2026-11-22T10:00:05Z"}`
	instB = `{"id":"b2","namespace":"prod","service":"orders","host":"fd00::2","port":9090,"weight":0,"isolated":true,"healthy":true,"revision":42,"created_at":"2026-11-22T10:00:01Z","updated_at":"2026-11-22T10:00:01Z"}`
	instC = `{"id":"c3","namespace":"prod","service":"payments","host":"10.0.0.3","port":7000,"weight":100,"healthy":false,"ttl_seconds":1,"revision":40,"created_at":"2026-11-22T10:00:01Z","updated_at":"2026-11-22T10:00:01Z"}`
)

func TestCLI(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		stdin    string
		answers  map[string]answer
		wantBody []string // request bodies, in order
		wantErr  string   // substring of the returned error; "" means success
	}{
		{
			name:     "register_flags",
			args:     []string{"instances", "register", "--namespace", "prod", "--service", "orders", "--host", "10.0.0.1", "--port", "8080", "--weight", "0", "--meta", "zone=z1", "--meta", "env=a=b", "--ttl", "5s", "--isolated"},
			answers:  map[string]answer{"POST /v1/instances": {200, `{"revision":43,"ids":["a1"]}`}},
			wantBody: []string{`{"instances":[{"namespace":"prod","service":"orders","host":"10.0.0.1","port":8080,"weight":0,"isolated":true,"metadata":{` /* map order varies: checked below */},
		},
		{
			name:     "register_default_weight_not_sent",
			args:     []string{"instances", "register", "--service", "orders", "--host", "h", "--port", "1", "-o", "json"},
			answers:  map[string]answer{"POST /v1/instances": {200, `{"revision":44,"ids":["x"]}`}},
			wantBody: []string{`{"instances":[{"service":"orders","host":"h","port":1}]}`},
		},
		{
			name:     "register_file_stdin",
			args:     []string{"instances", "register", "--file", "-"},
			stdin:    `{"instances":[{"service":"orders","host":"h","port":1},{"id":"z","service":"orders","host":"h","port":2,"weight":0}]}`,
			answers:  map[string]answer{"POST /v1/instances": {200, `{"revision":45,"ids":["5d2c","z"]}`}},
			wantBody: []string{`{"instances":[{"service":"orders","host":"h","port":1},{"id":"z","service":"orders","host":"h","port":2,"weight":0}]}`},
		},
		{
			name:    "register_invalid_field",
			args:    []string{"instances", "register", "--file", "-"},
			stdin:   `[{"service":"orders","host":"h","port":1},{"service":"orders","host":"h","port":70000}]`,
			answers: map[string]answer{"POST /v1/instances": {400, `{"error":{"code":"invalid_argument","message":"port must be 1..65535","field":"instances[1].port"}}`}},
			wantErr: "register: server answered 400 invalid_argument: port must be 1..65535 (field instances[1].port)",
		},
		{
			name:    "register_unknown_field_in_file",
			args:    []string{"instances", "register", "--file", "-"},
			stdin:   `{"service":"orders","host":"h","prot":1}`,
			wantErr: `json: unknown field "prot"`,
		},
		{
			name:     "register_namespace_in_service",
			args:     []string{"instances", "register", "--service", "prod/orders", "--host", "h", "--port", "1", "-o", "json"},
			answers:  map[string]answer{"POST /v1/instances": {200, `{"revision":44,"ids":["x"]}`}},
			wantBody: []string{`{"instances":[{"namespace":"prod","service":"orders","host":"h","port":1}]}`},
		},
		{
			name:    "register_two_namespaces",
			args:    []string{"instances", "register", "--service", "prod/orders", "--namespace", "dev", "--host", "h", "--port", "1"},
			wantErr: `--service "prod/orders" is in namespace prod, --namespace says dev`,
		},
		{
			name:    "register_bad_service",
			args:    []string{"instances", "register", "--service", "prod/", "--host", "h", "--port", "1"},
			wantErr: `--service: client: bad service "prod/"`,
		},
		{
			name:    "register_needs_service",
			args:    []string{"instances", "register", "--host", "h", "--port", "1"},
			wantErr: "--service is required",
		},
		{
			name:    "register_file_and_flags",
			args:    []string{"instances", "register", "--file", "-", "--port", "1"},
			wantErr: "--port cannot be combined with --file",
		},
		{
			name:    "register_bad_ttl",
			args:    []string{"instances", "register", "--service", "s", "--host", "h", "--port", "1", "--ttl", "1.5s"},
			wantErr: "want whole seconds",
		},
		{
			name:     "deregister_some_missing",
			args:     []string{"instances", "deregister", "a1", "nope", "b2"},
			answers:  map[string]answer{"POST /v1/instances:deregister": {200, `{"revision":50,"not_found":["nope"]}`}},
			wantBody: []string{`{"ids":["a1","nope","b2"]}`},
			wantErr:  "deregister: 1 of 3 ids not found: nope",
		},
		{
			name:    "deregister_json",
			args:    []string{"instances", "deregister", "a1", "-o", "json"},
			answers: map[string]answer{"POST /v1/instances:deregister": {200, `{"revision":51,"not_found":[]}`}},
		},
		{
			name:    "get_table",
			args:    []string{"instances", "get", "a1"},
			answers: map[string]answer{"GET /v1/instances/a1": {200, instA}},
		},
		{
			name:    "get_json",
			args:    []string{"instances", "get", "b2", "-o", "json"},
			answers: map[string]answer{"GET /v1/instances/b2": {200, instB}},
		},
		{
			name:    "get_not_found",
			args:    []string{"instances", "get", "zz"},
			answers: map[string]answer{"GET /v1/instances/zz": {404, `{"error":{"code":"not_found","message":"no instance with id \"zz\""}}`}},
			wantErr: `get zz: server answered 404 not_found: no instance with id "zz"`,
		},
		{
			name: "list_follows_pages",
			args: []string{"instances", "list", "--namespace", "prod", "--selector", "zone!=z9", "--healthy-only", "--page-size", "2"},
			answers: map[string]answer{
				"GET /v1/instances?namespace=prod&selector=zone%21%3Dz9&healthy_only=true&limit=2":               {200, `{"revision":60,"instances":[` + instA + `,` + instB + `],"next_page_token":"p2"}`},
				"GET /v1/instances?namespace=prod&selector=zone%21%3Dz9&healthy_only=true&limit=2&page_token=p2": {200, `{"revision":60,"instances":[` + instC + `]}`},
			},
		},
		{
			name: "list_namespace_in_service",
			args: []string{"instances", "list", "--service", "prod/payments", "-o", "json"},
			answers: map[string]answer{
				"GET /v1/instances?namespace=prod&service=payments": {200, `{"revision":61,"instances":[` + instC + `],"next_page_token":""}`},
			},
		},
		{
			name: "list_json",
			args: []string{"instances", "list", "--service", "payments", "-o", "json"},
			answers: map[string]answer{
				"GET /v1/instances?service=payments": {200, `{"revision":61,"instances":[` + instC + `],"next_page_token":""}`},
			},
		},
		{
			name:    "list_empty",
			args:    []string{"instances", "list"},
			answers: map[string]answer{"GET /v1/instances": {200, `{"revision":1,"instances":[]}`}},
		},
		{
			name:    "bad_output_format",
			args:    []string{"instances", "list", "-o", "yaml"},
			wantErr: `unknown --output "yaml"`,
		},
		{
			name: "services_all_namespaces",
			args: []string{"services", "list"},
			answers: map[string]answer{
				"GET /v1/namespaces":                  {200, `{"revision":70,"namespaces":["default","prod"]}`},
				"GET /v1/namespaces/default/services": {200, `{"revision":70,"services":[{"namespace":"default","name":"web","instances":1,"healthy":1,"revision":3}]}`},
				"GET /v1/namespaces/prod/services":    {200, `{"revision":70,"services":[{"namespace":"prod","name":"orders","instances":2,"healthy":2,"revision":42},{"namespace":"prod","name":"payments","instances":1,"healthy":0,"revision":40}]}`},
			},
		},
		{
			name: "services_one_namespace_json",
			args: []string{"services", "list", "--namespace", "prod", "-o", "json"},
			answers: map[string]answer{
				"GET /v1/namespaces/prod/services": {200, `{"revision":70,"services":[{"namespace":"prod","name":"orders","instances":2,"healthy":2,"revision":42}]}`},
			},
		},
		{
			name:    "services_server_down",
			args:    []string{"services", "list", "--namespace", "prod"},
			answers: map[string]answer{"GET /v1/namespaces/prod/services": {503, `{"error":{"code":"unavailable","message":"loading state"}}`}},
			wantErr: "list services of prod: server answered 503 unavailable: loading state",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &canned{answers: tt.answers}
			out, errOut, err := runCLI(t, h, tt.stdin, tt.args...)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
			if errOut != "" {
				t.Errorf("unexpected stderr: %s", errOut)
			}
			for i, want := range tt.wantBody {
				if i >= len(h.bodies) {
					t.Fatalf("request %d not sent; want body %s", i, want)
				}
				if !strings.HasPrefix(h.bodies[i], want) {
					t.Errorf("request %d body = %s\nwant prefix %s", i, h.bodies[i], want)
				}
			}
			if tt.wantErr != "" && out == "" {
				return // nothing printed before the error: no golden file
			}
			checkGolden(t, tt.name, out)
		})
	}
}

func TestCLIRegisterSendsMetaAndTTL(t *testing.T) {
	h := &canned{answers: map[string]answer{"POST /v1/instances": {200, `{"revision":1,"ids":["a"]}`}}}
	_, _, err := runCLI(t, h, "", "instances", "register", "--service", "s", "--host", "h", "--port", "1", "--meta", "zone=z1", "--meta", "env=a=b", "--ttl", "7")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`"zone":"z1"`, `"env":"a=b"`, `"ttl_seconds":7}`} {
		if !strings.Contains(h.bodies[0], part) {
			t.Errorf("body %s lacks %s", h.bodies[0], part)
		}
	}
}

// watchServer answers the first query with state 1 and the blocking query
// that follows (index=5) with state 2; anything later blocks until the
// client goes away.
func watchServer(t *testing.T) http.Handler {
	const (
		state1 = `{"revision":5,"instances":[` +
			`{"id":"a1","namespace":"prod","service":"orders","host":"10.0.0.1","port":80,"weight":100,"healthy":true,"metadata":{"zone":"z1"}},` +
			`{"id":"b2","namespace":"prod","service":"orders","host":"10.0.0.2","port":80,"weight":100,"healthy":true},` +
			`{"id":"c3","namespace":"prod","service":"orders","host":"10.0.0.3","port":80,"weight":100,"healthy":true}]}`
		state2 = `{"revision":7,"instances":[` +
			`{"id":"a1","namespace":"prod","service":"orders","host":"10.0.0.1","port":80,"weight":0,"healthy":false,"metadata":{"zone":"z2"}},` +
			`{"id":"c3","namespace":"prod","service":"orders","host":"10.0.0.3","port":80,"weight":100,"healthy":true},` +
			`{"id":"d4","namespace":"prod","service":"orders","host":"10.0.0.4","port":81,"weight":100,"healthy":true}]}`
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/namespaces/prod/services/orders/instances" || r.URL.Query().Get("selector") != "zone" {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":"invalid_argument","message":"unexpected request `+r.URL.String()+`"}}`)
			return
		}
		switch r.URL.Query().Get("index") {
		case "":
			io.WriteString(w, state1)
		case "5":
			io.WriteString(w, state2)
		default:
			<-r.Context().Done()
		}
	})
}

func TestCLIWatch(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "watch_text", args: []string{"watch", "prod/orders", "--selector", "zone", "--count", "2"}},
		{name: "watch_json", args: []string{"watch", "prod/orders", "-l", "zone", "--count", "2", "-o", "json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := runCLI(t, watchServer(t), "", tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if errOut != "" {
				t.Errorf("unexpected stderr: %s", errOut)
			}
			checkGolden(t, tt.name, out)
		})
	}
}

func TestCLIWatchBadArgs(t *testing.T) {
	for _, arg := range []string{"/orders", "prod/", "a/b/c"} {
		t.Run(arg, func(t *testing.T) {
			_, _, err := runCLI(t, watchServer(t), "", "watch", arg)
			if err == nil || !strings.Contains(err.Error(), "want NAME (namespace default) or NAMESPACE/NAME") {
				t.Errorf("watch %q: error %v", arg, err)
			}
		})
	}
}

func TestParseTTL(t *testing.T) {
	tests := []struct {
		name, in string
		want     int
		err      bool
	}{
		{name: "empty", in: "", want: 0},
		{name: "seconds", in: "5", want: 5},
		{name: "duration", in: "5s", want: 5},
		{name: "minutes", in: "1m", want: 60},
		{name: "zero", in: "0s", want: 0},
		{name: "fraction", in: "1500ms", err: true},
		{name: "negative", in: "-3", err: true},
		{name: "junk", in: "soon", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTTL(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("parseTTL(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestParseMeta(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want map[string]string
		err  bool
	}{
		{name: "none", in: nil, want: nil},
		{name: "pairs", in: []string{"zone=z1", "q=a=b", "empty="}, want: map[string]string{"zone": "z1", "q": "a=b", "empty": ""}},
		{name: "no equals", in: []string{"zone"}, err: true},
		{name: "no key", in: []string{"=v"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeta(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("parseMeta(%q) error %v, want error %v", tt.in, err, tt.err)
			}
			if !tt.err && !maps.Equal(got, tt.want) {
				t.Errorf("parseMeta(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
