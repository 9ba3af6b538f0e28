package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// openAudit returns the audit logger --audit-log asks for and a func that
// flushes and closes it. Records go through a buffer flushed every 200 ms
// and at shutdown, so that an audit record costs a copy, not a write
// system call, on the request's path; a crash loses at most the last
// 200 ms of records, never a write's durability.
func openAudit(f serverFlags, log *slog.Logger) (*slog.Logger, func(), error) {
	dest := f.auditLog
	if dest == "" {
		dest = "off"
		if f.acl {
			dest = "stderr"
		}
	}
	switch dest {
	case "off":
		return nil, func() {}, nil
	}
	var out *os.File
	if dest == "stderr" {
		out = os.Stderr
	} else {
		file, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("--audit-log: %w", err)
		}
		out = file
	}
	w := &flushWriter{out: out, bw: bufio.NewWriterSize(out, 256<<10)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // owned by openAudit's closer
		defer close(done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if n, err := w.Flush(); err != nil {
					log.Error("audit log write failed; records dropped", "file", dest, "records", n, "err", err)
				}
			}
		}
	}()
	closer := func() {
		cancel()
		<-done
		if n, err := w.Flush(); err != nil {
			log.Error("audit log write failed; records dropped", "file", dest, "records", n, "err", err)
		}
		if out != os.Stderr {
			if err := out.Close(); err != nil {
				log.Error("audit log close failed", "file", dest, "err", err)
			}
		}
	}
	// JSON lines whatever --log-format (records are for machines), not
	// subject to --log-level; on stderr tagged to tell them from the log.
	l := slog.New(acl.NewAuditHandler(w))
	if dest == "stderr" {
		l = l.With("component", "audit")
	}
	return l, closer, nil
}

// flushWriter is a buffered writer shared by concurrent loggers. A record
// is never split across two flushes, so lines of other writers to the same
// file (the server's log on stderr) fall between records, not inside one.
//
// A failed write drops the records buffered then and starts again with an
// empty buffer (bufio's errors are sticky: without the reset one full disk
// would silence the audit log for good).
type flushWriter struct {
	mu      sync.Mutex
	out     io.Writer
	bw      *bufio.Writer
	pending int // records buffered since the last successful flush
	dropped int // records dropped by failed flushes, not yet reported
}

func (w *flushWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > w.bw.Available() && w.bw.Buffered() > 0 {
		w.flushLocked()
	}
	w.pending++
	n, err := w.bw.Write(p)
	if err != nil {
		w.flushLocked()
	}
	return n, err
}

// Flush writes the buffer out; on failure it returns how many records
// were dropped since the last report.
func (w *flushWriter) Flush() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.flushLocked()
	if err == nil && w.dropped == 0 {
		return 0, nil
	}
	n := w.dropped
	w.dropped = 0
	if err == nil {
		err = errors.New("earlier records were dropped")
	}
	return n, err
}

func (w *flushWriter) flushLocked() error {
	if err := w.bw.Flush(); err != nil {
		w.dropped += w.pending
		w.pending = 0
		w.bw.Reset(w.out)
		return err
	}
	w.pending = 0
	return nil
}
