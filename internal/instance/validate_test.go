package instance

import (
	"errors"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/label"
)

func validInstance(md map[string]string) *Instance {
	return &Instance{ID: "i-1", Service: "svc", Host: "10.0.0.1", Port: 8080, Weight: 100,
		Metadata: label.FromMap(md)}
}

// TestPrepareMetadata: every metadata key and value is checked, wherever
// it sits among the pairs, and the error names the field.
func TestPrepareMetadata(t *testing.T) {
	for _, tc := range []struct {
		md   map[string]string
		want string // "" for valid
	}{
		{map[string]string{"a": "1", "zone/rack_1.x-y": "v"}, ""},
		{map[string]string{"a": "1", "b c": "2"}, `key "b c"`},
		{map[string]string{"a": "1", "z=": "2"}, `key "z="`},
		{map[string]string{"é": "1"}, `key "é"`},
		{map[string]string{strings.Repeat("k", label.MaxKeyLen+1): "1"}, "must be 1..128 bytes"},
		{map[string]string{"a": "1", "m": "\xff"}, "metadata.m"},
		{map[string]string{"a": "é", "b": "日本", "c": "ok"}, ""},
		// a sequence cut between two values is invalid in each
		{map[string]string{"a": "x\xc3", "b": "\xa9"}, "metadata.a"},
		{map[string]string{"a": "x", "b": "\xa9y"}, "metadata.b"},
		{map[string]string{"a": strings.Repeat("v", MaxValueLen+1)}, "metadata.a"},
	} {
		// Three instances sharing one set (as interned metadata does):
		// a set found valid is remembered, one found invalid never is.
		first := validInstance(tc.md)
		for n := range 3 {
			in := validInstance(nil)
			in.Metadata = first.Metadata
			err := Prepare(0, in)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%v (check %d): %v", tc.md, n, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%.40v (check %d): error %v, want one naming %s", tc.md, n, err, tc.want)
			}
		}
		if remembered := checkedMetadata.Has(first.Metadata); remembered != (tc.want == "") {
			t.Errorf("%.40v: remembered as checked: %v", tc.md, remembered)
		}
	}
}

// BenchmarkPrepare: the checks of one instance with the bench's 16
// metadata entries of 10-byte keys and values.
// "shared": every instance holds one set (interned replicas' metadata,
// checked once); "own": each of 4,096 instances holds a copy of its own.
func BenchmarkPrepare(b *testing.B) {
	md := map[string]string{}
	for j := range 16 {
		md["meta-key"+string(rune('a'+j))+"0"] = "v01-00000" + string(rune('a'+j))
	}
	b.Run("shared", func(b *testing.B) {
		in := validInstance(md)
		b.ReportAllocs()
		for b.Loop() {
			if err := Prepare(0, in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("own", func(b *testing.B) {
		ins := make([]*Instance, 4096)
		for i := range ins {
			ins[i] = validInstance(md)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := Prepare(0, ins[i%len(ins)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// TestPrepareVersionLabel: metadata may repeat the version as "version",
// or carry one when the version is unset, which then is the version (one
// meaning, shown everywhere), but not contradict it.
func TestPrepareVersionLabel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version string
		md      map[string]string
		want    string // "" for valid
		stored  string // the version of a valid one
	}{
		{"no metadata version", "v2", map[string]string{"zone": "z1"}, "", "v2"},
		{"equal", "v2", map[string]string{"version": "v2"}, "", "v2"},
		{"metadata only", "", map[string]string{"version": "v1"}, "", "v1"},
		{"neither", "", map[string]string{"zone": "z1"}, "", ""},
		{"different", "v2", map[string]string{"version": "v1"}, `metadata.version: "v1" differs from version "v2"`, ""},
		{"metadata only, too long", "", map[string]string{"version": strings.Repeat("v", MaxShortField+1)}, "metadata.version: must be at most 64 bytes", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validInstance(tc.md)
			in.Version = tc.version
			err := Prepare(3, in)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if in.Version != tc.stored {
					t.Fatalf("version %q, want %q", in.Version, tc.stored)
				}
				if v, _ := in.Labels().Get(VersionLabel); v != tc.stored {
					t.Fatalf("label version %q, want %q", v, tc.stored)
				}
				return
			}
			var fe *FieldError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &fe) || fe.Field != "metadata.version" || fe.Index != 3 {
				t.Fatalf("error %v, want a FieldError for [3].metadata.version containing %q", err, tc.want)
			}
		})
	}
}

func TestValidHost(t *testing.T) {
	for host, want := range map[string]bool{
		"10.0.0.1": true, "::1": true, "fe80::1%eth0": true, "a.example.com": true, "a.example.com.": true,
		"my_host-1": true, "": false, "-a.com": false, "a-.com": false, "a..com": false, "a b": false,
		"x.": true, ".": false, string(make([]byte, 254)): false,
	} {
		if got := validHost(host); got != want {
			t.Errorf("validHost(%q) = %v, want %v", host, got, want)
		}
	}
}
