package instance

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"unicode/utf8"

	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Limits of the API contract.
const (
	MaxBatch      = 10000
	MaxNameLen    = naming.MaxNameLen
	MaxIDLen      = 128
	MaxHostLen    = 253
	MaxShortField = 64
	MaxMetadata   = 64
	MaxValueLen   = 4096
	MaxTTLSeconds = 3600
	// MaxDeregisterAfter bounds deregister_after_seconds: 30 days.
	MaxDeregisterAfter = 30 * 24 * 3600
	MaxWeight          = 65535
	DefaultWeight      = 100
	DefaultNS          = naming.DefaultNamespace
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("instance: invalid argument")

// FieldError names the field of a request that is wrong. Index is the
// position of the instance or id in its batch, or -1.
type FieldError struct {
	Index int
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "instance: " + e.Msg
	}
	if e.Index >= 0 {
		return fmt.Sprintf("instance: [%d].%s: %s", e.Index, e.Field, e.Msg)
	}
	return fmt.Sprintf("instance: %s: %s", e.Field, e.Msg)
}

func (e *FieldError) Unwrap() error { return ErrInvalid }

// NewFieldError is the error of field of instance i of a batch (-1: none).
func NewFieldError(i int, field, format string, args ...any) error {
	return &FieldError{Index: i, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidID reports whether s is an instance id: 1..128 chars of [A-Za-z0-9._:-].
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !naming.Alnum(c) && !(c >= 'A' && c <= 'Z') && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// validHost accepts an IP address or a DNS name (labels of letters, digits,
// '-' and '_', at most 63 bytes, not starting or ending with '-').
func validHost(s string) bool {
	if len(s) == 0 || len(s) > MaxHostLen {
		return false
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	labelLen := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if labelLen == 0 || labelLen > 63 || s[i-1] == '-' || s[i-labelLen] == '-' {
				return false
			}
			labelLen = 0
			continue
		}
		c := s[i]
		if !naming.Alnum(c) && !(c >= 'A' && c <= 'Z') && c != '-' && c != '_' {
			return false
		}
		labelLen++
	}
	return true
}

// DefaultID is the id of an instance registered without one: the first 16
// bytes of sha256(namespace/service/host:port), in hex.
func DefaultID(ns, service, host string, port int) string {
	sum := sha256.Sum256([]byte(ns + "/" + service + "/" + host + ":" + strconv.Itoa(port)))
	return hex.EncodeToString(sum[:16])
}

// Prepare validates an instance given to Register, fills defaults (namespace,
// id) and returns the first error. i is its index in the batch (-1 if none).
// The weight default (100) is the caller's: it alone knows if weight was sent.
func Prepare(i int, in *Instance) error {
	if in.Namespace == "" {
		in.Namespace = DefaultNS
	}
	if !naming.ValidName(in.Namespace) {
		return NewFieldError(i, "namespace", "%q is not a valid name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", in.Namespace)
	}
	if in.Service == "" {
		return NewFieldError(i, "service", "required")
	}
	if !naming.ValidName(in.Service) {
		return NewFieldError(i, "service", "%q is not a valid name: 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit", in.Service)
	}
	if in.Host == "" {
		return NewFieldError(i, "host", "required")
	}
	if !validHost(in.Host) {
		return NewFieldError(i, "host", "%q is not an IP address or DNS name of at most 253 bytes", in.Host)
	}
	if in.Port < 1 || in.Port > 65535 {
		if _, portless := in.Metadata.Get(NoPortLabel); !portless || in.Port != 0 {
			return NewFieldError(i, "port", "%d is out of range 1..65535", in.Port)
		}
	}
	if in.ID == "" {
		in.ID = DefaultID(in.Namespace, in.Service, in.Host, in.Port)
	} else if !ValidID(in.ID) {
		return NewFieldError(i, "id", "%q is not a valid id: 1..128 chars of [A-Za-z0-9._:-]", in.ID)
	}
	if len(in.Protocol) > MaxShortField || !utf8.ValidString(in.Protocol) {
		return NewFieldError(i, "protocol", "must be at most %d bytes of UTF-8", MaxShortField)
	}
	if len(in.Version) > MaxShortField || !utf8.ValidString(in.Version) {
		return NewFieldError(i, "version", "must be at most %d bytes of UTF-8", MaxShortField)
	}
	for _, f := range [...]struct{ name, v string }{{"protocol", in.Protocol}, {"version", in.Version}} {
		if at := controlAt(f.v); at >= 0 {
			return NewFieldError(i, f.name, "holds a control character (%q at byte %d): text without control characters", f.v[at:at+1+int(f.v[at]>>7)], at)
		}
	}
	if in.Weight < 0 || in.Weight > MaxWeight {
		return NewFieldError(i, "weight", "%d is out of range 0..%d", in.Weight, MaxWeight)
	}
	if err := prepareMetadata(i, in.Metadata); err != nil {
		return err
	}
	// The version is the label "version" (Instance.Labels): a
	// metadata "version" saying otherwise would make selectors and the
	// VERSION column disagree; one given alone is the version (Istio's
	// meaning of the label), so every answer and column shows it.
	if v, ok := in.Metadata.Get(VersionLabel); ok {
		if in.Version != "" && v != in.Version {
			return NewFieldError(i, "metadata."+VersionLabel, "%q differs from version %q: the version is selectable as the label %q, so metadata may repeat it but not contradict it", v, in.Version, VersionLabel)
		}
		if in.Version == "" {
			if len(v) > MaxShortField {
				return NewFieldError(i, "metadata."+VersionLabel, "must be at most %d bytes: it is the instance's version", MaxShortField)
			}
			in.Version = v
		}
	}
	if in.TTLSeconds < 0 || in.TTLSeconds > MaxTTLSeconds {
		return NewFieldError(i, "ttl_seconds", "%d is out of range: 0 (no heartbeat) or 1..%d", in.TTLSeconds, MaxTTLSeconds)
	}
	if in.DeregisterAfterSeconds < 0 || in.DeregisterAfterSeconds > MaxDeregisterAfter {
		return NewFieldError(i, "deregister_after_seconds", "%d is out of range: 0 (the server's default) or 1..%d", in.DeregisterAfterSeconds, MaxDeregisterAfter)
	}
	if in.DeregisterAfterSeconds > 0 && in.TTLSeconds == 0 {
		return NewFieldError(i, "deregister_after_seconds", "needs ttl_seconds: an instance without a TTL never turns unhealthy, so it would never be removed (a check removes its instance with deregister_critical_service_after)")
	}
	return prepareChecks(i, in)
}

// checkedMetadata holds metadata sets that passed prepareMetadata: the
// decoders share equal sets (label.Interner), and a batch of replicas'
// instances was checked pair by pair once per instance (~6% of the
// server's instructions under batch registers).
var checkedMetadata label.CheckedSets

func prepareMetadata(i int, md label.Labels) error {
	if checkedMetadata.Has(md) {
		return nil
	}
	if md.Len() > MaxMetadata {
		return NewFieldError(i, "metadata", "%d entries, at most %d allowed", md.Len(), MaxMetadata)
	}
	for j := range md.Len() {
		k, v := md.At(j)
		if !label.ValidKey(k) {
			return NewFieldError(i, "metadata", "key %q must be 1..128 bytes of [A-Za-z0-9._/-]", k)
		}
		if len(v) > MaxValueLen {
			return NewFieldError(i, "metadata."+k, "value must be at most %d bytes of UTF-8", MaxValueLen)
		}
		if at := controlAt(v); at >= 0 {
			return NewFieldError(i, "metadata."+k, "value holds a control character (%q at byte %d): values are text without control characters", v[at:at+1+int(v[at]>>7)], at)
		}
	}
	// The keys are ASCII: the values are valid UTF-8 if all the pairs'
	// bytes are, checked at once (a call per value was ~1,000 instructions
	// per instance of 16 pairs).
	if !md.ValidUTF8() {
		for j := range md.Len() {
			if k, v := md.At(j); !utf8.ValidString(v) {
				return NewFieldError(i, "metadata."+k, "value must be at most %d bytes of UTF-8", MaxValueLen)
			}
		}
	}
	checkedMetadata.Add(md)
	return nil
}

// CheckIDs validates a batch of ids for deregister or heartbeat.
func CheckIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > MaxBatch {
		return NewFieldError(-1, "ids", "%d ids, want 1..%d", len(ids), MaxBatch)
	}
	for i, id := range ids {
		if !ValidID(id) {
			return &FieldError{Index: -1, Field: "ids[" + strconv.Itoa(i) + "]", Msg: fmt.Sprintf("%q is not a valid id", id)}
		}
	}
	return nil
}

// controlAt is the offset of the first control character of s (C0, DEL,
// or C1 in UTF-8: 0xC2 0x80..0x9F), or -1. A NUL or an escape sequence in
// a value would reach terminals, logs and the DNS answers that print it.
func controlAt(s string) int {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return i
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f:
			return i
		}
	}
	return -1
}
