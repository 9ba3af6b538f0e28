package mysql

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/label"
)

// The metadata column holds a flat JSON object of strings, keys in
// ascending order, so that an operator can read and query it
// (JSON_EXTRACT(metadata, '$.zone')). It is written and read here without
// reflection: at 200,000 instances of 16 pairs, encoding/json's map decoding
// was the largest cost of loading a server.

// appendMetadata appends labels as a JSON object.
func appendMetadata(b []byte, l label.Labels) []byte {
	b = append(b, '{')
	i := 0
	for k, v := range l.All() {
		if i > 0 {
			b = append(b, ',')
		}
		b = catalog.AppendJSONString(b, k)
		b = append(b, ':')
		b = catalog.AppendJSONString(b, v)
		i++
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

var errMetadata = errors.New("mysql: bad metadata column")

// parseMetadata reads a JSON object of strings into labels. Keys may come in
// any order (a row edited by hand); a duplicate key is an error.
func parseMetadata(s []byte) (label.Labels, error) {
	p := jsonParser{s: s}
	p.space()
	if !p.eat('{') {
		return label.Labels{}, p.fail("want an object")
	}
	type pair struct{ k, v string }
	var pairs []pair
	sorted := true
	p.space()
	if !p.eat('}') {
		for {
			p.space()
			k, err := p.str()
			if err != nil {
				return label.Labels{}, err
			}
			p.space()
			if !p.eat(':') {
				return label.Labels{}, p.fail("want ':'")
			}
			p.space()
			v, err := p.str()
			if err != nil {
				return label.Labels{}, err
			}
			if n := len(pairs); n > 0 && k <= pairs[n-1].k {
				sorted = false
			}
			pairs = append(pairs, pair{k, v})
			p.space()
			if p.eat(',') {
				continue
			}
			if p.eat('}') {
				break
			}
			return label.Labels{}, p.fail("want ',' or '}'")
		}
	}
	p.space()
	if p.i != len(p.s) {
		return label.Labels{}, p.fail("trailing bytes")
	}
	if !sorted {
		slices.SortStableFunc(pairs, func(a, b pair) int {
			switch {
			case a.k < b.k:
				return -1
			case a.k > b.k:
				return 1
			}
			return 0
		})
	}
	var lb label.LabelsBuilder
	size := 0
	for _, pr := range pairs {
		size += len(pr.k) + len(pr.v)
	}
	lb.Grow(len(pairs), size)
	for _, pr := range pairs {
		lb.Add(pr.k, pr.v)
	}
	l, ok := lb.Labels()
	if !ok {
		return label.Labels{}, fmt.Errorf("%w: duplicate key", errMetadata)
	}
	return l, nil
}

type jsonParser struct {
	s []byte
	i int
}

func (p *jsonParser) fail(msg string) error {
	return fmt.Errorf("%w: %s at byte %d", errMetadata, msg, p.i)
}

func (p *jsonParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a JSON string.
func (p *jsonParser) str() (string, error) {
	if !p.eat('"') {
		return "", p.fail("want a string")
	}
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := string(p.s[start:p.i])
			p.i++
			if !utf8.ValidString(s) {
				return "", p.fail("string is not UTF-8")
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	b := append([]byte(nil), p.s[start:p.i]...)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(b) {
				return "", p.fail("string is not UTF-8")
			}
			return string(b), nil
		case c < 0x20:
			return "", p.fail("control character in a string")
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.s) {
			break
		}
		e := p.s[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
					p.i += 2
					if r2, ok = p.hex4(); !ok {
						return "", p.fail("bad \\u escape")
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", p.fail("bad escape")
		}
	}
	return "", p.fail("unterminated string")
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.s[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(v), true
}
