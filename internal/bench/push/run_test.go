package push

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/xds"
)

// TestRunSmall runs the scenario at a small scale with both protocols: every
// change reaches every subscriber and the figures are filled in.
func TestRunSmall(t *testing.T) {
	for _, delta := range []bool{true, false} {
		var out bytes.Buffer
		res, err := Run(context.Background(), Config{
			Services: 20, Endpoints: 200, Subscribers: 3, Delta: delta,
			Duration: 700 * time.Millisecond, ChurnPerSec: 50, ConfigEvery: 50 * time.Millisecond, Resyncs: 1,
		}, &out)
		if err != nil {
			t.Fatal(err)
		}
		var printed Result
		if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed.Protocol != res.Protocol {
			t.Fatalf("printed %q: %v", out.String(), err)
		}
		if res.Undelivered != 0 || res.EndpointChanges == 0 || res.ConfigChanges == 0 ||
			res.EndpointAllP99MS == 0 || res.ConfigAllP99MS == 0 || res.Clusters != 80 || res.HeapAfterBytes == 0 ||
			res.ConfigDRAllP99MS == 0 || res.ConfigVSAllP99MS == 0 || max(res.ConfigDRAllP99MS, res.ConfigVSAllP99MS) < res.ConfigAllP99MS {
			t.Fatalf("%s: %+v", res.Protocol, res)
		}
	}
}

// TestACKEncoding: the hand-encoded ACKs decode as the requests they stand
// for.
func TestACKEncoding(t *testing.T) {
	r := response{typeURL: []byte(xds.TypeEndpoint.URL()), version: []byte("42"), nonce: []byte("7z")}
	var d discoveryv3.DeltaDiscoveryRequest
	if err := proto.Unmarshal(appendACK(nil, true, &r), &d); err != nil || d.TypeUrl != xds.TypeEndpoint.URL() || d.ResponseNonce != "7z" {
		t.Fatalf("delta ACK %v: %v", &d, err)
	}
	var s discoveryv3.DiscoveryRequest
	if err := proto.Unmarshal(appendACK(nil, false, &r), &s); err != nil || s.TypeUrl != xds.TypeEndpoint.URL() ||
		s.ResponseNonce != "7z" || s.VersionInfo != "42" || len(s.ResourceNames) != 1 || s.ResourceNames[0] != "*" {
		t.Fatalf("SotW ACK %v: %v", &s, err)
	}
}

// TestChurnOnlyDuringConfig: with the flag endpoint changes are committed
// only while a config change is on its way, and reported apart (a config
// change may arrive everywhere between the bench's check and the commit:
// a few may count as outside).
func TestChurnOnlyDuringConfig(t *testing.T) {
	res, err := Run(context.Background(), Config{
		Services: 20, Endpoints: 200, Subscribers: 3, Delta: true, ChurnOnlyDuringConfig: true,
		Duration: 700 * time.Millisecond, ChurnPerSec: 200, ConfigEvery: 20 * time.Millisecond, Resyncs: 1,
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.EndpointChanges == 0 || res.EndpointDuringConfigChanges < (res.EndpointChanges-res.Undelivered)*9/10 || res.EndpointDuringConfigAllP99MS == 0 {
		t.Fatalf("%+v", res)
	}
}

// TestRunSidecarImport: with a Sidecar importing 5 of 20 services, every
// subscriber syncs on those only, their changes are delivered, and each
// receives fewer bytes than without it in the same scenario.
func TestRunSidecarImport(t *testing.T) {
	var bytes [2]int64
	for i, imp := range []int{0, 5} {
		res, err := Run(context.Background(), Config{
			Services: 20, Endpoints: 200, Subscribers: 3, Delta: true, SidecarImport: imp,
			Duration: 2 * time.Second, ChurnPerSec: 50, ConfigEvery: 50 * time.Millisecond, Resyncs: 1,
		}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if res.Undelivered != 0 || res.EndpointAllP99MS == 0 || res.SidecarImport != imp {
			t.Fatalf("sidecar-import %d: %+v", imp, res)
		}
		bytes[i] = res.BytesPerSubscriber
	}
	if bytes[1] >= bytes[0] {
		t.Fatalf("bytes per subscriber: %d with the Sidecar, %d without", bytes[1], bytes[0])
	}
}

// TestChurnerSkipsBusy: an instance with a write in flight is not taken
// down (bench push --servers: the DELETE could overtake the POST that
// brought it back and be refused).
func TestChurnerSkipsBusy(t *testing.T) {
	ch := &churner{rng: rand.New(rand.NewPCG(1, 2)), services: 2, endpoints: 10, down: map[int]bool{},
		busy: func(j int) bool { return j != 7 }}
	for range 5 {
		delete(ch.down, 7)
		ch.downList = nil
		if j, _, up := ch.next(); up || j != 7 {
			t.Fatalf("took down %d (up %v), want 7, the only instance without a write in flight", j, up)
		}
	}
}

// TestSkimReadsAsMaterialize: a large state-of-the-world list read from
// gRPC's buffers without joining them gives the same version, type, nonce
// and count as the joined bytes; a large list of another type (its names
// are read) is joined; a truncated one is an error.
func TestSkimReadsAsMaterialize(t *testing.T) {
	for _, typ := range []xds.Type{xds.TypeCluster, xds.TypeRoute} {
		resp := &discoveryv3.DiscoveryResponse{VersionInfo: "42", TypeUrl: typ.URL(), Nonce: "n7", Canary: true}
		for i := range 400 {
			resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: typ.URL(), Value: bytes.Repeat([]byte{byte(i)}, 200+i%7)})
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		// Odd buffer sizes: fields straddle buffers.
		var data mem.BufferSlice
		for rest := b; len(rest) > 0; {
			n := min(len(rest), 16381)
			data = append(data, mem.SliceBuffer(rest[:n]))
			rest = rest[n:]
		}
		c := rawCodec{proto: encoding.GetCodecV2("proto")}
		m := rawMsg{skim: true}
		if err := c.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		var got, want response
		if err := parseSotW(&got, m.b, false); err != nil {
			t.Fatal(err)
		}
		got.count += m.skipped
		if err := parseSotW(&want, b, false); err != nil {
			t.Fatal(err)
		}
		if string(got.version) != "42" || string(got.nonce) != "n7" || string(got.typeURL) != typ.URL() || got.count != 400 || got.count != want.count || m.size != len(b) {
			t.Errorf("%s: read %q %q %q %d resources (%d bytes), want %q %q %q %d (%d)", typ, got.version, got.nonce, got.typeURL, got.count, m.size,
				want.version, want.nonce, want.typeURL, want.count, len(b))
		}
		if skimmed := len(m.b) < len(b); skimmed != (typ == xds.TypeCluster) {
			t.Errorf("%s: %d of %d bytes kept, skimmed %v", typ, len(m.b), len(b), skimmed)
		}
		trunc := rawMsg{skim: true}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:len(b)-100])}, &trunc); err == nil {
			t.Errorf("%s: a truncated list read without error", typ)
		}
	}
}
