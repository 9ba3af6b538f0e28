package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// TestOwnedInstancesReadOnly: an instance a sync owns (from Kubernetes) is
// refused to register, deregister and check writes with 409 owned naming
// its owner; a client may not claim an owner (400 naming the field).
func TestOwnedInstancesReadOnly(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	in := &instance.Instance{ID: "k8s-1", Service: "cart", Host: "10.0.0.1", Port: 80, Weight: 100,
		Metadata: label.FromMap(map[string]string{instance.OwnerLabel: "kubernetes"})}
	if err := instance.Prepare(0, in); err != nil {
		t.Fatal(err)
	}
	if _, err := s.reg.Sync(context.Background(), "kubernetes", []*instance.Instance{in}, nil); err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", "/v1/instances", `{"id":"k8s-1","service":"cart","host":"10.0.0.2","port":80}`)
	s.expectError(r, http.StatusConflict, "owned", "")
	if !strings.Contains(string(r.body), "kubernetes") {
		t.Errorf("refusal does not name the owner: %s", r.body)
	}
	s.expectError(s.do("DELETE", "/v1/instances/k8s-1", ""), http.StatusConflict, "owned", "")
	s.expectError(s.do("POST", "/v1/instances", `{"service":"cart","host":"10.0.0.3","port":80,"metadata":{"sextant.io/owner":"kubernetes"}}`),
		http.StatusBadRequest, "invalid_argument", "metadata.sextant.io/owner")
}
