package otlp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
)

// Protocols of Options.Protocol.
const (
	ProtocolGRPC = "grpc"          // OTLP/gRPC, <Signal>Service.Export (port 4317 by convention)
	ProtocolHTTP = "http/protobuf" // OTLP/HTTP, POST /v1/<signal> (port 4318)
)

// Signal is what an Exporter sends: the collector's service method and
// path for it, and how one item is written.
type Signal[T any] struct {
	// Items names the items in messages ("spans", "log records").
	Items string
	// GRPCMethod is the collector's Export method; HTTPPath the OTLP/HTTP
	// path (/v1/traces).
	GRPCMethod, HTTPPath string
	// Append appends item encoded (a Span, a LogRecord), without its tag.
	Append func(b []byte, item *T) []byte
	// Release, if set, is called once an item is encoded, before it is
	// sent: what it holds may be reused.
	Release func(item *T)
}

// Options configure an Exporter; zero values are defaults.
type Options struct {
	// Endpoint is the collector: host:port for gRPC; host:port or an
	// http(s) URL for HTTP (its path, when empty, is the signal's).
	Endpoint string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTP ("http" too).
	Protocol string
	// ServiceName is the resource's service.name (default sextant-gateway);
	// ResourceAttrs are added to it.
	ServiceName   string
	ResourceAttrs []Attr
	// QueueSize bounds the items waiting for export (default 2048): an
	// item that finds it full is dropped, counted, never waited for.
	QueueSize int
	// BatchSize is the most items per export (default 512); a batch is
	// sent when full or BatchTimeout (default 1s) after its first item.
	BatchSize    int
	BatchTimeout time.Duration
	// ExportTimeout bounds one export (default 10s); a batch that fails
	// is dropped, counted (the queue behind it keeps filling meanwhile,
	// and drops what does not fit).
	ExportTimeout time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
}

// Stats are an exporter's counts since it started.
type Stats struct {
	Exported     uint64 // items the collector accepted
	DroppedFull  uint64 // items dropped because the queue was full
	DroppedError uint64 // items of batches whose export failed, or the collector rejected
	Exports      uint64 // export requests sent
	ExportErrors uint64 // of which failed
	Queued       int    // items waiting now
}

// Exporter sends items of one signal to an OTLP collector from one
// goroutine, which it owns: New starts it, Close stops it. Submit never
// blocks.
type Exporter[T any] struct {
	sig   Signal[T]
	opts  Options
	log   *slog.Logger
	q     chan T
	send  func(ctx context.Context, body []byte) error
	close func() error

	exported, droppedFull, droppedError, exports, exportErrors atomic.Uint64

	// base is every export's context; Close cancels it when its own
	// context ends first, so that a slow collector does not hold Close.
	base       context.Context
	cancelBase context.CancelFunc
	stop       chan struct{}
	done       chan struct{}
	stopOnce   sync.Once
}

// New checks opts and starts the exporter's goroutine; the caller must
// Close it. It does not connect: a collector that is down only makes
// exports fail.
func New[T any](sig Signal[T], opts Options) (*Exporter[T], error) {
	if opts.Endpoint == "" {
		return nil, errors.New("otlp: endpoint is empty")
	}
	if opts.ServiceName == "" {
		opts.ServiceName = "sextant-gateway"
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 2048
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 512
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = time.Second
	}
	if opts.ExportTimeout <= 0 {
		opts.ExportTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Exporter[T]{sig: sig, opts: opts, log: opts.Logger, q: make(chan T, opts.QueueSize),
		stop: make(chan struct{}), done: make(chan struct{})}
	e.base, e.cancelBase = context.WithCancel(context.Background())
	switch opts.Protocol {
	case "", ProtocolGRPC:
		if strings.Contains(opts.Endpoint, "://") {
			return nil, fmt.Errorf("otlp: OTLP/gRPC endpoint %q: want host:port", opts.Endpoint)
		}
		cc, err := grpc.NewClient(opts.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("otlp: OTLP/gRPC endpoint %q: %w", opts.Endpoint, err)
		}
		e.send = func(ctx context.Context, body []byte) error { return exportGRPC(ctx, cc, sig.GRPCMethod, body) }
		e.close = cc.Close
	case "http", ProtocolHTTP:
		u, err := httpEndpoint(opts.Endpoint, sig.HTTPPath)
		if err != nil {
			return nil, err
		}
		hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2, IdleConnTimeout: time.Minute}}
		e.send = func(ctx context.Context, body []byte) error { return exportHTTP(ctx, hc, u, body) }
		e.close = func() error { hc.CloseIdleConnections(); return nil }
	default:
		return nil, fmt.Errorf("otlp: protocol %q: want grpc or http/protobuf", opts.Protocol)
	}
	go e.run()
	return e, nil
}

// httpEndpoint is the URL items are POSTed to: ep, or ep's host with
// path when ep has none.
func httpEndpoint(ep, path string) (string, error) {
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("otlp: OTLP/HTTP endpoint %q: want host:port or an http(s) URL", ep)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = path
	}
	return u.String(), nil
}

