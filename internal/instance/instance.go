// Package instance owns the instance record, the registry's unit: its type
// and the labels selectors see, its validation and the API's limits, its
// JSON (encoded once per version, and the register body's strict decoder),
// its durable binary codec, and its columns in a SQL store (Columns). A
// field of an instance is defined here and nowhere else: the catalog, the
// registry, the API, the stores and the push engine read it through this
// package. It imports nothing of Sextant's above label and naming.
package instance

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/jsonstring"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Instance is one registered endpoint. Once handed to the catalog it is
// immutable: a change is a new *Instance. Heartbeat deadlines are not part
// of it: they belong to the registry, which judges health.
type Instance struct {
	ID        string
	Namespace string
	Service   string
	Host      string
	Port      int
	Protocol  string
	Version   string
	Weight    int
	Isolated  bool
	Healthy   bool // set by the server, as Revision and the times below
	// TTLExpired is the server's: the instance has a TTL and no heartbeat
	// came within it. Healthy is !TTLExpired and no critical check
	// (SetHealthy). A bool in the bools' padding: free.
	TTLExpired bool
	// DeregisterAfterSeconds is how long the instance may stay unhealthy
	// (its TTL expired) before the server deregisters it; 0: the server's
	// default (the server's --deregister-after). An int32 beside the
	// flags: the struct stays in the 240-byte size class.
	DeregisterAfterSeconds int32
	Metadata               label.Labels
	TTLSeconds             int
	// Checks are the health checks the server runs (check.go); nil for
	// most instances.
	Checks []Check

	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time

	// cache holds what is computed once per version (instances are
	// immutable): one pointer for both, so that Checks fit in the
	// 256-byte size class.
	cache atomic.Pointer[cached]
}

// cached is what an instance version computed of itself: its JSON
// encoding, and its Labels when Version is set.
type cached struct {
	enc    []byte
	labels *label.Labels
}

// setCache stores fn(a copy of the cache) as the instance's cache.
func (in *Instance) setCache(fn func(c *cached)) {
	for {
		old := in.cache.Load()
		c := new(cached)
		if old != nil {
			*c = *old
		}
		fn(c)
		if in.cache.CompareAndSwap(old, c) {
			return
		}
	}
}

// OwnerLabel is the metadata key naming the system an instance is synced
// from ("kubernetes"): such an instance is read-only through Sextant's
// APIs (the registry refuses their writes, naming the owner), and the
// server sets the key, never a client.
const OwnerLabel = "sextant.io/owner"

// VersionLabel is the label an instance's version is selectable as.
const VersionLabel = "version"

// NoPortLabel marks an instance registered without a port (Consul lets a
// service have none: a database listed for discovery by address, an
// external service): its Port is 0, it is listed and answered in DNS and
// the Consul API, and is never an endpoint of a cluster. Only an instance
// carrying it may have port 0, so a port forgotten in Sextant's own API is
// still an error.
const NoPortLabel = "sextant.no-port"

// versionSets shares the labels of instances with equal metadata (by its
// storage: the decoders intern replicas' sets) and version, so that the
// label index recognises them as one set, as it does their metadata.
var versionSets label.WithSets

// Labels are what selectors, the label index, subsets and EDS endpoint
// metadata see: the metadata, plus version=Version when the version is set
// (Istio's subsets select on "version"). The version wins over a metadata
// "version" of another value; registry validation refuses such an
// instance. Metadata itself is what was registered and is stored.
func (in *Instance) Labels() label.Labels {
	if in.Version == "" {
		return in.Metadata
	}
	if c := in.cache.Load(); c != nil && c.labels != nil {
		return *c.labels
	}
	p := versionSets.With(in.Metadata, VersionLabel, in.Version)
	in.setCache(func(c *cached) { c.labels = p })
	return *p
}

// ItemID implements catalog.Item.
func (in *Instance) ItemID() string { return in.ID }

// ItemLabels implements catalog.Item: selectors match Labels.
func (in *Instance) ItemLabels() label.Labels { return in.Labels() }

// ItemGroup implements catalog.GroupItem: the instance's service.
func (in *Instance) ItemGroup() naming.ServiceKey { return in.Key() }

