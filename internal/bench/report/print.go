package report

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
)

// Print writes v to w as one JSON object, indented by two spaces and ended
// by a newline: the one thing a bench prints on stdout.
func Print(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// CompareKeys checks the JSON keys v's type can print (Keys) against the
// golden file at path, one key per line; the error names the keys added
// and removed.
func CompareKeys(v any, path string) error {
	golden, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	want := strings.Fields(string(golden))
	got := Keys(v)
	var added, removed []string
	for _, k := range got {
		if !slices.Contains(want, k) {
			added = append(added, k)
		}
	}
	for _, k := range want {
		if !slices.Contains(got, k) {
			removed = append(removed, k)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return nil
	}
	return fmt.Errorf("report: JSON keys of %T changed: added %q, removed %q (scripts and docs read them; change %s only on purpose)", v, added, removed, path)
}

// Keys lists every JSON key the type of v can print, as sorted dotted paths
// ("register.p99_ms"), whether or not a value would omit it: elements of a
// slice of objects add "[]" ("runs[].seconds"), values of a map of objects
// add "*". A scenario's test compares them with a golden file
// (CompareKeys) so that a refactoring cannot silently rename a figure.
func Keys(v any) []string {
	var keys []string
	addKeys(&keys, "", reflect.TypeOf(v))
	slices.Sort(keys)
	return slices.Compact(keys)
}

func addKeys(keys *[]string, prefix string, t reflect.Type) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if e := deref(t.Elem()); e.Kind() == reflect.Struct && !leaf(e) {
			addKeys(keys, prefix+"[]", e)
			return
		}
	case reflect.Map:
		if e := deref(t.Elem()); e.Kind() == reflect.Struct && !leaf(e) {
			addKeys(keys, join(prefix, "*"), e)
			return
		}
	case reflect.Struct:
		if leaf(t) {
			break
		}
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if name == "-" && tag == "-" || !f.IsExported() && !f.Anonymous {
				continue
			}
			if f.Anonymous && name == "" && deref(f.Type).Kind() == reflect.Struct {
				addKeys(keys, prefix, f.Type) // embedded: its keys print inline
				continue
			}
			if name == "" {
				name = f.Name
			}
			addKeys(keys, join(prefix, name), f.Type)
		}
		return
	}
	if prefix != "" {
		*keys = append(*keys, prefix)
	}
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// leaf reports a struct that prints as one JSON value (time.Time and the
// like), not as an object of its fields.
func leaf(t reflect.Type) bool {
	for _, m := range []reflect.Type{reflect.TypeFor[json.Marshaler](), reflect.TypeFor[encoding.TextMarshaler]()} {
		if t.Implements(m) || reflect.PointerTo(t).Implements(m) {
			return true
		}
	}
	return false
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
