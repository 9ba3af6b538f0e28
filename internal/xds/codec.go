package xds

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the proto codec wrapped below
	"google.golang.org/grpc/mem"
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
			// pooled buffer: gRPC copies it into its write buffer anyway,
			// and one buffer costs fewer allocations than one per part.
			pool := mem.DefaultBufferPool()
			b := pool.Get(w.size)
			*b = (*b)[:0]
			for _, p := range w.bufs {
				*b = append(*b, p...)
			}
			return mem.BufferSlice{mem.NewBuffer(b, pool)}, nil
		}
		out := make(mem.BufferSlice, len(w.bufs))
		for i, b := range w.bufs {
			out[i] = mem.SliceBuffer(b)
		}
		return out, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (codec) Name() string { return "proto" }

// ServerOption is the option a grpc.Server serving this package's ADS
// service must be created with: it lets responses assembled from shared
// bytes through. Other services on that server are unaffected (their
// messages go to the proto codec).
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")})
}
