package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sextant-mesh/sextant/internal/naming"
	networking "istio.io/api/networking/v1"
)

func TestDecodeSubset(t *testing.T) {
	data, err := os.ReadFile("testdata/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("got %d objects, want 2", len(objs))
	}
	vs, dr := objs[0], objs[1]
	if vs.Key != (Key{KindVirtualService, "default", "orders"}) || dr.Key != (Key{KindDestinationRule, "default", "orders"}) {
		t.Fatalf("keys %v %v", vs.Key, dr.Key)
	}
	r := vs.VirtualService.Http[1]
	if got := r.Timeout.AsDuration(); got != 1500*time.Millisecond {
		t.Errorf("timeout %v", got)
	}
	if got := r.Retries.PerTryTimeout.AsDuration(); got != 500*time.Millisecond {
		t.Errorf("perTryTimeout %v", got)
	}
	if got := r.Route[1].Destination.Port.Number; got != 8080 {
		t.Errorf("port %d", got)
	}
	if got := vs.VirtualService.Http[0].Match[0].Headers["x-group"].GetExact(); got != "blue" {
		t.Errorf("header match %q", got)
	}
	if p := EffectivePolicy(dr, "blue", 0); p.LoadBalancer != PolicyPeakEWMA || p.ConnectTimeout != 250*time.Millisecond || p.Outlier.GetConsecutive_5XxErrors().GetValue() != 5 {
		t.Errorf("blue policy %+v", p)
	}
	if p := EffectivePolicy(dr, "green", 0); p.LoadBalancer != PolicyLeastRequest {
		t.Errorf("green policy %+v", p)
	}
	sel, ok := SubsetSelector(dr, "gray")
	if !ok || sel.String() != "color=gray" {
		t.Errorf("gray selector %v %v", sel, ok)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	data, _ := os.ReadFile("testdata/orders.yaml")
	objs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		enc := o.Encode()
		back, err := DecodeRecord(enc)
		if err != nil {
			t.Fatalf("%s: decode of its encoding: %v\n%s", o.Key, err, enc)
		}
		if again := back.Encode(); string(again) != string(enc) {
			t.Fatalf("%s: encoding is not canonical:\n%s\n%s", o.Key, enc, again)
		}
		if back.Key != o.Key || !cmp.Equal(back.Annotations, o.Annotations) {
			t.Fatalf("%s: round trip changed the envelope", o.Key)
		}
	}
	// The same object written differently encodes the same.
	a, err := Decode([]byte(`{"apiVersion":"networking.istio.io/v1beta1","kind":"VirtualService","metadata":{"name":"x"},"spec":{"hosts":["x"],"http":[{"route":[{"destination":{"host":"x"}}],"timeout":"100ms"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode([]byte("kind: VirtualService\napiVersion: networking.istio.io/v1\nmetadata: {namespace: default, name: x}\nspec:\n  http:\n  - timeout: 0.1s\n    route: [{destination: {host: x}}]\n  hosts: [x]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a[0].Encode()) != string(b[0].Encode()) {
		t.Fatalf("equal objects encode differently:\n%s\n%s", a[0].Encode(), b[0].Encode())
	}
}

const vsHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: orders\nspec:\n  hosts: [orders]\n  http:\n"

const vsTLSHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: orders\nspec:\n  hosts: [orders]\n"

const gwHead = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec:\n  servers:\n"

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, in string
		path     string
		sentinel error
		msg      string
	}{
		{"placeholder", "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: [a.example.com], tls: {mode: SIMPLE, credentialName: \"$CREDENTIAL_NAME\"}}]\n",
			"spec.servers[0].tls.credentialName", ErrInvalid, "holds the placeholder $CREDENTIAL_NAME"},
		{"template placeholder", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: 'vs-{{.Revision}}'}\nspec: {hosts: [orders], http: [{route: [{destination: {host: orders}}]}]}\n",
			"metadata.name", ErrInvalid, "holds the placeholder {{.Revision}}"},
		{"envoyfilter", "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f}\nspec: {}\n",
			"kind", ErrNotSupported, "EnvoyFilter: not supported: it patches Envoy's own configuration"},
		{"retry backoff negative", vsHead + "  - route: [{destination: {host: orders}}]\n    retries: {attempts: 2, backoff: -1s}\n",
			"spec.http[0].retries.backoff", ErrInvalid, ""},
		{"retry backoff under 1ms", vsHead + "  - route: [{destination: {host: orders}}]\n    retries: {attempts: 2, backoff: 100us}\n",
			"spec.http[0].retries.backoff", ErrInvalid, "at least 1ms"},
		{"retryRemoteLocalities with retries off", vsHead + "  - route: [{destination: {host: orders}}]\n    retries: {retryRemoteLocalities: true}\n",
			"spec.http[0].retries.retryRemoteLocalities", ErrInvalid, "attempts 0"},
		{"delegate with route", vsHead + "  - route: [{destination: {host: orders}}]\n    delegate: {name: other}\n",
			"spec.http[0].delegate", ErrInvalid, "may not be set with route"},
		{"mirror without host", vsHead + "  - route: [{destination: {host: orders}}]\n    mirror: {subset: v1}\n",
			"spec.http[0].mirror.host", ErrInvalid, ""},
		{"mirror and mirrors", vsHead + "  - route: [{destination: {host: orders}}]\n    mirror: {host: orders}\n    mirrors: [{destination: {host: orders}}]\n",
			"spec.http[0].mirrors", ErrInvalid, "set mirror or mirrors, not both"},
		{"mirror percentage range", vsHead + "  - route: [{destination: {host: orders}}]\n    mirror: {host: orders}\n    mirrorPercentage: {value: 101}\n",
			"spec.http[0].mirrorPercentage.value", ErrInvalid, "101 not in [0, 100]"},
		{"mirror percentage alone", vsHead + "  - route: [{destination: {host: orders}}]\n    mirrorPercentage: {value: 10}\n",
			"spec.http[0].mirrorPercentage", ErrInvalid, "set without mirror"},
		{"mirror on a direct response", vsHead + "  - directResponse: {status: 200}\n    mirror: {host: orders}\n",
			"spec.http[0].mirror", ErrInvalid, "only with route"},
		{"mirrors percentage range", vsHead + "  - route: [{destination: {host: orders}}]\n    mirrors: [{destination: {host: orders}, percentage: {value: -1}}]\n",
			"spec.http[0].mirrors[0].percentage.value", ErrInvalid, "not in [0, 100]"},
		{"typo", vsHead + "  - route: [{destination: {host: orders}}]\n    retries: {attempts: 2, perTryTimout: 1s}\n",
			"spec.http[0].retries.perTryTimout", ErrUnknownField, `did you mean "perTryTimeout"`},
		{"bad gateway ref", strings.Replace(vsHead, "  hosts:", "  gateways: [mesh, a/b/c]\n  hosts:", 1) + "  - route: [{destination: {host: orders}}]\n",
			"spec.gateways[1]", ErrInvalid, "want a Gateway name"},
		{"gateway passthrough with a credential", gwHead + "  - port: {number: 443, protocol: TLS}\n    hosts: [a.example.com]\n    tls: {mode: PASSTHROUGH, credentialName: c}\n",
			"spec.servers[0].tls.credentialName", ErrInvalid, "the endpoint serves its own certificate"},
		{"gateway TLS protocol terminated", gwHead + "  - port: {number: 443, protocol: TLS}\n    hosts: [a.example.com]\n    tls: {mode: SIMPLE, credentialName: c}\n",
			"spec.servers[0].tls.mode", ErrNotSupported, "mode PASSTHROUGH"},
		{"auto passthrough with a credential", gwHead + "  - port: {number: 15443, protocol: TLS}\n    hosts: [\"*.local\"]\n    tls: {mode: AUTO_PASSTHROUGH, credentialName: c}\n",
			"spec.servers[0].tls.credentialName", ErrInvalid, "not used with AUTO_PASSTHROUGH"},
		{"auto passthrough with versions", gwHead + "  - port: {number: 15443, protocol: TLS}\n    hosts: [\"*.local\"]\n    tls: {mode: AUTO_PASSTHROUGH, minProtocolVersion: TLSV1_2}\n",
			"spec.servers[0].tls.minProtocolVersion", ErrInvalid, "the endpoint chooses"},
		{"auto passthrough on HTTPS", gwHead + "  - port: {number: 15443, protocol: HTTPS}\n    hosts: [\"*.local\"]\n    tls: {mode: AUTO_PASSTHROUGH}\n",
			"spec.servers[0].tls.mode", ErrInvalid, "needs protocol TLS"},
		{"tls route in the mesh", vsTLSHead + "  tls:\n  - match: [{sniHosts: [orders]}]\n    route: [{destination: {host: orders}}]\n",
			"spec.tls", ErrNotSupported, "gateways only"},
		{"tls route sni not a host", vsTLSHead + "  gateways: [edge]\n  tls:\n  - match: [{sniHosts: [other.example.com]}]\n    route: [{destination: {host: orders}}]\n",
			"spec.tls[0].match[0].sniHosts[0]", ErrInvalid, "not one of the VirtualService's hosts"},
		{"tls route without match", vsTLSHead + "  gateways: [edge]\n  tls:\n  - route: [{destination: {host: orders}}]\n",
			"spec.tls[0].match", ErrInvalid, "sniHosts is required"},
		{"tls route unknown field", vsTLSHead + "  gateways: [edge]\n  tls:\n  - match: [{sniHosts: [orders], sourceLabels: {a: b}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.tls[0].match[0].sourceLabels", ErrNotSupported, ""},
		{"gateway unknown tls mode", gwHead + "  - port: {number: 443, protocol: HTTPS}\n    hosts: [a.example.com]\n    tls: {mode: STRICT, credentialName: c}\n",
			"spec.servers[0].tls.mode", ErrInvalid, `"STRICT" is not one of`},
		{"gateway unknown tls field", gwHead + "  - port: {number: 443, protocol: HTTPS}\n    hosts: [a.example.com]\n    tls: {mode: SIMPLE, credentialName: c, credential: d}\n",
			"spec.servers[0].tls.credential", ErrUnknownField, "unknown field"},
		{"gateway https without credential", gwHead + "  - port: {number: 443, protocol: HTTPS}\n    hosts: [a.example.com]\n    tls: {mode: SIMPLE}\n",
			"spec.servers[0].tls.credentialName", ErrInvalid, "required"},
		{"gateway udp", gwHead + "  - port: {number: 5432, protocol: UDP}\n    hosts: [a.example.com]\n",
			"spec.servers[0].port.protocol", ErrNotSupported, "HTTP, HTTPS, HTTP2, TLS (passthrough) and TCP"},
		{"gateway tcp and http on a port", gwHead + "  - port: {number: 5432, protocol: TCP}\n    hosts: ['*']\n  - port: {number: 5432, protocol: HTTP}\n    hosts: [a.example.com]\n",
			"spec.servers[1].port.number", ErrInvalid, "both TCP and HTTP"},
		{"tcp route in the mesh", vsTLSHead + "  tcp:\n  - route: [{destination: {host: orders}}]\n",
			"spec.tcp", ErrNotSupported, "served by gateways only"},
		{"tcp sourceLabels", vsTLSHead + "  gateways: [gw]\n  tcp:\n  - match: [{sourceLabels: {app: a}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.tcp[0].match[0].sourceLabels", ErrNotSupported, "sourceSubnet"},
		{"tcp bad subnet", vsTLSHead + "  gateways: [gw]\n  tcp:\n  - match: [{destinationSubnets: [10.0.0.0/33]}]\n    route: [{destination: {host: orders}}]\n",
			"spec.tcp[0].match[0].destinationSubnets[0]", ErrInvalid, "CIDR"},
		{"tcp no weights", vsTLSHead + "  gateways: [gw]\n  tcp:\n  - route: [{destination: {host: a}}, {destination: {host: b}}]\n",
			"spec.tcp[0].route", ErrInvalid, "weights must add up"},
		{"gateway cipher suites", gwHead + "  - port: {number: 443, protocol: HTTPS}\n    hosts: [a.example.com]\n    tls: {mode: SIMPLE, credentialName: c, cipherSuites: [x]}\n",
			"spec.servers[0].tls.cipherSuites", ErrNotSupported, "not supported"},
		{"gateway-only VirtualService host", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x}\nspec:\n  hosts: [Shop.example.com]\n  gateways: [gw]\n  http:\n  - route: [{destination: {host: orders}}]\n",
			"spec.hosts[0]", ErrInvalid, "want a host name"},
		{"weight type", vsHead + "  - route: [{destination: {host: orders}, weight: heavy}]\n",
			"spec.http[0].route[0].weight", ErrInvalid, "not an integer"},
		{"negative weight", vsHead + "  - route: [{destination: {host: orders}, weight: -1}]\n",
			"spec.http[0].route[0].weight", ErrInvalid, "must not be negative"},
		{"zero weights", vsHead + "  - route: [{destination: {host: orders}}, {destination: {host: orders, subset: v1}}]\n",
			"spec.http[0].route", ErrInvalid, "add up"},
		{"bad duration", vsHead + "  - route: [{destination: {host: orders}}]\n    timeout: soon\n",
			"spec.http[0].timeout", ErrInvalid, "not a duration"},
		{"wildcard host", strings.Replace(vsHead, "[orders]", `["*.example.com"]`, 1) + "  - route: [{destination: {host: orders}}]\n",
			"spec.hosts[0]", ErrInvalid, "wildcard"},
		{"bad regex", vsHead + "  - match: [{uri: {regex: \"(\"}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].uri.regex", ErrInvalid, "missing closing"},
		{"two match types", vsHead + "  - match: [{uri: {exact: /a, prefix: /b}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].uri.prefix", ErrInvalid, "only one of"},
		{"empty string match", vsHead + "  - match: [{headers: {x-a: {}}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].headers[x-a]", ErrInvalid, "one of exact"},
		{"no routes", vsHead + "  - match: [{uri: {prefix: /}}]\n",
			"spec.http[0].route", ErrInvalid, "at least one destination"},
		{"bad method", vsHead + "  - match: [{method: {exact: get}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].method.exact", ErrInvalid, "not an HTTP method"},
		{"statPrefix not supported", vsHead + "  - match: [{statPrefix: a}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].statPrefix", ErrNotSupported, "not supported"},
		{"sourceNamespace invalid", vsHead + "  - match: [{sourceNamespace: Bad_NS}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].sourceNamespace", ErrInvalid, "DNS label"},
		{"queryParams empty", vsHead + "  - match: [{queryParams: {a: {}}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].queryParams[a]", ErrInvalid, "one of exact, prefix or regex is required"},
		{"withoutHeaders upper case", vsHead + "  - match: [{withoutHeaders: {X-A: {}}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].withoutHeaders[X-A]", ErrInvalid, "lower case"},
		{"match port", vsHead + "  - match: [{port: 70000}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].port", ErrInvalid, "want 1..65535"},
		{"scheme regex", vsHead + "  - match: [{scheme: {regex: '('}}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].scheme.regex", ErrInvalid, "missing closing"},
		{"match gateway not the VirtualService's", vsHead + "  - match: [{gateways: [edge]}]\n    route: [{destination: {host: orders}}]\n",
			"spec.http[0].match[0].gateways[0]", ErrInvalid, `"edge" is not one of the VirtualService's gateways [mesh]`},
		{"unknown top-level", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetdata: {name: x}\nspec: {}\n",
			"metdata", ErrUnknownField, "unknown field"},
		{"other kind", "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: x}\nspec: {}\n",
			"kind", ErrNotSupported, "not supported"},
		{"bad apiVersion", "apiVersion: v1\nkind: VirtualService\nmetadata: {name: x}\nspec: {hosts: [x], http: [{route: [{destination: {host: x}}]}]}\n",
			"apiVersion", ErrInvalid, "want networking.istio.io/v1"},
		{"no name", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {namespace: a}\nspec: {hosts: [x], http: [{route: [{destination: {host: x}}]}]}\n",
			"metadata.name", ErrInvalid, "required"},
		{"finalizers", "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: x, finalizers: [a]}\nspec: {hosts: [x], http: [{route: [{destination: {host: x}}]}]}\n",
			"metadata.finalizers", ErrNotSupported, "not supported"},
		{"dr duplicate subset", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, subsets: [{name: a}, {name: a}]}\n",
			"spec.subsets[1].name", ErrInvalid, "another subset"},
		{"dr consistent hash cookie attributes", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: c, attributes: [{name: SameSite, value: Lax}]}}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash.httpCookie.attributes", ErrNotSupported, "not supported"},
		{"dr consistent hash no key", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {ringHash: {minimumRingSize: 64}}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash", ErrInvalid, "one of httpHeaderName"},
		{"dr consistent hash bad header", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: 'x user'}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash.httpHeaderName", ErrInvalid, "not a header name"},
		{"dr consistent hash source ip false", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: false}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash.useSourceIp", ErrInvalid, "hashes nothing"},
		{"dr maglev not prime", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 1000}}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash.maglev.tableSize", ErrInvalid, "a prime"},
		{"dr ring too large", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, ringHash: {minimumRingSize: 9000000}}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash.ringHash.minimumRingSize", ErrInvalid, "more than"},
		{"dr ring size twice", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, minimumRingSize: 64, ringHash: {minimumRingSize: 64}}}}}\n",
			"spec.trafficPolicy.loadBalancer.consistentHash.minimumRingSize", ErrInvalid, "together with ringHash"},
		{"dr passthrough", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}}\n",
			"spec.trafficPolicy.loadBalancer.simple", ErrNotSupported, "PASSTHROUGH"},
		{"dr bad enum", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {loadBalancer: {simple: FASTEST}}}\n",
			"spec.trafficPolicy.loadBalancer.simple", ErrInvalid, "not one of"},
		{"dr annotation and simple", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x, annotations: {sextant.io/load-balancer: adaptive}}\nspec: {host: x, trafficPolicy: {loadBalancer: {simple: RANDOM}}}\n",
			"spec.trafficPolicy.loadBalancer", ErrInvalid, "annotation"},
		{"dr bad annotation", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x, annotations: {sextant.io/load-balancer: fastest}}\nspec: {host: x}\n",
			"metadata.annotations[sextant.io/load-balancer]", ErrInvalid, "adaptive"},
		{"dr tls mutual without credential", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {tls: {mode: MUTUAL}}}\n",
			"spec.trafficPolicy.tls.credentialName", ErrInvalid, "required with MUTUAL"},
		{"dr tls simple ca file", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {tls: {mode: SIMPLE, caCertificates: /etc/ca.pem}}}\n",
			"spec.trafficPolicy.tls.caCertificates", ErrNotSupported, "not supported"},
		{"dr tls sni", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {tls: {mode: ISTIO_MUTUAL, sni: x.example}}}\n",
			"spec.trafficPolicy.tls.sni", ErrNotSupported, "not used with ISTIO_MUTUAL"},
		{"dr tls san", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {tls: {mode: ISTIO_MUTUAL, subjectAltNames: [orders.example]}}}\n",
			"spec.trafficPolicy.tls.subjectAltNames[0]", ErrInvalid, "want a SPIFFE ID"},
		{"dr ejection percent", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, trafficPolicy: {outlierDetection: {maxEjectionPercent: 101}}}\n",
			"spec.trafficPolicy.outlierDetection.maxEjectionPercent", ErrInvalid, "0..100"},
		{"dr bad label key", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: x}\nspec: {host: x, subsets: [{name: a, labels: {\"a b\": c}}]}\n",
			"spec.subsets[0].labels[a b]", ErrInvalid, "metadata key"},
		{"not yaml", "a: [b\n", "", ErrInvalid, "not YAML"},
		{"a Pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: web-0}\nspec: {containers: [{name: c}]}\n",
			"kind", ErrInvalid, `this is a Pod (v1), not a VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry: Pods go to "sextant place"`},
		{"a Node in a List", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"status":{}}]}`,
			"items[0].kind", ErrInvalid, `this is a Node (v1), not a VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry: Nodes go to "sextant nodes apply"`},
		{"another kind", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {}\n",
			"kind", ErrInvalid, `this is a Deployment (apps/v1), not a VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar, PeerAuthentication, AuthorizationPolicy, RequestAuthentication or Telemetry`},
		{"empty", "# nothing\n", "", ErrInvalid, "no objects"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.in))
			if err == nil {
				t.Fatal("decoded without error")
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FieldError", err)
			}
			if fe.Path != tc.path || !errors.Is(fe, tc.sentinel) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got path %q (%v), message %q; want path %q (%v) containing %q", fe.Path, fe.Err, err, tc.path, tc.sentinel, tc.msg)
			}
		})
	}
}

// A YAML syntax error names the line of the input it is on (it was one
// early: for a stream starting with "---", and for every problem go-yaml's
// parser rather than its scanner finds).
func TestDecodeSyntaxErrorLine(t *testing.T) {
	vs := vsHead + "  - route: [{destination: {host: orders}}]\n"
	for _, c := range []struct{ name, in, want string }{
		{"after ---", "---\n" + vs + " bad: 1\n", "not YAML or JSON: line 10: did not find expected key"},
		{"mapping less indented", vs + " bad: 1\n", "not YAML or JSON: line 9: did not find expected key"},
		{"second document", vs + "---\n# comment\n" + strings.Replace(vs, "name: orders", "name: orders: x", 1),
			"document 2: not YAML or JSON: line 14: mapping values are not allowed in this context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s\nerror %v, want %q", c.in, err, c.want)
			}
		})
	}
}

func TestDecodeStreamNamesDocument(t *testing.T) {
	in := vsHead + "  - route: [{destination: {host: orders}}]\n---\n# second\n" + vsHead + "  - route: [{destination: {host: orders}}]\n    delegate: {name: x}\n"
	in = strings.Replace(in, "name: orders\nspec", "name: other\nspec", 1)
	_, err := Decode([]byte(in))
	if err == nil || !strings.Contains(err.Error(), "document 2: spec.http[0].delegate: may not be set with route") {
		t.Fatalf("got %v", err)
	}
	if _, err := Decode([]byte(vsHead + "  - route: [{destination: {host: orders}}]\n---\n" + vsHead + "  - route: [{destination: {host: orders}}]\n")); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Fatalf("duplicate objects: %v", err)
	}
}

func TestDecodeList(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"List","items":[
	 {"apiVersion":"networking.istio.io/v1","kind":"DestinationRule","metadata":{"name":"a","namespace":"prod","uid":"x","resourceVersion":"7"},"spec":{"host":"a"},"status":{"x":1}},
	 {"apiVersion":"networking.istio.io/v1","kind":"DestinationRule","metadata":{"name":"b"},"spec":{"host":"b","subsets":[{"name":"v1","labelz":{}}]}}]}`
	_, err := Decode([]byte(in))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "items[1].spec.subsets[0].labelz" {
		t.Fatalf("got %v", err)
	}
	in = strings.Replace(in, "labelz", "labels", 1)
	objs, err := Decode([]byte(in))
	if err != nil || len(objs) != 2 || objs[0].Namespace != "prod" {
		t.Fatalf("got %v %v", objs, err)
	}
}