// ItemRevision implements catalog.GroupItem.
func (in *Instance) ItemRevision() int64 { return in.Revision }

// ItemReady implements catalog.Item: healthy and not isolated.
func (in *Instance) ItemReady() bool { return in.Healthy && !in.Isolated }

// Key returns the instance's service key.
func (in *Instance) Key() naming.ServiceKey {
	return naming.ServiceKey{Namespace: in.Namespace, Name: in.Service}
}

// Clone returns a mutable copy sharing Metadata and Checks (replace
// Checks, never modify them), without the cached encoding and labels and
// without the revision: a new version gets its own when applied (and a
// version committed but not applied yet may have it set meanwhile, by
// the follower).
func (in *Instance) Clone() *Instance {
	c := &Instance{
		ID: in.ID, Namespace: in.Namespace, Service: in.Service, Host: in.Host, Port: in.Port,
		Protocol: in.Protocol, Version: in.Version, Weight: in.Weight, Isolated: in.Isolated,
		Metadata: in.Metadata, TTLSeconds: in.TTLSeconds, DeregisterAfterSeconds: in.DeregisterAfterSeconds,
		Healthy: in.Healthy, TTLExpired: in.TTLExpired, Checks: in.Checks,
		CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt,
	}
	return c
}

// SameSpec reports whether in and o have the same user-set fields, i.e.
// registering o over in changes nothing.
func (in *Instance) SameSpec(o *Instance) bool {
	if in.ID != o.ID || in.Namespace != o.Namespace || in.Service != o.Service || in.Host != o.Host ||
		in.Port != o.Port || in.Protocol != o.Protocol || in.Version != o.Version || in.Weight != o.Weight ||
		in.Isolated != o.Isolated || in.TTLSeconds != o.TTLSeconds || in.DeregisterAfterSeconds != o.DeregisterAfterSeconds {
		return false
	}
	if len(in.Checks) != len(o.Checks) {
		return false
	}
	for i := range in.Checks {
		if !in.Checks[i].SameDefinition(&o.Checks[i]) {
			return false
		}
	}
	return in.Metadata.Equal(o.Metadata)
}

// JSON returns the instance's JSON encoding, computed once per instance
// version. The bytes must not be modified.
func (in *Instance) JSON() []byte {
	if c := in.cache.Load(); c != nil && c.enc != nil {
		return c.enc
	}
	enc := in.encodeJSON(make([]byte, 0, 320+32*in.Metadata.Len()))
	in.setCache(func(c *cached) { c.enc = enc })
	return enc
}

// AppendJSON appends the instance's JSON encoding (the API's instance
// object) to b. The encoding is computed once per instance version.
func (in *Instance) AppendJSON(b []byte) []byte {
	return append(b, in.JSON()...)
}

func (in *Instance) encodeJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonstring.Append(b, in.ID)
	b = append(b, `,"namespace":`...)
	b = jsonstring.Append(b, in.Namespace)
	b = append(b, `,"service":`...)
	b = jsonstring.Append(b, in.Service)
	b = append(b, `,"host":`...)
	b = jsonstring.Append(b, in.Host)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(in.Port), 10)
	b = append(b, `,"protocol":`...)
	b = jsonstring.Append(b, in.Protocol)
	b = append(b, `,"version":`...)
	b = jsonstring.Append(b, in.Version)
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
		b = jsonstring.Append(b, k)
		b = append(b, ':')
		b = jsonstring.Append(b, v)
	}
	b = append(b, `},"ttl_seconds":`...)
	b = strconv.AppendInt(b, int64(in.TTLSeconds), 10)
	if in.DeregisterAfterSeconds != 0 {
		// Only when set: the answers of instances without one keep
		// their bytes.
		b = append(b, `,"deregister_after_seconds":`...)
		b = strconv.AppendInt(b, int64(in.DeregisterAfterSeconds), 10)
	}
	if len(in.Checks) > 0 {
		// Only when set, as above.
		b = append(b, `,"checks":`...)
		b = appendChecksJSON(b, in.Checks)
	}
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
