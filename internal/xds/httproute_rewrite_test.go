package xds

import (
	"bytes"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

const rewriteVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{uri: {prefix: /v1/ratings}}]
    rewrite: {uri: /ratings, authority: ratings.internal}
    route: [{destination: {host: ratings}}]
  - match: [{uri: {prefix: /svc}}]
    rewrite: {uriRegexRewrite: {match: '^/svc/([^/]+)(/.*)$', rewrite: '\2/of/\1'}}
    route: [{destination: {host: ratings}}]
`

// TestRewriteAsIstio: a rewrite is published on the route's action as
// Istio publishes it (prefix_rewrite, host_rewrite_literal, regex_rewrite),
// passes go-control-plane's validation, and the hand encoder agrees.
func TestRewriteAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(rewriteVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	a := vh.Routes[0].GetRoute()
	if a.GetPrefixRewrite() != "/ratings" || a.GetHostRewriteLiteral() != "ratings.internal" || a.GetCluster() == "" {
		t.Fatalf("uri and authority: %v", vh.Routes[0])
	}
	rr := vh.Routes[1].GetRoute().GetRegexRewrite()
	if rr.GetPattern().GetRegex() != `^/svc/([^/]+)(/.*)$` || rr.GetSubstitution() != `\2/of/\1` || vh.Routes[1].GetRoute().GetPrefixRewrite() != "" {
		t.Fatalf("regex: %v", vh.Routes[1])
	}
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}

const redirectVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{uri: {prefix: /old/}}]
    redirect: {prefixRewrite: /new/, authority: b.example, port: 8443, scheme: https, redirectCode: 308}
  - match: [{uri: {exact: /v1}}]
    redirect: {uri: /v2, derivePort: FROM_REQUEST_PORT}
  - route: [{destination: {host: ratings}}]
`

// TestRedirectAsIstio: a redirect is published as Istio publishes it (a
// RedirectAction, 301 by default), derivePort FROM_REQUEST_PORT in the
// route's sextant metadata, valid, the hand encoder agreeing.
func TestRedirectAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(redirectVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	if len(vh.Routes) != 3 {
		t.Fatalf("%d routes, want 3", len(vh.Routes))
	}
	a := vh.Routes[0].GetRedirect()
	if a.GetPrefixRewrite() != "/new/" || a.GetHostRedirect() != "b.example" || a.GetPortRedirect() != 8443 ||
		a.GetSchemeRedirect() != "https" || a.GetResponseCode().String() != "PERMANENT_REDIRECT" {
		t.Fatalf("redirect: %v", vh.Routes[0])
	}
	b := vh.Routes[1]
	if b.GetRedirect().GetPathRedirect() != "/v2" || b.GetRedirect().GetResponseCode().String() != "MOVED_PERMANENTLY" ||
		b.GetMetadata().GetFilterMetadata()["sextant"].GetFields()[RedirectPortField].GetStringValue() != "FROM_REQUEST_PORT" {
		t.Fatalf("redirect with the request's port: %v", b)
	}
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}

const corsVS = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - corsPolicy:
      allowOrigin: ['https://old.example']
      allowOrigins: [{exact: 'https://a.example'}, {prefix: 'https://b.'}, {regex: 'https://.*\.c\.example'}]
      allowMethods: [GET, POST]
      allowHeaders: [x-a, x-b]
      exposeHeaders: [x-c]
      maxAge: 90s
      allowCredentials: true
      unmatchedPreflights: IGNORE
    route: [{destination: {host: ratings}}]
`

// TestCORSAsIstio: a corsPolicy is published as Istio publishes it (the
// route's typed_per_filter_config["envoy.filters.http.cors"], here inside
// a FilterConfig marked optional so grpc-go skips it), valid, the hand
// encoder agreeing.
func TestCORSAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(corsVS))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	fc := new(routev3.FilterConfig)
	if err := vh.Routes[0].TypedPerFilterConfig[CORSFilterName].UnmarshalTo(fc); err != nil || !fc.IsOptional {
		t.Fatalf("filter config %v %v", fc, err)
	}
	p := new(corsv3.CorsPolicy)
	if err := fc.Config.UnmarshalTo(p); err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	o := p.AllowOriginStringMatch
	if len(o) != 4 || o[0].GetExact() != "https://old.example" || o[1].GetExact() != "https://a.example" || o[2].GetPrefix() != "https://b." ||
		o[3].GetSafeRegex().GetRegex() != `https://.*\.c\.example` || p.AllowMethods != "GET,POST" || p.AllowHeaders != "x-a,x-b" ||
		p.ExposeHeaders != "x-c" || p.MaxAge != "90" || !p.AllowCredentials.GetValue() || p.ForwardNotMatchingPreflights.GetValue() {
		t.Fatalf("cors policy: %v", p)
	}
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}
