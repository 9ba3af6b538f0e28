package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPushStatusTable(t *testing.T) {
	body := `{"revision": 42, "engine": {"revision": 42, "endpoint_queue": 1, "config_queue": 0,
	  "resources": {"clusters": 3, "endpoints": 3, "listeners": 2, "routes": 2}},
	 "subscribers": [{"id": 1, "node_id": "client-1", "address": "127.0.0.1:5000", "protocol": "sotw",
	  "connected_since": "2026-11-22T10:00:00Z",
	  "types": [
	   {"type": "clusters", "resources": 2, "responses": 2, "version_sent": "42", "version_acked": "41",
	    "nacks": [{"version": "42", "nonce": "3", "message": "bad lbPolicy"}]},
	   {"type": "endpoints", "resources": 2, "responses": 5, "version_sent": "42", "version_acked": "42", "pending": 1},
	   {"type": "listeners", "resources": 1, "responses": 1, "version_sent": "1", "version_acked": ""},
	   {"type": "routes", "resources": 1, "responses": 0}]}]}`
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.RequestURI()
		w.Write([]byte(body))
	}))
	defer srv.Close()
	cmd := newPushCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"status", "--server", srv.URL, "--node", "client-1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"revision 42, 3 clusters", "client-1", "NACKED (2)", "SYNCED (2)", "STALE (1)", "NOT SENT (1)"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if path != "/v1/push/status?node=client-1" {
		t.Errorf("asked %s", path)
	}
}
