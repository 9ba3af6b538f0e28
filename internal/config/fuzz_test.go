package config

import (
	"os"
	"testing"
)

// FuzzDecode: no input panics the decoder, and every object it accepts
// encodes canonically: its encoding decodes to an object with the same
// encoding.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"testdata/orders.yaml", "testdata/gateway.yaml", "testdata/security.yaml", "testdata/traffic.yaml", "testdata/telemetry.yaml", "testdata/serviceentry.yaml", "testdata/requestauth.yaml", "testdata/sidecar.yaml"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(vsHead + "  - route: [{destination: {host: orders}}]\n    mirror: {host: x}\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"networking.istio.io/v1","kind":"DestinationRule","metadata":{"name":"a"},"spec":{"host":"a","subsets":[{"name":"v1","labels":{"v":"1"}}]}}]}`))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: t}\nspec:\n  hosts: ['*']\n  gateways: [gw]\n  tcp:\n  - match: [{port: 31400, destinationSubnets: [10.0.0.0/8, '::1'], sourceSubnet: 192.168.0.1, gateways: [gw]}]\n    route: [{destination: {host: a, subset: v1, port: {number: 9000}}, weight: 80}, {destination: {host: a}, weight: 20}]\n"))
	f.Add([]byte(vsHead + "  - match: [{scheme: {exact: https}, authority: {prefix: a}, queryParams: {v: {regex: x}}, withoutHeaders: {x-a: {}}, ignoreUriCase: true, port: 80}]\n    route: [{destination: {host: orders}}]\n    mirrors: [{destination: {host: orders}, percentage: {value: 5}}]\n    retries: {attempts: 2, backoff: 10ms, retryIgnorePreviousHosts: false}\n"))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: '{{.Name}}'}\nspec: {servers: [{hosts: ['$HOST']}]}\n"))
	f.Add([]byte("apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: {name: p}\nspec:\n  rules: [{when: [{key: 'request.headers[x-a]', notValues: ['*b']}], from: [{source: {notNamespaces: ['te*']}}]}]\n"))
	f.Add([]byte(`{"apiVersion":"security.istio.io/v1","kind":"PeerAuthentication","metadata":{"name":"p"},"spec":{"selector":{"matchLabels":{"a":"b"}},"portLevelMtls":{"80":{"mode":"STRICT"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode(data)
		if err != nil {
			return
		}
		for _, o := range objs {
			enc := o.Encode()
			back, err := DecodeRecord(enc)
			if err != nil {
				t.Fatalf("%s: its encoding does not decode: %v\n%s", o.Key, err, enc)
			}
			if string(back.Encode()) != string(enc) {
				t.Fatalf("%s: encoding not canonical:\n%s\n%s", o.Key, enc, back.Encode())
			}
		}
	})
}
