package instance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
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
// Version 3 adds health checks (after the metadata) and the TTLExpired
// flag; it is written only for instances with checks, so every other
// record keeps its version 1 or 2 bytes. In versions 1 and 2 an unhealthy
// instance is one whose TTL expired.
const (
	codecVersion  = 1
	codecVersion2 = 2
	codecVersion3 = 3
)

const (
	flagIsolated   = 1 << 0
	flagUnhealthy  = 1 << 1
	flagTTLExpired = 1 << 2 // version 3 only
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("instance: corrupt record")

// AppendBinary appends the durable encoding of in to b.
func (in *Instance) AppendBinary(b []byte) []byte {
	version := byte(codecVersion)
	switch {
	case len(in.Checks) > 0:
		version = codecVersion3
	case in.DeregisterAfterSeconds != 0:
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
	if version == codecVersion3 && in.TTLExpired {
		flags |= flagTTLExpired
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(in.TTLSeconds))
	if version >= codecVersion2 {
		b = binary.AppendUvarint(b, uint64(in.DeregisterAfterSeconds))
	}
	b = binary.AppendVarint(b, in.CreatedAt.UnixNano())
	b = binary.AppendVarint(b, in.UpdatedAt.UnixNano())
	b = binary.AppendUvarint(b, uint64(in.Metadata.Len()))
	b = in.Metadata.AppendLengthPrefixed(b)
	if version == codecVersion3 {
		b = appendChecksBinary(b, in.Checks)
	}
	return b
}

// appendChecksBinary appends checks: a count, then each check's strings,
// headers, flags, durations, thresholds and state.
func appendChecksBinary(b []byte, checks []Check) []byte {
	appendString := func(b []byte, s string) []byte {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(checks)))
	for i := range checks {
		c := &checks[i]
		for _, s := range [...]string{c.ID, c.Name, c.Type, c.Target, c.GRPCService, c.Method} {
			b = appendString(b, s)
		}
		names := make([]string, 0, len(c.Header))
		for n := range c.Header {
			names = append(names, n)
		}
		slices.Sort(names)
		b = binary.AppendUvarint(b, uint64(len(names)))
		for _, n := range names {
			b = appendString(b, n)
			b = binary.AppendUvarint(b, uint64(len(c.Header[n])))
			for _, v := range c.Header[n] {
				b = appendString(b, v)
			}
		}
		var flags byte
		if c.TLSSkipVerify {
			flags |= 1
		}
		b = append(b, flags)
		for _, d := range [...]time.Duration{c.Interval, c.Timeout, c.TTL, c.DeregisterCriticalServiceAfter} {
			b = binary.AppendUvarint(b, uint64(d))
		}
		b = binary.AppendUvarint(b, uint64(c.SuccessBeforePassing))
		b = binary.AppendUvarint(b, uint64(c.FailuresBeforeCritical))
		b = appendString(b, c.Status)
		b = appendString(b, c.Output)
		b = binary.AppendVarint(b, c.ChangedAt.UnixNano())
	}
	return b
}

// checks decodes appendChecksBinary's encoding.
func (d *decoder) checks() []Check {
	n := d.uvarint("check count", MaxChecks)
	if d.err != nil || n == 0 {
		if d.err == nil {
			d.err = fmt.Errorf("%w: version 3 without checks", ErrCorrupt)
		}
		return nil
	}
	out := make([]Check, n)
	for i := range out {
		c := &out[i]
		c.ID = string(d.bytes("check id"))
		c.Name = string(d.bytes("check name"))
		c.Type = storedStrings.get(d.bytes("check type"))
		c.Target = string(d.bytes("check target"))
		c.GRPCService = string(d.bytes("check grpc service"))
		c.Method = storedStrings.get(d.bytes("check method"))
		if h := d.uvarint("check header count", MaxCheckHeaders); h > 0 {
			c.Header = make(map[string][]string, h)
			for range h {
				name := string(d.bytes("check header name"))
				nv := d.uvarint("check header values", 1<<16)
				if nv > uint64(len(d.b)) {
					d.err = fmt.Errorf("%w: check header values past the end", ErrCorrupt)
					return nil
				}
				vs := make([]string, nv)
				for j := range vs {
					vs[j] = string(d.bytes("check header value"))
				}
				c.Header[name] = vs
			}
		}
		if d.err == nil {
			if len(d.b) == 0 || d.b[0]&^1 != 0 {
				d.err = fmt.Errorf("%w: bad check flags", ErrCorrupt)
			} else {
				c.TLSSkipVerify = d.b[0]&1 != 0
				d.b = d.b[1:]
			}
		}
		for _, p := range [...]*time.Duration{&c.Interval, &c.Timeout, &c.TTL, &c.DeregisterCriticalServiceAfter} {
			*p = time.Duration(d.uvarint("check duration", math.MaxInt64))
		}
		c.SuccessBeforePassing = int(d.uvarint("check threshold", MaxThreshold))
		c.FailuresBeforeCritical = int(d.uvarint("check threshold", MaxThreshold))
		c.Status = storedStrings.get(d.bytes("check status"))
		c.Output = string(d.bytes("check output"))
		c.ChangedAt = time.Unix(0, d.varint("check changed_at")).UTC()
		if d.err != nil {
			return nil
		}
	}
	return out
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
	if len(b) == 0 || b[0] < codecVersion || b[0] > codecVersion3 {
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
		known := byte(flagIsolated | flagUnhealthy)
		if version == codecVersion3 {
			known |= flagTTLExpired
		}
		if len(d.b) == 0 || d.b[0]&^known != 0 {
			d.err = fmt.Errorf("%w: bad flags", ErrCorrupt)
		} else {
			in.Isolated = d.b[0]&flagIsolated != 0
			in.Healthy = d.b[0]&flagUnhealthy == 0
			in.TTLExpired = !in.Healthy // versions 1 and 2
			if version == codecVersion3 {
				in.TTLExpired = d.b[0]&flagTTLExpired != 0
			}
			d.b = d.b[1:]
		}
	}
	in.TTLSeconds = int(d.uvarint("ttl", 1<<31))
	if version >= codecVersion2 {
		in.DeregisterAfterSeconds = int32(d.uvarint("deregister_after", math.MaxInt32))
		if d.err == nil && in.DeregisterAfterSeconds == 0 && version == codecVersion2 {
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
	if version == codecVersion3 {
		in.Checks = d.checks()
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return in, nil
}
