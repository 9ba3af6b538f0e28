package consulapi_test

import (
	"fmt"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestKVPrefixWaitPastCompaction: a blocking list (?recurse, ?keys) at the
// KV store's index waits even when the instances' changes have since
// pushed that index out of the catalog's change log (a registry busier
// than its KV store, as consul-template meets it): it answered at once
// with the same index, so the client's watch loop spun.
func TestKVPrefixWaitPastCompaction(t *testing.T) {
	s := newKVStackOn(t, apitest.StartWith(t, apitest.Options{ACL: acl.Options{}, LogSize: 16}), "shop")
	c := s.client(t, "")
	if _, err := c.KV().Put(&capi.KVPair{Key: "app/a", Value: []byte("1")}, nil); err != nil {
		t.Fatal(err)
	}
	_, meta, err := c.KV().List("app/", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: fmt.Sprint("web-", i), Name: "web", Port: 80}); err != nil {
			t.Fatal(err)
		}
	}
	for _, keys := range []bool{false, true} {
		start := time.Now()
		q := &capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 2 * time.Second}
		var m *capi.QueryMeta
		if keys {
			_, m, err = c.KV().Keys("app/", "", q)
		} else {
			_, m, err = c.KV().List("app/", q)
		}
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 1900*time.Millisecond {
			t.Errorf("keys=%v: a wait at index %d answered %d after %v; want a 2s wait", keys, meta.LastIndex, m.LastIndex, took)
		}
	}
}

// TestCatalogWaitPastCompaction: the same for a blocking catalog read
// when KV writes pushed the instances' index out of the change log (a
// KV store busier than its registry: Vault's storage beside a few
// services).
func TestCatalogWaitPastCompaction(t *testing.T) {
	s := newKVStackOn(t, apitest.StartWith(t, apitest.Options{ACL: acl.Options{}, LogSize: 16}), "shop")
	c := s.client(t, "")
	if err := c.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "web-1", Name: "web", Port: 80}); err != nil {
		t.Fatal(err)
	}
	_, meta, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := c.KV().Put(&capi.KVPair{Key: fmt.Sprint("vault/", i), Value: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, m, err := c.Catalog().Services(&capi.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Errorf("a wait at index %d answered %d after %v; want a 2s wait", meta.LastIndex, m.LastIndex, took)
	}
}
