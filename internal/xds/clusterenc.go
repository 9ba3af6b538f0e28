package xds

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sextant-mesh/sextant/internal/config"
)

// ClusterEncoder encodes clusters (the bytes Encode(Cluster(name, p))
// gives) without building and marshalling a message per cluster: the
// clusters of one policy differ only in their name, their EDS service name
// and their "sextant" metadata, so everything else is encoded once per
// policy (a template) and each cluster's own fields are spliced in where
// the deterministic encoding puts them. In a full recomputation
// the subsets of a service, and the services without a policy of their
// own, share templates. Not safe for concurrent use: one per goroutine.
type ClusterEncoder struct {
	templates []clusterTemplate
	evict     int // the next template to replace once there are maxTemplates
}

// maxTemplates bounds the templates kept (and searched per cluster): the
// clusters of one service come together, and the policy most services
// share stays unless many others come between.
const maxTemplates = 8

type clusterTemplate struct {
	scope string // the service, for policies whose encoding may depend on it (TLS)
	p     config.Policy
	bytes []byte // Encode(Cluster) without name, eds_cluster_config, metadata
}

// Field numbers of envoy.config.cluster.v3.Cluster spliced by hand.
const (
	clusterName       = 1
	clusterEDSConfig  = 3 // EdsClusterConfig{eds_config = 1, service_name = 2}
	clusterMetadata   = 25
	edsConfigSource   = 1
	edsServiceName    = 2
	metadataFilter    = 1 // Metadata.filter_metadata, map<string, Struct>
	structFields      = 1 // Struct.fields, map<string, Value>
	valueStringValue  = 3 // Value.string_value
	mapEntryKey       = 1
	mapEntryValue     = 2
	sextantMetadataNS = "sextant"
)

// adsSourceBytes is adsSource encoded, the eds_config of every cluster.
var adsSourceBytes = sync.OnceValue(func() []byte {
	b, err := Encode(adsSource)
	if err != nil {
		panic(err)
	}
	return b
})

// Encode returns the encoding of Cluster(name, p).
func (ce *ClusterEncoder) Encode(name string, p config.Policy) ([]byte, error) {
	svc, subset, ok := clusterService(name)
	if !ok {
		return Encode(Cluster(name, p))
	}
	// A cluster's TLS settings may depend on where it is (its namespace's
	// identity, its service's name): such templates are per service.
	scope := ""
	if p.TLS != nil {
		scope = svc
	}
	var tmpl []byte
	for i := range ce.templates {
		if t := &ce.templates[i]; t.p == p && t.scope == scope {
			tmpl = t.bytes
			break
		}
	}
	if tmpl == nil {
		// A cluster of this policy (and namespace) with the spliced fields
		// taken out.
		c := Cluster(name, p)
		c.Name, c.EdsClusterConfig, c.Metadata = "", nil, nil
		b, err := Encode(c)
		if err != nil {
			return nil, err
		}
		tmpl = b
		t := clusterTemplate{scope: scope, p: p, bytes: b}
		if len(ce.templates) < maxTemplates {
			ce.templates = append(ce.templates, t)
		} else {
			ce.templates[ce.evict] = t
			ce.evict = (ce.evict + 1) % maxTemplates
		}
	}
	return spliceCluster(tmpl, name, svc, subset)
}

// spliceCluster inserts a cluster's name, eds_cluster_config and metadata
// into its policy's template as protobuf-go's deterministic encoding orders
// them: the regular fields by number, then the oneof fields (checked
// against the marshalled message by TestClusterEncoder).
func spliceCluster(tmpl []byte, name, svc, subset string) ([]byte, error) {
	ads := adsSourceBytes()
	edsLen := protowire.SizeTag(edsConfigSource) + protowire.SizeBytes(len(ads)) +
		protowire.SizeTag(edsServiceName) + protowire.SizeBytes(len(name))
	// Metadata{filter_metadata: {"sextant": Struct{fields: {"service": svc,
	// "subset": subset}}}}: map entries are key then value, keys in order
	// ("service" < "subset"), no subset for the whole service.
	fieldLen := func(k, v string) int {
		val := protowire.SizeTag(valueStringValue) + protowire.SizeBytes(len(v))
		return protowire.SizeTag(mapEntryKey) + protowire.SizeBytes(len(k)) + protowire.SizeTag(mapEntryValue) + protowire.SizeBytes(val)
	}
	stLen := protowire.SizeTag(structFields) + protowire.SizeBytes(fieldLen("service", svc))
	if subset != "" {
		stLen += protowire.SizeTag(structFields) + protowire.SizeBytes(fieldLen("subset", subset))
	}
	entryLen := protowire.SizeTag(mapEntryKey) + protowire.SizeBytes(len(sextantMetadataNS)) + protowire.SizeTag(mapEntryValue) + protowire.SizeBytes(stLen)
	mdLen := protowire.SizeTag(metadataFilter) + protowire.SizeBytes(entryLen)

	out := make([]byte, 0, len(tmpl)+len(name)+edsLen+mdLen+16)
	appendField := func(out []byte, k, v string) []byte {
		out = protowire.AppendTag(out, structFields, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(fieldLen(k, v)))
		out = appendString(out, mapEntryKey, k)
		out = protowire.AppendTag(out, mapEntryValue, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(protowire.SizeTag(valueStringValue)+protowire.SizeBytes(len(v))))
		return appendString(out, valueStringValue, v)
	}
	next, prev := 0, protowire.Number(0)
	extra := [...]protowire.Number{clusterName, clusterEDSConfig, clusterMetadata}
	put := func(upTo protowire.Number) {
		for ; next < len(extra) && extra[next] < upTo; next++ {
			switch extra[next] {
			case clusterName:
				out = appendString(out, clusterName, name)
			case clusterEDSConfig:
				out = protowire.AppendTag(out, clusterEDSConfig, protowire.BytesType)
				out = protowire.AppendVarint(out, uint64(edsLen))
				out = appendBytes(out, edsConfigSource, ads)
				out = appendString(out, edsServiceName, name)
			case clusterMetadata:
				out = protowire.AppendTag(out, clusterMetadata, protowire.BytesType)
				out = protowire.AppendVarint(out, uint64(mdLen))
				out = protowire.AppendTag(out, metadataFilter, protowire.BytesType)
				out = protowire.AppendVarint(out, uint64(entryLen))
				out = appendString(out, mapEntryKey, sextantMetadataNS)
				out = protowire.AppendTag(out, mapEntryValue, protowire.BytesType)
				out = protowire.AppendVarint(out, uint64(stLen))
				out = appendField(out, "service", svc)
				if subset != "" {
					out = appendField(out, "subset", subset)
				}
			}
		}
	}
	for b := tmpl; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("xds: cluster template: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("xds: cluster template: %w", protowire.ParseError(m))
		}
		if num == clusterName || num == clusterEDSConfig || num == clusterMetadata {
			return nil, fmt.Errorf("xds: cluster template holds field %d", num)
		}
		if num < prev {
			// Oneof fields (the discovery type, ...) come after the
			// others, whatever their numbers.
			put(protowire.Number(1 << 29))
		}
		prev = num
		put(num)
		out = append(out, b[:n+m]...)
		b = b[n+m:]
	}
	put(protowire.Number(1 << 29))
	return out, nil
}
