package gateway

import (
	"bufio"
	"bytes"

	"github.com/valyala/fasthttp"
)

// passHead is an endpoint's answer head kept as it arrived, for an
// HTTP/1.1 client: the gateway writes it on with its edits made in the
// bytes (hop-by-hop fields, Via and X-Request-Id left out, its own added)
// instead of parsing it into fasthttp's ResponseHeader and writing that
// out again, which was a tenth of an HTTP/1.1 call's user CPU (issue 48).
// Only the common answer comes this way: a whole head in the reader's
// buffer, of a status from 200, with a Content-Length the gateway reads
// the body of at once (or no body), no Transfer-Encoding, and nothing the
// scan does not take apart as fasthttp's parser would; any other answer
// is parsed by fasthttp as before (scanPassHead says which).
// One per HTTP/1.1 connection (h1Conn), lent to its calls whose answers
// nothing else edits (serveOn).
type passHead struct {
	buf    []byte  // the head, status line to blank line, as received
	drop   [8]span // lines of buf left out, in order
	ndrop  int
	status int
	cl     int  // Content-Length; -1: none
	close  bool // the endpoint closes its connection after this answer
	// bodyless: the answer has no body whatever its fields say (a HEAD
	// request's, 204, 304); else its Content-Length is its body's.
	bodyless bool
	server   bool // the answer has its own Server field
	grpc     span // Grpc-Status's value, if any
	id       []byte
	ok       bool // holds the current attempt's answer

	req passReq // the call's request head, when it goes upstream as it came
}

// span is a part of passHead.buf: [from, to).
type span struct{ from, to int }

// maxPassHead is the longest head scanned; a longer one is fasthttp's.
const maxPassHead = 4096

var (
	nameContentLength    = []byte("Content-Length")
	nameTransferEncoding = []byte("Transfer-Encoding")
	nameConnection       = []byte("Connection")
	nameServer           = []byte("Server")
	nameKeepAlive        = []byte("Keep-Alive")
	nameGrpcStatus       = []byte("Grpc-Status")
	tokClose             = []byte("close")
	tokKeepAlive         = []byte("keep-alive")
	passStatusLine       = []byte("HTTP/1.1")
)

// scanPassHead scans a head at the start of b (b ends where the reader's
// buffered bytes do) into p, and returns its length; 0 when the answer is
// not one passHead takes, p's content then undefined. head is whether the
// request was HEAD (its answer has no body whatever its fields say).
// One pass, its lines checked as it goes: the scan is most of what the
// pass costs (BenchmarkAnswerPass).
func scanPassHead(p *passHead, b []byte, head bool) int {
	p.ndrop, p.cl, p.close, p.server, p.grpc = 0, -1, false, false, span{}
	if len(b) > maxPassHead {
		b = b[:maxPassHead]
	}
	// The status line: HTTP/1.x, a space, three digits, and a reason.
	if len(b) < 16 || string(b[:7]) != "HTTP/1." || (b[7] != '0' && b[7] != '1') || b[8] != ' ' {
		return 0
	}
	http10 := b[7] == '0'
	c0, c1, c2 := b[9], b[10], b[11]
	if c0 < '2' || c0 > '5' || c1 < '0' || c1 > '9' || c2 < '0' || c2 > '9' {
		return 0 // 1xx and the rest are fasthttp's
	}
	p.status = int(c0-'0')*100 + int(c1-'0')*10 + int(c2-'0')
	i := 12
	if b[i] == ' ' {
		i++
		for i < len(b) && fieldTable[b[i]] {
			i++
		}
	}
	if i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0
	}
	i += 2
	keepAlive := false
	for {
		if i+1 >= len(b) {
			return 0 // not all here
		}
		if b[i] == '\r' {
			if b[i+1] != '\n' {
				return 0
			}
			i += 2
			break // the blank line
		}
		start := i
		name, vs, ve, next := scanField(b, i)
		if next == 0 {
			return 0
		}
		i = next
		drop := false
		switch passFieldOf(name) {
		case fieldOther:
		case fieldContentLength:
			if p.cl >= 0 {
				return 0 // twice: fasthttp's to judge
			}
			if p.cl = parseLength(b[vs:ve]); p.cl < 0 {
				return 0
			}
		case fieldTransferEncoding:
			return 0
		case fieldConnection:
			c, ka, other := connectionTokens(b[vs:ve])
			if other {
				return 0 // it names fields to leave out too
			}
			p.close, keepAlive = p.close || c, keepAlive || ka
			drop = true
		case fieldServer:
			p.server = true
		case fieldGrpcStatus:
			p.grpc = span{vs, ve}
		default: // hop-by-hop, Via, X-Request-Id
			drop = true
		}
		if drop {
			if p.ndrop == len(p.drop) {
				return 0
			}
			p.drop[p.ndrop] = span{start, i}
			p.ndrop++
		}
	}
	if http10 && !keepAlive {
		p.close = true
	}
	if p.bodyless = head || p.status == fasthttp.StatusNoContent || p.status == fasthttp.StatusNotModified; !p.bodyless {
		if p.cl < 0 {
			return 0 // the body ends with the connection: fasthttp's
		}
		if p.cl > bufferedResponseMax {
			return 0 // streamed (upBody), with fasthttp's header
		}
	}
	return i
}

