package consulapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/consulapi"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestConsulMonitor: /v1/agent/monitor streams the server's log records
// from the level asked, in hclog's text or JSON lines, as consul/api's
// Monitor and MonitorJSON read them, though the server's own log is at
// info: a register's debug record reaches a debug stream.
func TestConsulMonitor(t *testing.T) {
	s := apitest.StartWith(t, apitest.Options{ACL: acl.Options{}})
	logs := consulapi.NewLogStream()
	log := slog.New(logs.Handler(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})))
	api, err := consulapi.New(s.Registry, consulapi.Options{Namespace: "default", ACL: s.Guard, Addr: "127.0.0.1:8300", Version: "test",
		Logger: log.With("component", "consulapi"), Logs: logs})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	st := &stack{Server: s, consul: srv, api: api}
	agent := st.client(t, "").Agent()
	stop := make(chan struct{})
	defer close(stop)
	text, err := agent.Monitor("debug", stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := agent.MonitorJSON("debug", stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := agent.Monitor("info", stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The streams are open once their answers' headers came; a record
	// logged now reaches them.
	if err := agent.ServiceRegister(&capi.AgentServiceRegistration{Name: "redis", Port: 6379}); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-text:
		if !strings.Contains(line, "[DEBUG]") || !strings.Contains(line, "consulapi: synced service: service=redis") {
			t.Errorf("text line %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no text log line")
	}
	select {
	case line := <-js:
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["@level"] != "debug" || m["@module"] != "consulapi" || m["service"] != "redis" {
			t.Errorf("JSON line %q: %v", line, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no JSON log line")
	}
	log.Info("an info record")
	select {
	case line := <-info:
		if !strings.Contains(line, "[INFO]") || !strings.Contains(line, "an info record") {
			t.Errorf("info stream got %q, want the info record and not the debug one before it", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no info log line")
	}
}
