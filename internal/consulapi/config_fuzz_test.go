package consulapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

// FuzzConfigEntry holds the config entry decoder to its contract: no
// panic; a refusal is a 400 with a message; what it accepts has a known
// kind and a valid name, and re-encodes to the same kind and name.
func FuzzConfigEntry(f *testing.F) {
	for _, s := range []string{
		`{"Kind":"service-defaults","Name":"web","Protocol":"http"}`,
		`{"kind":"proxy-defaults","Config":{"a":1}}`,
		`{"Kind":"ingress-gateway","Name":"igw","Listeners":[{"Port":1,"Services":[{"Name":"*"}]}],"ModifyIndex":3}`,
		`{"Kind":"mesh","Name":"other"}`,
		`{"Kind":1}`,
		`{"Kind":"mesh","kind":"service-defaults","Name":"x"}`,
		`{"Kind":"nope","Name":"x"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		kind, name, entry, err := decodeConfigEntry(body)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusBadRequest || he.msg == "" {
				t.Fatalf("refusal %v is not a 400 with a message", err)
			}
			return
		}
		if _, ok := configKinds[kind]; !ok || !validNodeName(name) {
			t.Fatalf("accepted kind %q name %q", kind, name)
		}
		b, err := json.Marshal(entry)
		if err != nil {
			t.Fatal(err)
		}
		k2, n2, _, err := decodeConfigEntry(b)
		if err != nil || k2 != kind || n2 != name && configKinds[kind] == "" {
			t.Fatalf("re-encoded %s: %q %q %v, want %q %q", b, k2, n2, err, kind, name)
		}
	})
}
