package gateway

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// requestMayHaveHop reports whether dropHopHeaders has anything to do on
// a request: false only when fasthttp parsed it from the wire (its raw
// header block is kept), no line of that block names Connection or one of
// hopHeaders, and it is not to close its connection (an HTTP/1.0 request
// without keep-alive, which deleting Connection turns into one that
// keeps the upstream connection open). Most requests carry none, and the
// nine deletes cost a normalized copy of the name and a scan of the
// headers each (issue 48); this is one pass over the block.
func requestMayHaveHop(h *fasthttp.RequestHeader) bool {
	raw := h.RawHeaders()
	if len(raw) == 0 || h.ConnectionClose() {
		return true // built, not parsed, or closing: the deletes decide
	}
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue // the end, or a folded value's continuation
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			return true // not a header line fasthttp kept as such: the deletes decide
		}
		if isHopName(bytes.TrimRight(line[:colon], " \t")) {
			return true
		}
	}
	return false
}
