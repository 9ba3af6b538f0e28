package httpapi

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// The encoding/json baseline of the hand-written register decoder: the
// same bodies decoded strictly (decodeStrict, DisallowUnknownFields) into
// the reference types FuzzDecodeRegisterMatchesEncodingJSON holds the
// decoder to, then built into the same catalog instances. decode.go is
// worth keeping only if it is much faster than this (docs/perf/registry.md).

// decodeRegisterEncodingJSON is decodeRegister done the plain way.
func decodeRegisterEncodingJSON(body []byte) ([]*catalog.Instance, error) {
	var ref referenceBody
	if err := decodeStrict(body, &ref); err != nil {
		return nil, err
	}
	src := ref.Instances
	if src == nil {
		src = []referenceInstance{ref.referenceInstance}
	}
	out := make([]*catalog.Instance, len(src))
	for i := range src {
		r := &src[i]
		w := registry.DefaultWeight
		if r.Weight != nil {
			w = *r.Weight
		}
		out[i] = &catalog.Instance{ID: r.ID, Namespace: r.Namespace, Service: r.Service, Host: r.Host, Port: r.Port,
			Protocol: r.Protocol, Version: r.Version, Weight: w, Isolated: r.Isolated,
			Metadata: label.FromMap(r.Metadata), TTLSeconds: r.TTLSeconds}
	}
	return out, nil
}

// registerBodies are the bodies both decoders are timed on: the batch of
// BenchmarkDecodeRegister (500 instances, 16 metadata entries of 10-byte
// keys and values each) and one instance of it alone, the single register.
func registerBodies() map[string][]byte {
	var items []string
	for i := range 500 {
		md := map[string]string{}
		for j := 1; j <= 16; j++ {
			md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<j))
		}
		items = append(items, inst("svc", "10.0.0.1", 8000+i, md))
	}
	return map[string][]byte{"batch500": []byte(batch(items...)), "one": []byte(items[7])}
}

// TestEncodingJSONBaselineBuildsTheSameInstances keeps the comparison
// fair: both decoders build the same instances from the benchmark bodies.
func TestEncodingJSONBaselineBuildsTheSameInstances(t *testing.T) {
	for name, body := range registerBodies() {
		got, _, err := decodeRegister(body)
		if err != nil {
			t.Fatal(err)
		}
		base, err := decodeRegisterEncodingJSON(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(base) || len(got) == 0 {
			t.Fatalf("%s: %d instances from decodeRegister, %d from encoding/json", name, len(got), len(base))
		}
		for i := range got {
			a, b := got[i], base[i]
			if a.ID != b.ID || a.Namespace != b.Namespace || a.Service != b.Service || a.Host != b.Host || a.Port != b.Port ||
				a.Protocol != b.Protocol || a.Version != b.Version || a.Weight != b.Weight || a.Isolated != b.Isolated ||
				a.TTLSeconds != b.TTLSeconds || !a.Metadata.Equal(b.Metadata) || a.Metadata.Len() != 16 {
				t.Fatalf("%s: instance %d differs:\n hand-written  %+v\n encoding/json %+v", name, i, a, b)
			}
		}
	}
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRegisterDecoders times both decoders side by side, per body;
// compare with benchstat -col /decoder.
func BenchmarkRegisterDecoders(b *testing.B) {
	decoders := []struct {
		name   string
		decode func([]byte) ([]*catalog.Instance, error)
	}{
		{"hand-written", func(body []byte) ([]*catalog.Instance, error) {
			ins, _, err := decodeRegister(body)
			return ins, err
		}},
		{"encoding-json", decodeRegisterEncodingJSON},
	}
	bodies := registerBodies()
	for _, body := range []string{"batch500", "one"} {
		for _, d := range decoders {
			b.Run("body="+body+"/decoder="+d.name, func(b *testing.B) {
				raw := bodies[body]
				var n int
				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					ins, err := d.decode(raw)
					if err != nil {
						b.Fatal(err)
					}
					n = len(ins)
				}
				cpu := processCPU() - cpu0
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/instance")
				// CPU time, GC included, does not grow when other
				// processes take the cores: the figure to compare on a
				// shared machine (with -benchtime 1s or more; getrusage
				// is too coarse for a few microseconds).
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/instance")
			})
		}
	}
}
