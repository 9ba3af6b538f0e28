package gateway

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// FuzzDryRunRequest: any body decodes to a dry run or an error naming a
// field, never a panic; a decoded candidate evaluates on replayed records
// (every replay path: kept, not kept, no certificate) without one.
// Seeds: testdata/fuzz/FuzzDryRunRequest.
func FuzzDryRunRequest(f *testing.F) {
	f.Add([]byte(`{"listeners":[{"port":8443,"http_filters":[{"name":"sextant.rbac.allow","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC","rules":{"policies":{"p":{"permissions":[{"url_path":{"path":{"prefix":"/a"}}}],"principals":[{"authenticated":{"principal_name":{"exact":"spiffe://td/ns/a/sa/b"}}}]}}}}}]}]}`))
	f.Add([]byte(`{"listeners":[{"port":80}],"from":"1700000000000","max_calls":5,"timeout":"1s","samples":0}`))
	now := time.Unix(1_800_000_000, 0)
	calls := []calllog.Call{
		{Layout: 2, Principal: "spiffe://td/ns/a/sa/b", Subject: "O=td", Method: "GET", Path: "/a", Host: "h", Port: 8443, PeerIP: "10.0.0.1", TLS: true, PeerCert: true},
		{Layout: 2, Method: "POST", Port: 80, NotKept: []string{"path", "host", "principal", "subject", "method"}, TLS: true, PeerCert: true, OtherNames: true},
		{Layout: 2, Port: 80},
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeDryRun(body, now)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if d.from.After(d.to) || d.maxCalls < 1 || d.maxCalls > defaultDryRunMax || d.samples < 0 || d.samples > maxSamples {
			t.Fatalf("decoded out of bounds: %+v", d)
		}
		var h fasthttp.RequestHeader
		var rp replay
		for _, c := range d.ports {
			for i := range calls {
				req := replayOf(&calls[i], &h, &rp)
				decide(c.filters, nil, &req)
				for _, ov := range c.routes {
					decide(c.filters, ov, &req)
				}
			}
		}
	})
}
