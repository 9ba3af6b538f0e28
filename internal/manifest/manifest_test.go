package manifest

import (
	"errors"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	got := Split([]byte("# head\n---\na: 1\n---\n\n# only a comment\n--- \nb: 2\nc: 3\n...\n---\r\nd: 4"))
	want := []Doc{{Data: []byte("a: 1\n"), Line: 3}, {Data: []byte("b: 2\nc: 3\n"), Line: 8}, {Data: []byte("d: 4\n"), Line: 12}}
	if len(got) != len(want) {
		t.Fatalf("got %d documents: %+v", len(got), got)
	}
	for i := range want {
		if string(got[i].Data) != string(want[i].Data) || got[i].Line != want[i].Line {
			t.Errorf("document %d: %q at line %d, want %q at line %d", i, got[i].Data, got[i].Line, want[i].Data, want[i].Line)
		}
	}
}

// A syntax error names the line of the stream the problem is on, whether
// go-yaml's scanner or its parser found it (the parser's lines were one
// early) and whatever documents come before it (lines were counted from the
// document's start, so a file starting with "---" was one early too).
func TestSyntaxErrorLine(t *testing.T) {
	for _, c := range []struct {
		name, stream string
		line         int
		msg          string
	}{
		{"parser: mapping less indented", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n bad: 1\n", 5, "did not find expected key"},
		{"parser: after ---", "---\napiVersion: v1\nmetadata:\n  name: x\n bad: 1\n", 5, "did not find expected key"},
		{"parser: sequence entry expected", "a: 1\nb:\n  - x\n  y: 2\n", 4, "did not find expected '-' indicator"},
		{"parser: first line", "- a\nb: c\n", 2, "did not find expected '-' indicator"},
		{"parser: unclosed flow", "a: [1, 2\nb: 3\n", 2, "did not find expected ',' or ']'"},
		{"scanner: mapping value", "a: 1\nb: 2\nc: d: e\n", 3, "mapping values are not allowed in this context"},
		{"scanner: tab", "a:\n\tb: 1\n", 2, "found character that cannot start any token"},
		{"scanner: second document", "a: 1\n---\na: 1\nb: 2\nc: d: e\n", 5, "mapping values are not allowed in this context"},
		{"parser: third document", "a: 1\n---\nb: 2\n---\n# c\nc:\n  d: 1\n e: 2\n", 8, "did not find expected key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			for _, d := range Split([]byte(c.stream)) {
				if _, err = d.JSON(); err != nil {
					break
				}
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a *SyntaxError", err)
			}
			if se.Line != c.line || se.Msg != c.msg {
				t.Fatalf("%q: line %d %q, want line %d %q", c.stream, se.Line, se.Msg, c.line, c.msg)
			}
			if lines := strings.Split(c.stream, "\n"); c.line > len(lines) {
				t.Fatalf("bad case: line %d of %d", c.line, len(lines))
			}
		})
	}
}

// A key given twice is refused by StrictJSON, at the stream's line.
func TestStrictJSONDuplicateKey(t *testing.T) {
	docs := Split([]byte("x: 1\n---\na: 1\nb: 2\na: 3\n"))
	if _, err := docs[1].JSON(); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	_, err := docs[1].StrictJSON()
	if err == nil || !strings.Contains(err.Error(), `line 5: key "a" already set in map`) {
		t.Fatalf("StrictJSON: %v", err)
	}
}

func TestMismatch(t *testing.T) {
	for _, c := range []struct{ apiVersion, kind, want, msg string }{
		{"networking.istio.io/v1", "VirtualService", "a Pod",
			`this is a VirtualService (networking.istio.io/v1), not a Pod: routing config goes to "sextant config apply" (POST /v1/config:apply)`},
		{"v1", "Pod", "a VirtualService or DestinationRule",
			`this is a Pod (v1), not a VirtualService or DestinationRule: Pods go to "sextant place" (POST /v1/placements)`},
		{"v1", "Node", "a Pod", `this is a Node (v1), not a Pod: Nodes go to "sextant nodes apply" (POST /v1/nodes)`},
		{"apps/v1", "Deployment", "a Pod", `this is a Deployment (apps/v1), not a Pod`},
		{"", "", "a Node", `this is an object without a kind, not a Node`},
		{"v1", "Endpoints", "a Node", `this is an Endpoints (v1), not a Node`},
	} {
		if got := Mismatch(c.apiVersion, c.kind, c.want); got != c.msg {
			t.Errorf("Mismatch(%q, %q, %q) =\n%s\nwant\n%s", c.apiVersion, c.kind, c.want, got, c.msg)
		}
	}
}
