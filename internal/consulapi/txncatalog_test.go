package consulapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestTxnCatalogOneCommit: node, service and check operations commit with
// the KV ones in one revision; a stale cas of any kind writes nothing and
// answers 409 naming it; a check keeps its Definition; a write of checks
// alone leaves the node's own index.
func TestTxnCatalogOneCommit(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	c := s.client(t, "")
	def := capi.HealthCheckDefinition{TCP: "10.0.0.1:80", Interval: capi.ReadableDuration(7 * time.Second)}
	ok, ret, _, err := c.Txn().Txn(capi.TxnOps{
		{KV: &capi.KVTxnOp{Verb: capi.KVSet, Key: "k", Value: []byte("v")}},
		{Node: &capi.NodeTxnOp{Verb: capi.NodeSet, Node: capi.Node{Node: "n1", Address: "10.0.0.1", Meta: map[string]string{"m": "1"}}}},
		{Service: &capi.ServiceTxnOp{Verb: capi.ServiceSet, Node: "n1", Service: capi.AgentService{ID: "s1", Service: "web", Port: 80, Tags: []string{"t"}}}},
		{Check: &capi.CheckTxnOp{Verb: capi.CheckSet, Check: capi.HealthCheck{Node: "n1", CheckID: "c1", ServiceID: "s1", Status: "passing", Definition: def}}},
	}, nil)
	if err != nil || !ok || len(ret.Results) != 4 {
		t.Fatalf("txn: ok %v, err %v, %+v", ok, err, ret)
	}
	rev := ret.Results[0].KV.ModifyIndex
	n, sv, ck := ret.Results[1].Node, ret.Results[2].Service, ret.Results[3].Check
	if n == nil || sv == nil || ck == nil || n.ModifyIndex != rev || sv.ModifyIndex != rev || ck.ModifyIndex != rev {
		t.Fatalf("results %+v %+v %+v, want each of revision %d (one commit)", n, sv, ck, rev)
	}
	if ck.Type != "tcp" || ck.ServiceName != "web" || ck.Definition.TCP != "10.0.0.1:80" || ck.Definition.IntervalDuration != 7*time.Second {
		t.Errorf("check %+v: want type tcp, service web, its Definition kept", ck)
	}
	entries, _, err := c.Health().Service("web", "", false, nil)
	if err != nil || len(entries) != 1 || entries[0].Node.Node != "n1" || len(entries[0].Checks) != 1 || entries[0].Checks[0].Definition.TCP != "10.0.0.1:80" {
		t.Fatalf("health of web: %+v, %v; want s1 on n1 with c1 and its definition", entries, err)
	}

	// A stale node cas fails the whole transaction: the check is not set.
	ok, ret, _, err = c.Txn().Txn(capi.TxnOps{
		{Check: &capi.CheckTxnOp{Verb: capi.CheckSet, Check: capi.HealthCheck{Node: "n1", CheckID: "c2", Status: "critical"}}},
		{Node: &capi.NodeTxnOp{Verb: capi.NodeCAS, Node: capi.Node{Node: "n1", Address: "10.0.0.2", ModifyIndex: n.ModifyIndex + 100}}},
		{Service: &capi.ServiceTxnOp{Verb: capi.ServiceGet, Node: "n1", Service: capi.AgentService{ID: "nope"}}},
	}, nil)
	if err != nil || ok || len(ret.Errors) != 2 || ret.Errors[0].OpIndex != 1 || !strings.Contains(ret.Errors[0].What, "index is stale") ||
		ret.Errors[1].OpIndex != 2 || !strings.Contains(ret.Errors[1].What, "doesn't exist") {
		t.Fatalf("stale cas: ok %v, err %v, %+v; want op 1 stale, op 2 missing", ok, err, ret)
	}
	checks, _, err := c.Health().Node("n1", nil)
	if err != nil || len(checks) != 1 {
		t.Fatalf("checks of n1 after a refused transaction: %+v, %v; want c1 only", checks, err)
	}

	// Checks alone: the node's index stays, the check's moves.
	ok, ret, _, err = c.Txn().Txn(capi.TxnOps{
		{Check: &capi.CheckTxnOp{Verb: capi.CheckCAS, Check: capi.HealthCheck{Node: "n1", CheckID: "c1", ServiceID: "s1", Status: "critical", ModifyIndex: ck.ModifyIndex}}},
		{Node: &capi.NodeTxnOp{Verb: capi.NodeGet, Node: capi.Node{Node: "n1"}}},
	}, nil)
	if err != nil || !ok || len(ret.Results) != 2 {
		t.Fatalf("check cas: ok %v, err %v, %+v", ok, err, ret)
	}
	if ret.Results[0].Check.ModifyIndex <= ck.ModifyIndex || ret.Results[1].Node.ModifyIndex != n.ModifyIndex {
		t.Errorf("after a check cas: check index %d (was %d), node index %d (want %d)", ret.Results[0].Check.ModifyIndex, ck.ModifyIndex, ret.Results[1].Node.ModifyIndex, n.ModifyIndex)
	}

	// Deleting the service deletes its checks, with the node untouched.
	ok, ret, _, err = c.Txn().Txn(capi.TxnOps{
		{Service: &capi.ServiceTxnOp{Verb: capi.ServiceDelete, Node: "n1", Service: capi.AgentService{ID: "s1"}}},
	}, nil)
	if err != nil || !ok || len(ret.Results) != 0 {
		t.Fatalf("service delete: ok %v, err %v, %+v", ok, err, ret)
	}
	if svcs, _, _ := c.Catalog().Service("web", "", nil); len(svcs) != 0 {
		t.Errorf("web after its delete: %+v", svcs)
	}
	if checks, _, _ := c.Health().Node("n1", nil); len(checks) != 0 {
		t.Errorf("checks of n1 after its service's delete: %+v", checks)
	}
}

// TestTxnCatalogRefusals: a malformed catalog operation is a 400 naming
// it, before anything is read or written.
func TestTxnCatalogRefusals(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	for name, body := range map[string]string{
		"unknown verb":     `[{"Node":{"Verb":"frob","Node":{"Node":"n"}}}]`,
		"bad node name":    `[{"Node":{"Verb":"set","Node":{"Node":"a b"}}}]`,
		"service no name":  `[{"Service":{"Verb":"set","Node":"n","Service":{"Port":1}}}]`,
		"check bad status": `[{"Check":{"Verb":"set","Check":{"Node":"n","CheckID":"c","Status":"ok"}}}]`,
		"bad interval":     `[{"Check":{"Verb":"set","Check":{"Node":"n","CheckID":"c","Definition":{"Interval":"soon"}}}}]`,
		"session op":       `[{"Session":{"Verb":"delete"}}]`,
	} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPut, s.consul.URL+"/v1/txn", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", body, resp.StatusCode)
			}
		})
	}
}
