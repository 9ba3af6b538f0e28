package acl

import (
	"strings"
	"testing"
	"time"
)

func TestTokenSecret(t *testing.T) {
	tok, secret, err := newToken("d", []string{"p"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) != tokenLen || !strings.HasPrefix(secret, "sxt_"+tok.AccessorID+"_") {
		t.Fatalf("secret %d bytes, shape wrong", len(secret))
	}
	acc, sec, err := ParseSecret(secret)
	if err != nil || acc != tok.AccessorID || !tok.matches(&sec) {
		t.Fatalf("ParseSecret: %v %q", err, acc)
	}
	sec[0] ^= 1
	if tok.matches(&sec) {
		t.Fatal("a changed secret matches")
	}
	stored := encodeToken(tok)
	if strings.Contains(string(stored), secret[len(secret)-64:]) {
		t.Fatal("the stored record holds the secret")
	}
	back, err := decodeToken(stored, 9)
	if err != nil || back.AccessorID != tok.AccessorID || back.hash != tok.hash || back.Revision != 9 {
		t.Fatalf("decode: %v %+v", err, back)
	}
	_, sec, _ = ParseSecret(secret)
	if !back.matches(&sec) {
		t.Fatal("decoded token does not match its secret")
	}
	_, other, _ := newToken("", []string{"p"}, time.Now())
	if _, osec, _ := ParseSecret(other); back.matches(&osec) {
		t.Fatal("another token's secret matches")
	}
}

func TestParseSecretRejects(t *testing.T) {
	_, good, _ := newToken("", []string{"p"}, time.Now())
	bad := []string{"", "sxt_", good[:len(good)-1], good + "0", strings.ToUpper(good), "xxx" + good[3:],
		good[:4] + "g" + good[5:], good[:len(good)-1] + "G", strings.Replace(good, "_", "-", 2)}
	for _, s := range bad {
		if _, _, err := ParseSecret(s); err == nil {
			t.Errorf("ParseSecret accepted a malformed token")
		} else if len(s) > 8 && strings.Contains(err.Error(), s) {
			t.Errorf("the error quotes the token: %v", err)
		}
	}
}

func TestParseBearer(t *testing.T) {
	for h, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "BEARER x": "x"} {
		if got, ok := ParseBearer(h); !ok || got != want {
			t.Errorf("ParseBearer(%q) = %q %v", h, got, ok)
		}
	}
	for _, h := range []string{"", "Basic abc", "Bearer", "Bearer ", "Bearerabc"} {
		if _, ok := ParseBearer(h); ok {
			t.Errorf("ParseBearer(%q) accepted", h)
		}
	}
}

func TestParseTokenRequest(t *testing.T) {
	for doc, field := range map[string]string{
		`{"policies":["a","b"],"description":"x"}`: "",
		`{"policies":[]}`:                          "policies",
		`{}`:                                       "policies",
		`{"policies":["a","a"]}`:                   "policies[1]",
		`{"policies":["A"]}`:                       "policies[0]",
		`{"policies":["a"],"secret":"x"}`:          "secret",
		`{"policies":"a"}`:                         "policies",
	} {
		_, err := ParseTokenRequest([]byte(doc))
		if field == "" {
			if err != nil {
				t.Errorf("%s: %v", doc, err)
			}
			continue
		}
		fe, ok := err.(*FieldError)
		if !ok || fe.Field != field {
			t.Errorf("%s: error %v, want field %q", doc, err, field)
		}
	}
}
