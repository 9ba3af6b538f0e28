package gateway

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// decodeHPACK decodes a header block with x/net's decoder.
func decodeHPACK(t testing.TB, block []byte) []hpack.HeaderField {
	t.Helper()
	fields, err := hpack.NewDecoder(4096, nil).DecodeFull(block)
	if err != nil {
		t.Fatalf("decode %x: %v", block, err)
	}
	return fields
}

// TestAppendHPACK: every static-table name, whole static entries, new
// names, and lengths across the integer prefixes' boundaries decode with
// x/net's decoder to the fields given; whole entries take one byte.
func TestAppendHPACK(t *testing.T) {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":method", Value: "POST"}, {Name: ":method", Value: "PUT"},
		{Name: ":scheme", Value: "https"}, {Name: ":path", Value: "/"}, {Name: ":path", Value: "/a?b=c"},
		{Name: ":status", Value: "200"}, {Name: ":status", Value: "503"}, {Name: "accept-encoding", Value: "gzip, deflate"},
		{Name: "grpc-status", Value: "0"}, {Name: "x-empty", Value: ""}, {Name: "x-long", Value: strings.Repeat("v", 127)},
		{Name: "x-longer", Value: strings.Repeat("w", 128)}, {Name: "x-big", Value: strings.Repeat("z", 70000)},
		{Name: strings.Repeat("n", 200), Value: "1"},
	}
	for _, name := range []string{":authority", "accept-charset", "accept-language", "accept-ranges", "accept",
		"access-control-allow-origin", "age", "allow", "authorization", "cache-control", "content-disposition",
		"content-encoding", "content-language", "content-length", "content-location", "content-range", "content-type",
		"cookie", "date", "etag", "expect", "expires", "from", "host", "if-match", "if-modified-since", "if-none-match",
		"if-range", "if-unmodified-since", "last-modified", "link", "location", "max-forwards", "proxy-authenticate",
		"proxy-authorization", "range", "referer", "refresh", "retry-after", "server", "set-cookie",
		"strict-transport-security", "transfer-encoding", "user-agent", "vary", "via", "www-authenticate"} {
		fields = append(fields, hpack.HeaderField{Name: name, Value: "value of " + name})
	}
	var b bytes.Buffer
	for _, f := range fields {
		appendHPACK(&b, f.Name, f.Value)
	}
	got := decodeHPACK(t, b.Bytes())
	if len(got) != len(fields) {
		t.Fatalf("decoded %d fields, want %d", len(got), len(fields))
	}
	for i, f := range fields {
		if got[i].Name != f.Name || got[i].Value != f.Value {
			t.Errorf("field %d: %q: %.40q, want %q: %.40q", i, got[i].Name, got[i].Value, f.Name, f.Value)
		}
	}
	b.Reset()
	appendHPACK(&b, ":status", "200")
	if b.Len() != 1 {
		t.Errorf(":status 200 took %d bytes, want 1 (indexed)", b.Len())
	}
}

// FuzzAppendHPACK: any field appendHPACK writes decodes to itself.
func FuzzAppendHPACK(f *testing.F) {
	f.Add(":status", "200")
	f.Add("content-type", "application/grpc")
	f.Add("x-\x00", strings.Repeat("\xff", 300))
	f.Fuzz(func(t *testing.T, name, value string) {
		if name == "" {
			return
		}
		var b bytes.Buffer
		appendHPACK(&b, name, value)
		got := decodeHPACK(t, b.Bytes())
		if len(got) != 1 || got[0].Name != name || got[0].Value != value {
			t.Fatalf("%q: %q decoded as %v", name, value, got)
		}
	})
}
