package instance

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/sextant-mesh/sextant/internal/jsonkeys"
	"github.com/sextant-mesh/sextant/internal/jsonstring"
	"github.com/sextant-mesh/sextant/internal/label"
)

// The register body is the hot request of the registry, so it has its own
// strict decoder: it builds instances and their label.Labels
// directly, with none of encoding/json's reflection or intermediate maps.
// It accepts exactly what encoding/json with DisallowUnknownFields accepts
// into the API's types, except that field names must match in case
// (FuzzDecodeRegisterMatchesEncodingJSON holds it to that).

type decodeState struct {
	b    []byte
	i    int
	item int // the instance's index in a batch, -1 for a bare instance
	// pairs is the metadata scratch, reused by every instance of a body:
	// growing a fresh slice per instance was its largest allocation.
	pairs   []pair
	pairBuf [16]pair
	// shared holds the last namespace, service, protocol and version: the
	// instances of a batch mostly repeat them, and then share one string.
	shared [4]string
}

// idHost holds an instance's id and host as views into the body until the
// instance is decoded: then they become one string (set), as they live as
// long as the instance, and an allocation (and an object for every GC
// cycle) fewer per instance counts in a batch.
type idHost struct{ id, host []byte }

func (v *idHost) set(in *Instance) {
	s := string(v.id) + string(v.host)
	in.ID, in.Host = s[:len(v.id)], s[len(v.id):]
}

func (d *decodeState) field(name string) string {
	if d.item < 0 {
		return name
	}
	return joinField("instances["+strconv.Itoa(d.item)+"]", name)
}

func (d *decodeState) syntax(what string) error {
	if d.i >= len(d.b) {
		return invalid("", "truncated JSON body: expected %s", what)
	}
	return invalid("", "malformed JSON at byte %d: expected %s, found %q", d.i, what, d.b[d.i])
}

func (d *decodeState) ws() { d.i = skipSpace(d.b, d.i) }

// skipSpace returns the index of the first byte of b at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (d *decodeState) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decodeState) consume(c byte) bool {
	if d.peek() == c {
		d.i++
		return true
	}
	return false
}

func (d *decodeState) literal(lit string) bool {
	if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return true
	}
	return false
}

// strBytes reads a JSON string (jsonstring.Parse): a view of the body
// when the string has no escapes, else a decoded copy: valid until the
// body is reused.
func (d *decodeState) strBytes() ([]byte, error) {
	if d.peek() != '"' {
		return nil, d.syntax("a string")
	}
	s, end, err := jsonstring.Parse(d.b, d.i)
	if err != nil {
		var se *jsonstring.SyntaxError
		if errors.As(err, &se) && !se.Truncated {
			return nil, invalid("", "malformed JSON at byte %d: %s", se.Offset, se.Msg)
		}
		d.i = len(d.b)
		return nil, d.syntax("the end of a string")
	}
	d.i = end
	return s, nil
}

// number reads a JSON number and returns its text.
func (d *decodeState) number() ([]byte, error) {
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, d.syntax("a value")
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, d.syntax("a digit")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.syntax("a digit")
		}
	}
	return d.b[start:d.i], nil
}

// kind names the JSON value at the cursor, for type errors.
func (d *decodeState) kind() string {
	switch c := d.peek(); {
	case c == '"':
		return "string"
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == 't' || c == 'f':
		return "bool"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	}
	return "value"
}

// typeErr reports a value of the wrong JSON type, as jsonError words it.
func (d *decodeState) typeErr(name, want string) error {
	f := d.field(name)
	got := d.kind()
	if got == "number" {
		if n, err := d.number(); err == nil {
			got = "number " + string(n)
		}
	}
	return invalid(f, "%s: expected %s, got JSON %s", name, want, got)
}

// null consumes a JSON null, which leaves any field at its zero value.
func (d *decodeState) null() bool {
	d.ws()
	return d.literal("null")
}

func (d *decodeState) intField(name string, bits int) (int64, error) {
	c := d.peek()
	if c != '-' && (c < '0' || c > '9') {
		if c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' {
			return 0, d.typeErr(name, "int")
		}
		return 0, d.syntax("a value")
	}
	n, err := d.number()
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseInt(string(n), 10, bits)
	if perr != nil {
		return 0, invalid(d.field(name), "%s: expected int, got JSON number %s", name, n)
	}
	return v, nil
}

