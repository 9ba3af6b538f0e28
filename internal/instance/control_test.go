package instance

import (
	"errors"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/label"
)

// TestPrepareRefusesControlCharacters: a metadata value holding a NUL, an
// escape or another control character is refused, naming its key; text,
// non-ASCII letters included, is kept.
func TestPrepareRefusesControlCharacters(t *testing.T) {
	for _, v := range []string{"a\x00b", "\x1b[31mred", "tab\there", "line\n", "del\x7f", "c1\u009b"} {
		in := &Instance{ID: "i", Namespace: "default", Service: "s", Host: "10.0.0.1", Port: 80, Weight: 1,
			Metadata: label.FromMap(map[string]string{"note": v})}
		err := Prepare(-1, in)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "metadata.note" || !strings.Contains(fe.Msg, "control character") {
			t.Errorf("value %q: %v, want a control character error on metadata.note", v, err)
		}
	}
	for _, v := range []string{"", "plain", "é ü 日本", "a=b,c;d", "\u00a0nbsp"} {
		in := &Instance{ID: "i", Namespace: "default", Service: "s", Host: "10.0.0.1", Port: 80, Weight: 1,
			Metadata: label.FromMap(map[string]string{"note": v})}
		if err := Prepare(-1, in); err != nil {
			t.Errorf("value %q: %v", v, err)
		}
	}
}

// TestPrepareRefusesControlCharactersInShortFields: the version (a label
// too) and the protocol are text without control characters as well.
func TestPrepareRefusesControlCharactersInShortFields(t *testing.T) {
	for _, tc := range []struct{ field, protocol, version string }{{"version", "", "v1\x00"}, {"protocol", "http\x1b", ""}} {
		in := &Instance{ID: "i", Namespace: "default", Service: "s", Host: "10.0.0.1", Port: 80, Weight: 1, Protocol: tc.protocol, Version: tc.version}
		err := Prepare(-1, in)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, "control character") {
			t.Errorf("%+v: %v, want a control character error on %s", tc, err, tc.field)
		}
	}
}
