package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/cockroachdb/pebble.(*DB).maybeScheduleFlush"),
		goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"))
}

// testServer is a real API over a real registry on a real pebble store in
// a temp dir.
type testServer struct {
	t   *testing.T
	url string
	reg *registry.Registry
	srv *httptest.Server
	api *API
}

func newTestServer(t *testing.T, opts registry.Options) *testServer {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	api := New(Options{})
	api.SetRegistry(reg)
	// As cmd/sextant serves it: through JoinWrites, so that every test's
	// answers also take the joined-write path (conn.go).
	srv := httptest.NewUnstartedServer(api)
	srv.Listener = JoinWrites(srv.Config, srv.Listener)
	srv.Start()
	t.Cleanup(func() {
		api.Shutdown()
		srv.Close()
		reg.Close()
		st.Close()
	})
	return &testServer{t: t, url: srv.URL, reg: reg, srv: srv, api: api}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiErr is the error body of the contract.
type apiErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

func (s *testServer) do(method, path, body string) response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

// must sends a request that must answer 200 and decodes its body into v.
func (s *testServer) must(method, path, body string, v any) response {
	s.t.Helper()
	r := s.do(method, path, body)
	if r.status != http.StatusOK {
		s.t.Fatalf("%s %s: status %d, body %s", method, path, r.status, r.body)
	}
	if v != nil {
		r.decode(s.t, v)
	}
	return r
}

// expectError checks status, code and field of an error answer.
func (s *testServer) expectError(r response, status int, code, field string) {
	s.t.Helper()
	if r.status != status {
		s.t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var e apiErr
	r.decode(s.t, &e)
	if e.Error.Code != code || e.Error.Field != field || e.Error.Message == "" {
		s.t.Fatalf("error %+v, want code %q field %q and a message", e.Error, code, field)
	}
}

type registerAnswer struct {
	Revision int64    `json:"revision"`
	IDs      []string `json:"ids"`
}

type instanceOut struct {
	ID         string            `json:"id"`
	Namespace  string            `json:"namespace"`
	Service    string            `json:"service"`
	Host       string            `json:"host"`
	Port       int               `json:"port"`
	Protocol   string            `json:"protocol"`
	Version    string            `json:"version"`
	Weight     int               `json:"weight"`
	Isolated   bool              `json:"isolated"`
	Metadata   map[string]string `json:"metadata"`
	TTLSeconds int               `json:"ttl_seconds"`
	Healthy    bool              `json:"healthy"`
	Revision   int64             `json:"revision"`
	CreatedAt  string            `json:"created_at"`
	UpdatedAt  string            `json:"updated_at"`
}

type queryAnswer struct {
	Revision      int64         `json:"revision"`
	Instances     []instanceOut `json:"instances"`
	NextPageToken string        `json:"next_page_token"`
}

func ids(ins []instanceOut) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}

// inst renders a register body for one instance.
func inst(service, host string, port int, meta map[string]string) string {
	b, _ := json.Marshal(map[string]any{"service": service, "host": host, "port": port, "metadata": meta})
	return string(b)
}

func batch(items ...string) string {
	var b bytes.Buffer
	b.WriteString(`{"instances":[`)
	b.WriteString(strings.Join(items, ","))
	b.WriteString(`]}`)
	return b.String()
}

func newHTTPTest(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
