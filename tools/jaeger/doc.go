// Package jaeger pins the Jaeger (v2) collector the tracing tests run as a
// real OTLP receiver. It is its own module so that Jaeger's dependencies
// stay out of the main module's builds; the tests build it with
// `go build -C tools/jaeger -o DIR/jaeger github.com/jaegertracing/jaeger/cmd/jaeger`.
package jaeger
