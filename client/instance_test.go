package client

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAppendInstanceRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   Instance
	}{
		{name: "minimal", in: Instance{Service: "s", Host: "h", Port: 1}},
		{name: "weight zero is sent", in: Instance{Service: "s", Host: "h", Port: 1, Weight: Weight(0)}},
		{name: "all register fields", in: Instance{
			ID: "id-1", Namespace: "prod", Service: "orders", Host: "10.0.0.1", Port: 65535,
			Protocol: "grpc", Version: "v2", Weight: Weight(65535), Isolated: true,
			Metadata: map[string]string{"zone": "z1", "env": "prod", "a/b.c-d_e": ""}, TTLSeconds: 3600,
		}},
		{name: "escapes", in: Instance{Service: "s", Host: "h", Port: 1, Metadata: map[string]string{
			"q": `say "hi" \ bye`, "ctl": "a\nb\tc\rd\x00e\x1f", "html": "<a href='x'>&</a>",
			"utf8": "zoë 東京 🚀", "seps": "\u2028\u2029",
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendInstance(nil, &tt.in)
			if !json.Valid(b) {
				t.Fatalf("invalid JSON: %s", b)
			}
			var got Instance
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.in, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendInstanceOmitsServerFields(t *testing.T) {
	in := Instance{Service: "s", Host: "h", Port: 1, Healthy: true, Revision: 4}
	const want = `{"service":"s","host":"h","port":1}`
	if got := string(AppendInstance(nil, &in)); got != want {
		t.Errorf("AppendInstance = %s, want %s", got, want)
	}
}

func TestAppendIDsBody(t *testing.T) {
	got := string(AppendIDsBody(nil, "a", `b"c`))
	if want := `{"ids":["a","b\"c"]}`; got != want {
		t.Errorf("AppendIDsBody = %s, want %s", got, want)
	}
}

// benchInstance has the benchmark's shape: 16 metadata entries of 10-byte keys and values.
func benchInstance() Instance {
	md := make(map[string]string, 16)
	for i := range 16 {
		md["mkey0000"+string(rune('a'+i))+"x"] = "mval00000" + string(rune('a'+i))
	}
	return Instance{ID: "bench-0000000001", Namespace: "bench", Service: "svc-0001", Host: "10.1.2.3", Port: 8080, Protocol: "http", Version: "v1", Weight: Weight(100), Metadata: md}
}

func BenchmarkAppendInstance(b *testing.B) {
	in := benchInstance()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendInstance(buf[:0], &in)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkMarshalInstanceStdlib(b *testing.B) {
	in := benchInstance()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(&in); err != nil {
			b.Fatal(err)
		}
	}
}
