package instance

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sextant-mesh/sextant/internal/label"
)

// TestCodecDeregisterAfter: an instance with a removal delay round-trips
// through a version 2 record and answers it in JSON; one without keeps
// version 1's bytes (what older binaries read) and JSON without the field.
func TestCodecDeregisterAfter(t *testing.T) {
	in := &Instance{ID: "x", Namespace: "ns", Service: "s", Host: "h", Port: 80, Weight: 100, TTLSeconds: 10,
		Metadata: label.FromMap(map[string]string{"k": "v"}), CreatedAt: time.Unix(1, 0).UTC(), UpdatedAt: time.Unix(2, 0).UTC(), Healthy: true}
	v1 := in.AppendBinary(nil)
	if v1[0] != 1 {
		t.Fatalf("an instance without a removal delay is written as version %d", v1[0])
	}
	if strings.Contains(string(in.JSON()), "deregister_after") {
		t.Fatalf("JSON without a removal delay names it: %s", in.JSON())
	}
	d := in.Clone()
	d.DeregisterAfterSeconds = 90
	if d.SameSpec(in) {
		t.Fatal("SameSpec ignores the removal delay")
	}
	v2 := d.AppendBinary(nil)
	if v2[0] != 2 || bytes.Equal(v1[1:], v2[1:]) {
		t.Fatalf("record %x", v2)
	}
	got, err := Decode(v2, 3)
	if err != nil || got.DeregisterAfterSeconds != 90 || !got.SameSpec(d) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if !strings.Contains(string(d.JSON()), `"ttl_seconds":10,"deregister_after_seconds":90,`) {
		t.Fatalf("JSON: %s", d.JSON())
	}
	for i := range v2 {
		if _, err := Decode(v2[:i], 1); err == nil {
			t.Fatalf("truncated record of %d/%d bytes decoded", i, len(v2))
		}
	}
	// A version 1 record relabelled version 2 does not decode.
	bad := append([]byte{2}, v1[1:]...)
	if _, err := Decode(bad, 1); err == nil {
		t.Fatal("a version 2 record read as version 1's layout decoded")
	}
}

// TestInstanceSize: the instance stays in the 256-byte size class (the
// removal delay and TTLExpired fit where padding was; the JSON and labels
// caches share one pointer so that Checks cost 16 bytes, not the 48 of
// the next class): one per registered instance, 205,000 in the
// registry's figures of record.
func TestInstanceSize(t *testing.T) {
	if n := unsafe.Sizeof(Instance{}); n > 256 {
		t.Fatalf("Instance is %d bytes, past the 256-byte size class", n)
	}
}