// scanField scans the field line at b[i:] (name ":" OWS value OWS CRLF)
// and returns its name, where its value starts and ends in b, and where
// the next line starts; next is 0 if it is not such a line.
func scanField(b []byte, i int) (name []byte, vs, ve, next int) {
	start := i
	for i < len(b) && tokenTable[b[i]] {
		i++
	}
	if i == start || i >= len(b) || b[i] != ':' {
		return nil, 0, 0, 0
	}
	name = b[start:i]
	i++
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	vs = i
	for i < len(b) && fieldTable[b[i]] {
		i++
	}
	if i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return nil, 0, 0, 0
	}
	ve = i
	for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
		ve--
	}
	return name, vs, ve, i + 2
}

// connectionTokens says what a Connection value names: close, keep-alive,
// anything else (fields to leave out).
func connectionTokens(v []byte) (closing, keepAlive, other bool) {
	for tok := range connectionList(v) {
		switch {
		case bytes.EqualFold(tok, tokClose):
			closing = true
		case bytes.EqualFold(tok, tokKeepAlive):
			keepAlive = true
		default:
			other = true
		}
	}
	return closing, keepAlive, other
}

// passField is what scanPassHead does with a field.
type passField uint8

const (
	fieldOther passField = iota
	fieldContentLength
	fieldTransferEncoding
	fieldConnection
	fieldServer
	fieldGrpcStatus
	fieldDrop // hop-by-hop (but Connection), Via, X-Request-Id
)

// passFieldOf says which field name is, by its length first: most names
// are compared with nothing.
func passFieldOf(name []byte) passField {
	var want []byte
	f := fieldDrop
	switch len(name) {
	case 3:
		want = nameVia
	case 6:
		want, f = nameServer, fieldServer
	case 10:
		if bytes.EqualFold(name, nameConnection) {
			return fieldConnection
		}
		want = nameKeepAlive
	case 11:
		want, f = nameGrpcStatus, fieldGrpcStatus
	case 12:
		want = nameRequestID
	case 14:
		want, f = nameContentLength, fieldContentLength
	case 17:
		want, f = nameTransferEncoding, fieldTransferEncoding
	case 2, 7, 16, 18, 19:
		if isHopName(name) {
			return fieldDrop
		}
		return fieldOther
	default:
		return fieldOther
	}
	if bytes.EqualFold(name, want) {
		return f
	}
	return fieldOther
}

// parseLength is a Content-Length value's, -1 if it is not one.
func parseLength(v []byte) int {
	if len(v) == 0 || len(v) > 18 {
		return -1
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// tokenTable says which bytes may be in a field name (RFC 9110 5.6.2),
// fieldTable which in a field value or a reason phrase (VCHAR, SP, HTAB,
// obs-text).
var tokenTable, fieldTable = func() (t, f [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	for c := range 256 {
		f[c] = c >= 0x20 && c != 0x7f || c == '\t'
	}
	return t, f
}()

// take scans the answer head br holds (after the first read for it), and
// consumes it if it is one for p: true. Otherwise br is as it was and the
// head is fasthttp's to read.
func (p *passHead) take(br *bufio.Reader, head bool) bool {
	b, _ := br.Peek(br.Buffered())
	n := scanPassHead(p, b, head)
	if n == 0 {
		return false
	}
	p.buf = append(p.buf[:0], b[:n]...)
	_, _ = br.Discard(n)
	return true
}

// grpcStatus is the answer's Grpc-Status value (empty if none).
func (p *passHead) grpcStatus() []byte { return p.buf[p.grpc.from:p.grpc.to] }

// writeHead writes p's head as the client's answer: HTTP/1.1, the
// endpoint's status and fields but those left out, then Via, X-Request-Id
// (p.id), Connection (closing, or keep-alive for an HTTP/1.0 client) and
// Server when the answer has none. The head is built in w's free space,
// or in scratch when that may be too small.
func (p *passHead) writeHead(w *bufio.Writer, scratch *[]byte, closing, keepAlive bool, server string) error {
	b := w.AvailableBuffer()
	own := cap(b) < len(p.buf)+len(p.id)+128+len(server) // may not fit: scratch's
	if own {
		b = (*scratch)[:0]
	}
	b = append(b, passStatusLine...)
	from := len(passStatusLine)
	last := len(p.buf) - 2 // the blank line's
	for _, d := range p.drop[:p.ndrop] {
		b = append(b, p.buf[from:d.from]...)
		from = d.to
	}
	b = append(b, p.buf[from:last]...)
	b = append(b, "Via: "...)
	b = append(b, viaBytes...)
	b = append(b, crlf...)
	if len(p.id) > 0 {
		b = append(b, "X-Request-Id: "...)
		b = append(b, p.id...)
		b = append(b, crlf...)
	}
	switch {
	case closing:
		b = append(b, "Connection: close\r\n"...)
	case keepAlive:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	if !p.server && server != "" {
		b = append(b, "Server: "...)
		b = append(b, server...)
		b = append(b, crlf...)
	}
	b = append(b, crlf...)
	_, err := w.Write(b)
	if own {
		*scratch = b[:0]
	}
	return err
}
