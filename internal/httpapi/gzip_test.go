package httpapi

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/sextant-mesh/sextant/internal/registry"
)

func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want bool
	}{
		{"absent", nil, false},
		{"gzip", []string{"gzip"}, true},
		{"list", []string{"br, gzip, deflate"}, true},
		{"case", []string{"GZip"}, true},
		{"weighted", []string{"gzip;q=0.5"}, true},
		{"refused", []string{"gzip;q=0"}, false},
		{"refused with decimals", []string{"deflate, gzip; q=0.000"}, false},
		{"star", []string{"*"}, true},
		{"other only", []string{"br, deflate"}, false},
		{"identity", []string{"identity"}, false},
		{"second header line", []string{"br", "gzip"}, true},
		{"prefix is not gzip", []string{"x-gzip2"}, false},
	} {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Accept-Encoding", v)
		}
		if got := acceptsGzip(h); got != tc.want {
			t.Errorf("%s: acceptsGzip(%q) = %v, want %v", tc.name, tc.in, got, tc.want)
		}
	}
}

// rawGet sends a GET without the client's transparent decompression.
func (s *testServer) rawGet(path, acceptEncoding string) response {
	s.t.Helper()
	req, err := http.NewRequest("GET", s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s: status %d, body %s", path, resp.StatusCode, b)
	}
	return response{resp.StatusCode, resp.Header, b}
}

func TestQueryGzip(t *testing.T) {
	s := newTestServer(t, registry.Options{})
	var items []string
	for i := range 40 {
		items = append(items, fmt.Sprintf(`{"id":"g%02d","service":"big","host":"10.0.0.%d","port":80,"metadata":{"zone":"z%d","env":"prod"}}`, i, i, i%3))
	}
	s.must("POST", "/v1/instances", batch(items...), nil)
	s.must("POST", "/v1/instances", batch(`{"id":"s1","service":"small","host":"h","port":1}`), nil)

	path := "/v1/namespaces/default/services/big/instances?selector=env%3Dprod"
	plain := s.rawGet(path, "")
	if plain.header.Get("Content-Encoding") != "" {
		t.Fatalf("plain answer: Content-Encoding %q", plain.header.Get("Content-Encoding"))
	}
	for _, ae := range []string{"gzip", "gzip, deflate, br"} {
		for round := range 2 { // the second is served from the memo
			z := s.rawGet(path, ae)
			if z.header.Get("Content-Encoding") != "gzip" || z.header.Get("Vary") != "Accept-Encoding" {
				t.Fatalf("%q round %d: Content-Encoding %q, Vary %q", ae, round, z.header.Get("Content-Encoding"), z.header.Get("Vary"))
			}
			if len(z.body) >= len(plain.body) {
				t.Fatalf("gzip answer of %d bytes, plain %d", len(z.body), len(plain.body))
			}
			zr, err := gzip.NewReader(bytes.NewReader(z.body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, plain.body) {
				t.Fatalf("inflated answer differs:\n%s\nwant\n%s", got, plain.body)
			}
		}
	}
	if z := s.rawGet(path, "gzip;q=0"); z.header.Get("Content-Encoding") != "" || !bytes.Equal(z.body, plain.body) {
		t.Fatalf("gzip;q=0 answered Content-Encoding %q", z.header.Get("Content-Encoding"))
	}
	// A small answer goes out as it is, even to a gzip client.
	small := s.rawGet("/v1/namespaces/default/services/small/instances", "gzip")
	if small.header.Get("Content-Encoding") != "" {
		t.Fatalf("small answer: Content-Encoding %q, want none", small.header.Get("Content-Encoding"))
	}
	var q queryAnswer
	small.decode(t, &q)
	if len(q.Instances) != 1 {
		t.Fatalf("small answer: %s", small.body)
	}
	// A new version is compressed anew.
	s.must("POST", "/v1/instances", batch(`{"id":"g99","service":"big","host":"h","port":1,"metadata":{"env":"prod"}}`), nil)
	z := s.rawGet(path, "gzip")
	zr, err := gzip.NewReader(bytes.NewReader(z.body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(zr)
	q = queryAnswer{}
	(response{body: got}).decode(t, &q)
	if len(q.Instances) != 41 {
		t.Fatalf("after a register: %d instances, want 41", len(q.Instances))
	}
}

// BenchmarkGzipAnswer is the compression of one 100-instance answer, paid
// once per service version by the first gzip reader.
func BenchmarkGzipAnswer(b *testing.B) {
	var items []string
	for i := range 500 {
		md := map[string]string{}
		for j := 1; j <= 16; j++ {
			md[fmt.Sprintf("meta-key%02d", j)] = fmt.Sprintf("v%02d-%06d", j, i%(1<<j))
		}
		items = append(items, inst("svc", "10.0.0.1", 8000+i, md))
	}
	body := []byte(batch(items...))[:36<<10]
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if z := gzipBytes(body); len(z) == 0 {
			b.Fatal("empty")
		}
	}
}