// Submit queues an item for export, or drops it (counted) when the queue
// is full. It never blocks; any goroutine may call it. The item is taken
// by value: through an interface a pointer would move the caller's item
// to the heap.
func (e *Exporter[T]) Submit(item T) { e.TrySubmit(item) }

// TrySubmit is Submit, reporting whether the item was queued: one that
// was not is the caller's again (Release is not called for it).
func (e *Exporter[T]) TrySubmit(item T) bool {
	select {
	case e.q <- item:
		return true
	default:
		e.droppedFull.Add(1)
		return false
	}
}

// Stats returns the exporter's counts.
func (e *Exporter[T]) Stats() Stats {
	return Stats{Exported: e.exported.Load(), DroppedFull: e.droppedFull.Load(), DroppedError: e.droppedError.Load(),
		Exports: e.exports.Load(), ExportErrors: e.exportErrors.Load(), Queued: len(e.q)}
}

// Close exports what is queued (until ctx ends) and stops the goroutine.
func (e *Exporter[T]) Close(ctx context.Context) error {
	e.stopOnce.Do(func() { close(e.stop) })
	var err error
	select {
	case <-e.done:
	case <-ctx.Done():
		err = fmt.Errorf("otlp: exporter close: %w", ctx.Err())
		e.cancelBase()
		<-e.done
	}
	e.cancelBase()
	return errors.Join(err, e.close())
}

// run batches the queue into exports until stopped.
func (e *Exporter[T]) run() {
	defer close(e.done)
	enc := NewEncoder(&e.sig, e.opts.ServiceName, e.opts.ResourceAttrs)
	batch := make([]T, 0, e.opts.BatchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		e.export(enc, batch)
		clear(batch) // let the items' strings go
		batch = batch[:0]
	}
	for {
		select {
		case s := <-e.q:
			if len(batch) == 0 {
				timer.Reset(e.opts.BatchTimeout)
			}
			batch = append(batch, s)
			if len(batch) == cap(batch) {
				timer.Stop()
				flush()
			}
		case <-timer.C:
			flush()
		case <-e.stop:
			timer.Stop()
			for {
				select {
				case s := <-e.q:
					batch = append(batch, s)
					if len(batch) == cap(batch) {
						flush()
					}
					continue
				default:
				}
				break
			}
			flush()
			return
		}
	}
}

func (e *Exporter[T]) export(enc *Encoder[T], batch []T) {
	ctx, cancel := context.WithTimeout(e.base, e.opts.ExportTimeout)
	defer cancel()
	e.exports.Add(1)
	body := enc.Request(batch)
	err := e.send(ctx, body)
	var rej *rejectedError
	switch {
	case errors.As(err, &rej):
		e.exportErrors.Add(1)
		e.droppedError.Add(uint64(rej.n))
		e.exported.Add(uint64(int64(len(batch)) - rej.n))
		e.log.Warn("otlp: collector rejected "+e.sig.Items, "rejected", rej.n, "error", rej.msg)
	case err != nil:
		e.exportErrors.Add(1)
		e.droppedError.Add(uint64(len(batch)))
		e.log.Warn("otlp: export failed; "+e.sig.Items+" dropped", "items", len(batch), "error", err)
	default:
		e.exported.Add(uint64(len(batch)))
	}
}

// rejectedError: the collector took the request but rejected n items.
type rejectedError struct {
	n   int64
	msg string
}

func (r *rejectedError) Error() string {
	return fmt.Sprintf("otlp: collector rejected %d items: %s", r.n, r.msg)
}

func exportGRPC(ctx context.Context, cc *grpc.ClientConn, method string, body []byte) error {
	var resp rawMessage
	if err := cc.Invoke(ctx, method, rawMessage(body), &resp, grpc.ForceCodecV2(rawCodec{})); err != nil {
		return fmt.Errorf("otlp: OTLP/gRPC export: %w", err)
	}
	if n, msg := partialSuccess(resp); n > 0 {
		return &rejectedError{n, msg}
	}
	return nil
}

func exportHTTP(ctx context.Context, hc *http.Client, u string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("otlp: OTLP/HTTP export: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("otlp: OTLP/HTTP export: %w", err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("otlp: OTLP/HTTP export: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("otlp: OTLP/HTTP export to %s: %s: %.200s", u, resp.Status, rb)
	}
	if n, msg := partialSuccess(rb); n > 0 {
		return &rejectedError{n, msg}
	}
	return nil
}

// rawMessage is an encoded protobuf message, for rawCodec.
type rawMessage []byte

// rawCodec passes encoded messages through gRPC as they are. It is named
// "proto" so that the content type is application/grpc+proto, which the
// collector decodes as usual.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(rawMessage)
	if !ok {
		return nil, fmt.Errorf("otlp: raw codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("otlp: raw codec: cannot unmarshal into %T", v)
	}
	*m = data.Materialize()
	return nil
}
