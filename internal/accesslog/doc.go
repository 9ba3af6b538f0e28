// Package accesslog owns the gateway's access log: one line per call in
// Envoy's default text format as Istio configures it (TextFormat) or in
// Istio's default JSON format, formatted on the call's goroutine into a
// pooled buffer and written by one goroutine (Writer.Run) to stdout or a
// file rotated by size. A call never waits for the disk: when the bounded
// queue is full the line is dropped and counted.
//
// It does not decide which calls are logged (the gateway's listeners and
// the Telemetry kind do, docs/telemetry.md) nor read xDS.
package accesslog
