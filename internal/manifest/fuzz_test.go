package manifest

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDocJSON: splitting and converting any stream never panics, documents
// start within the stream in order, and a syntax error's line is one of the
// stream's (or just past its end, for an unexpected end of stream).
func FuzzDocJSON(f *testing.F) {
	for _, s := range []string{"a: 1\n---\nb: [1, 2\n", "---\n- a\nb: c\n", "a:\n\tb: 1\n", "x: 1\na: 1\na: 2\n", "...\n---\n\xff\n", "{\"a\": 1}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		// YAML breaks lines at "\r" alone too.
		lines := bytes.Count(stream, []byte("\n")) + bytes.Count(stream, []byte("\r")) - bytes.Count(stream, []byte("\r\n")) + 1
		prev := 0
		for _, d := range Split(stream) {
			if d.Line <= prev || d.Line > lines {
				t.Fatalf("document at line %d after %d, stream of %d lines", d.Line, prev, lines)
			}
			prev = d.Line
			for _, conv := range []func() ([]byte, error){d.JSON, d.StrictJSON} {
				_, err := conv()
				var se *SyntaxError
				if err != nil && (!errors.As(err, &se) || se.Line < 0 || se.Line > lines+1 || (se.Line > 0 && se.Line < d.Line)) {
					t.Fatalf("document at line %d of %d: error %v", d.Line, lines, err)
				}
			}
		}
	})
}
