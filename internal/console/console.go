// Package console serves Sextant's web console: the static files of a small
// browser application (assets/) that reads and operates the mesh through the
// public HTTP API only (docs/console.md). It owns the files and how they are
// served (content types, compression, caching, security headers); it owns no
// data, no route of the API and no credentials: the browser sends the user's
// ACL token with each API call itself.
package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

//go:embed assets
var assets embed.FS

// csp lets the page run only its own scripts and styles and talk to any
// HTTP(S) origin: the API is same-origin, gateway admin APIs are not.
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self' http: https:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// file is one asset, compressed once when first served.
type file struct {
	body, gz    []byte
	etag, ctype string
}

// Handler serves the console's files at the root of its mount point: mount
// it with http.StripPrefix("/ui", console.Handler()) at "/ui/". Every
// request for a path that is not a file (the application's own routes)
// gets index.html. Safe for concurrent use.
func Handler() http.Handler {
	root, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return &handler{root: root, files: map[string]*file{}}
}

type handler struct {
	root  fs.FS
	mu    sync.Mutex
	files map[string]*file
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "console: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	f := h.file(name)
	if f == nil {
		if path.Ext(name) != "" {
			http.NotFound(w, r) // a missing asset, not a page
			return
		}
		f = h.file("index.html")
	}
	hd := w.Header()
	hd.Set("Content-Type", f.ctype)
	hd.Set("ETag", f.etag)
	// Revalidate every time: a new binary's files show at once, an
	// unchanged file costs a 304.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", csp)
	hd.Add("Vary", "Accept-Encoding")
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := f.body
	if f.gz != nil && acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		body = f.gz
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// file returns the asset called name, or nil.
func (h *handler) file(name string) *file {
	if name == "" {
		name = "index.html"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.files[name]; ok {
		return f
	}
	b, err := fs.ReadFile(h.root, name)
	if err != nil {
		return nil // not cached: the set of names asked for is unbounded
	}
	sum := sha256.Sum256(b)
	f := &file{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: contentType(name)}
	if len(b) > 1024 {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		if buf.Len() < len(b) {
			f.gz = buf.Bytes()
		}
	}
	h.files[name] = f
	return f
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".html":
		return "text/html; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".txt":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
