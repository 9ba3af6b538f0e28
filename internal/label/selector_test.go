package label

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Selector
	}{
		{"empty", "", nil},
		{"blank", "   ", nil},
		{"equals", "zone=z1", Selector{{Key: "zone", Op: Equals, Values: []string{"z1"}}}},
		{"double equals", "zone==z1", Selector{{Key: "zone", Op: Equals, Values: []string{"z1"}}}},
		{"not equals", "zone != z1", Selector{{Key: "zone", Op: NotEquals, Values: []string{"z1"}}}},
		{"empty value", "zone=", Selector{{Key: "zone", Op: Equals, Values: []string{""}}}},
		{"in", "env in (prod, dev,prod)", Selector{{Key: "env", Op: In, Values: []string{"dev", "prod"}}}},
		{"notin", "env notin (a)", Selector{{Key: "env", Op: NotIn, Values: []string{"a"}}}},
		{"exists", "canary", Selector{{Key: "canary", Op: Exists}}},
		{"not exists", "!canary", Selector{{Key: "canary", Op: NotExists}}},
		{"many", "a=1, b!=2,c in (x,y),!d,e", Selector{
			{Key: "a", Op: Equals, Values: []string{"1"}},
			{Key: "b", Op: NotEquals, Values: []string{"2"}},
			{Key: "c", Op: In, Values: []string{"x", "y"}},
			{Key: "d", Op: NotExists},
			{Key: "e", Op: Exists},
		}},
		{"key chars", "app.kubernetes.io/name-x_y=v.1-2", Selector{{Key: "app.kubernetes.io/name-x_y", Op: Equals, Values: []string{"v.1-2"}}}},
		{"utf8 value", "city=東京", Selector{{Key: "city", Op: Equals, Values: []string{"東京"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in string
		offset   int
	}{
		{"trailing comma", "a=1,", 4},
		{"leading comma", ",a=1", 0},
		{"missing key", "=v", 0},
		{"bad operator", "a >= 1", 2},
		{"unknown word", "a within (x)", 2},
		{"unclosed set", "a in (x,y", 9},
		{"no paren", "a in x", 5},
		{"empty set", "a in ()", 7},
		{"double value", "a=b=c", 3},
		{"bang value", "a=!b", 2},
		{"space in value", "a=b c", 4},
		{"bad key char", "a$=1", 1},
		{"bare bang", "!", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			var se *SyntaxError
			if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) = %v, want a SyntaxError", tt.in, err)
			}
			if se.Offset != tt.offset {
				t.Errorf("Parse(%q) offset = %d, want %d (%v)", tt.in, se.Offset, tt.offset, err)
			}
		})
	}
}

func TestParseLongKey(t *testing.T) {
	long := make([]byte, MaxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	if _, err := Parse(string(long) + "=v"); !errors.Is(err, ErrSyntax) {
		t.Fatalf("key of %d bytes: err = %v, want ErrSyntax", len(long), err)
	}
	if _, err := Parse(string(long[:MaxKeyLen]) + "=v"); err != nil {
		t.Fatalf("key of %d bytes: %v", MaxKeyLen, err)
	}
}

func TestMatches(t *testing.T) {
	labels := map[string]string{"zone": "z1", "env": "prod"}
	tests := []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"zone=z1", true},
		{"zone=z2", false},
		{"zone!=z2", true},
		{"region!=r1", true}, // absent key satisfies !=
		{"region notin (a)", true},
		{"region in (a)", false},
		{"env in (dev,prod)", true},
		{"env notin (dev,prod)", false},
		{"zone", true},
		{"!zone", false},
		{"!region", true},
		{"zone=z1,env=dev", false},
	}
	for _, tt := range tests {
		sel, err := Parse(tt.sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Matches(Map(labels)); got != tt.want {
			t.Errorf("%q.Matches = %v, want %v", tt.sel, got, tt.want)
		}
	}
}

