package instance

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/jsonstring"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Columns lays instances out as rows of sx_instance, one column per field
// (the Polaris seed's single-table layout), so that an operator can read
// and query them; a SQL store (store/mysql) writes and loads instance
// records through it and knows nothing else of them. Its table and
// columns are created by the store's schema migrations (a new field is a
// new migration there and a new column here).
type Columns struct{}

// columnNames are sx_instance's columns in Values' and Dest's order; the
// store adds revision.
var columnNames = []string{"id", "namespace", "service", "host", "port", "protocol", "version", "weight", "isolated",
	"healthy", "ttl_seconds", "deregister_after_seconds", "metadata", "created_ns", "updated_ns", "ttl_expired", "checks"}

// Table implements mysql.Columns.
func (Columns) Table() string { return "sx_instance" }

// Names implements mysql.Columns: the key (id) first.
func (Columns) Names() []string { return columnNames }

// Values implements mysql.Columns: the columns of instance record key, from
// the writer's *Instance when it handed one (obj), else decoded from value.
func (Columns) Values(dst []any, key string, value []byte, obj any) ([]any, int, error) {
	in, ok := obj.(*Instance)
	if !ok {
		var err error
		if in, err = Decode(value, 0); err != nil {
			return dst, 0, fmt.Errorf("instance %q: %w", key, err)
		}
	}
	if in.ID != key {
		return dst, 0, fmt.Errorf("instance record %q holds instance %q", key, in.ID)
	}
	meta := string(appendMetadata(make([]byte, 0, 16+32*in.Metadata.Len()), in.Metadata))
	var checks any // NULL without checks
	if len(in.Checks) > 0 {
		checks = string(appendChecksJSON(nil, in.Checks))
	}
	dst = append(dst, in.ID, in.Namespace, in.Service, in.Host, in.Port,
		[]byte(in.Protocol), []byte(in.Version), in.Weight, in.Isolated, in.Healthy, in.TTLSeconds,
		in.DeregisterAfterSeconds, meta, in.CreatedAt.UnixNano(), in.UpdatedAt.UnixNano(),
		in.TTLExpired && len(in.Checks) > 0, checks)
	return dst, len(value) + len(meta), nil
}

// NewRow implements mysql.Columns: the scan destinations of one row's
// columns (Names), and what turns the row last scanned into its record.
func (Columns) NewRow() ([]any, func(buf []byte) (string, []byte, error)) {
	r := &row{}
	return r.dest(), r.appendRecord
}

// row is one row of sx_instance as scanned.
type row struct {
	id, ns, svc, host, proto, version, meta, checks sql.RawBytes
	port, weight, ttl, deregisterAfter              int
	isolated, healthy, ttlExpired                   bool
	created, updated                                int64
}

func (r *row) dest() []any {
	return []any{&r.id, &r.ns, &r.svc, &r.host, &r.port, &r.proto, &r.version, &r.weight, &r.isolated,
		&r.healthy, &r.ttl, &r.deregisterAfter, &r.meta, &r.created, &r.updated, &r.ttlExpired, &r.checks}
}

// appendRecord appends the row last scanned to buf as an instance record
// (AppendBinary) and returns its key and the record.
func (r *row) appendRecord(buf []byte) (string, []byte, error) {
	md, err := parseMetadata(r.meta)
	if err != nil {
		return "", buf, fmt.Errorf("instance %q: %w", r.id, err)
	}
	in := &Instance{
		ID: string(r.id), Namespace: string(r.ns), Service: string(r.svc), Host: string(r.host), Port: r.port,
		Protocol: string(r.proto), Version: string(r.version), Weight: r.weight, Isolated: r.isolated,
		Healthy: r.healthy, TTLSeconds: r.ttl, DeregisterAfterSeconds: int32(r.deregisterAfter), Metadata: md,
		CreatedAt: time.Unix(0, r.created).UTC(), UpdatedAt: time.Unix(0, r.updated).UTC(),
	}
	if in.Checks, err = parseChecksColumn(r.checks); err != nil {
		return "", buf, fmt.Errorf("instance %q: %w", r.id, err)
	}
	// Without checks, unhealthy is a TTL expired (as codec versions 1, 2).
	in.TTLExpired = !r.healthy
	if len(in.Checks) > 0 {
		in.TTLExpired = r.ttlExpired
	}
	return in.ID, in.AppendBinary(buf), nil
}

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

var errMetadata = errors.New("instance: bad metadata column")

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
		slices.SortStableFunc(pairs, func(a, b pair) int { return strings.Compare(a.k, b.k) })
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

func (p *jsonParser) space() { p.i = skipSpace(p.s, p.i) }

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
