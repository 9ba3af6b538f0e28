// Package kv is the KV record kind (store.KV): Consul's key/value store,
// served by the Consul-compatible API (/v1/kv, docs/compat.md). An entry is
// a key of one Sextant namespace, its value (opaque bytes), Consul's flags,
// and the indexes Consul clients read: ModifyIndex is the store revision of
// the entry's last write (one sequence with every other kind), CreateIndex
// the revision that created it. Session is the Consul session holding the
// key (?acquire), LockIndex how often a session acquired it; the sessions
// themselves are records of this kind too (session.go).
package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// Limits of an entry.
const (
	// MaxValueSize is Consul's own limit on a value (kv_max_value_size,
	// 512 KiB).
	MaxValueSize = 512 * 1024
	// MaxKeyLen bounds a key so that namespace/key fits the stores' key
	// column (512 bytes: internal/store/mysql's rkey) for any namespace.
	MaxKeyLen = 512 - 1 - naming.MaxNameLen
	// MaxSessionLen bounds a session id (Consul's are 36-byte UUIDs).
	MaxSessionLen = 128
)

var (
	// ErrInvalid is wrapped by the error of a bad key or value (HTTP 400).
	ErrInvalid = errors.New("kv: invalid")
	// ErrTooLarge is wrapped by the error of a value over MaxValueSize
	// (HTTP 413, as Consul answers).
	ErrTooLarge = errors.New("kv: value too large")
)

// Entry is one key's version. Immutable once in the table.
type Entry struct {
	Namespace   string
	Key         string
	Value       []byte
	Flags       uint64
	CreateIndex int64
	ModifyIndex int64
	LockIndex   uint64
	Session     string

	// created is the create index as stored: 0 when the entry's own put
	// created it. Set by its writer, never changed after (Adopt completes
	// CreateIndex and ModifyIndex once committed).
	created int64
}

// ID is the entry's record key: namespace/key.
func (e *Entry) ID() string { return ID(e.Namespace, e.Key) }

// ID is the record key of key in namespace ns.
func ID(ns, key string) string { return ns + "/" + key }

// CheckKey reports why key cannot be stored, or nil. An empty key is
// refused: Consul's root is a prefix, not a key.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: missing key name", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes; at most %d", ErrInvalid, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalid, key)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: key %q holds a NUL byte", ErrInvalid, key)
	}
	return nil
}

// CheckValue reports why value cannot be stored, or nil.
func CheckValue(value []byte) error { return CheckSize(int64(len(value))) }

// CheckSize reports why a value of n bytes cannot be stored, or nil.
func CheckSize(n int64) error {
	if n > MaxValueSize {
		return fmt.Errorf("%w: the value is %d bytes; at most %d (%d KiB, as Consul)", ErrTooLarge, n, MaxValueSize, MaxValueSize/1024)
	}
	return nil
}

// codecVersion1 is the first byte of an encoded entry.
const codecVersion1 = 1

// encode is the stored form: version, flags, create index (0: the
// revision of this put, which the writer cannot know), lock index,
// session, then the value to the end. The key is the record's.
func (e *Entry) encode() []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+1+len(e.Session)+len(e.Value))
	b = append(b, codecVersion1)
	b = binary.AppendUvarint(b, e.Flags)
	b = binary.AppendUvarint(b, uint64(e.created))
	b = binary.AppendUvarint(b, e.LockIndex)
	b = binary.AppendUvarint(b, uint64(len(e.Session)))
	b = append(b, e.Session...)
	return append(b, e.Value...)
}

// decode reads an entry stored under id at revision rev.
func decode(id string, rev int64, b []byte) (*Entry, error) {
	ns, key, ok := strings.Cut(id, "/")
	if !ok || ns == "" {
		return nil, fmt.Errorf("kv: record key %q is not namespace/key", id)
	}
	if len(b) == 0 || b[0] != codecVersion1 {
		return nil, fmt.Errorf("kv: record %q: unknown encoding (version byte %v)", id, b[:min(len(b), 1)])
	}
	b = b[1:]
	var vals [4]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("kv: record %q: truncated header", id)
		}
		vals[i], b = v, b[n:]
	}
	if vals[3] > MaxSessionLen || vals[3] > uint64(len(b)) {
		return nil, fmt.Errorf("kv: record %q: session of %d bytes", id, vals[3])
	}
	if vals[1] > uint64(rev) {
		return nil, fmt.Errorf("kv: record %q: created at %d, after its revision %d", id, vals[1], rev)
	}
	e := &Entry{Namespace: ns, Key: key, Flags: vals[0], CreateIndex: int64(vals[1]), LockIndex: vals[2], ModifyIndex: rev, created: int64(vals[1])}
	e.Session = string(b[:vals[3]])
	b = b[vals[3]:]
	if len(b) > 0 {
		e.Value = append([]byte(nil), b...)
	}
	if e.CreateIndex == 0 {
		e.CreateIndex = rev
	}
	return e, nil
}
