package gateway

import (
	"bytes"
	"iter"
	"slices"

	"github.com/valyala/fasthttp"
)

// requestHead is what one pass over a request's raw header block found:
// whether dropHopHeaders has anything to do, and which of the fields
// prepareRequest sets the request already has. Each lookup it saves is a
// normalized copy of the name and a scan of the headers (Peek, Del); most
// requests carry none of these fields (issue 48).
type requestHead uint8

const (
	headHop       requestHead = 1 << iota // Connection or one of hopHeaders, or a closing request
	headForwarded                         // X-Forwarded-For
	headRequestID                         // X-Request-Id
	headVia
	headSubset // SubsetHeader
	// headUnknown: the request was built, not parsed (no raw block), or
	// has a line fasthttp did not keep as a field: look each up.
	headUnknown = headHop | headForwarded | headRequestID | headVia | headSubset
)

// scanRequestHead reads h's raw header block. A request to close its
// connection (an HTTP/1.0 request without keep-alive, which deleting
// Connection turns into one that keeps the upstream connection open)
// counts as having a hop-by-hop field.
func scanRequestHead(h *fasthttp.RequestHeader) requestHead {
	raw := h.RawHeaders()
	if len(raw) == 0 {
		return headUnknown
	}
	var f requestHead
	if h.ConnectionClose() {
		f |= headHop
	}
	for k, ok := range rawFieldNames(raw) {
		if !ok {
			return headUnknown
		}
		f |= fieldHead(k)
	}
	return f
}

// fieldHead is what a field named k (in any case) tells of its request.
func fieldHead(k []byte) requestHead {
	switch {
	case isHopName(k):
		return headHop
	case len(k) == 15 && bytes.EqualFold(k, []byte("X-Forwarded-For")):
		return headForwarded
	case len(k) == 12 && bytes.EqualFold(k, []byte("X-Request-Id")):
		return headRequestID
	case len(k) == 3 && bytes.EqualFold(k, []byte("Via")):
		return headVia
	case len(k) == len(SubsetHeader) && bytes.EqualFold(k, []byte(SubsetHeader)):
		return headSubset
	}
	return 0
}

// rawFieldNames yields the name of each field line of a raw header block,
// true, or false for a line that is not one (no colon): fasthttp did not
// keep it as a field. The blank end and folded continuations are skipped.
func rawFieldNames(raw []byte) iter.Seq2[[]byte, bool] {
	return func(yield func([]byte, bool) bool) {
		for len(raw) > 0 {
			line := raw
			if i := bytes.IndexByte(raw, '\n'); i >= 0 {
				line, raw = raw[:i], raw[i+1:]
			} else {
				raw = nil
			}
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
				continue
			}
			colon := bytes.IndexByte(line, ':')
			if colon < 0 {
				if !yield(nil, false) {
					return
				}
				continue
			}
			if !yield(bytes.TrimRight(line[:colon], " \t"), true) {
				return
			}
		}
	}
}

// takeRepeated deletes the fields a parsed request repeats (named as in
// its raw header block, any case) and returns them, copied, in order: for
// dropHopHeaders, whose deletes would reorder them. Not the hop-by-hop
// fields, which go, nor those fasthttp keeps apart from its list (Host,
// Cookie...), which no delete reorders. A built request (no raw block)
// returns none. Only requests with a hop-by-hop field come here.
func takeRepeated(h *fasthttp.RequestHeader) [][2][]byte {
	raw := h.RawHeaders()
	if len(raw) == 0 {
		return nil
	}
	var seenBuf [32][]byte // on the stack: a browser's request (Connection: keep-alive) comes here
	seen := seenBuf[:0]
	var repeated [][]byte
	for k, ok := range rawFieldNames(raw) {
		if !ok || len(k) == 0 {
			continue
		}
		eq := func(n []byte) bool { return len(n) == len(k) && bytes.EqualFold(n, k) }
		switch {
		case !slices.ContainsFunc(seen, eq):
			seen = append(seen, k)
		case !slices.ContainsFunc(repeated, eq):
			repeated = append(repeated, bytes.Clone(k)) // raw is the header's; Peek and Del reuse its buffers
		}
	}
	if len(repeated) == 0 {
		return nil
	}
	named := slices.Collect(connectionNames(h.Peek("Connection")))
	repeated = slices.DeleteFunc(repeated, func(k []byte) bool {
		return isHopName(k) || requestFieldApart(k) || slices.ContainsFunc(named, func(n []byte) bool { return bytes.EqualFold(n, k) })
	})
	var out [][2][]byte
	for _, k := range repeated {
		for _, v := range h.PeekAll(string(k)) {
			out = append(out, [2][]byte{k, bytes.Clone(v)})
		}
	}
	for _, k := range repeated {
		h.DelBytes(k)
	}
	return out
}

// forwardedFor returns the request's X-Forwarded-For, its fields' values
// joined in order when it has several (RFC 9110 5.3), which are then
// removed (prepareRequest sets the one field, the client appended): the
// client must go after the last proxy's address, not the first's. The
// other fields the request repeats keep their order (takeRepeated).
func forwardedFor(h *fasthttp.RequestHeader) []byte {
	vals := h.PeekAll("X-Forwarded-For")
	if len(vals) < 2 {
		if len(vals) == 0 {
			return nil
		}
		return vals[0]
	}
	joined := bytes.Join(vals, []byte(", ")) // a copy: the deletes below reuse the header's buffers
	repeated := takeRepeated(h)
	if repeated == nil {
		h.DelBytes(nameForwardedFor) // built, not parsed: no order to keep
	}
	for _, kv := range repeated {
		if !bytes.EqualFold(kv[0], nameForwardedFor) {
			h.AddBytesKV(kv[0], kv[1])
		}
	}
	return joined
}

// requestFieldApart reports whether fasthttp keeps a request field apart
// from its list of fields.
func requestFieldApart(k []byte) bool {
	for _, n := range []string{"Host", "Content-Length", "Content-Type", "User-Agent", "Cookie", "Transfer-Encoding", "Connection", "Trailer"} {
		if bytes.EqualFold(k, []byte(n)) {
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
		for tok := range connectionList(v) {
			if !bytes.EqualFold(tok, tokClose) && !bytes.EqualFold(tok, tokKeepAlive) && !yield(tok) {
				return
			}
		}
	}
}

// connectionList yields a Connection value's tokens: its comma-separated
// parts, trimmed, the empty ones left out.
func connectionList(v []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for tok := range bytes.SplitSeq(v, []byte{','}) {
			if tok = bytes.TrimSpace(tok); len(tok) > 0 && !yield(tok) {
				return
			}
		}
	}
}
