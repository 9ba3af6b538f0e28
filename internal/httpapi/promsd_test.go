package httpapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/registry"
)

// targetGroup is one entry of Prometheus' http_sd format.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// sdTargets asks /v1/sd/prometheus with query and returns "target id"
// per group, in order, after checking the format Prometheus requires.
func (s *testServer) sdTargets(query string) ([]targetGroup, []string) {
	s.t.Helper()
	r := s.must("GET", "/v1/sd/prometheus?"+query, "", nil)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		s.t.Fatalf("Content-Type %q, want application/json", ct)
	}
	var groups []targetGroup
	if err := json.Unmarshal(r.body, &groups); err != nil || groups == nil {
		s.t.Fatalf("answer %s is not a JSON array of target groups: %v", r.body, err)
	}
	var got []string
	for _, g := range groups {
		if len(g.Targets) != 1 {
			s.t.Fatalf("group %+v: want one target per instance", g)
		}
		for name := range g.Labels {
			if !validPromLabel(name) {
				s.t.Fatalf("label %q is not a valid Prometheus label name", name)
			}
		}
		got = append(got, g.Targets[0]+" "+g.Labels["__meta_sextant_instance_id"])
	}
	return groups, got
}

// validPromLabel is Prometheus' rule for label names: [a-zA-Z_][a-zA-Z0-9_]*.
func validPromLabel(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	return plainLabelName(s)
}

func TestPrometheusSDFilters(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.must("POST", "/v1/instances", batch(
		`{"id":"i1","service":"web","host":"10.0.0.1","port":80,"version":"v1","metadata":{"zone":"z1","env":"prod"}}`,
		`{"id":"i2","service":"web","host":"10.0.0.2","port":80,"version":"v2","metadata":{"zone":"z2","env":"prod"}}`,
		`{"id":"i0","service":"web","host":"10.0.0.9","port":80,"metadata":{"zone":"z1"},"isolated":true}`,
		`{"id":"j1","service":"api","host":"api.internal","port":9090,"metadata":{"zone":"z1"}}`,
		`{"id":"k1","namespace":"other","service":"web","host":"::1","port":8080}`,
	), nil)
	tests := []struct {
		name, query string
		want        []string
	}{
		{"all healthy", "", []string{"api.internal:9090 j1", "10.0.0.1:80 i1", "10.0.0.2:80 i2", "[::1]:8080 k1"}},
		{"with the isolated", "healthy_only=false", []string{"api.internal:9090 j1", "10.0.0.9:80 i0", "10.0.0.1:80 i1", "10.0.0.2:80 i2", "[::1]:8080 k1"}},
		{"healthy_only=true", "healthy_only=true", []string{"api.internal:9090 j1", "10.0.0.1:80 i1", "10.0.0.2:80 i2", "[::1]:8080 k1"}},
		{"namespace", "namespace=default", []string{"api.internal:9090 j1", "10.0.0.1:80 i1", "10.0.0.2:80 i2"}},
		{"service across namespaces", "service=web", []string{"10.0.0.1:80 i1", "10.0.0.2:80 i2", "[::1]:8080 k1"}},
		{"namespace and service", "namespace=other&service=web", []string{"[::1]:8080 k1"}},
		{"selector on metadata", "selector=" + url.QueryEscape("zone=z1"), []string{"api.internal:9090 j1", "10.0.0.1:80 i1"}},
		{"selector on the version", "selector=" + url.QueryEscape("version in (v2,v3)"), []string{"10.0.0.2:80 i2"}},
		{"selector and unhealthy", "healthy_only=false&selector=" + url.QueryEscape("zone=z1,!env"), []string{"api.internal:9090 j1", "10.0.0.9:80 i0"}},
		{"unknown namespace", "namespace=nowhere", nil},
		{"unknown service", "service=nothing", nil},
		{"no match", "selector=zone%3Dz9", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.t = t
			_, got := s.sdTargets(tt.query)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("targets (-want +got):\n%s", diff)
			}
		})
	}
	s.t = t
	if r := s.must("GET", "/v1/sd/prometheus?namespace=nowhere", "", nil); string(r.body) != "[]\n" {
		t.Fatalf("nothing matches: %q, want []", r.body)
	}

	groups, _ := s.sdTargets("service=web&namespace=default&healthy_only=false")
	want := map[string]string{
		"__meta_sextant_namespace":     "default",
		"__meta_sextant_service":       "web",
		"__meta_sextant_instance_id":   "i0",
		"__meta_sextant_protocol":      "",
		"__meta_sextant_version":       "",
		"__meta_sextant_weight":        "100",
		"__meta_sextant_healthy":       "true",
		"__meta_sextant_isolated":      "true",
		"__meta_sextant_metadata_zone": "z1",
	}
	if diff := cmp.Diff(want, groups[0].Labels); diff != "" {
		t.Fatalf("labels of the isolated instance (-want +got):\n%s", diff)
	}
	if v := groups[1].Labels["__meta_sextant_version"]; v != "v1" || groups[1].Labels["__meta_sextant_isolated"] != "false" {
		t.Fatalf("labels of i1: %v", groups[1].Labels)
	}

	for _, b := range []struct{ query, field string }{
		{"namespace=Bad", "namespace"},
		{"service=-x", "service"},
		{"selector=" + url.QueryEscape("zone in (z1"), "selector"},
		{"healthy_only=yes", "healthy_only"},
	} {
		s.expectError(s.do("GET", "/v1/sd/prometheus?"+b.query, ""), 400, "invalid_argument", b.field)
	}
	r := s.do("POST", "/v1/sd/prometheus", "")
	if r.status != 405 || r.header.Get("Allow") != "GET" {
		t.Fatalf("POST: %d, Allow %q", r.status, r.header.Get("Allow"))
	}
}

