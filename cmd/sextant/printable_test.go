package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/client"
)

// TestPrintableMetadata: metadata stored before the server refused control
// characters (a NUL, an escape sequence, a line break) is printed escaped
// by the CLI's tables, never raw.
func TestPrintableMetadata(t *testing.T) {
	in := &client.Instance{ID: "i1", Namespace: "default", Service: "s", Host: "10.0.0.1", Port: 80, Version: "v1\x00",
		Metadata: map[string]string{"a": "x\x00y", "b": "\x1b[31mred\x1b[0m", "c": "two\nlines", "d": "é\u009b", "e": "plain"}}
	var out bytes.Buffer
	instanceRow(&out, in)
	got := out.String()
	if strings.ContainsAny(strings.TrimSuffix(got, "\n"), "\x00\x1b\n\u009b") {
		t.Fatalf("raw control characters printed: %q", got)
	}
	if !strings.Contains(got, `v1\x00`) {
		t.Errorf("row %q, want the version escaped", got)
	}
	if want := `a=x\x00y,b=\x1b[31mred\x1b[0m,c=two\nlines,d=é\u009b,e=plain`; !strings.Contains(got, want) {
		t.Errorf("row %q, want metadata %q", got, want)
	}
}
