package push_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	benchpush "github.com/sextant-mesh/sextant/internal/bench/push"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/push/pushtest"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// BenchmarkFullRecompute: one config round over seed 001's 2,200 services
// (8,800 clusters, 2,200 route configurations), as after a resync.
func BenchmarkFullRecompute(b *testing.B) {
	reg := pushtest.New(1 << 20)
	if err := benchpush.Load(reg, 2200, 20000); err != nil {
		b.Fatal(err)
	}
	cache := xds.NewCache()
	e := push.New(reg, cache, push.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for e.Status().FullEndpointsMS == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var total, cpu float64
	for b.Loop() {
		cpu0 := cpuSeconds()
		before := e.Status().ConfigRounds
		if err := e.Resync(ctx); err != nil {
			b.Fatal(err)
		}
		for e.Status().ConfigRounds == before || e.Status().EndpointQueue > 0 {
			time.Sleep(time.Millisecond)
		}
		total += e.Status().LastConfigRoundMS
		cpu += cpuSeconds() - cpu0
	}
	b.ReportMetric(total/float64(b.N), "round_ms")
	b.ReportMetric(cpu*1000/float64(b.N), "cpu_ms")
}

// cpuSeconds is the process's CPU time; during a round nothing else runs.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
