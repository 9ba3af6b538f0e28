package gateway

import (
	"bufio"
	"io"
	"testing"
	"time"
)

// TestH1BodyChunkNotHeld: a chunk's data is handed on as it arrives, not
// held until the CRLF after it (a client streaming its body in chunks).
func TestH1BodyChunkNotHeld(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var b h1Body
	b.start(bufio.NewReader(pr), -1)
	go func() { _, _ = io.WriteString(pw, "3\r\nabc") }() // the CRLF not yet
	got := make(chan string, 1)
	go func() {
		p := make([]byte, 16)
		n, _ := b.Read(p)
		got <- string(p[:n])
	}()
	select {
	case s := <-got:
		if s != "abc" {
			t.Fatalf("read %q, want abc", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the chunk's data was held for its CRLF")
	}
	go func() { _, _ = io.WriteString(pw, "\r\n0\r\n\r\n") }()
	rest, err := io.ReadAll(&b)
	if err != nil || len(rest) != 0 || !b.done() {
		t.Fatalf("after the last chunk: %q %v done=%v", rest, err, b.done())
	}
}
