package gateway

import (
	"testing"
	"time"
)

// BenchmarkNBConnDeadlines is the deadline bookkeeping of one request on a
// client's connection, as h1Server does it: the idle deadline, the read
// that finds the request (begin and end, around no system call here), the
// read timeout from its first byte.
func BenchmarkNBConnDeadlines(b *testing.B) {
	c, _ := tcpPair(b)
	last := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		last = last.Add(time.Microsecond)
		if err := c.SetReadDeadline(last.Add(time.Minute)); err != nil {
			b.Fatal(err)
		}
		c.begin()
		c.end()
		if err := c.SetReadDeadline(last.Add(30 * time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}
