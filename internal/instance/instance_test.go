package instance

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sextant-mesh/sextant/internal/label"
)

func TestInstanceJSON(t *testing.T) {
	in := &Instance{ID: "a:b", Namespace: "ns", Service: "s", Host: "::1", Port: 80, Protocol: "grpc", Version: "v\"1",
		Weight: 0, Isolated: true, TTLSeconds: 5, Healthy: true, Revision: 7,
		Metadata:  label.FromMap(map[string]string{"z": "last", "a": "ctl\x01\n\t\\ \u2028 é \xff"}),
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), UpdatedAt: time.Date(2026, 1, 2, 3, 4, 5, 7, time.FixedZone("x", 3600)),
	}
	b := in.AppendJSON(nil)
	if !json.Valid(b) {
		t.Fatalf("invalid JSON: %s", b)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": "a:b", "namespace": "ns", "service": "s", "host": "::1", "port": 80.0, "protocol": "grpc", "version": "v\"1",
		"weight": 0.0, "isolated": true, "ttl_seconds": 5.0, "healthy": true, "revision": 7.0,
		"metadata":   map[string]any{"z": "last", "a": "ctl\x01\n\t\\ \u2028 é \ufffd"},
		"created_at": "2026-01-02T03:04:05.000000006Z", "updated_at": "2026-01-02T02:04:05.000000007Z",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if !strings.Contains(string(b), `"metadata":{"a":`) {
		t.Fatalf("metadata keys not sorted: %s", b)
	}
	if string(in.AppendJSON(nil)) != string(b) {
		t.Fatal("cached encoding differs")
	}
}

func TestCodecRoundTrip(t *testing.T) {
	in := &Instance{ID: "x", Namespace: "ns", Service: "s", Host: "h", Port: 65535, Protocol: "p", Version: "v",
		Weight: 65535, Isolated: true, TTLSeconds: 3600, Metadata: label.FromMap(map[string]string{"k": "v", "e": ""}),
		CreatedAt: time.Unix(0, 123).UTC(), UpdatedAt: time.Unix(5, 0).UTC(), Healthy: true}
	got, err := Decode(in.AppendBinary(nil), 9)
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameSpec(in) || got.Revision != 9 || !got.Healthy || !got.CreatedAt.Equal(in.CreatedAt) || !got.UpdatedAt.Equal(in.UpdatedAt) {
		t.Fatalf("round trip: %+v", got)
	}
	// Health is durable: an unhealthy instance decodes unhealthy.
	sick := in.Clone()
	sick.Healthy = false
	if got, err := Decode(sick.AppendBinary(nil), 9); err != nil || got.Healthy || !got.SameSpec(in) {
		t.Fatalf("unhealthy round trip: %+v %v", got, err)
	}
	b := in.AppendBinary(nil)
	for i := range b {
		if _, err := Decode(b[:i], 1); err == nil {
			t.Fatalf("truncated record of %d/%d bytes decoded", i, len(b))
		}
	}
}

// TestDecodeSharesStrings: instances of one service decoded one after
// another share their namespace, service, protocol and version strings;
// each keeps its own id and host; more distinct values than the table has
// slots still decode right.
func TestDecodeSharesStrings(t *testing.T) {
	var prev *Instance
	for i := range 1000 {
		in := benchInstance(i, fmt.Sprintf("svc-%d", i/100))
		in.Protocol, in.Version = "grpc", fmt.Sprintf("v%d", i%3)
		if i >= 600 {
			in.Service = fmt.Sprintf("many-%d", i) // a value per instance: the slots thrash
		}
		got, err := Decode(in.AppendBinary(nil), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !got.SameSpec(in) {
			t.Fatalf("instance %d decoded as %+v, want %+v", i, got, in)
		}
		if prev != nil && i%100 != 0 && i < 600 {
			if unsafe.StringData(got.Service) != unsafe.StringData(prev.Service) ||
				unsafe.StringData(got.Namespace) != unsafe.StringData(prev.Namespace) ||
				unsafe.StringData(got.Protocol) != unsafe.StringData(prev.Protocol) {
				t.Fatalf("instance %d: namespace, service or protocol not shared with the one before", i)
			}
		}
		if prev != nil && unsafe.StringData(got.ID) == unsafe.StringData(prev.ID) {
			t.Fatalf("instance %d shares its id's storage", i)
		}
		prev = got
	}
}

// BenchmarkDecodeInstance: one stored record of a service's instance, as a
// restart reads them.
func BenchmarkDecodeInstance(b *testing.B) {
	recs := make([][]byte, 512)
	for i := range recs {
		recs[i] = benchInstance(i, "orders").AppendBinary(nil)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := Decode(recs[i%len(recs)], 1); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeInstance: records read from disk never panic the decoder, and
// what decodes re-encodes to the same bytes up to metadata order.
func FuzzDecodeInstance(f *testing.F) {
	in := &Instance{ID: "x", Namespace: "ns", Service: "s", Host: "h", Port: 1, Metadata: label.FromMap(map[string]string{"k": "v"})}
	f.Add(in.AppendBinary(nil))
	in.TTLSeconds, in.DeregisterAfterSeconds = 5, 60
	f.Add(in.AppendBinary(nil))
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b, 1)
		if err != nil {
			return
		}
		again, err := Decode(got.AppendBinary(nil), 1)
		if err != nil || !again.SameSpec(got) {
			t.Fatalf("re-encoding of %+v does not decode back: %v", got, err)
		}
	})
}

func BenchmarkAppendJSON(b *testing.B) {
	in := benchInstance(1, "s")
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = in.encodeJSON(buf[:0])
	}
}

// BenchmarkAppendBinary is the record encoding of one instance with 16
// metadata pairs, as the registry writes it to the store.
func BenchmarkAppendBinary(b *testing.B) {
	in := benchInstance(1, "s")
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = in.AppendBinary(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

func benchInstance(i int, svc string) *Instance {
	md := make(map[string]string, 16)
	for j := 1; j <= 16; j++ {
		md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<j))
	}
	return &Instance{ID: fmt.Sprintf("id-%08d", i), Namespace: "default", Service: svc, Host: "10.0.0.1", Port: 8080,
		Weight: 100, Metadata: label.FromMap(md), Healthy: true}
}
