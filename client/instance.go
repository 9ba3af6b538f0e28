package client

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// DefaultNamespace is the namespace of an instance that names none.
const DefaultNamespace = "default"

// DefaultWeight is the weight of an instance registered without one.
const DefaultWeight = 100

// Instance is one registered endpoint of a service. The fields up to
// TTLSeconds are what you register; Healthy, Revision, CreatedAt and
// UpdatedAt are set by the server and not sent on register.
type Instance struct {
	// ID is optional on register; the server derives one from
	// namespace/service/host:port when it is empty.
	ID        string `json:"id,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Service   string `json:"service"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Protocol  string `json:"protocol,omitempty"`
	Version   string `json:"version,omitempty"`
	// Weight is a pointer because 0 is meaningful (never picked by weighted
	// balancers) and differs from "unset" (the server's default, 100).
	// Use Weight(n) to set it.
	Weight   *int              `json:"weight,omitempty"`
	Isolated bool              `json:"isolated,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// TTLSeconds: 0 means no heartbeat needed; otherwise the instance turns
	// unhealthy after 3 x TTLSeconds without a heartbeat.
	TTLSeconds int `json:"ttl_seconds,omitempty"`

	Healthy   bool      `json:"healthy"`
	Revision  uint64    `json:"revision,omitzero"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Weight returns a pointer to w, for Instance.Weight.
func Weight(w int) *int { return &w }

// EffectiveWeight is the instance's weight, DefaultWeight when unset.
func (in *Instance) EffectiveWeight() int {
	if in.Weight == nil {
		return DefaultWeight
	}
	return *in.Weight
}

// AppendRegisterBody appends the JSON body of a register request,
// {"instances":[...]}, to dst. Only the fields a client sets are written.
// Load generators can encode a body once and send it many times.
func AppendRegisterBody(dst []byte, instances ...Instance) []byte {
	dst = append(dst, `{"instances":[`...)
	for i := range instances {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendInstance(dst, &instances[i])
	}
	return append(dst, "]}"...)
}

// AppendInstance appends the register form of one instance as a JSON object.
// It is the hot path of registration, so it writes JSON by hand instead of
// through reflection; the output decodes to the same Instance.
func AppendInstance(dst []byte, in *Instance) []byte {
	dst = append(dst, '{')
	if in.ID != "" {
		dst = append(dst, `"id":`...)
		dst = appendString(dst, in.ID)
		dst = append(dst, ',')
	}
	if in.Namespace != "" {
		dst = append(dst, `"namespace":`...)
		dst = appendString(dst, in.Namespace)
		dst = append(dst, ',')
	}
	dst = append(dst, `"service":`...)
	dst = appendString(dst, in.Service)
	dst = append(dst, `,"host":`...)
	dst = appendString(dst, in.Host)
	dst = append(dst, `,"port":`...)
	dst = strconv.AppendInt(dst, int64(in.Port), 10)
	if in.Protocol != "" {
		dst = append(dst, `,"protocol":`...)
		dst = appendString(dst, in.Protocol)
	}
	if in.Version != "" {
		dst = append(dst, `,"version":`...)
		dst = appendString(dst, in.Version)
	}
	if in.Weight != nil {
		dst = append(dst, `,"weight":`...)
		dst = strconv.AppendInt(dst, int64(*in.Weight), 10)
	}
	if in.Isolated {
		dst = append(dst, `,"isolated":true`...)
	}
	if len(in.Metadata) > 0 {
		dst = append(dst, `,"metadata":{`...)
		first := true
		for k, v := range in.Metadata {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendString(dst, v)
		}
		dst = append(dst, '}')
	}
	if in.TTLSeconds != 0 {
		dst = append(dst, `,"ttl_seconds":`...)
		dst = strconv.AppendInt(dst, int64(in.TTLSeconds), 10)
	}
	return append(dst, '}')
}

// AppendIDsBody appends {"ids":[...]}, the body of heartbeat and batch
// deregister requests.
func AppendIDsBody(dst []byte, ids ...string) []byte {
	dst = append(dst, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, id)
	}
	return append(dst, "]}"...)
}

const hexDigits = "0123456789abcdef"

// safe[b] is true for ASCII bytes that need no escaping in a JSON string.
var safe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// appendString appends s as a quoted JSON string, escaping as encoding/json
// does except for HTML characters (these bodies never reach a browser):
// control characters, quotes and backslashes are escaped, invalid UTF-8
// becomes U+FFFD, and U+2028/U+2029 are escaped.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if safe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
