package xds

import (
	"bytes"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/envoycheck"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// TestRetryBackoffAsIstio: retries.backoff is the retry policy's
// retry_back_off base interval, retryIgnorePreviousHosts false drops the
// previous_hosts predicate, as Istio writes them; the rest of Istio's
// default policy stays; the hand encoder agrees.
func TestRetryBackoffAsIstio(t *testing.T) {
	vh := ratingsVirtualHost(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{uri: {prefix: /a}}]
    retries: {attempts: 3, retryOn: 5xx, backoff: 50ms}
    route: [{destination: {host: ratings}}]
  - retries: {attempts: 2, retryIgnorePreviousHosts: false}
    route: [{destination: {host: ratings}}]
`)
	if err := RouteConfiguration("r", vh).ValidateAll(); err != nil {
		t.Fatalf("does not validate: %v", err)
	}
	rp := vh.Routes[0].GetRoute().GetRetryPolicy()
	if rp.GetRetryBackOff().GetBaseInterval().AsDuration() != 50*time.Millisecond || rp.GetRetryBackOff().GetMaxInterval() != nil ||
		rp.GetNumRetries().GetValue() != 3 || len(rp.GetRetryHostPredicate()) != 1 {
		t.Fatalf("backoff: %v", rp)
	}
	rp = vh.Routes[1].GetRoute().GetRetryPolicy()
	if rp.GetRetryBackOff() != nil || len(rp.GetRetryHostPredicate()) != 0 || rp.GetHostSelectionRetryMaxAttempts() != 0 || rp.GetNumRetries().GetValue() != 2 {
		t.Fatalf("retryIgnorePreviousHosts false: %v", rp)
	}
}

// TestRetryRemoteLocalitiesAsIstio: retryRemoteLocalities true is the
// retry policy's previous_priorities retry priority with update_frequency
// 2, as Istio's retry.ConvertPolicy writes it; false, unset and the
// default policy carry none; the route configuration validates with the
// typed config inside it, and the hand encoder agrees.
func TestRetryRemoteLocalitiesAsIstio(t *testing.T) {
	vh := ratingsVirtualHost(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings}
spec:
  hosts: [ratings]
  http:
  - match: [{uri: {prefix: /a}}]
    retries: {attempts: 2, retryOn: 5xx, retryRemoteLocalities: true}
    route: [{destination: {host: ratings}}]
  - match: [{uri: {prefix: /b}}]
    retries: {attempts: 2, retryRemoteLocalities: false}
    route: [{destination: {host: ratings}}]
  - retries: {attempts: 2}
    route: [{destination: {host: ratings}}]
`)
	if bad := envoycheck.Validate("ratings", RouteConfiguration("r", vh)); len(bad) > 0 {
		t.Fatalf("does not validate: %v", bad)
	}
	rp := vh.Routes[0].GetRoute().GetRetryPolicy()
	pr := rp.GetRetryPriority()
	if pr.GetName() != "envoy.retry_priorities.previous_priorities" ||
		pr.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig" {
		t.Fatalf("retryRemoteLocalities true: retry priority %v", pr)
	}
	var pc previousprioritiesv3.PreviousPrioritiesConfig
	if err := pr.GetTypedConfig().UnmarshalTo(&pc); err != nil || pc.GetUpdateFrequency() != 2 {
		t.Fatalf("previous_priorities config %v (%v), want update_frequency 2", &pc, err)
	}
	// The rest of the policy is as without it.
	if rp.GetNumRetries().GetValue() != 2 || rp.GetRetryOn() != "5xx" || len(rp.GetRetryHostPredicate()) != 1 || rp.GetHostSelectionRetryMaxAttempts() != 5 {
		t.Fatalf("retryRemoteLocalities true: policy %v", rp)
	}
	for i, r := range vh.Routes[1:] {
		if p := r.GetRoute().GetRetryPolicy(); p == nil || p.GetRetryPriority() != nil {
			t.Fatalf("route %d without retryRemoteLocalities: policy %v", i+1, p)
		}
	}
	if p := retryPolicy(nil); p.GetRetryPriority() != nil {
		t.Fatalf("default policy has a retry priority: %v", p)
	}
}

// ratingsVirtualHost is the virtual host of the VirtualService for
// ratings in doc, after checking that the hand encoder agrees with it.
func ratingsVirtualHost(t *testing.T, doc string) *routev3.VirtualHost {
	t.Helper()
	objs, err := config.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
	return VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
}
