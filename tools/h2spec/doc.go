// Package h2spec pins h2spec (github.com/summerwind/h2spec), the HTTP/2
// conformance suite the gateway's frame-level server is tested with
// (internal/gateway, TestH2ServerH2spec). It is its own module so that
// h2spec's dependencies stay out of the main module's builds; the tests
// build it with `go build -C tools/h2spec -o DIR/h2spec github.com/summerwind/h2spec/cmd/h2spec`.
package h2spec