func TestResolveHost(t *testing.T) {
	tests := []struct {
		host, ns string
		want     naming.ServiceKey
		bad      bool
	}{
		{"orders", "prod", naming.ServiceKey{Namespace: "prod", Name: "orders"}, false},
		{"orders.default", "prod", naming.ServiceKey{Namespace: "default", Name: "orders"}, false},
		{"orders.default.svc", "prod", naming.ServiceKey{Namespace: "default", Name: "orders"}, false},
		{"orders.default.svc.cluster.local", "prod", naming.ServiceKey{Namespace: "default", Name: "orders"}, false},
		{"a.b.default", "prod", naming.ServiceKey{Namespace: "default", Name: "a.b"}, false},
		{"orders.svc", "prod", naming.ServiceKey{}, true},
		{"*", "prod", naming.ServiceKey{}, true},
		{"*.default.svc.cluster.local", "prod", naming.ServiceKey{}, true},
		{"10.0.0.1", "prod", naming.ServiceKey{}, true},
		{"Orders", "prod", naming.ServiceKey{}, true},
		{"", "prod", naming.ServiceKey{}, true},
	}
	for _, tc := range tests {
		got, err := ResolveHost(tc.host, tc.ns)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ResolveHost(%q, %q) = %v, %v; want %v, bad=%v", tc.host, tc.ns, got, err, tc.want, tc.bad)
		}
	}
}

