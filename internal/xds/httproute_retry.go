package xds

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1"
)

// retryExtras writes a route's retries.backoff as the retry policy's
// retry_back_off base interval (Envoy's max: ten times it), and
// retryIgnorePreviousHosts false as no previous_hosts predicate, as Istio
// does.
func retryExtras(rp *routev3.RetryPolicy, r *networking.HTTPRetry) {
	if r.Backoff != nil {
		rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: r.Backoff}
	}
	if v := r.RetryIgnorePreviousHosts; v != nil && !v.GetValue() {
		rp.RetryHostPredicate = nil
		rp.HostSelectionRetryMaxAttempts = 0
	}
}
