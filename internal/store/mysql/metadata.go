package mysql

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sextant-mesh/sextant/internal/jsonstring"
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
		b = jsonstring.Append(b, k)
		b = append(b, ':')
		b = jsonstring.Append(b, v)
		i++
	}
	return append(b, '}')
}

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

// str reads a JSON string (stored: it must be UTF-8).
func (p *jsonParser) str() (string, error) {
	v, end, err := jsonstring.ParseStrict(p.s, p.i)
	if err != nil {
		var se *jsonstring.SyntaxError
		if errors.As(err, &se) && se.Truncated {
			p.i = len(p.s)
			return "", p.fail("unterminated string")
		}
		if errors.As(err, &se) {
			p.i = se.Offset
			return "", p.fail(se.Msg)
		}
		return "", err
	}
	p.i = end
	return string(v), nil
}
