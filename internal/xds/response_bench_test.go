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
// so that the figures are the server's more than the client's; the floor
// server (BenchmarkEndpointChangeFloor) sends and reads them too. rawCodec
// hands them to gRPC without a copy.
type rawBytes struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawBytes).b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawBytes).b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = rawCodec{}

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
// cpu-us/resp counts both sides, allocs/op too. BenchmarkEndpointChangeFloor
// is the same with a server that does nothing of its own.
func BenchmarkEndpointChange(b *testing.B) {
	for _, subs := range []int{1, 50} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			benchEndpointChange(b, subs)
		})
	}
}

const benchClusters = 100

// benchCache is the cache of BenchmarkEndpointChange: benchClusters
// endpoint resources.
func benchCache() *Cache {
	c := NewCache()
	var set []Resource
	for i := range benchClusters {
		set = append(set, endpoints(fmt.Sprintf("c%03d", i), 80, 81))
	}
	c.Apply(TypeEndpoint, set, nil, "0", time.Now())
	return c
}

func benchEndpointChange(b *testing.B, subs int) {
	c := benchCache()
	srv := NewServer(c, ServerOptions{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ctx, lis) })
	defer func() { cancel(); wg.Wait() }()
	got := benchSubscribers(ctx, b, &wg, lis.Addr().String(), subs)
	measureResponses(b, subs, got, func(i int) {
		name := fmt.Sprintf("c%03d", i%benchClusters)
		c.Apply(TypeEndpoint, []Resource{endpoints(name, 80, uint32(82+i%1000))}, nil, fmt.Sprint(i+1), time.Now())
	})
}

// benchSubscribers opens subs delta streams to addr, each subscribing to
// every endpoint resource and ACKing every response; got receives one
// value per ACK sent. It returns once each has had its first response.
func benchSubscribers(ctx context.Context, b *testing.B, wg *sync.WaitGroup, addr string, subs int) <-chan struct{} {
	got := make(chan struct{}, subs)
	sub := appendString(nil, 2, TypeEndpoint.URL()) // type_url
	sub = appendString(sub, 3, "*")                 // resource_names_subscribe
	for range subs {
		// Fixed windows, as the bench's subscribers and Envoy: gRPC's
		// window estimation would PING after nearly every response.
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(4<<20),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
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
	return got
}

// measureResponses runs change b.N times, each followed by one ACK from
// each of the subs subscribers, and reports the process's CPU (user and
// system, both sides of the connections) per response.
func measureResponses(b *testing.B, subs int, got <-chan struct{}, change func(i int)) {
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		change(i)
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

// BenchmarkEndpointChangeFloor is BenchmarkEndpointChange's floor: what
// any ADS server on gRPC-Go does per response, and nothing else. The
// same subscribers, transport and server options as Serve's, the same
// response bytes (those the server sends for one endpoint change,
// encoded once before the timer starts and sent as they are by a codec
// that copies nothing), and each ACK read and dropped. No cache, no
// pending sets, no build, no nonce bookkeeping. Two ways to send:
//   - sender=stream: each stream's handler goroutine sends when woken by
//     the change, a second goroutine per stream reads its requests (the
//     shape of an ADS server that must not let a slow client block the
//     others, as Sextant's and go-control-plane's);
//   - sender=caller: the change's goroutine writes to every stream itself
//     (no wake per stream; a client that stops reading would block it).
//
// BenchmarkEndpointChange's cpu-us/resp less this one's is what Sextant's
// own code costs per response.
func BenchmarkEndpointChangeFloor(b *testing.B) {
	for _, subs := range []int{1, 50} {
		for _, sender := range []string{"stream", "caller"} {
			b.Run(fmt.Sprintf("subscribers=%d/sender=%s", subs, sender), func(b *testing.B) {
				benchEndpointChangeFloor(b, subs, sender == "caller")
			})
		}
	}
}

// floorStream is one stream of the floor server.
type floorStream struct {
	ss   grpc.ServerStream
	wake chan struct{}
}

func benchEndpointChangeFloor(b *testing.B, subs int, caller bool) {
	resp := floorResponse(b)
	srv := NewServer(NewCache(), ServerOptions{}) // for its keepalive parameters only
	g := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.MaxRecvMsgSize(16<<20),
		grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(1<<20),
		grpc.KeepaliveParams(srv.age))
	streams := make(chan *floorStream, subs)
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "envoy.service.discovery.v3.AggregatedDiscoveryService",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "DeltaAggregatedResources", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				var req rawBytes
				if err := ss.RecvMsg(&req); err != nil { // the subscription
					return err
				}
				// The first response, as the real server's to the subscription.
				if err := ss.SendMsg(&rawBytes{resp}); err != nil {
					return err
				}
				fs := &floorStream{ss: ss, wake: make(chan struct{}, 1)}
				streams <- fs
				if caller {
					for { // ACKs, read and dropped
						if err := ss.RecvMsg(&req); err != nil {
							return nil
						}
					}
				}
				ctx, cancel := context.WithCancel(ss.Context())
				defer cancel()
				go func() {
					defer cancel()
					for {
						var ack rawBytes
						if err := ss.RecvMsg(&ack); err != nil {
							return
						}
					}
				}()
				for {
					select {
					case <-ctx.Done():
						return nil
					case <-fs.wake:
					}
					if err := ss.SendMsg(&rawBytes{resp}); err != nil {
						return err
					}
				}
			}}},
	}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { g.Serve(userTimeoutListener{Listener: lis, d: srv.age.Timeout}) })
	defer func() { cancel(); g.Stop(); wg.Wait() }()
	got := benchSubscribers(ctx, b, &wg, lis.Addr().String(), subs)
	all := make([]*floorStream, 0, subs)
	for range subs {
		all = append(all, <-streams)
	}
	msg := &rawBytes{resp}
	measureResponses(b, subs, got, func(int) {
		for _, fs := range all {
			if caller {
				if err := fs.ss.SendMsg(msg); err != nil {
					b.Fatal(err)
				}
				continue
			}
			select {
			case fs.wake <- struct{}{}:
			default:
			}
		}
	})
}

// floorResponse is the DeltaDiscoveryResponse Sextant's server sends for one
// change of BenchmarkEndpointChange: the header its build writes, then the
// cache's encoding of the changed resource.
func floorResponse(b *testing.B) []byte {
	c := benchCache()
	c.Apply(TypeEndpoint, []Resource{endpoints("c000", 80, 82)}, nil, "1", time.Now())
	tc := c.types[TypeEndpoint]
	e := tc.current(tc.lookup("c000"))
	if e == nil {
		b.Fatal("xds: floor: no endpoint resource c000")
	}
	resp := appendString(nil, deltaSystemVersion, tc.version)
	resp = appendString(resp, deltaTypeURL, TypeEndpoint.URL())
	resp = appendString(resp, deltaNonce, "1b")
	return append(resp, e.resField...)
}
