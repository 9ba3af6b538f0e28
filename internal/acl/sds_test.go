package acl

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAnonymousNeverReadsSecrets: anonymous reads reach every resource but
// secrets, over SDS and in listings.
func TestAnonymousNeverReadsSecrets(t *testing.T) {
	g, _ := newTestGuard(t, Options{Enabled: true, AnonymousRead: true})
	r, err := g.Begin(httptest.NewRequest("GET", "/v1/secrets", nil), "GET /v1/secrets")
	if err != nil {
		t.Fatal(err)
	}
	if err := Require(r, Permission{Resource: Push, Access: Read, Namespace: "team-b"}); err != nil {
		t.Fatalf("anonymous push:read: %v", err)
	}
	if SDS(r.Context()).Allows("team-b") {
		t.Error("an anonymous stream may receive team-b's secrets")
	}
	if f := Readable(r.Context(), Secrets); f.Any() || f.All() || f.Allows("team-b") {
		t.Error("an anonymous caller may list secrets")
	}
	err = Require(r, Permission{Resource: Secrets, Access: Read, Namespace: "team-b"})
	if e, ok := err.(*Error); !ok || e.Code != "unauthenticated" || !strings.Contains(e.Msg, "never read secrets") {
		t.Errorf("anonymous secret:read: %v", err)
	}
}

// TestSecretSentAudit: each secret sent is one audit record naming the
// caller, node and secret; the same version sent again to the same caller
// and node within a minute is counted in the next record, not recorded
// itself (a reconnect storm), while another version, secret or node is
// recorded at once.
func TestSecretSentAudit(t *testing.T) {
	var out syncBuffer
	var mu sync.Mutex
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	g := New(Options{Audit: slog.New(NewAuditHandler(&out)), Now: clock})
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.1.2.3:5555"
	r, err := g.Begin(req, "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources")
	if err != nil {
		t.Fatal(err)
	}
	s := SDS(r.Context())
	if !s.Allows("team-b") {
		t.Fatal("without ACLs every stream receives every secret")
	}
	for range 1000 { // a reconnect storm: the same version, again and again
		s.Sent("team-b", "team-b/shop-cert", "v1", "gw-1")
	}
	s.Sent("team-b", "team-b/shop-cert", "v2", "gw-1")
	s.Sent("team-b", "team-b/other", "v1", "gw-1")
	s.Sent("team-b", "team-b/shop-cert", "v1", "gw-2")
	mu.Lock()
	now = now.Add(sdsAuditWindow)
	mu.Unlock()
	s.Sent("team-b", "team-b/shop-cert", "v1", "gw-1")

	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		recs = append(recs, m)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5:\n%s", len(recs), out.String())
	}
	for i, want := range []struct{ secret, version, node string }{
		{"team-b/shop-cert", "v1", "gw-1"}, {"team-b/shop-cert", "v2", "gw-1"}, {"team-b/other", "v1", "gw-1"},
		{"team-b/shop-cert", "v1", "gw-2"}, {"team-b/shop-cert", "v1", "gw-1"},
	} {
		m := recs[i]
		if m["msg"] != "audit" || m["result"] != "sent" || m["secret"] != want.secret || m["version"] != want.version || m["node"] != want.node ||
			m["namespace"] != "team-b" || m["accessor"] != "anonymous" || m["remote"] != "10.1.2.3" {
			t.Errorf("record %d: %v, want %+v", i, m, want)
		}
	}
	if got := recs[4]["resent_since_last_record"]; got != float64(999) {
		t.Errorf("resent_since_last_record %v, want 999", got)
	}
	for _, m := range recs[:4] {
		if _, ok := m["resent_since_last_record"]; ok {
			t.Errorf("a first record counts resends: %v", m)
		}
	}
}
