package httpapi

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/jsonstring"
	"github.com/sextant-mesh/sextant/internal/label"
)

// prometheusSD answers Prometheus' HTTP service discovery (http_sd_configs):
// a JSON array of target groups, one per instance, each with its
// __meta_sextant_* labels. Sorted by namespace, service and id.
func (a *API) prometheusSD(w http.ResponseWriter, r *http.Request, reg *backend) error {
	v := r.URL.Query()
	ns, name, err := namespaceAndService(v)
	if err != nil {
		return err
	}
	q, err := parseQuery(v)
	if err != nil {
		return err
	}
	if v.Get("healthy_only") == "" {
		q.healthyOnly = true // scrape what serves, unless asked otherwise
	}
	readable, err := readableFilter(r, acl.Instances, ns)
	if err != nil {
		return err
	}
	snap := reg.inst.Instances().Snapshot()
	svcs := snap.Groups(ns)
	// Encoded per request, not memoised per service version as a service
	// query is: Prometheus polls every refresh_interval (default 1m), and a
	// memo would keep a second encoding of every instance in memory.
	streamJSON(w, snap.Revision(), func(bw *bufio.Writer) {
		bp := bufPool.Get().(*[]byte)
		b := *bp
		bw.WriteByte('[')
		first := true
		for _, svc := range svcs {
			if name != "" && svc.Key.Name != name {
				continue
			}
			if readable != nil && !readable.Allows(svc.Key.Namespace) {
				continue
			}
			for _, in := range svc.Select(q.sel, q.healthyOnly) {
				b = b[:0]
				if !first {
					b = append(b, ',')
				}
				first = false
				b = appendTargetGroup(b, in)
				bw.Write(b)
			}
		}
		bw.WriteByte(']')
		*bp = b[:0]
		bufPool.Put(bp)
	})
	return nil
}

// sdPrefix begins the name of every label of a target group; mdPrefix
// those of the metadata.
const (
	sdPrefix = "__meta_sextant_"
	mdPrefix = sdPrefix + "metadata_"
)

// appendTargetGroup appends in as one Prometheus target group:
// {"targets":["host:port"],"labels":{...}}.
func appendTargetGroup(b []byte, in *instance.Instance) []byte {
	b = append(b, `{"targets":[`...)
	b = appendTarget(b, in.Host, in.Port)
	b = append(b, `],"labels":{"`+sdPrefix+`namespace":`...)
	b = jsonstring.Append(b, in.Namespace)
	b = append(b, `,"`+sdPrefix+`service":`...)
	b = jsonstring.Append(b, in.Service)
	b = append(b, `,"`+sdPrefix+`instance_id":`...)
	b = jsonstring.Append(b, in.ID)
	b = append(b, `,"`+sdPrefix+`protocol":`...)
	b = jsonstring.Append(b, in.Protocol)
	b = append(b, `,"`+sdPrefix+`version":`...)
	b = jsonstring.Append(b, in.Version)
	b = append(b, `,"`+sdPrefix+`weight":"`...)
	b = strconv.AppendInt(b, int64(in.Weight), 10)
	b = append(b, `","`+sdPrefix+`healthy":"`...)
	b = strconv.AppendBool(b, in.Healthy)
	b = append(b, `","`+sdPrefix+`isolated":"`...)
	b = strconv.AppendBool(b, in.Isolated)
	b = append(b, '"')
	md := in.Metadata
	clash := false // some key has a byte that sanitising changes
	for i := range md.Len() {
		if k, _ := md.At(i); !plainLabelName(k) {
			clash = true
			break
		}
	}
	// The hashes of the names written so far, when two keys may become one
	// name: compared first, so that finding none costs n²/2 integer
	// comparisons rather than string ones.
	var hashes [instance.MaxMetadata]uint64
	for i := range md.Len() {
		k, v := md.At(i)
		if clash && i < len(hashes) {
			h := sanitisedHash(k)
			hashes[i] = h
			if sanitisedBefore(md, hashes[:i], i, h) {
				continue // two keys, one label name: the first in key order wins
			}
		}
		b = append(b, `,"`+mdPrefix...)
		b = appendLabelName(b, k)
		b = append(b, `":`...)
		b = jsonstring.Append(b, v)
	}
	return append(b, "}}"...)
}

// appendTarget appends "host:port" as a JSON string, an IPv6 host in
// brackets ("[::1]:8080"), as net.JoinHostPort writes it.
func appendTarget(b []byte, host string, port int) []byte {
	start := len(b)
	b = jsonstring.Append(b, host)
	b = b[:len(b)-1] // reopen the string
	if strings.IndexByte(host, ':') >= 0 {
		b = slices.Insert(b, start+1, '[')
		b = append(b, ']')
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(port), 10)
	return append(b, '"')
}

// labelByte reports whether c may appear in a Prometheus label name after
// its first byte: [a-zA-Z0-9_].
func labelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func plainLabelName(k string) bool {
	for i := 0; i < len(k); i++ {
		if !labelByte(k[i]) {
			return false
		}
	}
	return true
}

// appendLabelName appends metadata key k as a label name's tail: every
// byte outside [a-zA-Z0-9_] becomes '_', as Prometheus' consul_sd does
// with service metadata. Metadata keys are ASCII ([A-Za-z0-9._/-]), so
// the result is valid after the prefix.
func appendLabelName(b []byte, k string) []byte {
	for i := 0; i < len(k); i++ {
		b = append(b, sanitisedByte(k[i]))
	}
	return b
}

// sanitisedBefore reports whether a metadata key before pair i of md
// sanitises to the same label name as pair i's; hashes are the
// sanitisedHash of the keys before it, h pair i's.
func sanitisedBefore(md label.Labels, hashes []uint64, i int, h uint64) bool {
	k, _ := md.At(i)
	for j, hj := range hashes {
		if hj != h {
			continue
		}
		if o, _ := md.At(j); len(o) == len(k) && sameSanitised(o, k) {
			return true
		}
	}
	return false
}

// sanitisedHash is FNV-1a of k's label name.
func sanitisedHash(k string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(k); i++ {
		h = (h ^ uint64(sanitisedByte(k[i]))) * 1099511628211
	}
	return h
}

func sameSanitised(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if x, y := a[i], b[i]; x != y && sanitisedByte(x) != sanitisedByte(y) {
			return false
		}
	}
	return true
}

func sanitisedByte(c byte) byte {
	if labelByte(c) {
		return c
	}
	return '_'
}