func TestParseKey(t *testing.T) {
	k := Key{KindDestinationRule, "prod", "orders.v2"}
	got, err := ParseKey(k.String())
	if err != nil || got != k {
		t.Fatalf("ParseKey(%q) = %v, %v", k, got, err)
	}
	for _, bad := range []string{"", "VirtualService/a", "WasmPlugin/a/b", "VirtualService/A/b", "VirtualService/a/b/c"} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKey(%q): %v", bad, err)
		}
	}
}

var _ = networking.VirtualService{}

// A Gateway and a VirtualService bound to it decode; the VirtualService's
// hosts are names at the gateway, not services, so the mesh's index sees
// none of them.
func TestDecodeGateway(t *testing.T) {
	b, err := os.ReadFile("testdata/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Gateway == nil || objs[0].Key.String() != "Gateway/edge/shop-gw" || objs[1].VirtualService == nil {
		t.Fatalf("%+v", objs)
	}
	if InMesh(objs[1].VirtualService) || Hosts(objs[1]) != nil || Destinations(objs[1]) != nil || len(VirtualServiceDestinations(objs[1])) != 1 {
		t.Errorf("a gateway-only VirtualService is in the mesh's view")
	}
	if k, err := ParseKey("Gateway/edge/shop-gw"); err != nil || k != objs[0].Key {
		t.Errorf("ParseKey: %v %v", k, err)
	}
}

// h2UpgradePolicy UPGRADE asks for HTTP/2 to the endpoints (gRPC), as in
// Istio; a subset's connectionPool replaces the rule's.
func TestHTTP2Policy(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: greeter, namespace: default}
spec:
  host: greeter
  trafficPolicy:
    connectionPool:
      http: {h2UpgradePolicy: UPGRADE}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      connectionPool:
        http: {h2UpgradePolicy: DO_NOT_UPGRADE}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p := EffectivePolicy(objs[0], "", 0); !p.HTTP2 {
		t.Errorf("service: %+v", p)
	}
	if p := EffectivePolicy(objs[0], "v1", 0); !p.HTTP2 {
		t.Errorf("v1: %+v", p)
	}
	if p := EffectivePolicy(objs[0], "v2", 0); p.HTTP2 {
		t.Errorf("v2: %+v", p)
	}
}
