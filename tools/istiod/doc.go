// Package istiod pins the stock istiod (Istio's pilot-discovery) that
// `sextant bench push --peer istiod` runs beside Sextant against the real
// kube-apiserver of test/kube. It is its own module so that Istio's
// dependencies stay out of the main module's builds; the Makefile builds it
// with `go -C tools/istiod build -o DIR/istiod istio.io/istio/pilot/cmd/pilot-discovery`
// (docs/perf/push.md, "Istio beside us").
package istiod
