package httpapi

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
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

// gzipBytes compresses an answer that is kept and shared, so it spends the
// default level's CPU once for better ratio.
func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(b) / 4)
	zw, _ := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	zw.Write(b) // writes to a bytes.Buffer do not fail
	zw.Close()
	return out.Bytes()
}
