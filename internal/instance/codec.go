package instance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/label"
)

// The durable form of an instance: a version byte, then varint-prefixed
// fields. The revision is not in it: the store keeps it beside the record.
// Health is a flag, so that every server of a cluster agrees on it; a single
// server may start everything healthy again after a restart (with a grace
// period: Options.HealthyAtLoad). Version 2 adds the removal delay after
// the TTL; it is written only for instances that set one, so every other
// record keeps version 1's bytes (and an older binary reads them).
const (
	codecVersion  = 1
	codecVersion2 = 2
)

const (
	flagIsolated  = 1 << 0
	flagUnhealthy = 1 << 1
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("instance: corrupt record")

// AppendBinary appends the durable encoding of in to b.
func (in *Instance) AppendBinary(b []byte) []byte {
	version := byte(codecVersion)
	if in.DeregisterAfterSeconds != 0 {
		version = codecVersion2
	}
	b = append(b, version)
	for _, s := range [...]string{in.ID, in.Namespace, in.Service, in.Host, in.Protocol, in.Version} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(in.Port))
	b = binary.AppendUvarint(b, uint64(in.Weight))
	flags := byte(0)
	if in.Isolated {
		flags |= flagIsolated
	}
	if !in.Healthy {
		flags |= flagUnhealthy
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(in.TTLSeconds))
	if version == codecVersion2 {
		b = binary.AppendUvarint(b, uint64(in.DeregisterAfterSeconds))
	}
	b = binary.AppendVarint(b, in.CreatedAt.UnixNano())
	b = binary.AppendVarint(b, in.UpdatedAt.UnixNano())
	b = binary.AppendUvarint(b, uint64(in.Metadata.Len()))
	return in.Metadata.AppendLengthPrefixed(b)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(what string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > max {
		d.err = fmt.Errorf("%w: bad %s", ErrCorrupt, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad %s", ErrCorrupt, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what, 1<<32)
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s length %d past the end", ErrCorrupt, what, n)
	}
	if d.err != nil {
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

// storedSets holds the metadata sets of the instances decoded lately
// (label.Interner): a restart reads replicas' equal sets one after another.
var storedSets = label.NewInterner()

// storedStrings holds the namespaces, services, protocols and versions of
// the instances decoded lately: a restart reads a service's instances one
// after another, and 205,000 instances of a few services held 820,000
// copies of a few strings.
var storedStrings = recentStrings{seed: maphash.MakeSeed()}

// recentStrings is a table of strings keyed by their bytes' hash, in
// buckets of recentWays, newest first, safe for concurrent use (the load
// decodes on every core). A miss puts the string first in its bucket and
// drops the oldest, so a field with more distinct values than slots costs
// what it cost before, plus the slot's pointer. Buckets, not one slot per
// hash: a service's four strings fell into one slot often enough (the hash
// seed is random per process) to lose their sharing for a whole restart.
// Concurrent misses may drop or repeat an entry: only sharing suffers.
type recentStrings struct {
	seed  maphash.Seed
	slots [256]atomic.Pointer[string]
}

const recentWays = 4

func (r *recentStrings) get(b []byte) string {
	i := maphash.Bytes(r.seed, b) % uint64(len(r.slots)/recentWays) * recentWays
	bucket := r.slots[i : i+recentWays]
	for j := range bucket {
		if p := bucket[j].Load(); p != nil && *p == string(b) {
			return *p
		}
	}
	s := string(b)
	for j := recentWays - 1; j > 0; j-- {
		bucket[j].Store(bucket[j-1].Load())
	}
	bucket[0].Store(&s)
	return s
}

// Decode decodes a record written by AppendBinary, at revision rev.
func Decode(b []byte, rev int64) (*Instance, error) {
	if len(b) == 0 || b[0] != codecVersion && b[0] != codecVersion2 {
		return nil, fmt.Errorf("%w: unknown version", ErrCorrupt)
	}
	version := b[0]
	d := decoder{b: b[1:]}
	in := &Instance{Revision: rev}
	id := d.bytes("id")
	in.Namespace = storedStrings.get(d.bytes("namespace"))
	in.Service = storedStrings.get(d.bytes("service"))
	host := d.bytes("host")
	in.Protocol = storedStrings.get(d.bytes("protocol"))
	in.Version = storedStrings.get(d.bytes("version"))
	// One allocation for the two strings of the instance's own.
	idHost := string(id) + string(host)
	in.ID, in.Host = idHost[:len(id)], idHost[len(id):]
	in.Port = int(d.uvarint("port", 65535))
	in.Weight = int(d.uvarint("weight", 65535))
	if d.err == nil {
		if len(d.b) == 0 || d.b[0]&^(flagIsolated|flagUnhealthy) != 0 {
			d.err = fmt.Errorf("%w: bad flags", ErrCorrupt)
		} else {
			in.Isolated = d.b[0]&flagIsolated != 0
			in.Healthy = d.b[0]&flagUnhealthy == 0
			d.b = d.b[1:]
		}
	}
	in.TTLSeconds = int(d.uvarint("ttl", 1<<31))
	if version == codecVersion2 {
		in.DeregisterAfterSeconds = int32(d.uvarint("deregister_after", math.MaxInt32))
		if d.err == nil && in.DeregisterAfterSeconds == 0 {
			d.err = fmt.Errorf("%w: version 2 without a removal delay", ErrCorrupt)
		}
	}
	in.CreatedAt = time.Unix(0, d.varint("created_at")).UTC()
	in.UpdatedAt = time.Unix(0, d.varint("updated_at")).UTC()
	n := d.uvarint("metadata count", 1<<16)
	if d.err == nil && n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: metadata count %d past the end", ErrCorrupt, n)
	}
	if d.err == nil && n > 0 {
		// The rest of the record is the pairs: replicas' equal sets meet
		// there and are held once, as the API's decoder holds them.
		raw := d.b
		var buf [16]label.BytePair
		pairs := buf[:0]
		for range n {
			k := d.bytes("metadata key")
			v := d.bytes("metadata value")
			if d.err != nil {
				break
			}
			pairs = append(pairs, label.BytePair{Key: k, Value: v})
		}
		if d.err == nil {
			var ok bool
			if in.Metadata, ok = storedSets.FromBytePairs(raw[:len(raw)-len(d.b)], pairs); !ok {
				d.err = fmt.Errorf("%w: metadata keys not in ascending order", ErrCorrupt)
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return in, nil
}
