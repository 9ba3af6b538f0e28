package accesslog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultBuffer   = 4096      // lines queued
	DefaultMaxBytes = 100 << 20 // a file's size before it is rotated
	DefaultKeep     = 5         // rotated files kept

	DefaultFlushInterval = 100 * time.Millisecond
)

// Stdout is the Path that means the process's standard output (as
// Istio's accessLogFile: /dev/stdout).
const Stdout = "/dev/stdout"

// Options configure a Writer.
type Options struct {
	// Path is the file lines go to, appended; "" or Stdout: standard output
	// (never rotated).
	Path string
	// MaxBytes rotates the file when a line would take it past this size
	// (0: DefaultMaxBytes; negative: never).
	MaxBytes int64
	// Keep is how many rotated files are kept: PATH.1 (the newest) to
	// PATH.Keep (0: DefaultKeep).
	Keep int
	// Buffer is how many lines may wait for the writer (0: DefaultBuffer);
	// a line beyond is dropped and counted.
	Buffer int
	// FlushInterval is how long a written line may wait in memory before
	// it reaches the file (0: DefaultFlushInterval; Envoy's is 1s).
	FlushInterval time.Duration
	// Out replaces standard output (tests).
	Out    io.Writer
	Logger *slog.Logger
}

// Stats are a Writer's counts since it opened.
type Stats struct {
	Written   uint64 // lines written
	Dropped   uint64 // lines dropped: the queue was full
	Rotations uint64
	Errors    uint64 // failed writes (the lines are lost)
}

// Writer writes access log lines off the callers' goroutines: Line hands
// out a buffer, Submit queues it without blocking, and Run (one goroutine)
// writes the queue out through a 64 KB buffer flushed when full and at
// most FlushInterval after a line went in.
type Writer struct {
	o    Options
	log  *slog.Logger
	ch   chan *[]byte
	pool sync.Pool

	written, dropped, rotations, errs atomic.Uint64

	// Run's goroutine only.
	f    *os.File // nil: Out
	out  *bufio.Writer
	size int64
}

// Open opens (creates, appends to) the log file and returns the Writer;
// nothing is written until Run runs.
func Open(o Options) (*Writer, error) {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Keep <= 0 {
		o.Keep = DefaultKeep
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{o: o, log: o.Logger, ch: make(chan *[]byte, o.Buffer)}
	w.pool.New = func() any { b := make([]byte, 0, 512); return &b }
	if o.Path == "" || o.Path == Stdout || o.Path == "-" {
		out := o.Out
		if out == nil {
			out = os.Stdout
		}
		w.out = bufio.NewWriterSize(out, 64<<10)
		return w, nil
	}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.o.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("accesslog: open %s: %w", w.o.Path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("accesslog: %s: %w", w.o.Path, err)
	}
	w.f, w.size = f, st.Size()
	if w.out == nil {
		w.out = bufio.NewWriterSize(f, 64<<10)
	} else {
		w.out.Reset(f)
	}
	return nil
}

// Line returns an empty buffer to append one line to, then Submit. Any
// goroutine.
func (w *Writer) Line() *[]byte {
	b := w.pool.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// Submit queues the line in b (from Line) for the writer and takes b
// back; it never blocks: with the queue full the line is dropped and
// counted. Any goroutine.
func (w *Writer) Submit(b *[]byte) {
	select {
	case w.ch <- b:
	default:
		w.dropped.Add(1)
		w.put(b)
	}
}

func (w *Writer) put(b *[]byte) {
	if cap(*b) <= 64<<10 { // an outsized line's buffer is not kept
		w.pool.Put(b)
	}
}

// Stats returns the counts. Any goroutine.
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Dropped: w.dropped.Load(), Rotations: w.rotations.Load(), Errors: w.errs.Load()}
}

// Run writes queued lines until ctx ends, then writes what is queued,
// flushes and closes the file. It returns nil.
func (w *Writer) Run(ctx context.Context) error {
	defer func() {
		for {
			select {
			case b := <-w.ch:
				w.write(b)
				continue
			default:
			}
			break
		}
		w.flush()
		if w.f != nil {
			w.f.Close()
		}
	}()
	// Lines wait in the buffer at most FlushInterval (a full buffer is
	// written at once): a write per line would cost a system call per
	// call, which a busy gateway's CPU feels (docs/perf/gateway.md).
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			flush.Stop()
			return nil
		case <-flush.C:
			armed = false
			w.flush()
		case b := <-w.ch:
			w.write(b)
			if !armed && w.out.Buffered() > 0 {
				flush.Reset(w.o.FlushInterval)
				armed = true
			}
		}
	}
}

func (w *Writer) write(b *[]byte) {
	line := *b
	if w.f != nil && w.o.MaxBytes > 0 && w.size > 0 && w.size+int64(len(line)) > w.o.MaxBytes {
		if err := w.rotate(); err != nil {
			w.errs.Add(1)
			w.log.Error("accesslog: rotate", "path", w.o.Path, "err", err)
		}
	}
	if _, err := w.out.Write(line); err != nil {
		w.errs.Add(1)
	} else {
		w.written.Add(1)
		w.size += int64(len(line))
	}
	w.put(b)
}

func (w *Writer) flush() {
	if err := w.out.Flush(); err != nil {
		w.errs.Add(1)
		w.log.Error("accesslog: write", "path", w.o.Path, "err", err)
		w.out.Reset(w.sink()) // drop what failed rather than retry it forever
	}
}

func (w *Writer) sink() io.Writer {
	if w.f != nil {
		return w.f
	}
	if w.o.Out != nil {
		return w.o.Out
	}
	return os.Stdout
}

// rotate moves PATH to PATH.1 (PATH.i to PATH.i+1, the oldest beyond
// Keep removed) and opens a new PATH; PATH is open again whatever fails.
func (w *Writer) rotate() error {
	w.flush()
	if err := w.f.Close(); err != nil {
		w.errs.Add(1)
	}
	err := w.shift()
	if err == nil {
		w.rotations.Add(1)
	}
	if oerr := w.open(); oerr != nil {
		w.out.Reset(io.Discard) // lines go nowhere until the gateway restarts; the error is logged
		w.f = nil
		return errors.Join(err, oerr)
	}
	return err
}

func (w *Writer) shift() error {
	name := func(i int) string { return w.o.Path + "." + strconv.Itoa(i) }
	if err := os.Remove(name(w.o.Keep)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("accesslog: %w", err)
	}
	for i := w.o.Keep - 1; i >= 1; i-- {
		if err := os.Rename(name(i), name(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("accesslog: %w", err)
		}
	}
	if err := os.Rename(w.o.Path, name(1)); err != nil {
		return fmt.Errorf("accesslog: %w", err)
	}
	return nil
}