func (d *decodeState) strField(name string) (string, error) {
	b, err := d.strFieldBytes(name)
	return string(b), err
}

// strFieldBytes is strField without the string (see strBytes).
func (d *decodeState) strFieldBytes(name string) ([]byte, error) {
	if c := d.peek(); c != '"' {
		if c == '{' || c == '[' || c == 't' || c == 'f' || c == '-' || c >= '0' && c <= '9' {
			return nil, d.typeErr(name, "string")
		}
		return nil, d.syntax("a value")
	}
	return d.strBytes()
}

// sharedField is strField for a field that repeats across a batch: equal to
// the last value in slot i, it is that string, not a new one.
func (d *decodeState) sharedField(name string, i int) (string, error) {
	if d.peek() != '"' {
		return d.strField(name)
	}
	b, err := d.strBytes()
	if err != nil {
		return "", err
	}
	if string(b) != d.shared[i] {
		d.shared[i] = string(b)
	}
	return d.shared[i], nil
}

func (d *decodeState) boolField(name string) (bool, error) {
	d.ws()
	switch {
	case d.literal("true"):
		return true, nil
	case d.literal("false"):
		return false, nil
	}
	if c := d.peek(); c == '"' || c == '{' || c == '[' || c == '-' || c >= '0' && c <= '9' {
		return false, d.typeErr(name, "bool")
	}
	return false, d.syntax("a value")
}

// object walks the members of an object, calling member for each key with
// the cursor at its value.
func (d *decodeState) object(member func(key []byte) error) error {
	if !d.consume('{') {
		return d.syntax("'{'")
	}
	if d.consume('}') {
		return nil
	}
	for {
		key, err := d.strBytes()
		if err != nil {
			return err
		}
		if !d.consume(':') {
			return d.syntax("':'")
		}
		if err := member(key); err != nil {
			return err
		}
		if d.consume(',') {
			continue
		}
		if d.consume('}') {
			return nil
		}
		return d.syntax("',' or '}'")
	}
}

type pair = label.BytePair

// metadataSets holds the metadata sets decoded lately, so that instances
// with equal metadata (the replicas of one deployment) share one copy:
// less to build, to keep and for the catalog's index to add
// (label.Interner). One per process: any server's API meets the same sets.
var metadataSets = label.NewInterner()

// compactPairs reads a metadata object of plain strings written without
// whitespace (what the SDK, the bench and most encoders send) in one tight
// loop, appending its pairs to pairs. On anything else (whitespace,
// escapes, non-ASCII, null) it reports false having read nothing, and
// object's general path reads it.
// The general path cost ~3x as many instructions per pair: a closure
// call, and whitespace and null checks before every token.
func (d *decodeState) compactPairs(pairs []pair) ([]pair, bool) {
	b, i, n := d.b, d.i, len(pairs)
	if i+1 >= len(b) || b[i] != '{' {
		return pairs, false
	}
	if b[i+1] == '}' {
		d.i = i + 2
		return pairs, true
	}
	i++
	for {
		k, j, ok := jsonstring.Plain(b, i)
		if !ok || j >= len(b) || b[j] != ':' {
			return pairs[:n], false
		}
		v, j, ok := jsonstring.Plain(b, j+1)
		if !ok || j >= len(b) {
			return pairs[:n], false
		}
		pairs = append(pairs, pair{Key: k, Value: v})
		switch b[j] {
		case ',':
			i = j + 1
		case '}':
			d.i = j + 1
			return pairs, true
		default:
			return pairs[:n], false
		}
	}
}

