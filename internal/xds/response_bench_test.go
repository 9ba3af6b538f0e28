package xds

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawBytes is a message a benchmark client sends or receives undecoded,
// so that the figures are the server's more than the client's.
type rawBytes struct{ b []byte }

type rawClientCodec struct{}

func (rawClientCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawBytes).b)}, nil
}

func (rawClientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawBytes).b = data.Materialize()
	return nil
}

func (rawClientCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = rawClientCodec{}

// deltaACK is the ACK of a DeltaDiscoveryResponse: its type URL and nonce.
func deltaACK(resp []byte) []byte {
	var typeURL, nonce []byte
	for b := resp; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if typ != protowire.BytesType {
			b = b[protowire.ConsumeFieldValue(num, typ, b):]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		b = b[n:]
		switch num {
		case deltaTypeURL:
			typeURL = v
		case deltaNonce:
			nonce = v
		}
	}
	ack := appendBytes(nil, 2, typeURL) // DeltaDiscoveryRequest.type_url
	return appendBytes(ack, 6, nonce)   // response_nonce
}

// BenchmarkEndpointChange is one endpoint change delivered to every
// delta subscriber over loopback gRPC and ACKed by each: the per-change,
// per-response cost of the send path (build, gRPC write, the ACK's read
// and handling). The subscribers are lean clients in the same process:
// cpu-us/resp counts both sides, allocs/op too.
func BenchmarkEndpointChange(b *testing.B) {
	for _, subs := range []int{1, 50} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			benchEndpointChange(b, subs)
		})
	}
}

func benchEndpointChange(b *testing.B, subs int) {
	const clusters = 100
	c := NewCache()
	var set []Resource
	for i := range clusters {
		set = append(set, endpoints(fmt.Sprintf("c%03d", i), 80, 81))
	}
	c.Apply(TypeEndpoint, set, nil, "0", time.Now())
	srv := NewServer(c, ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ctx, lis) })
	defer func() { cancel(); wg.Wait() }()

	got := make(chan struct{}, subs)
	sub := appendString(nil, 2, TypeEndpoint.URL()) // type_url
	sub = appendString(sub, 3, "*")                 // resource_names_subscribe
	for range subs {
		// Fixed windows, as the bench's subscribers and Envoy: gRPC's
		// window estimation would PING after nearly every response.
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(4<<20),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawClientCodec{})))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		desc := &discoverygrpc.AggregatedDiscoveryService_ServiceDesc.Streams[1] // DeltaAggregatedResources
		st, err := conn.NewStream(ctx, desc, "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources")
		if err != nil {
			b.Fatal(err)
		}
		if err := st.SendMsg(&rawBytes{sub}); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			for {
				var r rawBytes
				if err := st.RecvMsg(&r); err != nil {
					return
				}
				if err := st.SendMsg(&rawBytes{deltaACK(r.b)}); err != nil {
					return
				}
				got <- struct{}{}
			}
		})
	}
	for range subs {
		<-got
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("c%03d", i%clusters)
		c.Apply(TypeEndpoint, []Resource{endpoints(name, 80, uint32(82+i%1000))}, nil, fmt.Sprint(i+1), time.Now())
		for range subs {
			<-got
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
		syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*subs), "cpu-us/resp")
}
