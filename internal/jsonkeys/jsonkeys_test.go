package jsonkeys

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		doc        string
		key, path  string
		line       int
		field      string
		duplicated bool
	}{
		{doc: `{"service":"a","port":1}`},
		{doc: `{"service":"a","service":"b"}`, duplicated: true, key: "service", line: 1, field: "service"},
		{doc: "{\n \"metadata\": {\"a\": \"1\",\n  \"b\": \"2\",\n  \"a\": \"3\"}}", duplicated: true, key: "a", path: "metadata", line: 4, field: "metadata.a"},
		{doc: `{"instances":[{"id":"x"},{"id":"y","id":"z"}]}`, duplicated: true, key: "id", path: "instances[1]", line: 1, field: "instances[1].id"},
		{doc: `[{"a":1},{"a":2}]`},
		{doc: `{"a":{"a":{"a":1}}}`},
		{doc: `{"a":1,"\u0061":2}`, duplicated: true, key: "a", line: 1},
		{doc: `{"a":[1,{"b":2}],"c":{"b":3}}`},
		{doc: `{"a":1} {"a":2}`}, // two documents, each with one a
		{doc: `{"a":1,"a"`},      // malformed, but the duplicate comes first
		{doc: `not json`},
		{doc: ``},
	} {
		err := Check([]byte(tc.doc))
		var de *DuplicateError
		if !tc.duplicated {
			if err != nil && tc.doc != `{"a":1,"a"` {
				t.Errorf("%s: %v, want nil", tc.doc, err)
			}
			continue
		}
		if !errors.As(err, &de) || de.Key != tc.key || de.Path != tc.path || de.Line != tc.line {
			t.Errorf("%s: %v (%+v), want key %q in %q on line %d", tc.doc, err, de, tc.key, tc.path, tc.line)
			continue
		}
		if tc.field != "" && de.Field() != tc.field {
			t.Errorf("%s: field %q, want %q", tc.doc, de.Field(), tc.field)
		}
	}
}

// colons counts the ':' outside strings of a valid JSON document: its
// object members, keys given twice included.
func colons(doc []byte) int {
	n, in, esc := 0, false, false
	for _, c := range doc {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && c == ':':
			n++
		}
	}
	return n
}

// members counts the members of every object of v, as decoded (a key
// given twice counts once).
func members(v any) int {
	switch v := v.(type) {
	case map[string]any:
		n := len(v)
		for _, e := range v {
			n += members(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range v {
			n += members(e)
		}
		return n
	}
	return 0
}

// FuzzCheck holds Check to an independent count: a valid document has a
// key given twice exactly when it has more members (colons) than its
// decoded objects keep.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `[{"a":1},{"a":1}]`, `{"a:":"b:"}`, `{"\u0061":1,"a":2}`, "{\n\"x\":[{\"y\":1}],\n\"x\":2}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := Check(doc)
		var v any
		if json.Unmarshal(doc, &v) != nil {
			return // not one JSON document: no panic is all
		}
		dup := colons(doc) > members(v)
		if dup != (err != nil) {
			t.Fatalf("%q: Check %v, but duplicated is %v", doc, err, dup)
		}
		var de *DuplicateError
		if err != nil && (!errors.As(err, &de) || de.Line < 1 || de.Line > Line(doc, len(doc))) {
			t.Fatalf("%q: %v", doc, err)
		}
	})
}
