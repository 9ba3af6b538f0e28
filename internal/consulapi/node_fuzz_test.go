package consulapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

// FuzzCatalogRegister holds the catalog register decoder to its contract
// on any input: no panic; a refusal is a 400 with a message; a decoded
// registration has a node, an address unless SkipNodeUpdate, and its
// service a name; re-encoded, it decodes again.
func FuzzCatalogRegister(f *testing.F) {
	for _, s := range []string{
		`{"Node":"foo","Address":"127.0.0.2","TaggedAddresses":{"wan":"198.18.0.2"},"NodeMeta":{"env":"prod"},"Locality":{"Region":"us-west-1","Zone":"us-west-1a"},"Checks":[{"Node":"foo","CheckID":"foo:alive","Name":"alive","Status":"passing"}]}`,
		`{"Node":"foo","SkipNodeUpdate":true,"Service":{"ID":"redis1","Service":"redis","Tags":["v1"],"Port":0,"Address":"198.18.1.2","Weights":{"Passing":1,"Warning":1}},"Check":{"CheckID":"svc","ServiceID":"redis1","Status":"warning","Definition":{"HTTP":"http://x"}}}`,
		`{"ID":"","Node":"n","Address":"10.0.0.1","TaggedAddresses":null,"NodeMeta":null,"Datacenter":"","Service":{"Kind":"connect-proxy","ID":"p","Service":"p","Tags":null,"Meta":null,"Port":21000,"Address":"","TaggedAddresses":{"lan":{"Address":"10.0.0.1","Port":1}},"Weights":{"Passing":0,"Warning":0},"EnableTagOverride":false,"Ports":[{"Name":"http","Port":80,"Default":true}]},"Check":null,"Checks":null,"SkipNodeUpdate":false}`,
		`{"Node":"","Address":"x"}`,
		`{"Node":"a","Address":"b","Unknown":1}`,
		`{"Node":"a","Address":"b","Service":{"Service":"s","Proxy":{"DestinationServiceName":"x"}}}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reg, err := DecodeCatalogRegister(body)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusBadRequest || he.msg == "" {
				t.Fatalf("refusal %v is not a 400 with a message", err)
			}
			return
		}
		if reg.Node == "" || reg.Address == "" && !reg.SkipNodeUpdate || reg.Service != nil && reg.Service.Service == "" {
			t.Fatalf("accepted %s: %+v", body, reg)
		}
		b, err := json.Marshal(reg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCatalogRegister(b); err != nil {
			t.Fatalf("re-encoded %s: %v", b, err)
		}
	})
}

// FuzzTxn holds the transaction decoder to its contract: no panic; a
// refusal is a 400 or a 413 with a message; what it accepts re-encodes to
// the same operations.
func FuzzTxn(f *testing.F) {
	for _, s := range []string{
		`[{"KV":{"Verb":"lock","Key":"k","Value":"dGVzdA==","Session":"s"}},{"KV":{"Verb":"get","Key":"k"}}]`,
		`[{"KV":{"Verb":"cas","Key":"a/b","Value":null,"Flags":3,"Index":12}},{"KV":{"Verb":"delete-tree","Key":"a/"}}]`,
		`[{"Node":{"Verb":"set","Node":{"Node":"n"}}}]`,
		`[{"Service":{"Verb":"set","Node":"n","Service":{"ID":"s","Service":"s","Port":80}}}]`,
		`[{"Check":{"Verb":"cas","Check":{"Node":"n","CheckID":"c","Status":"passing","Definition":{"TCP":"a:1","Interval":"5s"}}}}]`,
		`[{"KV":{"Verb":"nope","Key":"k"}}]`,
		`[{"KV":{"Verb":"set","Key":""}}]`,
		`[{"KV":{"Verb":"set","Key":"k","Value":"!"}}]`,
		`[{}]`,
		`{}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := DecodeTxn(body)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusBadRequest && he.status != http.StatusRequestEntityTooLarge || he.msg == "" {
				t.Fatalf("refusal %v is not a 400 or 413 with a message", err)
			}
			return
		}
		var again []map[string]any
		for _, op := range ops {
			switch {
			case op.KV != nil:
				k := op.KV
				again = append(again, map[string]any{"KV": txnKVOp{Verb: k.Verb, Key: k.Key, Value: k.Value, Flags: k.Flags, Index: uint64(k.Index), Session: k.Session}})
			case op.Node != nil:
				again = append(again, map[string]any{"Node": op.Node})
			case op.Service != nil:
				again = append(again, map[string]any{"Service": op.Service})
			case op.Check != nil:
				again = append(again, map[string]any{"Check": op.Check})
			}
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		ops2, err := DecodeTxn(b)
		if err != nil {
			t.Fatalf("re-encoded %s: %v", b, err)
		}
		if len(ops2) != len(ops) {
			t.Fatalf("%d operations, %d after a round trip", len(ops), len(ops2))
		}
	})
}
