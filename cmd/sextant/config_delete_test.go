package main

import (
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// config delete KIND/NAME says which namespace it assumed, and the form is
// in the command's usage; KIND/NAMESPACE/NAME names its own.
func TestConfigDeleteNamesTheNamespace(t *testing.T) {
	url := apitest.Start(t).URL
	if out, err := runOn(t, url, cliRouting, "config", "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	for _, c := range []struct{ ref, want string }{
		{"dr/orders", "deleted destinationrule default/orders (revision "},
		{"VirtualService/prod/orders", "deleted virtualservice prod/orders (revision "},
	} {
		out, err := runOn(t, url, "", "config", "delete", c.ref)
		if err != nil || !strings.HasPrefix(out, c.want) {
			t.Errorf("config delete %s: %v\n%s\nwant %q...", c.ref, err, out, c.want)
		}
	}
	if out, err := runOn(t, url, "", "config", "delete", "vs/orders"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("deleting an absent vs/orders: %v\n%s", err, out)
	}
	del, _, err := newConfigCmd().Find([]string{"delete"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(del.Use, "KIND/NAME") || !strings.Contains(del.Example, "config delete vs/orders") || !strings.Contains(del.Long, "namespace default") {
		t.Errorf("config delete's help has no KIND/NAME form: %q\n%s\n%s", del.Use, del.Long, del.Example)
	}
}
