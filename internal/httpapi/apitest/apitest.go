// Package apitest starts the real registry server stack (a pebble store in
// a temp dir, the registry, the HTTP API) on an httptest listener, for the
// tests of its clients: the SDK, the CLI and the load generators. It owns
// nothing else.
package apitest

import (
	"net/http/httptest"
	"testing"

	"github.com/sextant-mesh/sextant/internal/httpapi"
	"github.com/sextant-mesh/sextant/internal/registry"
	"github.com/sextant-mesh/sextant/internal/store/embedded"
)

// Start runs the stack until the test ends and returns its server.
func Start(t testing.TB) *httptest.Server {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(st, registry.Options{})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Options{})
	api.SetRegistry(reg)
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
		reg.Close()
		st.Close()
	})
	return srv
}
