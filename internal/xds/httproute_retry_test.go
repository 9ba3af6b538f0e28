package xds

import (
	"bytes"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// TestRetryBackoffAsIstio: retries.backoff is the retry policy's
// retry_back_off base interval, retryIgnorePreviousHosts false drops the
// previous_hosts predicate, as Istio writes them; the rest of Istio's
// default policy stays; the hand encoder agrees.
func TestRetryBackoffAsIstio(t *testing.T) {
	objs, err := config.Decode([]byte(`apiVersion: networking.istio.io/v1
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
`))
	if err != nil {
		t.Fatal(err)
	}
	svc := naming.ServiceKey{Namespace: "default", Name: "ratings"}
	clusterFor := func(d config.Destination) (string, bool) { return ClusterName(d.Service, d.Subset, d.Port), true }
	vh := VirtualHost("ratings", []string{"ratings"}, svc, objs[0], clusterFor, nil)
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
	enc, err := EncodeVirtualHost("ratings", svc, objs[0], clusterFor, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg, _ := Encode(VirtualHost("ratings", nil, svc, objs[0], clusterFor, nil)); !bytes.Equal(enc, msg) {
		t.Fatal("EncodeVirtualHost differs from the message")
	}
}
