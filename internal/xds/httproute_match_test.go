package xds

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

const matchVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: orders}
spec:
  hosts: [orders]
  gateways: [mesh, edge]
  http:
  - match:
    - scheme: {exact: https}
      authority: {prefix: orders.example}
      ignoreUriCase: true
      uri: {prefix: /API}
      queryParams: {v: {exact: "2"}, debug: {regex: "on|yes"}}
      withoutHeaders: {x-canary: {}, x-env: {exact: prod}}
    route: [{destination: {host: orders}}]
  - match: [{port: 8080}]
    route: [{destination: {host: orders}}]
  - match: [{gateways: [edge]}]
    route: [{destination: {host: orders}}]
  - route: [{destination: {host: orders}}]
`

// TestMatchAsIstio: a match's scheme, authority, ignoreUriCase,
// queryParams, withoutHeaders and (in the mesh) port are published as
// Istio publishes them; a match naming only other gateways is left out of
// the mesh's routes; everything passes go-control-plane's validation and
// the hand encoder agrees.
func TestMatchAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(matchVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "orders"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("orders", []string{"orders"}, svc, objs[0], clusterFor, nil)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	if len(vh.Routes) != 3 {
		t.Fatalf("got %d routes, want 3 (the edge-only match left out of the mesh's)", len(vh.Routes))
	}
	want := []string{
		`prefix:"/API" case_sensitive:{} ` +
			`headers:{name:":scheme" string_match:{exact:"https"}} headers:{name:":authority" string_match:{prefix:"orders.example"}} ` +
			`headers:{name:"x-canary" present_match:true invert_match:true} headers:{name:"x-env" string_match:{exact:"prod"} invert_match:true} ` +
			`query_parameters:{name:"debug" string_match:{safe_regex:{regex:"on|yes"}}} query_parameters:{name:"v" string_match:{exact:"2"}}`,
		`prefix:"/" headers:{name:":authority" string_match:{suffix:":8080"}}`,
		`prefix:"/"`,
	}
	for i, w := range want {
		got, _ := prototext.MarshalOptions{}.Marshal(vh.Routes[i].Match)
		if norm(string(got)) != norm(w) {
			t.Errorf("route %d match:\n got %s\nwant %s", i, got, w)
		}
	}
	enc, err := EncodeVirtualHost("orders", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("orders", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}

// norm drops the spaces prototext puts at random (its output is not stable).
func norm(s string) string { return strings.ReplaceAll(s, " ", "") }
