GO ?= go
BIN := bin/sextant
# Printed by "sextant version"; GOFLAGS may hold -buildvcs=false, so the
# commit is passed explicitly.
VERSION ?= $(shell git describe --tags 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)

.PHONY: build run test vet fmt bench clean console screenshots chromium

build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.gitCommit=$(COMMIT)" -o $(BIN) ./cmd/sextant

# Starts the server on the embedded default store in ./data.
run: build
	./$(BIN) server --data ./data --http 127.0.0.1:7400 --xds 127.0.0.1:7402

# The Kubernetes tests' API server: a real kube-apiserver over an embedded
# etcd, from test/kube, a Go module of its own so that kube-apiserver stays
# out of go.mod. Built once, without -race (docs/kubernetes.md, "Tests").
KUBE_TESTSERVER := $(CURDIR)/bin/kube-testserver
# The tracing tests' collector: Jaeger v2, pinned in tools/jaeger, a module
# of its own for the same reason (docs/tracing.md).
JAEGER := $(CURDIR)/bin/jaeger
# The push bench's peer: a stock istiod (Istio's pilot-discovery), pinned in
# tools/istiod, a module of its own too (docs/perf/push.md).
ISTIOD := $(CURDIR)/bin/istiod
# The HTTP/2 conformance suite the gateway's HTTP/2 server is tested
# with, pinned in tools/h2spec (internal/gateway, TestH2ServerH2spec).
H2SPEC := $(CURDIR)/bin/h2spec

# Every test, with the race detector, including the fuzz seed corpora in testdata/.
test:
	$(GO) vet ./...
	$(GO) -C test/kube build -o $(KUBE_TESTSERVER) ./cmd/kube-testserver
	$(GO) -C tools/jaeger build -o $(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger
	$(GO) -C tools/istiod build -o $(ISTIOD) istio.io/istio/pilot/cmd/pilot-discovery
	$(GO) -C tools/h2spec build -o $(H2SPEC) github.com/summerwind/h2spec/cmd/h2spec
	SEXTANT_KUBE_TESTSERVER=$(KUBE_TESTSERVER) SEXTANT_JAEGER=$(JAEGER) SEXTANT_ISTIOD=$(ISTIOD) SEXTANT_H2SPEC=$(H2SPEC) $(GO) test -race -timeout 14m ./...

# Rebuilds the console's third-party bundle (internal/console/assets/vendor/)
# from the npm packages pinned in internal/console/web. Needs Node.js and
# npm; the output is committed, so build, run and test never need them.
console:
	sh internal/console/web/build.sh

# The console's pictures in docs/img/, taken by its browser tests.
screenshots:
	SEXTANT_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -count=1 -run 'TestConsole$$|TestPlacementPage|TestKVPage' ./cmd/sextant ./internal/console

# Debian's Chromium for the browser tests (they install it themselves when
# run as root; this is the same step by hand).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
