package gateway

import (
	"errors"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Head is a HEADERS frame and its CONTINUATION frames, decoded: what
// x/net's MetaHeadersFrame holds. h2HeadReader reads it instead of the
// Framer (ReadMetaHeaders) because the Framer's allocates per block what
// a connection can keep: the field list grown field by field and its
// decoder's emit closure (3 blocks per gRPC call: about a fifth of the
// gateway's allocations per call, with the frames it still allocates).
type h2Head struct {
	*http2.HeadersFrame
	Fields    []hpack.HeaderField // the pseudo-header fields first
	Truncated bool                // over the header list size limit: Fields is partial
}

// PseudoValue is the value of pseudo-header field ":"+name ("": none).
func (h *h2Head) PseudoValue(name string) string {
	for _, hf := range h.PseudoFields() {
		if hf.Name[1:] == name {
			return hf.Value
		}
	}
	return ""
}

func (h *h2Head) PseudoFields() []hpack.HeaderField {
	for i, hf := range h.Fields {
		if !hf.IsPseudo() {
			return h.Fields[:i]
		}
	}
	return h.Fields
}

func (h *h2Head) RegularFields() []hpack.HeaderField {
	for i, hf := range h.Fields {
		if !hf.IsPseudo() {
			return h.Fields[i:]
		}
	}
	return nil
}

// h2HeadReader decodes the header blocks of one connection, on its reading
// goroutine, with the checks x/net's Framer makes (RFC 9113 8.2, 8.3): its
// errors are the same ConnectionError and StreamError values. The head it
// returns, and its field list, are valid until its next read; the fields'
// strings may be kept.
type h2HeadReader struct {
	dec  *hpack.Decoder
	max  uint32 // the header list size limit
	head h2Head

	// Of the block being read.
	remain, trailerRemain uint32
	sawRegular            bool
	invalid               error
}

var (
	errH2PseudoAfterRegular = errors.New("gateway: http2 pseudo-header field after a regular one")
	errH2MixedPseudo        = errors.New("gateway: http2 mix of request and response pseudo-header fields")
)

func newH2HeadReader(max uint32) *h2HeadReader {
	r := &h2HeadReader{max: max}
	r.dec = hpack.NewDecoder(4096, r.emit)
	r.dec.SetMaxStringLength(int(max))
	return r
}

func (r *h2HeadReader) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		r.invalid = errors.New("gateway: http2 invalid value of header field " + hf.Name)
	}
	if strings.HasPrefix(hf.Name, ":") {
		if r.sawRegular {
			r.invalid = errH2PseudoAfterRegular
		}
	} else {
		r.sawRegular = true
		if !validWireName(hf.Name) {
			r.invalid = errors.New("gateway: http2 invalid header field name " + hf.Name)
		}
	}
	if r.invalid != nil {
		r.dec.SetEmitEnabled(false)
		return
	}
	remain := &r.remain
	var size uint32
	if hf.Name == "trailer" {
		// Each name a trailer declares is counted as a field of its own,
		// as x/net counts it.
		remain = &r.trailerRemain
		n := strings.Count(hf.Value, ",") + 1
		size = uint32(len(hf.Value)-n+1) + uint32(n)*hpack.HeaderField{}.Size()
	} else {
		size = hf.Size()
	}
	if size > *remain {
		r.dec.SetEmitEnabled(false)
		r.head.Truncated = true
		r.remain, r.trailerRemain = 0, 0
		return
	}
	*remain -= size
	r.head.Fields = append(r.head.Fields, hf)
}

// validWireName reports whether a header field name is a lower-case token.
func validWireName(v string) bool {
	if v == "" {
		return false
	}
	for _, c := range []byte(v) {
		if !httpguts.IsTokenRune(rune(c)) || ('A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// read decodes hf's header block, reading its CONTINUATION frames from fr
// (fr must not have ReadMetaHeaders set).
func (r *h2HeadReader) read(fr *http2.Framer, hf *http2.HeadersFrame) (*h2Head, error) {
	r.head = h2Head{HeadersFrame: hf, Fields: r.head.Fields[:0]}
	r.remain, r.trailerRemain = r.max, r.max
	r.sawRegular, r.invalid = false, nil
	r.dec.SetEmitEnabled(true)
	id := hf.StreamID
	var frag []byte = hf.HeaderBlockFragment()
	end := hf.HeadersEnded()
	for {
		// A fragment far over what is left of the limit, or more of a
		// block after an invalid field, ends the connection (as x/net's).
		if int64(len(frag)) > 2*int64(r.remain+r.trailerRemain) || r.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := r.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if end {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		cf := f.(*http2.ContinuationFrame) // the Framer checks the order
		frag, end = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := r.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if r.invalid != nil {
		return nil, http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: r.invalid}
	}
	if err := checkPseudos(r.head.PseudoFields()); err != nil {
		return nil, http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return &r.head, nil
}

// checkPseudos checks a block's pseudo-header fields: known, not repeated,
// of a request or of an answer.
func checkPseudos(pf []hpack.HeaderField) error {
	var request, answer bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			answer = true
		default:
			return errors.New("gateway: http2 unknown pseudo-header field " + hf.Name)
		}
		for _, prev := range pf[:i] {
			if hf.Name == prev.Name {
				return errors.New("gateway: http2 repeated pseudo-header field " + hf.Name)
			}
		}
	}
	if request && answer {
		return errH2MixedPseudo
	}
	return nil
}
