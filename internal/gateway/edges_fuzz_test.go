package gateway

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzLFGuard: whatever the bytes and however they arrive (one byte per
// read, or all at once), the guard passes on exactly the input up to the
// first bare LF of the first header block, then fails with errBareLF; with
// no bare LF there it passes on everything unchanged.
func FuzzLFGuard(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody\nwith\nLFs",
		"POST / HTTP/1.1\r\nX: 1\nY: 2\r\n\r\n",
		"\n",
		"\r\n\r\n\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// The reference: where the guard must stop, if anywhere.
		stop := -1
		for i, b := range in {
			if bytes.HasSuffix(in[:i], []byte("\r\n\r\n")) {
				break
			}
			if b == '\n' && (i == 0 || in[i-1] != '\r') {
				stop = i
				break
			}
		}
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			var g lfGuard
			var out []byte
			buf := make([]byte, 7)
			var err error
			for range 10 * (len(in) + 2) {
				var n int
				n, err = g.read(r, buf)
				out = append(out, buf[:n]...)
				if err != nil {
					break
				}
			}
			if stop < 0 {
				if err != io.EOF || !bytes.Equal(out, in) {
					t.Fatalf("%q (one byte %v): passed %q, %v; want all, EOF", in, oneByte, out, err)
				}
				continue
			}
			if !errors.Is(err, errBareLF) || !bytes.Equal(out, in[:stop]) {
				t.Fatalf("%q (one byte %v): passed %q, %v; want %q, errBareLF", in, oneByte, out, err, in[:stop])
			}
		}
	})
}
