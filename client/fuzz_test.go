package client

import (
	"errors"
	"strings"
	"testing"
)

// FuzzServiceName: ParseService (and View.key, built on it) accepts NAME or
// NAMESPACE/NAME, never panics, and gives back parts that join into what it
// was given.
func FuzzServiceName(f *testing.F) {
	for _, s := range []string{"orders", "prod/orders", "", "/", "a/", "/b", "a/b/c", "é/ü", "a\x00b"} {
		f.Add(s)
	}
	v := &View{ns: "default"}
	f.Fuzz(func(t *testing.T, s string) {
		pns, pname, perr := ParseService(s, "")
		key, ns, name, err := v.key(s)
		if (perr == nil) != (err == nil) || pns != ns || pname != name {
			t.Fatalf("ParseService(%q) = %q, %q, %v; View.key = %q, %q, %v", s, pns, pname, perr, ns, name, err)
		}
		if err != nil {
			if !errors.Is(perr, ErrBadService) || !errors.Is(err, ErrInvalidPick) {
				t.Fatalf("%q: errors %v, %v", s, perr, err)
			}
			return
		}
		if strings.Contains(s, "/") && ns+"/"+name != s {
			t.Fatalf("ParseService(%q) = %q, %q", s, ns, name)
		}
		if ns == "" || name == "" || strings.Contains(name, "/") || key != ns+"/"+name {
			t.Fatalf("key(%q) = %q, %q, %q", s, key, ns, name)
		}
		if !strings.Contains(s, "/") && (ns != "default" || name != s) {
			t.Fatalf("key(%q) = %q, %q: a bare name is in the view's namespace", s, ns, name)
		}
	})
}