// TestPrometheusSDUnhealthy: an instance whose TTL expired leaves the
// default answer, and healthy_only=false labels it unhealthy.
func TestPrometheusSDUnhealthy(t *testing.T) {
	// The clock runs an hour behind while the instance registers, so its
	// deadline is long past once it is set right.
	var offset atomic.Int64
	offset.Store(int64(-time.Hour))
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	s := newTestServer(t, registry.Options{Now: now})
	s.must("POST", "/v1/instances", batch(
		`{"id":"a","service":"s","host":"10.0.0.1","port":80,"ttl_seconds":1}`,
		`{"id":"b","service":"s","host":"10.0.0.2","port":80}`,
	), nil)
	if _, got := s.sdTargets(""); fmt.Sprint(got) != "[10.0.0.1:80 a 10.0.0.2:80 b]" {
		t.Fatalf("before the TTL expired: %v", got)
	}
	offset.Store(0)
	waitFor(t, func() bool {
		_, got := s.sdTargets("")
		return fmt.Sprint(got) == "[10.0.0.2:80 b]"
	})
	groups, got := s.sdTargets("healthy_only=false")
	if fmt.Sprint(got) != "[10.0.0.1:80 a 10.0.0.2:80 b]" ||
		groups[0].Labels["__meta_sextant_healthy"] != "false" || groups[1].Labels["__meta_sextant_healthy"] != "true" {
		t.Fatalf("healthy_only=false: %+v", groups)
	}
}

// TestPrometheusSDLabelNames: metadata keys become label names with every
// byte outside [a-zA-Z0-9_] replaced by '_'; of two keys that become one
// name the first in key order wins; values are escaped as JSON.
func TestPrometheusSDLabelNames(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	s.must("POST", "/v1/instances", `{"id":"x","service":"s","host":"10.0.0.1","port":80,"protocol":"http","weight":7,"metadata":{
		"app.kubernetes.io/name":"shop","prometheus.io-port":"9102","a.b":"dot","a_b":"underscore","a-b":"dash",
		"Upper9":"ok","quote":"say \"hi\" \\ <b>","utf8":"größe ✓"}}`, nil)
	groups, _ := s.sdTargets("")
	want := map[string]string{
		"__meta_sextant_namespace":                       "default",
		"__meta_sextant_service":                         "s",
		"__meta_sextant_instance_id":                     "x",
		"__meta_sextant_protocol":                        "http",
		"__meta_sextant_version":                         "",
		"__meta_sextant_weight":                          "7",
		"__meta_sextant_healthy":                         "true",
		"__meta_sextant_isolated":                        "false",
		"__meta_sextant_metadata_app_kubernetes_io_name": "shop",
		"__meta_sextant_metadata_prometheus_io_port":     "9102",
		"__meta_sextant_metadata_a_b":                    "dash", // "a-b" < "a.b" < "a_b"
		"__meta_sextant_metadata_Upper9":                 "ok",
		"__meta_sextant_metadata_quote":                  "say \"hi\" \\ <b>",
		"__meta_sextant_metadata_utf8":                   "größe ✓",
	}
	if diff := cmp.Diff(want, groups[0].Labels); diff != "" {
		t.Fatalf("labels (-want +got):\n%s", diff)
	}
	// No name twice in the object: a JSON decoder keeping the last one
	// would otherwise disagree with the rule above.
	r := s.must("GET", "/v1/sd/prometheus", "", nil)
	if n := strings.Count(string(r.body), `"__meta_sextant_metadata_a_b"`); n != 1 {
		t.Fatalf("a_b appears %d times: %s", n, r.body)
	}
}

func TestAppendTarget(t *testing.T) {
	for _, tt := range []struct {
		host string
		want string
	}{
		{"10.0.0.1", `"10.0.0.1:80"`},
		{"db.example", `"db.example:80"`},
		{"::1", `"[::1]:80"`},
		{"2001:db8::7", `"[2001:db8::7]:80"`},
		{"fe80::1%eth0", `"[fe80::1%eth0]:80"`},
	} {
		if got := string(appendTarget([]byte("x"), tt.host, 80)); got != "x"+tt.want {
			t.Errorf("%s: %s, want x%s", tt.host, got, tt.want)
		}
	}
}

