package registry

import (
	"bytes"
	"strconv"

	"github.com/sextant-mesh/sextant/client"
)

const idDigits = 10

// instanceID is the id of instance i of a family (not used on hot paths).
func instanceID(prefix string, i int64) string {
	b := make([]byte, 0, len(prefix)+idDigits)
	b = append(b, prefix...)
	b = append(b, make([]byte, idDigits)...)
	putDigits(b[len(prefix):], uint64(i))
	return string(b)
}

// putDigits writes n as fixed-width decimal into b, in place.
func putDigits(b []byte, n uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}

// metadata is the benchmark's metadata: 16 entries of 10-byte keys and
// values. Key j has 2^j distinct values across instances, so selectors hit
// both dense and sparse postings.
func metadata(i int) map[string]string {
	md := make(map[string]string, 16)
	for j := 1; j <= 16; j++ {
		k := []byte("meta-key00")
		putDigits(k[8:], uint64(j))
		v := []byte("v00-000000")
		putDigits(v[1:3], uint64(j))
		putDigits(v[4:], uint64(i%(1<<j)))
		md[string(k)] = string(v)
	}
	return md
}

// template is a pre-encoded register body whose id digits are patched
// in place before each send.
type template struct {
	body    []byte
	offsets []int // where each instance's id digits start
	// unique, when set, are where each instance's meta-key16 value starts:
	// set writes digits there that no other instance of the run has.
	unique     []int
	uniqueBase uint64
}

// uniqueMetadata makes set give every instance metadata of its own (see
// Config.UniqueMetadata): meta-key16's 10-byte value becomes digits of the
// template's index g (a loader connection) and of the instance's number,
// so that neither the instances of one family nor those of two families
// (numbered alike) share a set.
func (t *template) uniqueMetadata(g int) {
	marker := []byte(`"meta-key16":"`)
	for off := 0; ; {
		i := bytes.Index(t.body[off:], marker)
		if i < 0 {
			break
		}
		t.unique = append(t.unique, off+i+len(marker))
		off += i + len(marker)
	}
	if len(t.unique) != len(t.offsets) {
		panic("bench: register template lost a metadata placeholder")
	}
	t.uniqueBase = uint64(g) * uniqueSpan
}

// uniqueSpan is how many instances of one family get unique metadata
// values: 10 digits leave 1,000 families of 10,000,000.
const uniqueSpan = 10_000_000

// newTemplate encodes n instances of service svc whose ids are
// prefix+digits; set(k) patches instance k's digits to base+k.
func newTemplate(ns, svc, prefix string, n, ttl int) template {
	insts := make([]client.Instance, n)
	placeholder := prefix + "##########"
	for k := range insts {
		insts[k] = client.Instance{
			ID: placeholder, Namespace: ns, Service: svc,
			Host: "10.0." + strconv.Itoa(k/250) + "." + strconv.Itoa(k%250+1), Port: 8080 + k%1000,
			Protocol: "http", Version: "v1", Weight: client.Weight(100),
			Metadata: metadata(k), TTLSeconds: ttl,
		}
	}
	t := template{body: client.AppendRegisterBody(nil, insts...)}
	quoted := []byte(`"` + placeholder + `"`)
	for off := 0; ; {
		i := bytes.Index(t.body[off:], quoted)
		if i < 0 {
			break
		}
		t.offsets = append(t.offsets, off+i+1+len(prefix))
		off += i + len(quoted)
	}
	if len(t.offsets) != n {
		panic("bench: register template lost an id placeholder")
	}
	return t
}

func (t *template) set(base uint64) {
	for k, off := range t.offsets {
		putDigits(t.body[off:off+idDigits], base+uint64(k))
	}
	for k, off := range t.unique {
		putDigits(t.body[off:off+10], t.uniqueBase+(base+uint64(k))%uniqueSpan)
	}
}
