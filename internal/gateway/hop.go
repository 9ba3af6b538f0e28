package gateway

import (
	"bytes"
	"iter"
	"slices"

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

// dropAnswerHopHeaders is dropHopHeaders for an endpoint's answer, whose
// field names stay as the endpoint wrote them (roundTrip disables
// fasthttp's normalizing): a hop-by-hop field is found whatever its case
// ("connection", "keep-alive"), which Del by the canonical name misses,
// and a field the answer repeats keeps its values' order, which fasthttp's
// Del breaks (it moves the last field into a deleted one's place: Vary: A,
// Vary: B would go out as B, A). Only answers with a hop-by-hop field come
// here (hasHopHeader), so the copies it makes are not on the common path.
func dropAnswerHopHeaders(h *fasthttp.ResponseHeader) {
	var named [][]byte // the names Connection lists, from each of its lines
	for k, v := range h.All() {
		if bytes.EqualFold(k, []byte("Connection")) {
			for tok := range connectionNames(v) {
				named = append(named, bytes.Clone(tok))
			}
		}
	}
	hop := func(k []byte) bool {
		if isHopName(k) {
			return true
		}
		for _, n := range named {
			if bytes.EqualFold(k, n) {
				return true
			}
		}
		return false
	}
	gone := [][]byte{[]byte("Connection")} // also clears fasthttp's close flag: the client's connection stays open
	count := map[string]int{}
	for k := range h.All() {
		count[string(k)]++
		if hop(k) && !slices.ContainsFunc(gone, func(g []byte) bool { return bytes.Equal(g, k) }) {
			gone = append(gone, bytes.Clone(k))
		}
	}
	// The repeated fields kept, in order, copied (Del and Add reuse the
	// header's storage). Every one of them is deleted before any is added
	// back: deleting one name reorders the fields of the others.
	var repeated [][2][]byte
	for k, v := range h.All() {
		if count[string(k)] > 1 && !hop(k) && !answerFieldApart(k) {
			repeated = append(repeated, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
		}
	}
	for _, k := range gone {
		h.DelBytes(k)
	}
	for _, kv := range repeated {
		h.DelBytes(kv[0])
	}
	for _, kv := range repeated {
		h.AddBytesKV(kv[0], kv[1])
	}
}

// answerFieldApart reports whether fasthttp keeps an answer field apart
// from its list of fields (or makes it itself), so that deleting another
// field cannot reorder it and adding it back would not append it.
func answerFieldApart(k []byte) bool {
	for _, n := range []string{"Content-Length", "Content-Type", "Content-Encoding", "Server", "Set-Cookie", "Trailer", "Date", "Transfer-Encoding", "Connection"} {
		if bytes.EqualFold(k, []byte(n)) {
			return true
		}
	}
	return false
}

// connectionNames yields the header names a Connection value lists, but
// close and keep-alive (options, not names).
func connectionNames(v []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for tok := range bytes.SplitSeq(v, []byte{','}) {
			if tok = bytes.TrimSpace(tok); len(tok) > 0 && !bytes.EqualFold(tok, []byte("close")) && !bytes.EqualFold(tok, []byte("keep-alive")) && !yield(tok) {
				return
			}
		}
	}
}
