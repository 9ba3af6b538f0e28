package instance

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/label"
)

// FuzzMetadata: whatever the column holds, parseMetadata agrees with
// encoding/json on what it accepts (objects of strings with unique keys)
// and on the pairs; what appendMetadata writes is valid JSON that parses
// back to the same labels.
func FuzzMetadata(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, ` { "z" : "1" , "a":"\u00e9\ud83d\ude00\n" } `, `{"a":"b","a":"c"}`,
		`{"a":1}`, `{"a":"b"`, `[]`, `{"\u0000":"\\\/\"\b\f\r\t"}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseMetadata([]byte(s))
		var m map[string]any
		jerr := json.Unmarshal([]byte(s), &m)
		allStrings := jerr == nil && m != nil && utf8.ValidString(s)
		for _, v := range m {
			if _, ok := v.(string); !ok {
				allStrings = false
			}
		}
		if err == nil {
			if !allStrings {
				t.Fatalf("parseMetadata accepted %q, encoding/json: %v", s, jerr)
			}
			if l.Len() != len(m) {
				t.Fatalf("%q: %d pairs, encoding/json %d (a duplicate key must fail)", s, l.Len(), len(m))
			}
			for k, v := range l.All() {
				if m[k] != v {
					t.Fatalf("%q: %q=%q, encoding/json %q", s, k, v, m[k])
				}
			}
		} else if allStrings && l.Len() == 0 && countKeys(s) == len(m) {
			t.Fatalf("parseMetadata refused %q (%v), a valid object of strings", s, err)
		}
		// Round trip from labels.
		mm := map[string]string{}
		for k, v := range m {
			if sv, ok := v.(string); ok {
				mm[k] = sv
			}
		}
		in := label.FromMap(mm)
		out := appendMetadata(nil, in)
		if !json.Valid(out) {
			t.Fatalf("appendMetadata wrote invalid JSON %q", out)
		}
		back, err := parseMetadata(out)
		if err != nil || !back.Equal(in) {
			t.Fatalf("round trip of %v: %q -> %v %v", mm, out, back.Map(), err)
		}
	})
}

// countKeys counts the keys of a JSON object including duplicates.
func countKeys(s string) int {
	d := json.NewDecoder(strings.NewReader(s))
	n := 0
	depth := 0
	expectKey := false
	for {
		tok, err := d.Token()
		if err != nil {
			return n
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' {
				depth++
				expectKey = true
			} else if v == '}' {
				depth--
			}
		case string:
			if depth == 1 && expectKey {
				n++
				expectKey = false
			} else {
				expectKey = true
			}
		default:
			expectKey = true
		}
	}
}
