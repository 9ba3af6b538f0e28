package main

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// failingOnce fails its first write, as a full disk would, then works.
type failingOnce struct {
	failed bool
	buf    bytes.Buffer
}

func (f *failingOnce) Write(p []byte) (int, error) {
	if !f.failed {
		f.failed = true
		return 0, errors.New("no space left on device")
	}
	return f.buf.Write(p)
}

// TestAuditRecoversAfterFailedWrite: a failed flush drops and reports the
// records it held, and the records after it are written (bufio's error is
// sticky: without the reset every later record would be lost).
func TestAuditRecoversAfterFailedWrite(t *testing.T) {
	out := &failingOnce{}
	w := &flushWriter{out: out, bw: bufio.NewWriterSize(out, 1024)}
	w.Write([]byte("{\"a\":1}\n"))
	w.Write([]byte("{\"a\":2}\n"))
	if n, err := w.Flush(); err == nil || n != 2 {
		t.Fatalf("first flush: %d dropped, err %v; want 2 and an error", n, err)
	}
	w.Write([]byte("{\"a\":3}\n"))
	if n, err := w.Flush(); err != nil || n != 0 {
		t.Fatalf("flush after recovery: %d %v", n, err)
	}
	if got := out.buf.String(); got != "{\"a\":3}\n" {
		t.Fatalf("written %q", got)
	}
}
