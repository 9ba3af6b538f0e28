// Package catalog owns the registry's in-memory truth: services, their
// instances, the label index over instance metadata, revisions, the change
// log and the waiters of blocking queries. One writer (the registry's
// committer) applies committed changes in revision order; readers load an
// immutable snapshot and never wait for the writer. The catalog does not
// validate, persist or expire anything: that is the registry's job.
package catalog

import (
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/label"
)

// ServiceKey names a service.
type ServiceKey struct {
	Namespace string
	Name      string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

func (k ServiceKey) less(o ServiceKey) bool {
	if k.Namespace != o.Namespace {
		return k.Namespace < o.Namespace
	}
	return k.Name < o.Name
}

// Instance is one registered endpoint. Once handed to the catalog it is
// immutable: a change is a new *Instance.
type Instance struct {
	ID         string
	Namespace  string
	Service    string
	Host       string
	Port       int
	Protocol   string
	Version    string
	Weight     int
	Isolated   bool
	Metadata   label.Labels
	TTLSeconds int

	Healthy   bool
	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time

	// Live is the heartbeat state shared by every version of the instance.
	Live *Liveness

	enc atomic.Pointer[[]byte] // cached JSON encoding; instances are immutable
}

// Liveness is the mutable heartbeat state of an instance, kept apart from
// the immutable versions so that a heartbeat is one atomic store.
type Liveness struct {
	// Deadline is when the instance turns unhealthy without a heartbeat, in
	// unix nanoseconds; 0 for instances without a TTL.
	Deadline atomic.Int64
	// Sched is the deadline of the TTL timer's entry for this instance (0:
	// none). It belongs to the registry's timer and is guarded by its lock.
	Sched int64
}

// Key returns the instance's service key.
func (in *Instance) Key() ServiceKey { return ServiceKey{in.Namespace, in.Service} }

// Clone returns a mutable copy sharing Metadata and Live, without the cached
// encoding.
func (in *Instance) Clone() *Instance {
	c := &Instance{
		ID: in.ID, Namespace: in.Namespace, Service: in.Service, Host: in.Host, Port: in.Port,
		Protocol: in.Protocol, Version: in.Version, Weight: in.Weight, Isolated: in.Isolated,
		Metadata: in.Metadata, TTLSeconds: in.TTLSeconds, Healthy: in.Healthy, Revision: in.Revision,
		CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, Live: in.Live,
	}
	return c
}

// SameSpec reports whether in and o have the same user-set fields, i.e.
// registering o over in changes nothing.
func (in *Instance) SameSpec(o *Instance) bool {
	if in.ID != o.ID || in.Namespace != o.Namespace || in.Service != o.Service || in.Host != o.Host ||
		in.Port != o.Port || in.Protocol != o.Protocol || in.Version != o.Version || in.Weight != o.Weight ||
		in.Isolated != o.Isolated || in.TTLSeconds != o.TTLSeconds {
		return false
	}
	return in.Metadata.Equal(o.Metadata)
}

// JSON returns the instance's JSON encoding, computed once per instance
// version. The bytes must not be modified.
func (in *Instance) JSON() []byte {
	if p := in.enc.Load(); p != nil {
		return *p
	}
	enc := in.encodeJSON(make([]byte, 0, 320+32*in.Metadata.Len()))
	in.enc.Store(&enc)
	return enc
}

// AppendJSON appends the instance's JSON encoding (the API's instance
// object) to b. The encoding is computed once per instance version.
func (in *Instance) AppendJSON(b []byte) []byte {
	return append(b, in.JSON()...)
}

func (in *Instance) encodeJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, in.ID)
	b = append(b, `,"namespace":`...)
	b = appendString(b, in.Namespace)
	b = append(b, `,"service":`...)
	b = appendString(b, in.Service)
	b = append(b, `,"host":`...)
	b = appendString(b, in.Host)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(in.Port), 10)
	b = append(b, `,"protocol":`...)
	b = appendString(b, in.Protocol)
	b = append(b, `,"version":`...)
	b = appendString(b, in.Version)
	b = append(b, `,"weight":`...)
	b = strconv.AppendInt(b, int64(in.Weight), 10)
	b = append(b, `,"isolated":`...)
	b = strconv.AppendBool(b, in.Isolated)
	b = append(b, `,"metadata":{`...)
	for i := range in.Metadata.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		k, v := in.Metadata.At(i)
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, v)
	}
	b = append(b, `},"ttl_seconds":`...)
	b = strconv.AppendInt(b, int64(in.TTLSeconds), 10)
	b = append(b, `,"healthy":`...)
	b = strconv.AppendBool(b, in.Healthy)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, in.Revision, 10)
	b = append(b, `,"created_at":"`...)
	b = in.CreatedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","updated_at":"`...)
	b = in.UpdatedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does; validation keeps it out of the catalog anyway.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
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
