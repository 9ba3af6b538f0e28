package calllog

import (
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// BenchmarkWrite is the call log's cost per gateway call record, queue to
// disk: Record, the writer's dictionary ids and body encoding, callstore's
// Put and a Flush every 4096 records (no fsync). Records of 16 services,
// 8 endpoints, 64 paths, 4 callers, as layout 2 keeps them.
func BenchmarkWrite(b *testing.B) { benchWrite(b, 0) }

// BenchmarkWriteInterleaved is BenchmarkWrite with records queued as a
// gateway with 64 calls in flight queues them: by end, not by start, so
// the writer sorts each batch (starts shuffled within a window of 64).
func BenchmarkWriteInterleaved(b *testing.B) { benchWrite(b, 64) }

func benchWrite(b *testing.B, window int) {
	l, err := Open(Options{Dir: b.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var svcs, eps, paths, callers [64]string
	for i := range 64 {
		svcs[i] = "shop/svc-" + strconv.Itoa(i%16)
		eps[i] = "10.0.0." + strconv.Itoa(i%8) + ":8080"
		paths[i] = "/orders/" + strconv.Itoa(i)
		callers[i] = "spiffe://cluster.local/ns/shop/sa/caller-" + strconv.Itoa(i%4)
	}
	peer := netip.MustParseAddr("10.1.2.3")
	base := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := i % 64
		start := base + int64(i)
		if window > 0 {
			start += int64(i * 7919 % window)
		}
		l.Record(Record{Start: start, Latency: time.Duration(500+i%1000) * time.Microsecond, Service: svcs[k], Cluster: svcs[k],
			Route: "default", Endpoint: eps[k], Status: 200, BytesIn: 100, BytesOut: 1000,
			Principal: callers[k], Subject: "O=cluster.local", Method: "GET", Path: paths[k], Host: "shop.example", Port: 8443, PeerIP: peer,
			Conn: ConnTLS | ConnPeerCert})
		if i%4096 == 4095 {
			if err := l.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	if w, d := l.Counts(); d != 0 || w != uint64(b.N) {
		b.Fatalf("written %d, dropped %d of %d", w, d, b.N)
	}
}

// BenchmarkRecord is what recording costs the call: Record alone, the
// writer draining the queue beside it every 10 ms (its encoding is
// BenchmarkWrite's). A gateway-shaped record, as the gateway makes them.
func BenchmarkRecord(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := Record{Start: time.Now().UnixNano(), Latency: time.Millisecond, Service: "shop/orders", Cluster: "shop/orders",
		Route: "default", Endpoint: "10.0.0.1:8080", Status: 200, BytesIn: 100, BytesOut: 1000,
		Method: "GET", Path: "/orders/1", Host: "shop.example", Port: 8080, PeerIP: netip.MustParseAddr("10.1.2.3")}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r.Start++
		l.Record(r)
		if i%65536 == 65535 {
			b.StopTimer()
			if err := l.Flush(); err != nil { // the queue's bound is not what is measured
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	if w, d := l.Counts(); d != 0 || w != uint64(b.N) {
		b.Fatalf("written %d, dropped %d of %d", w, d, b.N)
	}
}

// BenchmarkEncode is the writer's work per record before the store: the
// dictionary ids of its names and of its request string, and its body.
// Gateway-shaped records of one service, 8 endpoints and 64 paths.
func BenchmarkEncode(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	p, err := l.openPartition("shop/orders")
	if err != nil {
		b.Fatal(err)
	}
	// distinct: each call's path is another than the last one's; repeated:
	// one client calling one path (the gateway's benchmarks).
	for _, tc := range []struct {
		name  string
		paths int
	}{{"distinct", 64}, {"repeated", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			var rs [64]Record
			for i := range rs {
				rs[i] = Record{Start: int64(i), Latency: time.Millisecond, Service: "shop/orders", Cluster: "shop/orders",
					Route: "default", Endpoint: "10.0.0." + strconv.Itoa(i%8) + ":8080", Status: 200, BytesIn: 100, BytesOut: 1000,
					Method: "GET", Path: "/orders/" + strconv.Itoa(i%tc.paths), Host: "shop.example", Port: 8080, PeerIP: netip.MustParseAddr("10.1.2.3")}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				e, err := l.encode(p, &rs[i%64])
				if err != nil || e.t != int64(i%64) {
					b.Fatalf("encode: %v, t %d", err, e.t)
				}
			}
		})
	}
}
