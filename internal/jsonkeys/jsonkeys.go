// Package jsonkeys finds a key given twice in one object of a JSON
// document. encoding/json keeps the last of repeated keys without a word,
// so {"service":"a","service":"b"} would register b; Sextant's decoders of
// outside input refuse such a document instead, naming the key and its
// line.
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// DuplicateError is a key given twice in one object.
type DuplicateError struct {
	// Key is the repeated key; Path the object it is in ("" for the
	// document's top level, "metadata", "items[2].spec", ...).
	Key, Path string
	// Line is the line (from 1) of the key's second occurrence.
	Line int
}

func (e *DuplicateError) Error() string {
	where := ""
	if e.Path != "" {
		where = " in " + e.Path
	}
	return "jsonkeys: line " + strconv.Itoa(e.Line) + ": key " + strconv.Quote(e.Key) + " given twice" + where
}

// Field is where the key is, as an API names a field: path.key.
func (e *DuplicateError) Field() string {
	if e.Path == "" {
		return e.Key
	}
	return e.Path + "." + e.Key
}

// Line is the line (from 1) of byte offset off of doc.
func Line(doc []byte, off int) int {
	off = min(max(off, 0), len(doc))
	return 1 + bytes.Count(doc[:off], []byte("\n"))
}

// frame is an object or array being read.
type frame struct {
	object bool
	path   string
	keys   map[string]struct{}
	index  int    // arrays: the next element's
	key    string // objects: the key whose value is next ("" before a key)
	want   bool   // objects: a key comes next
}

// Check returns a *DuplicateError for the first key given twice in one
// object of doc, and nil when there is none. A document that is not JSON
// is nil as well: the decoder that reads it after says what is wrong.
func Check(doc []byte) error {
	if bytes.IndexByte(doc, '{') < 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var stack []*frame
	// child is the path of the value that comes next.
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		var p string
		if f.object {
			p = f.key
			if f.path != "" {
				p = f.path + "." + p
			}
		} else {
			p = f.path + "[" + strconv.Itoa(f.index) + "]"
		}
		return p
	}
	// valueDone moves the enclosing frame past a value.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if f.object {
			f.want, f.key = true, ""
		} else {
			f.index++
		}
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return nil // not JSON: the caller's decoder reports it
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, &frame{object: t == '{', path: child(), want: t == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
			continue
		case string:
			if top != nil && top.object && top.want {
				if top.keys == nil {
					top.keys = make(map[string]struct{}, 8)
				}
				if _, ok := top.keys[t]; ok {
					// start is before the separator the decoder skipped;
					// the key itself follows it.
					off := int(start)
					if i := bytes.IndexByte(doc[off:], '"'); i >= 0 {
						off += i
					}
					return &DuplicateError{Key: t, Path: top.path, Line: Line(doc, off)}
				}
				top.keys[t] = struct{}{}
				top.key, top.want = t, false
				continue
			}
		}
		valueDone()
	}
}