// FuzzTargetGroup holds the hand-written target group to encoding/json:
// it parses, and carries every label name Prometheus accepts, once.
func FuzzTargetGroup(f *testing.F) {
	f.Add("10.0.0.1", "a.b", "v", "a_b", "w", "v1")
	f.Add("::1", "x/y-z", "\"\\\n\u2028", "x_y_z", "", "")
	f.Fuzz(func(t *testing.T, host, k1, v1, k2, v2, version string) {
		if !label.ValidKey(k1) || !label.ValidKey(k2) || k1 == k2 {
			return
		}
		md := label.FromMap(map[string]string{k1: v1, k2: v2})
		in := &instance.Instance{ID: "i", Namespace: "n", Service: "s", Host: host, Port: 1, Version: version, Metadata: md}
		var g targetGroup
		if err := json.Unmarshal(appendTargetGroup(nil, in), &g); err != nil {
			t.Fatalf("%v", err)
		}
		names := 0
		for name := range g.Labels {
			if !validPromLabel(name) {
				t.Fatalf("label name %q", name)
			}
			if strings.HasPrefix(name, mdPrefix) {
				names++
			}
		}
		wantNames := 2
		if sanitise(k1) == sanitise(k2) {
			wantNames = 1
		}
		if names != wantNames {
			t.Fatalf("%d metadata labels, want %d: %v", names, wantNames, g.Labels)
		}
		if len(g.Targets) != 1 || !strings.HasSuffix(g.Targets[0], ":1") {
			t.Fatalf("targets %v", g.Targets)
		}
	})
}

func sanitise(k string) string { return string(appendLabelName(nil, k)) }

// sdBenchAPI is the real stack in process with 1,000 healthy instances of
// 16 metadata entries (keys with '-', so every name is sanitised) in 10
// services.
func sdBenchAPI(b *testing.B) *API {
	api, _ := benchAPI(b, acl.Options{})
	var body strings.Builder
	body.WriteString(`{"instances":[`)
	for i := range 1000 {
		if i > 0 {
			body.WriteByte(',')
		}
		md := map[string]string{}
		for j := range 16 {
			md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<(j%8+1)))
		}
		m, _ := json.Marshal(md)
		fmt.Fprintf(&body, `{"namespace":"orders","service":"svc-%d","host":"10.0.%d.%d","port":8080,"protocol":"http","version":"v%d","metadata":%s}`,
			i%10, i/250, i%250+1, i%3, m)
	}
	body.WriteString(`]}`)
	w := httptest.NewRecorder()
	api.ServeHTTP(w, httptest.NewRequest("POST", "/v1/instances", strings.NewReader(body.String())))
	if w.Code != 200 {
		b.Fatalf("register: %d %s", w.Code, w.Body)
	}
	return api
}

// BenchmarkPrometheusSD is one discovery of 1,000 instances through the
// whole handler (routing, guard, query, encoding, a 64 KiB buffered
// writer), as Prometheus polls it.
func BenchmarkPrometheusSD(b *testing.B) {
	api := sdBenchAPI(b)
	for _, q := range []string{"", "?selector=version%3Dv1"} {
		b.Run("query="+q, func(b *testing.B) {
			get := httptest.NewRequest("GET", "/v1/sd/prometheus"+q, nil)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.code, w.n = 0, 0
				api.ServeHTTP(w, get)
				if w.code != 0 && w.code != 200 {
					b.Fatalf("status %d", w.code)
				}
			}
			b.ReportMetric(float64(w.n), "bytes/answer")
		})
	}
}

// BenchmarkPrometheusSDEncode compares the hand-written target groups of
// 1,000 instances with encoding/json marshalling the same groups.
func BenchmarkPrometheusSDEncode(b *testing.B) {
	api := sdBenchAPI(b)
	ins := api.reg.Load().inst.Instances().Snapshot().Groups("orders")
	var all []*instance.Instance
	for _, svc := range ins {
		all = append(all, svc.Items()...)
	}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = append(buf[:0], '[')
			for i, in := range all {
				if i > 0 {
					buf = append(buf, ',')
				}
				buf = appendTargetGroup(buf, in)
			}
			buf = append(buf, ']')
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			groups := make([]targetGroup, len(all))
			for i, in := range all {
				l := map[string]string{
					"__meta_sextant_namespace":   in.Namespace,
					"__meta_sextant_service":     in.Service,
					"__meta_sextant_instance_id": in.ID,
					"__meta_sextant_protocol":    in.Protocol,
					"__meta_sextant_version":     in.Version,
					"__meta_sextant_weight":      strconv.Itoa(in.Weight),
					"__meta_sextant_healthy":     strconv.FormatBool(in.Healthy),
					"__meta_sextant_isolated":    strconv.FormatBool(in.Isolated),
				}
				for k, v := range in.Metadata.All() {
					if n := mdPrefix + sanitise(k); l[n] == "" {
						l[n] = v
					}
				}
				groups[i] = targetGroup{Targets: []string{net.JoinHostPort(in.Host, strconv.Itoa(in.Port))}, Labels: l}
			}
			if _, err := json.Marshal(groups); err != nil {
				b.Fatal(err)
			}
		}
	})
}
