package acl

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name, doc string
		field     string // "" = valid
	}{
		{"exact and prefix", `{"name":"orders-rw","rules":[{"namespace":"orders","instances":"write","config":"read"},{"namespace":"team-a-*","push":"read"}]}`, ""},
		{"every namespace", `{"name":"readers","rules":[{"namespace":"*","instances":"read","config":"read","placements":"read","push":"read"}]}`, ""},
		{"admin only", `{"name":"ops","admin":true}`, ""},
		{"description", `{"name":"a","description":"for the orders team","admin":true}`, ""},
		{"bad name", `{"name":"Orders","admin":true}`, "name"},
		{"builtin name", `{"name":"admin","admin":true}`, "name"},
		{"grants nothing", `{"name":"a"}`, "rules"},
		{"rule grants nothing", `{"name":"a","rules":[{"namespace":"x"}]}`, "rules[0]"},
		{"no namespace", `{"name":"a","rules":[{"instances":"read"}]}`, "rules[0].namespace"},
		{"bad access", `{"name":"a","rules":[{"namespace":"x","instances":"admin"}]}`, "rules[0].instances"},
		{"unknown rule field", `{"name":"a","rules":[{"namespace":"x","nodes":"read"}]}`, "rules[0].nodes"},
		{"unknown field", `{"name":"a","admin":true,"extra":1}`, "extra"},
		{"server field", `{"name":"a","admin":true,"revision":3}`, "revision"},
		{"star inside", `{"name":"a","rules":[{"namespace":"a*b","instances":"read"}]}`, "rules[0].namespace"},
		{"bare prefix star", `{"name":"a","rules":[{"namespace":"-*","instances":"read"}]}`, "rules[0].namespace"},
		{"upper namespace", `{"name":"a","rules":[{"namespace":"Prod","instances":"read"}]}`, "rules[0].namespace"},
		{"trailing data", `{"name":"a","admin":true} {}`, ""},
		{"not an object", `[]`, ""},
		{"rules not an array", `{"name":"a","rules":{}}`, "rules"},
		{"wrong type", `{"name":7}`, "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.doc))
			valid := tt.field == "" && !strings.Contains(tt.name, "trailing") && !strings.Contains(tt.name, "not an object")
			if valid {
				if err != nil {
					t.Fatalf("ParsePolicy: %v", err)
				}
				back, err := decodePolicy(encodePolicy(p), 7)
				if err != nil || back.Revision != 7 {
					t.Fatalf("stored form: %v", err)
				}
				back.Revision = 0
				if !reflect.DeepEqual(back, p) {
					t.Fatalf("stored form round trip: %+v != %+v", back, p)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParsePolicy(%s) accepted %+v", tt.doc, p)
			}
			fe, ok := err.(*FieldError)
			if !ok {
				t.Fatalf("error %T %v, want *FieldError", err, err)
			}
			if tt.field != "" && fe.Field != tt.field {
				t.Fatalf("field %q (%v), want %q", fe.Field, err, tt.field)
			}
			if fe.Msg == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestParseRule(t *testing.T) {
	good := map[string]string{
		"orders:instances=write":             "orders:instances=write",
		"orders:instances=write,config=read": "orders:instances=write,config=read",
		"team-a-*:*=read":                    "team-a-*:instances=read,config=read,placements=read,push=read,identity=read",
		"*:push=read,push=write":             "*:push=write",
		"*:*=read,instances=write":           "*:instances=write,config=read,placements=read,push=read,identity=read",
		"a.b_c:placements=read":              "a.b_c:placements=read",
		"shop:kv=write,secret=read":          "shop:secret=read,kv=write",
		"shop:*=write,kv=read":               "shop:instances=write,config=write,placements=write,push=write,identity=write,kv=read",
	}
	for in, want := range good {
		r, err := ParseRule(in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", in, err)
			continue
		}
		if r.String() != want {
			t.Errorf("ParseRule(%q) = %q, want %q", in, r.String(), want)
		}
	}
	for _, in := range []string{"", "orders", "orders:", ":instances=read", "orders:instances", "orders:instances=all",
		"orders:nodes=read", "Orders:instances=read", "a*b:instances=read", "**:instances=read", "orders:instances=read,"} {
		if r, err := ParseRule(in); err == nil {
			t.Errorf("ParseRule(%q) accepted %v", in, r)
		} else if !strings.HasPrefix(err.Error(), "acl: rule ") {
			t.Errorf("ParseRule(%q) error %q does not name the rule", in, err)
		}
	}
}

func TestGrants(t *testing.T) {
	pol := func(doc string) *Policy {
		p, err := ParsePolicy([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var g grants
	g.add(pol(`{"name":"a","rules":[{"namespace":"orders","instances":"write"},{"namespace":"team-*","config":"read"}]}`))
	g.add(pol(`{"name":"b","rules":[{"namespace":"orders","config":"write"},{"namespace":"*","push":"read"},{"namespace":"team-*","config":"write"}]}`))
	tests := []struct {
		p    Permission
		want bool
	}{
		{Permission{Instances, Write, "orders"}, true},
		{Permission{Instances, Read, "orders"}, true}, // write implies read
		{Permission{Instances, Read, "orders2"}, false},
		{Permission{Instances, Read, "order"}, false},
		{Permission{Config, Write, "orders"}, true},
		{Permission{Config, Write, "team-x"}, true}, // union of a's read and b's write
		{Permission{Config, Read, "team"}, false},
		{Permission{Push, Read, "anything"}, true},
		{Permission{Push, Write, "anything"}, false},
		{Permission{Push, Read, ""}, true}, // every namespace: the * rule
		{Permission{Instances, Read, ""}, false},
		{Permission{Placements, Read, "orders"}, false},
		{Admin, false},
	}
	for _, tt := range tests {
		if got := g.allows(tt.p); got != tt.want {
			t.Errorf("allows(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if !g.any(Instances, Read) || g.any(Placements, Read) || !g.any(Config, Write) {
		t.Error("any() is wrong")
	}
	var admin grants
	admin.add(builtinAdmin)
	if !admin.allows(Admin) || !admin.allows(Permission{Placements, Write, ""}) {
		t.Error("admin does not allow everything")
	}
}

func TestPolicyJSONRoundTrip(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"name":"x","description":"d","rules":[{"namespace":"a-*","instances":"write","push":"read"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"name":"x","description":"d","rules":[{"namespace":"a-*","instances":"write","push":"read"}]}` {
		t.Fatalf("marshal = %s", b)
	}
}

// TestKVRule: the kv resource (Consul's key:read and key:write) is
// written and read in a policy's JSON, and granted per namespace.
func TestKVRule(t *testing.T) {
	var r Rule
	if err := json.Unmarshal([]byte(`{"namespace":"shop","kv":"write"}`), &r); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil || string(b) != `{"namespace":"shop","kv":"write"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var g grants
	g.add(&Policy{Name: "p", Rules: []Rule{r}})
	for _, tc := range []struct {
		p    Permission
		want bool
	}{
		{Permission{Resource: KV, Access: Write, Namespace: "shop"}, true},
		{Permission{Resource: KV, Access: Read, Namespace: "shop"}, true},
		{Permission{Resource: KV, Access: Read, Namespace: "other"}, false},
		{Permission{Resource: Instances, Access: Read, Namespace: "shop"}, false},
	} {
		if got := g.allows(tc.p); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := KV.String(); got != "kv" {
		t.Errorf("KV.String() = %q", got)
	}
}