func (d *decodeState) metadata(in *Instance) error {
	if d.null() {
		in.Metadata = label.Labels{}
		return nil
	}
	if d.peek() != '{' {
		return d.typeErr("metadata", "map[string]string")
	}
	if d.pairs == nil {
		d.pairs = d.pairBuf[:0]
	}
	start := d.i
	pairs, ok := d.compactPairs(d.pairs[:0])
	defer func() { d.pairs = pairs[:0] }()
	if ok {
		// Written compactly, the object's bytes are the set's identity.
		if in.Metadata, ok = metadataSets.FromBytePairs(d.b[start:d.i], pairs); ok {
			return nil
		}
	} else {
		err := d.object(func(kb []byte) error {
			var v []byte
			if !d.null() {
				if c := d.peek(); c != '"' {
					if _, err := d.strField("metadata." + string(kb)); err != nil {
						return err
					}
				}
				var err error
				if v, err = d.strBytes(); err != nil {
					return err
				}
			}
			pairs = append(pairs, pair{Key: kb, Value: v})
			return nil
		})
		if err != nil {
			return err
		}
	}
	// Keys mostly come sorted; FromBytePairs checks the order as it goes.
	if in.Metadata, ok = label.FromBytePairs(pairs); ok {
		return nil
	}
	// Sort by key; a key given twice is refused (a map would keep the last).
	slices.SortStableFunc(pairs, func(a, b pair) int { return bytes.Compare(a.Key, b.Key) })
	for i := 1; i < len(pairs); i++ {
		if bytes.Equal(pairs[i-1].Key, pairs[i].Key) {
			return d.duplicate()
		}
	}
	in.Metadata, _ = label.FromBytePairs(pairs)
	return nil
}

// instanceMember decodes one member of an instance object into in.
// weightSet reports whether "weight" was given (0 is a valid weight).
func (d *decodeState) instanceMember(kb []byte, in *Instance, weightSet *bool, ih *idHost) error {
	switch string(kb) {
	case "metadata":
		return d.metadata(in)
	case "checks":
		return d.checks(in)
	}
	key, known := knownName(kb)
	if !known {
		return invalid(d.field(string(kb)), "unknown field %q", string(kb))
	}
	if d.null() {
		switch key {
		case "weight":
			*weightSet = false
		case "id":
			ih.id = nil
		case "host":
			ih.host = nil
		}
		return nil
	}
	var err error
	var n int64
	switch key {
	case "id":
		ih.id, err = d.strFieldBytes(key)
	case "namespace":
		in.Namespace, err = d.sharedField(key, 0)
	case "service":
		in.Service, err = d.sharedField(key, 1)
	case "host":
		ih.host, err = d.strFieldBytes(key)
	case "protocol":
		in.Protocol, err = d.sharedField(key, 2)
	case "version":
		in.Version, err = d.sharedField(key, 3)
	case "port":
		n, err = d.intField(key, strconv.IntSize)
		in.Port = int(n)
	case "weight":
		n, err = d.intField(key, strconv.IntSize)
		in.Weight, *weightSet = int(n), true
	case "ttl_seconds":
		n, err = d.intField(key, strconv.IntSize)
		in.TTLSeconds = int(n)
	case "deregister_after_seconds":
		n, err = d.intField(key, 32)
		in.DeregisterAfterSeconds = int32(n)
	case "isolated":
		in.Isolated, err = d.boolField(key)
	case "healthy": // server-set: type-checked, ignored
		_, err = d.boolField(key)
	case "revision":
		_, err = d.intField(key, 64)
	case "created_at", "updated_at":
		_, err = d.strField(key)
	}
	return err
}

// knownName returns the name of an instance field without allocating, and
// false for a name the API does not know.
func knownName(kb []byte) (string, bool) {
	switch string(kb) {
	case "id":
		return "id", true
	case "namespace":
		return "namespace", true
	case "service":
		return "service", true
	case "host":
		return "host", true
	case "protocol":
		return "protocol", true
	case "version":
		return "version", true
	case "port":
		return "port", true
	case "weight":
		return "weight", true
	case "ttl_seconds":
		return "ttl_seconds", true
	case "deregister_after_seconds":
		return "deregister_after_seconds", true
	case "isolated":
		return "isolated", true
	case "healthy":
		return "healthy", true
	case "revision":
		return "revision", true
	case "created_at":
		return "created_at", true
	case "updated_at":
		return "updated_at", true
	}
	return "", false
}

// memberBit is the bit of an instance member (or the body's "instances")
// in a set of the members an object gave, 0 for an unknown name.
func memberBit(kb []byte) uint32 {
	switch string(kb) {
	case "metadata":
		return 1 << 0
	case "checks":
		return 1 << 1
	case "instances":
		return 1 << 2
	case "id":
		return 1 << 3
	case "namespace":
		return 1 << 4
	case "service":
		return 1 << 5
	case "host":
		return 1 << 6
	case "protocol":
		return 1 << 7
	case "version":
		return 1 << 8
	case "port":
		return 1 << 9
	case "weight":
		return 1 << 10
	case "ttl_seconds":
		return 1 << 11
	case "deregister_after_seconds":
		return 1 << 12
	case "isolated":
		return 1 << 13
	case "healthy":
		return 1 << 14
	case "revision":
		return 1 << 15
	case "created_at":
		return 1 << 16
	case "updated_at":
		return 1 << 17
	}
	return 0
}

