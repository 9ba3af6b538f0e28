package consulapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzConsulRegister holds the register body decoder to its contract on
// any input: no panic; a refusal is a 400; a decoded registration survives
// a round trip through Consul's JSON unchanged, and the instance made of it
// (or its refusal, a 400) is decided without a panic.
func FuzzConsulRegister(f *testing.F) {
	for _, s := range []string{
		`{"ID":"web-1","Name":"web","Tags":["primary","v1"],"Address":"10.0.0.1","Port":8080,"Meta":{"env":"prod"},"Weights":{"Passing":10,"Warning":1},"Check":null,"Checks":null}`,
		`{"name":"web","port":80,"enable_tag_override":true,"tags":[]}`,
		`{"Name":"web","Port":80,"Check":{"TTL":"10s","DeregisterCriticalServiceAfter":"1m"}}`,
		`{"Name":"web","Port":80,"Checks":[{"HTTP":"http://127.0.0.1/health","Interval":"5s","Timeout":"1s","Header":{"X":["y"]}},{"TCP":"127.0.0.1:80","Interval":"5s"},{"GRPC":"127.0.0.1:9090/svc","Interval":"5s","GRPCUseTLS":true}]}`,
		`{"Name":"web","Port":"80"}`,
		`{"Name":"web","Port":80,"Connect":{"Native":true}}`,
		`{"Name":"web","Port":1e3}`,
		`[1,2]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		reg, err := DecodeRegister(body)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusBadRequest || he.msg == "" {
				t.Fatalf("refusal %v is not a 400 with a message", err)
			}
			return
		}
		again := map[string]any{"ID": reg.ID, "Name": reg.Name, "Address": reg.Address, "Port": reg.Port, "Tags": reg.Tags, "Meta": reg.Meta}
		if reg.Weights != nil {
			again["Weights"] = reg.Weights
		}
		again["Kind"], again["TaggedAddresses"], again["Locality"], again["Ports"] = reg.Kind, reg.TaggedAddresses, reg.Locality, reg.Ports
		again["EnableTagOverride"] = reg.EnableTagOverride
		again["SocketPath"] = reg.SocketPath
		if reg.ConnectNative {
			again["Connect"] = map[string]bool{"Native": true}
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		reg2, err := DecodeRegister(b)
		if err != nil {
			t.Fatalf("re-encoded %s: %v", b, err)
		}
		reg.Checks, reg2.Checks = nil, nil
		reg.Proxy = nil // not sent again: kept as given, compared by the tests of its answer
		reg.Sidecar = nil
		if diff := cmp.Diff(reg, reg2); diff != "" {
			t.Fatalf("round trip of %s (-first +second):\n%s", body, diff)
		}
		if _, err := reg.Instance("default", "127.0.0.1"); err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusBadRequest {
				t.Fatalf("instance refusal %v is not a 400", err)
			}
		}
	})
}
