// Package bench holds the load generators behind "sextant bench ...", one
// package per scenario: registry (register, batch, heartbeat, query,
// changes and watch against a running server), callstore (the call-log
// store's race), balancer (load-balancing policies against providers whose
// capacity changes). Each prints one JSON object of figures named with
// their units and reports progress on an io.Writer the caller passes (nil:
// none); the parts they share (percentiles, CPU meter, progress bars, the
// printing) are in package report. None of them owns server state: they
// drive the public client, the HTTP API or the engines.
package bench
