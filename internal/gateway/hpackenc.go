package gateway

import "bytes"

// HPACK as the gateway writes it (RFC 7541), for h2Server and h2Client:
// no dynamic table (h2Config's reason) and no Huffman coding. x/net's
// encoder, with its table off, still searched the static table through a
// map and Huffman-coded every string: 6.6% of the gateway's CPU per gRPC
// call (perf, the dataplane bench). A string is sent as it is (its H bit
// clear), which the RFC allows; a name in the static table is sent by its
// index, found by a switch.

// appendHPACK appends the representation of one header field: indexed
// when the static table has the whole field, else a literal without
// indexing, its name by index when the table has the name.
func appendHPACK(b *bytes.Buffer, name, value string) {
	idx, full := hpackStatic(name, value)
	if full {
		appendHPACKInt(b, 0x80, 7, uint64(idx))
		return
	}
	appendHPACKInt(b, 0x00, 4, uint64(idx)) // 0 when the name is new: it follows
	if idx == 0 {
		appendHPACKInt(b, 0x00, 7, uint64(len(name)))
		b.WriteString(name)
	}
	appendHPACKInt(b, 0x00, 7, uint64(len(value)))
	b.WriteString(value)
}

// appendHPACKInt appends i with an n-bit prefix, the first byte's other
// bits set to first (RFC 7541 5.1).
func appendHPACKInt(b *bytes.Buffer, first byte, n uint, i uint64) {
	max := uint64(1)<<n - 1
	if i < max {
		b.WriteByte(first | byte(i))
		return
	}
	b.WriteByte(first | byte(max))
	for i -= max; i >= 128; i >>= 7 {
		b.WriteByte(byte(i&0x7f) | 0x80)
	}
	b.WriteByte(byte(i))
}

// hpackStatic is the index of name in HPACK's static table (0: none), and
// whether that entry's value is value too.
func hpackStatic(name, value string) (int, bool) {
	switch name {
	case ":authority":
		return 1, false
	case ":method":
		switch value {
		case "GET":
			return 2, true
		case "POST":
			return 3, true
		}
		return 2, false
	case ":path":
		switch value {
		case "/":
			return 4, true
		case "/index.html":
			return 5, true
		}
		return 4, false
	case ":scheme":
		switch value {
		case "http":
			return 6, true
		case "https":
			return 7, true
		}
		return 6, false
	case ":status":
		switch value {
		case "200":
			return 8, true
		case "204":
			return 9, true
		case "206":
			return 10, true
		case "304":
			return 11, true
		case "400":
			return 12, true
		case "404":
			return 13, true
		case "500":
			return 14, true
		}
		return 8, false
	case "accept-charset":
		return 15, false
	case "accept-encoding":
		return 16, value == "gzip, deflate"
	case "accept-language":
		return 17, false
	case "accept-ranges":
		return 18, false
	case "accept":
		return 19, false
	case "access-control-allow-origin":
		return 20, false
	case "age":
		return 21, false
	case "allow":
		return 22, false
	case "authorization":
		return 23, false
	case "cache-control":
		return 24, false
	case "content-disposition":
		return 25, false
	case "content-encoding":
		return 26, false
	case "content-language":
		return 27, false
	case "content-length":
		return 28, false
	case "content-location":
		return 29, false
	case "content-range":
		return 30, false
	case "content-type":
		return 31, false
	case "cookie":
		return 32, false
	case "date":
		return 33, false
	case "etag":
		return 34, false
	case "expect":
		return 35, false
	case "expires":
		return 36, false
	case "from":
		return 37, false
	case "host":
		return 38, false
	case "if-match":
		return 39, false
	case "if-modified-since":
		return 40, false
	case "if-none-match":
		return 41, false
	case "if-range":
		return 42, false
	case "if-unmodified-since":
		return 43, false
	case "last-modified":
		return 44, false
	case "link":
		return 45, false
	case "location":
		return 46, false
	case "max-forwards":
		return 47, false
	case "proxy-authenticate":
		return 48, false
	case "proxy-authorization":
		return 49, false
	case "range":
		return 50, false
	case "referer":
		return 51, false
	case "refresh":
		return 52, false
	case "retry-after":
		return 53, false
	case "server":
		return 54, false
	case "set-cookie":
		return 55, false
	case "strict-transport-security":
		return 56, false
	case "transfer-encoding":
		return 57, false
	case "user-agent":
		return 58, false
	case "vary":
		return 59, false
	case "via":
		return 60, false
	case "www-authenticate":
		return 61, false
	}
	return 0, false
}