// once refuses a member an object already gave (encoding/json would keep
// the last without a word): seen is the object's set of members.
func (d *decodeState) once(kb []byte, seen *uint32) error {
	bit := memberBit(kb)
	if *seen&bit != 0 {
		return d.duplicate()
	}
	*seen |= bit
	return nil
}

// duplicate is the error of a key the body gives twice in one object,
// naming the first such key and its line (only on this error path is the
// body walked again).
func (d *decodeState) duplicate() error {
	var de *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(d.b), &de) {
		return &FieldError{Index: -1, Field: de.Field(), Msg: fmt.Sprintf("key %q given twice (line %d): give each key once", de.Key, de.Line)}
	}
	return invalid("", "a key given twice in one object")
}

func (d *decodeState) instance() (*Instance, error) {
	in := &Instance{}
	weightSet := false
	var ih idHost
	var seen uint32
	if err := d.object(func(key []byte) error {
		if err := d.once(key, &seen); err != nil {
			return err
		}
		return d.instanceMember(key, in, &weightSet, &ih)
	}); err != nil {
		return nil, err
	}
	if !weightSet {
		in.Weight = DefaultWeight
	}
	ih.set(in)
	return in, nil
}

// DecodeRegister decodes a register body: {"instances": [...]} or one bare
// instance. It reports whether the body was the batch form.
func DecodeRegister(body []byte) ([]*Instance, bool, error) {
	d := &decodeState{b: body, item: -1}
	switch d.peek() {
	case 0:
		return nil, false, invalid("", "empty body: a JSON object is required")
	case '{':
	case '[', '"', 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if d.null() {
			d.ws()
			if d.i == len(d.b) { // encoding/json accepts a bare null as "nothing set"
				return []*Instance{{Weight: DefaultWeight}}, false, nil
			}
			return nil, false, invalid("", "unexpected data after the JSON object")
		}
		return nil, false, invalid("", "expected a JSON object, got JSON %s", d.kind())
	default:
		return nil, false, d.syntax("a JSON object")
	}
	bare := &Instance{}
	weightSet := false
	var bareIH idHost
	var batch []*Instance
	sawBatch := false
	var seen uint32
	err := d.object(func(key []byte) error {
		if err := d.once(key, &seen); err != nil {
			return err
		}
		if string(key) != "instances" {
			return d.instanceMember(key, bare, &weightSet, &bareIH)
		}
		if d.null() {
			batch, sawBatch = nil, false
			return nil
		}
		if d.peek() != '[' {
			return d.typeErr("instances", "array")
		}
		d.i++
		batch, sawBatch = batch[:0], true
		if d.consume(']') {
			return nil
		}
		for {
			if len(batch) > MaxBatch {
				return invalid("instances", "more than %d instances", MaxBatch)
			}
			d.item = len(batch)
			if d.null() {
				batch = append(batch, &Instance{Weight: DefaultWeight})
			} else {
				if d.peek() != '{' {
					return d.typeErr("", "an instance object")
				}
				in, err := d.instance()
				if err != nil {
					return err
				}
				batch = append(batch, in)
			}
			d.item = -1
			if d.consume(',') {
				continue
			}
			if d.consume(']') {
				return nil
			}
			return d.syntax("',' or ']'")
		}
	})
	if err != nil {
		return nil, false, err
	}
	d.ws()
	if d.i != len(d.b) {
		return nil, false, invalid("", "unexpected data after the JSON object")
	}
	bareIH.set(bare)
	if sawBatch {
		if bare.Service != "" || bare.Host != "" || bare.Port != 0 || bare.ID != "" {
			return nil, true, invalid("instances", "send either {\"instances\": [...]} or one bare instance, not both")
		}
		return batch, true, nil
	}
	if !weightSet {
		bare.Weight = DefaultWeight
	}
	return []*Instance{bare}, false, nil
}

// invalid is a decoding error naming the field at fault ("" for the body).
func invalid(field, format string, args ...any) error {
	return &FieldError{Index: -1, Field: field, Msg: fmt.Sprintf(format, args...)}
}

func joinField(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}
