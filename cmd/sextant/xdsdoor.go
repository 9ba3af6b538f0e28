package main

// The xDS port's front door: a client must finish its TLS and HTTP/2
// handshake within --xds-handshake-timeout, and one source (or all of
// them) can hold only so many connections open, so that idle connections
// cannot use up the file descriptors the HTTP API needs (issue 42).

import (
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sextant-mesh/sextant/internal/connlimit"
)

// defaultXDSHandshake bounds an xDS client's TLS and HTTP/2 handshake when
// --xds-handshake-timeout is unset, as ReadHeaderTimeout does the HTTP API's.
const defaultXDSHandshake = 10 * time.Second

// limitXDS wraps the xDS listener in the connection caps of f, counting the
// connections it refuses and those open in metrics.
func limitXDS(ln net.Listener, f serverFlags, metrics prometheus.Registerer) net.Listener {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sextant_xds_connections_refused_total",
		Help: "Connections to the xDS port closed at once: over --xds-max-connections-per-source (per_source) or --xds-max-connections (total).",
	}, []string{"reason"})
	l := connlimit.New(ln, connlimit.Options{PerSource: f.xdsPerSource, Total: f.xdsMaxConns,
		Refused: func(why string) { refused.WithLabelValues(why).Inc() }})
	metrics.MustRegister(refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sextant_xds_connections", Help: "Connections open on the xDS port.",
	}, func() float64 { return float64(l.Open()) }))
	return l
}

// xdsHandshake is the gRPC option bounding an xDS client's handshake.
func xdsHandshake(f serverFlags) grpc.ServerOption {
	d := f.xdsHandshake
	if d <= 0 {
		d = defaultXDSHandshake
	}
	return grpc.ConnectionTimeout(d)
}
