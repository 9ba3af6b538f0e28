// Package apitest starts the real registry server stack (a pebble store in
// a temp dir, the registry with the ACL, routing config and placement
// tables, the HTTP API behind the ACL guard) on an httptest listener, for
// the tests of its clients: the SDK, the CLI and the load generators. It
// owns nothing else.
package apitest

import (
	"crypto/tls"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/httpapi"
	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/placement"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// Options shape the stack; the zero value is Start's: ACLs off, plain
// HTTP, a fresh store.
type Options struct {
	// ACL configures the guard (Enabled turns ACLs on).
	ACL acl.Options
	// Dir is the store's directory (default: a new temp dir). Start a
	// second stack on the same Dir after Close to test a restart.
	Dir string
	// TLS, if set, serves HTTPS with this config (mutual TLS when it
	// sets ClientAuth).
	TLS *tls.Config
	// LogSize is the catalog's change log size (catalog.Options;
	// default its own): small, to test what follows a compaction.
	LogSize int
}

// Server is a running stack.
type Server struct {
	*httptest.Server
	Guard    *acl.Guard
	Registry *registry.Registry
	KV       *kv.Store // the KV kind (Consul's /v1/kv)
	Dir      string

	api   *httpapi.API
	st    *embedded.Store
	close func()
}

// Start runs the stack until the test ends and returns its server.
func Start(t testing.TB) *httptest.Server {
	t.Helper()
	return StartWith(t, Options{}).Server
}

// StartWith runs the stack with opts until the test ends or Close.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	st, err := embedded.Open(opts.Dir)
	if err != nil {
		t.Fatal(err)
	}
	guard := acl.New(opts.ACL)
	tables := guard.Tables()
	cfg := config.NewTable()
	tables[store.Config] = cfg
	tables[store.Secrets] = secret.NewTable()
	kvs := kv.New()
	tables[store.KV] = kvs.Table()
	sched := placement.New(placement.Config{})
	maps.Copy(tables, sched.Tables())
	reg, err := registry.Open(st, registry.Options{Engine: commit.Options{Tables: tables, Catalog: catalog.Options{LogSize: opts.LogSize}}})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	kvs.Start(reg.Engine())
	cfg.Attach(reg.Catalog())
	api := httpapi.New(httpapi.Options{ACL: guard})
	api.SetKV(kvs)
	api.SetRegistry(reg)
	srv := httptest.NewUnstartedServer(api)
	// Handshake failures are what TLS tests provoke: keep them off stderr.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if opts.TLS != nil {
		srv.TLS = opts.TLS
		srv.StartTLS()
	} else {
		// As cmd/sextant serves plain HTTP: large answers in one write.
		srv.Listener = httpapi.JoinWrites(srv.Config, srv.Listener)
		srv.Start()
	}
	s := &Server{Server: srv, Guard: guard, Registry: reg, KV: kvs, Dir: opts.Dir, api: api, st: st}
	closed := false
	s.close = func() {
		if closed {
			return
		}
		closed = true
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
		reg.Close()
		st.Close()
		sched.Close()
	}
	t.Cleanup(s.close)
	return s
}

// Close stops the stack and closes its store (idempotent).
func (s *Server) Close() { s.close() }

// Stack is a real server stack that a test can stop and start again on the
// same address, keeping its data directory (a restart) or not (a server
// that lost its state). The SDK's keepalive and watch tests and its
// runnable examples use it.
type Stack struct {
	addr  string
	dir   string
	tmp   []string // directories Wipe made, removed by Close
	srv   *http.Server
	api   *httpapi.API
	reg   *registry.Registry
	st    *embedded.Store
	sched *placement.Scheduler
	done  chan struct{}
}

// StartStack runs the stack on a loopback port until the test ends.
func StartStack(t testing.TB) *Stack {
	t.Helper()
	s, err := NewStack(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// NewStack starts a stack over dir on a loopback port, for code without a
// testing.TB (examples). Close stops it.
func NewStack(dir string) (*Stack, error) {
	s := &Stack{addr: "127.0.0.1:0", dir: dir}
	return s, s.Start()
}

// URL is the server's base URL; it stays the same across restarts.
func (s *Stack) URL() string { return "http://" + s.addr }

// Start starts a stopped stack on its address, over its data directory.
func (s *Stack) Start() error {
	if s.srv != nil {
		return nil
	}
	st, err := embedded.Open(s.dir)
	if err != nil {
		return err
	}
	sched := placement.New(placement.Config{})
	reg, err := registry.Open(st, registry.Options{Engine: commit.Options{Tables: sched.Tables()}})
	if err != nil {
		st.Close()
		return err
	}
	api := httpapi.New(httpapi.Options{})
	api.SetRegistry(reg)
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		reg.Close()
		st.Close()
		return err
	}
	s.addr = ln.Addr().String()
	s.srv = &http.Server{Handler: api}
	ln = httpapi.JoinWrites(s.srv, ln)
	s.api, s.reg, s.st, s.sched, s.done = api, reg, st, sched, make(chan struct{})
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return nil
}

// Stop closes the server and every connection to it at once, like a crash
// seen from the network (the store is closed cleanly).
func (s *Stack) Stop() {
	if s.srv == nil {
		return
	}
	s.api.Shutdown()
	s.srv.Close()
	<-s.done
	s.reg.Close()
	s.st.Close()
	s.sched.Close()
	s.srv = nil
}

// Wipe stops the stack and gives it an empty data directory: the next
// Start is a server that lost every instance.
func (s *Stack) Wipe() error {
	s.Stop()
	dir, err := os.MkdirTemp("", "sextant-apitest-")
	if err != nil {
		return err
	}
	s.tmp = append(s.tmp, dir)
	s.dir = dir
	return nil
}

// Close stops the stack and removes the directories Wipe made.
func (s *Stack) Close() {
	s.Stop()
	for _, d := range s.tmp {
		os.RemoveAll(d)
	}
}
