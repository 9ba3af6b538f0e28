package client

import (
	"strings"
	"testing"
)

// FuzzServiceName: View.key accepts NAME or NAMESPACE/NAME, never panics,
// and gives back a key that splits into what it was given.
func FuzzServiceName(f *testing.F) {
	for _, s := range []string{"orders", "prod/orders", "", "/", "a/", "/b", "a/b/c", "é/ü", "a\x00b"} {
		f.Add(s)
	}
	v := &View{ns: "default"}
	f.Fuzz(func(t *testing.T, s string) {
		key, ns, name, err := v.key(s)
		if err != nil {
			return
		}
		if ns == "" || name == "" || strings.Contains(name, "/") || key != ns+"/"+name {
			t.Fatalf("key(%q) = %q, %q, %q", s, key, ns, name)
		}
		if !strings.Contains(s, "/") && (ns != "default" || name != s) {
			t.Fatalf("key(%q) = %q, %q: a bare name is in the view's namespace", s, ns, name)
		}
	})
}
