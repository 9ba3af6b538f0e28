package consulapi_test

import (
	"strings"
	"testing"

	capi "github.com/hashicorp/consul/api"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestTxnAllOrNothing: a transaction whose last operation fails writes
// none of the earlier ones and lists every failure; one that succeeds
// writes all in one revision and answers each operation in order.
func TestTxnAllOrNothing(t *testing.T) {
	s := newKVStack(t, acl.Options{}, "default")
	kvc := s.client(t, "").KV()
	if _, err := kvc.Put(&capi.KVPair{Key: "a", Value: []byte("1")}, nil); err != nil {
		t.Fatal(err)
	}
	a, _, err := kvc.Get("a", nil)
	if err != nil || a == nil {
		t.Fatal(a, err)
	}
	ok, ret, _, err := kvc.Txn(capi.KVTxnOps{
		{Verb: capi.KVSet, Key: "b", Value: []byte("2")},
		{Verb: capi.KVDelete, Key: "a"},
		{Verb: capi.KVCAS, Key: "a", Value: []byte("x"), Index: a.ModifyIndex + 1000},
		{Verb: capi.KVCheckNotExists, Key: "b"},
	}, nil)
	if err != nil || ok {
		t.Fatalf("txn with a stale cas: ok %v, err %v; want a refusal", ok, err)
	}
	if len(ret.Errors) != 2 || ret.Errors[0].OpIndex != 2 || !strings.Contains(ret.Errors[0].What, "index is stale") || ret.Errors[1].OpIndex != 3 {
		t.Fatalf("errors %+v, want op 2 (stale index) and op 3 (b exists, set by op 0)", ret.Errors)
	}
	if b, _, _ := kvc.Get("b", nil); b != nil {
		t.Errorf("b written by a refused transaction: %+v", b)
	}
	if a2, _, _ := kvc.Get("a", nil); a2 == nil || a2.ModifyIndex != a.ModifyIndex {
		t.Errorf("a changed by a refused transaction: %+v", a2)
	}
	ok, ret, _, err = kvc.Txn(capi.KVTxnOps{
		{Verb: capi.KVCheckIndex, Key: "a", Index: a.ModifyIndex},
		{Verb: capi.KVSet, Key: "dir/b", Value: []byte("2")},
		{Verb: capi.KVCAS, Key: "a", Value: []byte("3"), Index: a.ModifyIndex},
		{Verb: capi.KVGetTree, Key: "dir/"},
	}, nil)
	if err != nil || !ok {
		t.Fatalf("txn: ok %v, err %v, %+v", ok, err, ret)
	}
	if len(ret.Results) != 4 || ret.Results[1].Value != nil || string(ret.Results[3].Value) != "2" || ret.Results[2].ModifyIndex != ret.Results[1].ModifyIndex {
		t.Errorf("results %+v, want check-index, set (no value), cas (of the same revision), dir/b", ret.Results)
	}
	if a3, _, _ := kvc.Get("a", nil); a3 == nil || string(a3.Value) != "3" {
		t.Errorf("a after the transaction: %+v, want 3", a3)
	}
}
