package acl

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The parsers of outside input: policy documents and rules (API bodies and
// CLI flags), token create bodies, and token secrets (every request's
// Authorization header). Seed corpora live in testdata/fuzz.

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(`{"name":"orders-rw","rules":[{"namespace":"orders","instances":"write","config":"read"},{"namespace":"team-a-*","push":"read"}]}`))
	f.Add([]byte(`{"name":"ops","admin":true,"description":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("error %T is not a *FieldError: %v", err, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted policy does not validate: %v", err)
		}
		// What is accepted survives the stored form and the API's JSON.
		back, err := decodePolicy(encodePolicy(p), 1)
		if err != nil {
			t.Fatal(err)
		}
		back.Revision = 0
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("stored round trip %+v != %+v", back, p)
		}
		j, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParsePolicy(j)
		if err != nil || !reflect.DeepEqual(again, p) {
			t.Fatalf("JSON round trip: %v", err)
		}
		var g grants
		g.add(p)
		for _, r := range p.Rules {
			ns := strings.TrimSuffix(r.Namespace, "*")
			if ns == "" {
				ns = "x"
			}
			for res, a := range r.Grants {
				if a != None && !g.allows(Permission{Resource(res), a, ns}) {
					t.Fatalf("rule %v does not grant %v:%v on %q", r, Resource(res), a, ns)
				}
			}
		}
	})
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"orders:instances=write,config=read", "team-a-*:*=read", "*:push=read", "a:b", ":", "x:instances=read,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted rule does not validate: %v", err)
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseRule(%q.String() = %q) = %v, %v", s, r.String(), again, err)
		}
	})
}

func FuzzParseSecret(f *testing.F) {
	f.Add("sxt_0123456789abcdef01234567_" + strings.Repeat("ab", 32))
	f.Add("Bearer sxt_0123456789abcdef01234567_" + strings.Repeat("0f", 32))
	f.Add("sxt_")
	f.Fuzz(func(t *testing.T, s string) {
		if tok, ok := ParseBearer(s); ok {
			s = tok
		}
		acc, sec, err := ParseSecret(s)
		if err != nil {
			if len(s) >= 6 && strings.Contains(err.Error(), s) {
				t.Fatalf("the error quotes its input: %v", err)
			}
			return
		}
		if !ValidAccessor(acc) {
			t.Fatalf("accessor %q", acc)
		}
		const hexdigits = "0123456789abcdef"
		var b strings.Builder
		b.WriteString("sxt_" + acc + "_")
		for _, c := range sec {
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&15])
		}
		if b.String() != s {
			t.Fatalf("accepted %q, which does not print back", s)
		}
	})
}

func FuzzParseTokenRequest(f *testing.F) {
	f.Add([]byte(`{"policies":["a","b"],"description":"x"}`))
	f.Add([]byte(`{"policies":["admin"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ParseTokenRequest(b)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("error %T is not a *FieldError: %v", err, err)
			}
			return
		}
		if err := req.Validate(); err != nil || len(req.Policies) == 0 {
			t.Fatalf("accepted request does not validate: %v", err)
		}
	})
}
