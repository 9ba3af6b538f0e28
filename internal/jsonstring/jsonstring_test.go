package jsonstring

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

var seeds = []string{"plain", "", "quote\" back\\ nl\n ctl\x01\b\f html<>& ls\u2028\u2029 bad\xff é", "\x00\x1f\x7f",
	"😀", "a\xc3", "tab\there"}

// FuzzAppend: Append and AppendHTML write what encoding/json writes.
func FuzzAppend(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendHTML(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendHTML(%q) = %s, encoding/json %s", s, got, want)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := Append([]byte("x"), s); !bytes.Equal(got[1:], want) {
			t.Fatalf("Append(%q) = %s, encoding/json %s", s, got[1:], want)
		}
	})
}

// FuzzParse: Parse accepts the JSON strings encoding/json accepts, with
// the same value, and reports where the string ends; ParseStrict refuses
// what is not UTF-8 and otherwise agrees.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`"plain"`, `""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`,
		`"\udc00\ud800x"`, "\"\xff\"", `"\x"`, `"\u12"`, `"abc`, "\"a\x01\"", `"é"`, `"a" trailing`, `x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		b := []byte(in)
		got, end, err := Parse(b, 0)
		var want string
		jerr := json.Unmarshal(b[:max(end, 0)], &want)
		if err == nil {
			if jerr != nil {
				t.Fatalf("Parse(%q) = %q, but encoding/json refuses %q: %v", in, got, b[:end], jerr)
			}
			if string(got) != want {
				t.Fatalf("Parse(%q) = %q, encoding/json %q", in, got, want)
			}
		} else {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): %T %v, want a *SyntaxError", in, err, err)
			}
			// Whatever prefix encoding/json reads as one string, Parse reads too.
			var s string
			if d := json.NewDecoder(bytes.NewReader(b)); d.Decode(&s) == nil && bytes.HasPrefix(bytes.TrimLeft(b, " "), []byte(`"`)) && b[0] == '"' {
				t.Fatalf("Parse(%q) failed (%v), encoding/json reads %q", in, err, s)
			}
		}
		sgot, send, serr := ParseStrict(b, 0)
		switch {
		case err != nil && serr == nil:
			t.Fatalf("ParseStrict(%q) accepted what Parse refused", in)
		case serr == nil && (string(sgot) != string(got) || send != end):
			t.Fatalf("ParseStrict(%q) = %q %d, Parse %q %d", in, sgot, send, got, end)
		case err == nil && serr != nil && utf8.Valid(b[:end]):
			t.Fatalf("ParseStrict(%q) refused valid UTF-8: %v", in, serr)
		}
	})
}

// TestParseView: a string without escapes is a view of the input, with
// no allocation.
func TestParseView(t *testing.T) {
	b := []byte(`"zone-é" rest`)
	got, end, err := Parse(b, 0)
	if err != nil || string(got) != "zone-é" || end != len(`"zone-é"`) {
		t.Fatalf("Parse = %q %d %v", got, end, err)
	}
	if &got[0] != &b[1] {
		t.Fatal("a string without escapes was copied")
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = Parse(b, 0) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in        string
		msg       string
		offset    int
		truncated bool
	}{
		{`"ab`, "", 3, true},
		{`"a\`, "", 3, true},
		{"\"a\x01\"", "control character in string", 2, false},
		{`"a\q"`, `bad escape \q`, 3, false},
		{`"\u12x4"`, `bad \u escape`, 3, false},
		{`x`, "want a string", 0, false},
	} {
		_, _, err := Parse([]byte(tc.in), 0)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Msg != tc.msg || se.Offset != tc.offset || se.Truncated != tc.truncated {
			t.Errorf("Parse(%q) = %#v, want msg %q offset %d truncated %v", tc.in, se, tc.msg, tc.offset, tc.truncated)
		}
	}
	if _, _, err := ParseStrict([]byte("\"\xff\""), 0); err == nil {
		t.Error("ParseStrict accepted invalid UTF-8")
	}
}

func BenchmarkAppend(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = Append(buf[:0], "orders-7f9c.prod.zone-a")
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	in := []byte(`"orders-7f9c.prod.zone-a\n"`)
	for b.Loop() {
		_, _, _ = Parse(in, 0)
	}
}
