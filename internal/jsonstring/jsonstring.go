// Package jsonstring owns the JSON string literal: Append writes one as
// encoding/json does, Parse reads one. Sextant's hand-written JSON encoders
// and decoders (an instance's JSON and its register decoder, the MySQL
// metadata column, the audit log) all use these, so that they agree with
// encoding/json, and with each other, byte for byte.
package jsonstring

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// Append appends s as a JSON string, as encoding/json does with HTML
// escaping off: invalid UTF-8 becomes U+FFFD, U+2028 and U+2029 are
// escaped.
func Append(b []byte, s string) []byte { return appendString(b, s, &plainSafe) }

// AppendHTML is Append with <, > and & escaped as well, as json.Marshal
// and log/slog's JSON handler write them.
func AppendHTML(b []byte, s string) []byte { return appendString(b, s, &htmlSafe) }

// plainSafe and htmlSafe mark the ASCII bytes written as they are: one
// load per byte, where a flag tested in the loop cost Append 15% of an
// instance's JSON.
var plainSafe, htmlSafe = func() (p, h [utf8.RuneSelf]bool) {
	for c := range utf8.RuneSelf {
		p[c] = c >= 0x20 && c != '"' && c != '\\'
		h[c] = p[c] && c != '<' && c != '>' && c != '&'
	}
	return p, h
}()

func appendString(b []byte, s string, safe *[utf8.RuneSelf]bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// SyntaxError is a string Parse could not read.
type SyntaxError struct {
	Offset    int    // the byte of the input at fault
	Msg       string // what is wrong there
	Truncated bool   // the input ended inside the string
}

func (e *SyntaxError) Error() string {
	if e.Truncated {
		return "jsonstring: truncated string"
	}
	return fmt.Sprintf("jsonstring: %s at byte %d", e.Msg, e.Offset)
}

// stop marks the bytes that end Plain's scan: the quote, the backslash,
// control characters and every non-ASCII byte.
var stop = func() (t [256]bool) {
	for c := range t {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()

// Plain reads the string starting at b[i] if it is plain ASCII with no
// escapes, the common case, and returns it (a view of b) and the index
// after its closing quote. It reports false for any other string, which
// Parse reads. The loop ranges over a local slice: one on b[i] reloaded
// b at every byte (12 instructions a byte, against 8; IndexByte and a
// word-at-a-time check cost more on 10-byte strings).
func Plain(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	rest := b[i+1:]
	for j, c := range rest {
		if stop[c] {
			if c != '"' {
				return nil, 0, false
			}
			return rest[:j:j], i + 2 + j, true
		}
	}
	return nil, 0, false
}

// Parse reads the JSON string starting at b[i] (a quote) and returns its
// value and the index after its closing quote. The value is a view of b
// when the string has no escapes, else a decoded copy. Invalid UTF-8 and
// lone surrogates become U+FFFD, as encoding/json decodes them.
func Parse(b []byte, i int) ([]byte, int, error) { return parse(b, i, false) }

// ParseStrict is Parse refusing a string whose bytes are not UTF-8 (for
// stored data, which was valid when written).
func ParseStrict(b []byte, i int) ([]byte, int, error) { return parse(b, i, true) }

func parse(b []byte, i int, strict bool) ([]byte, int, error) {
	if s, end, ok := Plain(b, i); ok {
		return s, end, nil
	}
	if i >= len(b) || b[i] != '"' {
		return nil, i, &SyntaxError{Offset: i, Msg: "want a string", Truncated: i >= len(b)}
	}
	i++
	start := i
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			s := b[start:i]
			return valid(s, i+1, strict)
		case c == '\\':
			return parseEscaped(b, start, i, strict)
		case c < 0x20:
			return nil, i, &SyntaxError{Offset: i, Msg: "control character in string"}
		}
		i++
	}
	return nil, i, &SyntaxError{Offset: i, Truncated: true}
}

// valid returns s, or its U+FFFD-replaced copy when it is not UTF-8 (an
// error when strict).
func valid(s []byte, end int, strict bool) ([]byte, int, error) {
	if utf8.Valid(s) {
		return s, end, nil
	}
	if strict {
		return nil, end, &SyntaxError{Offset: end - 1, Msg: "string is not UTF-8"}
	}
	return []byte(string([]rune(string(s)))), end, nil
}

// parseEscaped reads on from b[i], a backslash, into a copy of the string
// read so far (b[start:i]).
func parseEscaped(b []byte, start, i int, strict bool) ([]byte, int, error) {
	out := append([]byte(nil), b[start:i]...)
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return valid(out, i+1, strict)
		case c < 0x20:
			return nil, i, &SyntaxError{Offset: i, Msg: "control character in string"}
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		i++
		if i >= len(b) {
			break
		}
		e := b[i]
		i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, i)
			if !ok {
				return nil, i, &SyntaxError{Offset: i, Msg: `bad \u escape`}
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// A pair makes one rune; anything else leaves U+FFFD and
				// is read on its own, as encoding/json does.
				r2 := rune(-1)
				if len(b)-i >= 6 && b[i] == '\\' && b[i+1] == 'u' {
					if x, ok := hex4(b, i+2); ok {
						r2 = x
					}
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, i - 1, &SyntaxError{Offset: i - 1, Msg: fmt.Sprintf(`bad escape \%c`, e)}
		}
	}
	return nil, i, &SyntaxError{Offset: i, Truncated: true}
}

func hex4(b []byte, i int) (rune, bool) {
	if len(b)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
