package xds

import (
	"fmt"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// wireMsg is a discovery response already encoded, as a list of byte
// slices sent in order: a small per-subscriber header and the cache's shared
// resource encodings, never copied per subscriber.
type wireMsg struct {
	bufs [][]byte
	size int
}

func (w *wireMsg) add(b []byte) {
	if len(b) > 0 {
		w.bufs = append(w.bufs, b)
		w.size += len(b)
	}
}

// flatMax is the largest response Marshal copies into one buffer.
const flatMax = 16 << 10

// codec is gRPC's proto codec plus wireMsg, which it hands to the transport
// as is.
type codec struct{ proto encoding.CodecV2 }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireMsg); ok {
		if w.size <= flatMax {
			// A small response (an endpoint change) is gathered into one
			// buffer of its size: gRPC copies it into its write buffer
			// anyway, and one buffer costs fewer allocations than one per
			// part. Not from gRPC's pool: its buffers are freed by the
			// connection's writer goroutine, and the send loop's Get mostly
			// missed, making a buffer, a pointer to it and gRPC's buffer
			// object each time (BenchmarkEndpointChange: 0.28 us less).
			b := make([]byte, 0, w.size)
			for _, p := range w.bufs {
				b = append(b, p...)
			}
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
		out := make(mem.BufferSlice, len(w.bufs))
		for i, b := range w.bufs {
			out[i] = mem.SliceBuffer(b)
		}
		return out, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*requestMsg)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData() // parsed before gRPC frees it
	} else {
		b = data.Materialize()
	}
	if m.req, ok = parseAnswer(b, m.delta); ok {
		return nil
	}
	if m.delta {
		var d discoveryv3.DeltaDiscoveryRequest
		if err := proto.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("xds: delta discovery request: %w", err)
		}
		m.req = deltaRequest(&d)
		return nil
	}
	var d discoveryv3.DiscoveryRequest
	if err := proto.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("xds: discovery request: %w", err)
	}
	m.req = sotwRequest(&d)
	return nil
}

// requestMsg receives one request of an ADS stream (state of the world or
// delta) as the request it makes.
type requestMsg struct {
	delta bool
	req   request
}

// Field numbers of the requests parseAnswer reads.
const (
	sotwReqVersion  = 1 // DiscoveryRequest
	sotwReqNames    = 3
	sotwReqTypeURL  = 4
	sotwReqNonce    = 5
	deltaReqTypeURL = 2 // DeltaDiscoveryRequest
	deltaReqSub     = 3
	deltaReqUnsub   = 4
	deltaReqNonce   = 6
)

// parseAnswer reads a request made only of a type URL, a nonce, and
// resource names (and for state of the world the version it ACKs): what a
// client's ACKs are, nearly every request of a stream. It reports false
// for anything else (a node, a NACK's error, initial versions, fields it
// does not know, bad encoding), which proto decodes. Decoding ACKs by
// hand spares a message and its strings per response.
func parseAnswer(b []byte, delta bool) (request, bool) {
	var r request
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return request{}, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return request{}, false
		}
		b = b[n:]
		switch {
		case delta && num == deltaReqTypeURL, !delta && num == sotwReqTypeURL:
			r.typeURL = typeURLString(v)
		case delta && num == deltaReqNonce, !delta && num == sotwReqNonce:
			r.nonce = string(v)
		case delta && num == deltaReqSub:
			r.subscribe = append(r.subscribe, string(v))
		case delta && num == deltaReqUnsub:
			r.unsub = append(r.unsub, string(v))
		case !delta && num == sotwReqNames:
			r.names = append(r.names, string(v))
		case !delta && num == sotwReqVersion: // not used
		default:
			return request{}, false
		}
		if !utf8.Valid(v) {
			return request{}, false // proto rejects it
		}
	}
	return r, true
}

// typeURLString is v as a string, the package's own when it is a type URL
// served here (no allocation).
func typeURLString(v []byte) string {
	for _, u := range typeURLs {
		if string(v) == u {
			return u
		}
	}
	return string(v)
}

func (codec) Name() string { return "proto" }

// ServerOption is the option a grpc.Server serving this package's ADS
// service must be created with: it lets responses assembled from shared
// bytes through. Other services on that server are unaffected (their
// messages go to the proto codec).
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")})
}
