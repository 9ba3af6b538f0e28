package label

import (
	"testing"
	"unsafe"
)

// TestWith: the pair is inserted in key order, replaces the key's other
// value, and leaves a set already holding it as it is.
func TestWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   map[string]string
		want map[string]string
	}{
		{"empty", nil, map[string]string{"version": "v2"}},
		{"first", map[string]string{"zone": "z1"}, map[string]string{"version": "v2", "zone": "z1"}},
		{"last", map[string]string{"app": "a"}, map[string]string{"app": "a", "version": "v2"}},
		{"middle", map[string]string{"app": "a", "zone": "z1"}, map[string]string{"app": "a", "version": "v2", "zone": "z1"}},
		{"replaced", map[string]string{"app": "a", "version": "v1", "zone": "z1"}, map[string]string{"app": "a", "version": "v2", "zone": "z1"}},
		{"held", map[string]string{"app": "a", "version": "v2"}, map[string]string{"app": "a", "version": "v2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := FromMap(tc.in)
			got := in.With("version", "v2")
			if want := FromMap(tc.want); !got.Equal(want) {
				t.Fatalf("With = %v, want %v", got.Map(), want.Map())
			}
			if v, ok := got.Get("version"); !ok || v != "v2" {
				t.Fatalf("Get(version) = %q, %v", v, ok)
			}
			if !FromMap(tc.in).Equal(in) {
				t.Fatalf("With changed its receiver: %v", in.Map())
			}
		})
	}
}

// TestWithSets: equal bases (by storage) and pairs share one derived set;
// another base of equal pairs, or another value, gets its own.
func TestWithSets(t *testing.T) {
	var c WithSets
	base := FromMap(map[string]string{"app": "a"})
	a := c.With(base, "version", "v1")
	b := c.With(base, "version", "v1")
	if a != b {
		t.Fatal("the same base and pair were not shared")
	}
	if !a.Equal(FromMap(map[string]string{"app": "a", "version": "v1"})) {
		t.Fatalf("derived set %v", a.Map())
	}
	if v2 := c.With(base, "version", "v2"); v2 == a || !v2.Equal(base.With("version", "v2")) {
		t.Fatalf("another value: %v (shared: %v)", v2.Map(), v2 == a)
	}
	other := FromMap(map[string]string{"app": "a"}) // equal pairs, other storage
	if o := c.With(other, "version", "v1"); !o.Equal(*a) {
		t.Fatalf("another base: %v", o.Map())
	}
	if e := c.With(Labels{}, "version", "v1"); !e.Equal(FromMap(map[string]string{"version": "v1"})) {
		t.Fatalf("empty base: %v", e.Map())
	}
	held := FromMap(map[string]string{"version": "v1"})
	if h := c.With(held, "version", "v1"); unsafe.StringData(h.s) != unsafe.StringData(held.s) {
		t.Fatal("a base holding the pair was copied")
	}
}