// FuzzParse checks that Parse never panics and that whatever it accepts
// renders to a string that parses back to the same selector.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "a=b", "a==b,c!=d", "a in (x,y)", "a notin (x)", "a,!b", "a in (", "k=東京", " a = b , c "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrSyntax", s, err)
			}
			return
		}
		again, err := Parse(sel.String())
		if err != nil {
			t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, sel.String(), err)
		}
		if diff := cmp.Diff(sel, again); diff != "" {
			t.Fatalf("round trip of %q changed the selector:\n%s", s, diff)
		}
	})
}

func TestLabels(t *testing.T) {
	m := map[string]string{"zone": "z1", "a": "", "env": "prod", "k/8s.io_x-y": "東京"}
	l := FromMap(m)
	if l.Len() != 4 {
		t.Fatalf("Len = %d", l.Len())
	}
	var keys []string
	for k, v := range l.All() {
		keys = append(keys, k)
		if m[k] != v {
			t.Fatalf("%s = %q, want %q", k, v, m[k])
		}
	}
	if diff := cmp.Diff([]string{"a", "env", "k/8s.io_x-y", "zone"}, keys); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
	for k, v := range m {
		if got, ok := l.Get(k); !ok || got != v {
			t.Fatalf("Get(%q) = %q, %v", k, got, ok)
		}
	}
	for _, k := range []string{"", "b", "zzz", "en"} {
		if _, ok := l.Get(k); ok {
			t.Fatalf("Get(%q) found a value", k)
		}
	}
	if !l.Equal(FromMap(m)) || l.Equal(FromMap(map[string]string{"zone": "z1"})) || !(Labels{}).Equal(FromMap(nil)) {
		t.Fatal("Equal is wrong")
	}
	if diff := cmp.Diff(m, l.Map()); diff != "" {
		t.Fatal(diff)
	}
	var b LabelsBuilder
	b.Add("b", "1")
	b.Add("a", "2")
	if _, ok := b.Labels(); ok {
		t.Fatal("out-of-order keys accepted")
	}
	var d LabelsBuilder
	d.Add("a", "1")
	d.Add("a", "2")
	if _, ok := d.Labels(); ok {
		t.Fatal("duplicate keys accepted")
	}
}

func TestAppendLengthPrefixed(t *testing.T) {
	long := strings.Repeat("v", 300) // a length of two uvarint bytes
	l := FromMap(map[string]string{"zone": "z1", "a": "", "k": long, "東京": "x"})
	var want []byte
	for k, v := range l.All() {
		want = binary.AppendUvarint(want, uint64(len(k)))
		want = append(want, k...)
		want = binary.AppendUvarint(want, uint64(len(v)))
		want = append(want, v...)
	}
	got := l.AppendLengthPrefixed([]byte("prefix"))
	if !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("got %q\nwant prefix%q", got, want)
	}
	if got := (Labels{}).AppendLengthPrefixed(nil); len(got) != 0 {
		t.Fatalf("empty labels appended %q", got)
	}
}

// TestBuilderPastItsHint: pairs beyond what Grow reserved (one allocation
// for offsets and bytes) move to their own storage, intact.
func TestBuilderPastItsHint(t *testing.T) {
	var b LabelsBuilder
	b.Grow(1, 3)
	b.Add("a", "12")
	b.Add("b", strings.Repeat("x", 40))
	b.Add("c", "3")
	l, ok := b.Labels()
	if !ok || l.Len() != 3 {
		t.Fatalf("ok %v, %d pairs", ok, l.Len())
	}
	want := map[string]string{"a": "12", "b": strings.Repeat("x", 40), "c": "3"}
	if diff := cmp.Diff(want, l.Map()); diff != "" {
		t.Fatal(diff)
	}
	var exact LabelsBuilder
	exact.Grow(2, 4)
	exact.Add("k", "v")
	exact.Add("l", "w")
	if e, _ := exact.Labels(); !e.Equal(FromMap(map[string]string{"k": "v", "l": "w"})) {
		t.Fatalf("got %v", e.Map())
	}
}
