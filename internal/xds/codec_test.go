package xds

import (
	"reflect"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestCodecReadsRequestsAsProtoDoes: every request the codec reads, by
// hand (ACKs) or through proto (the rest), is the request proto's decoding
// makes, and only plain answers take the hand-written path.
func TestCodecReadsRequestsAsProtoDoes(t *testing.T) {
	c := codec{proto: encoding.GetCodecV2("proto")}
	eds := TypeEndpoint.URL()
	node := &corev3.Node{Id: "sidecar~10.0.0.1~a.default~default.svc.cluster.local", Cluster: "a"}
	nack := &status.Status{Message: "bad cluster"}
	sotw := []struct {
		name string
		m    *discoveryv3.DiscoveryRequest
		fast bool
	}{
		{"ack", &discoveryv3.DiscoveryRequest{TypeUrl: eds, ResponseNonce: "1b", VersionInfo: "7-abc"}, true},
		{"ack with names", &discoveryv3.DiscoveryRequest{TypeUrl: eds, ResponseNonce: "2", ResourceNames: []string{"c000", "c001"}}, true},
		{"unknown type", &discoveryv3.DiscoveryRequest{TypeUrl: "type.googleapis.com/x.Y", ResponseNonce: "3"}, true},
		{"empty", &discoveryv3.DiscoveryRequest{}, true},
		{"first, with node", &discoveryv3.DiscoveryRequest{TypeUrl: eds, Node: node, ResourceNames: []string{"c000"}}, false},
		{"nack", &discoveryv3.DiscoveryRequest{TypeUrl: eds, ResponseNonce: "4", ErrorDetail: nack}, false},
	}
	for _, tc := range sotw {
		b, err := proto.Marshal(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		_, fast := parseAnswer(b, false)
		m := requestMsg{delta: false}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := sotwRequest(tc.m)
		if fast != tc.fast || !sameRequest(m.req, want) {
			t.Errorf("sotw %s: hand-written %v (want %v), got %+v, want %+v", tc.name, fast, tc.fast, m.req, want)
		}
	}
	delta := []struct {
		name string
		m    *discoveryv3.DeltaDiscoveryRequest
		fast bool
	}{
		{"ack", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "1b"}, true},
		{"subscribe", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{"*", "c1"}, ResourceNamesUnsubscribe: []string{"c2"}}, true},
		{"first, with node and versions", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, Node: node, InitialResourceVersions: map[string]string{"c000": "1-a"}}, false},
		{"nack", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "5", ErrorDetail: nack}, false},
	}
	for _, tc := range delta {
		b, err := proto.Marshal(tc.m)
		if err != nil {
			t.Fatal(err)
		}
		_, fast := parseAnswer(b, true)
		m := requestMsg{delta: true}
		// Split in two buffers, as gRPC may hand a message over.
		data := mem.BufferSlice{mem.SliceBuffer(b[:len(b)/2]), mem.SliceBuffer(b[len(b)/2:])}
		if err := c.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := deltaRequest(tc.m)
		if fast != tc.fast || !sameRequest(m.req, want) {
			t.Errorf("delta %s: hand-written %v (want %v), got %+v, want %+v", tc.name, fast, tc.fast, m.req, want)
		}
	}
}

// TestCodecRejectsWhatProtoRejects: a request proto cannot decode is not
// read as an answer by hand either.
func TestCodecRejectsWhatProtoRejects(t *testing.T) {
	c := codec{proto: encoding.GetCodecV2("proto")}
	ack := appendString(nil, deltaReqTypeURL, TypeEndpoint.URL())
	for name, b := range map[string][]byte{
		"invalid UTF-8 nonce": appendBytes(ack, deltaReqNonce, []byte{0xff, 0xfe}),
		"truncated":           ack[:len(ack)-3],
	} {
		if _, ok := parseAnswer(b, true); ok {
			t.Errorf("%s: read by hand", name)
		}
		m := requestMsg{delta: true}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &m); err == nil {
			t.Errorf("%s: no error, read %+v", name, m.req)
		}
	}
}

func sameRequest(a, b request) bool {
	if (a.errMsg == nil) != (b.errMsg == nil) || a.errMsg != nil && *a.errMsg != *b.errMsg {
		return false
	}
	if !proto.Equal(a.node, b.node) {
		return false
	}
	a.errMsg, b.errMsg, a.node, b.node = nil, nil, nil, nil
	norm := func(r *request) {
		for _, l := range []*[]string{&r.names, &r.subscribe, &r.unsub} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if len(r.initial) == 0 {
			r.initial = nil
		}
	}
	norm(&a)
	norm(&b)
	return reflect.DeepEqual(a, b)
}

// FuzzParseAnswer: a request the hand-written path reads is one proto
// decodes, to the same request; whatever the bytes, it does not panic.
func FuzzParseAnswer(f *testing.F) {
	eds := TypeEndpoint.URL()
	for _, m := range []proto.Message{
		&discoveryv3.DiscoveryRequest{TypeUrl: eds, ResponseNonce: "1b", VersionInfo: "7-abc", ResourceNames: []string{"c000"}},
		&discoveryv3.DiscoveryRequest{TypeUrl: eds, Node: &corev3.Node{Id: "n"}},
		&discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResponseNonce: "2", ResourceNamesSubscribe: []string{"*"}, ResourceNamesUnsubscribe: []string{"c2"}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		_, delta := m.(*discoveryv3.DeltaDiscoveryRequest)
		f.Add(b, delta)
	}
	f.Fuzz(func(t *testing.T, b []byte, delta bool) {
		got, ok := parseAnswer(b, delta)
		if !ok {
			return
		}
		var want request
		if delta {
			var d discoveryv3.DeltaDiscoveryRequest
			if err := proto.Unmarshal(b, &d); err != nil {
				t.Fatalf("read by hand as %+v, but proto refuses it: %v", got, err)
			}
			want = deltaRequest(&d)
		} else {
			var d discoveryv3.DiscoveryRequest
			if err := proto.Unmarshal(b, &d); err != nil {
				t.Fatalf("read by hand as %+v, but proto refuses it: %v", got, err)
			}
			want = sotwRequest(&d)
		}
		if !sameRequest(got, want) {
			t.Fatalf("read by hand as %+v, proto reads %+v", got, want)
		}
	})
}
