GO ?= go
BIN := bin/sextant

.PHONY: build run test vet fmt bench clean

build:
	$(GO) build -o $(BIN) ./cmd/sextant

# Starts the server on the embedded default store in ./data.
run: build
	./$(BIN) server --data ./data --http 127.0.0.1:7400

# Every test, with the race detector, including the fuzz seed corpora in testdata/.
test:
	$(GO) vet ./...
	$(GO) test -race -timeout 14m ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
