package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/store"
)

// TestConfigOwnedBySync: an object a sync owns (Istio's CRDs in a
// Kubernetes cluster) is refused to PUT, apply and DELETE through the API
// with a 409 naming its owner, and an object may not claim an owner
// through the API.
func TestConfigOwnedBySync(t *testing.T) {
	s := newConfigServer(t)
	owned := strings.Replace(testDR, "metadata: {name: orders}", "metadata: {name: orders, annotations: {sextant.io/owner: kubernetes}}", 1)
	objs, err := config.Decode([]byte(owned))
	if err != nil {
		t.Fatal(err)
	}
	s.expectError(s.do("POST", "/v1/config:apply", owned), http.StatusBadRequest, "invalid_argument", "")
	tbl, _ := s.reg.Catalog().Table(store.Config).(*config.Table)
	if _, err := s.reg.Engine().Submit(context.Background(), &config.ApplyWrite{Objects: objs, Table: tbl, Owner: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []response{
		s.do("POST", "/v1/config:apply", testDR),
		s.do("PUT", "/v1/config/dr/default/orders", testDR),
		s.do("DELETE", "/v1/config/dr/default/orders", ""),
	} {
		s.expectError(r, http.StatusConflict, "conflict", "metadata.annotations[sextant.io/owner]")
		if !strings.Contains(string(r.body), "owned by kubernetes") {
			t.Errorf("the refusal does not name the owner: %s", r.body)
		}
	}
	// The sync itself may delete it; one written through the API it may not.
	if _, err := s.reg.Engine().Submit(context.Background(), &config.DeleteWrite{Key: objs[0].Key, Owner: "kubernetes"}); err != nil {
		t.Fatal(err)
	}
	s.must("POST", "/v1/config:apply", testDR, nil)
	if _, err := s.reg.Engine().Submit(context.Background(), &config.ApplyWrite{Objects: objs, Table: tbl, Owner: "kubernetes"}); err == nil || !strings.Contains(err.Error(), "written through Sextant's APIs") {
		t.Fatalf("a sync replacing an object written through the API: %v", err)
	}
}
