package httpapi

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
)

// minGzip is the smallest answer worth compressing: below it the gzip
// header and the client's inflater cost more than the bytes saved.
const minGzip = 1024

// Header values shared by every answer (never modified).
var (
	varyAcceptEncoding  = []string{"Accept-Encoding"}
	contentEncodingGzip = []string{"gzip"}
)

// acceptsGzip reports whether the request's Accept-Encoding lists gzip
// (or *) without q=0.
func acceptsGzip(h http.Header) bool {
	for _, v := range h["Accept-Encoding"] {
		for v != "" {
			var part string
			part, v, _ = strings.Cut(v, ",")
			coding, params, _ := strings.Cut(part, ";")
			coding = strings.TrimSpace(coding)
			if !strings.EqualFold(coding, "gzip") && coding != "*" {
				continue
			}
			if q, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok && strings.Trim(strings.TrimSpace(q), "0.") == "" {
				return false // q=0, q=0.0, q=0.000: refused
			}
			return true
		}
	}
	return false
}

// gzipWriters reuses compressors: each holds ~800 KB of state, and a
// service that changes under gzip readers compresses every version.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
	return zw
}}

// gzipBytes compresses an answer that is kept and shared, so it spends the
// default level's CPU once for better ratio.
func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(b)/8 + 64)
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&out)
	zw.Write(b) // writes to a bytes.Buffer do not fail
	zw.Close()
	zw.Reset(nil)
	gzipWriters.Put(zw)
	return out.Bytes()
}
