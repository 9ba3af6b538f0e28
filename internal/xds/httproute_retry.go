package xds

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1"
)

// PreviousPriorities is the name of Envoy's retry priority that takes the
// priorities (localities) a call already tried out of a retry's priority
// load: what Istio publishes for retryRemoteLocalities.
const PreviousPriorities = "envoy.retry_priorities.previous_priorities"

// PreviousPrioritiesUpdateFrequency is Istio's update_frequency: the first
// two attempts use the unmodified load, the third leaves out the
// priorities of the first two, and so on every second attempt.
const PreviousPrioritiesUpdateFrequency = 2

// previousPrioritiesAny is the retry priority's typed config, the same
// for every route (only read once marshalled into a route); marshalling a
// message of this package does not fail.
var previousPrioritiesAny, _ = anypb.New(&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: PreviousPrioritiesUpdateFrequency})

// retryExtras writes a route's retries.backoff as the retry policy's
// retry_back_off base interval (Envoy's max: ten times it),
// retryIgnorePreviousHosts false as no previous_hosts predicate, and
// retryRemoteLocalities true as the previous_priorities retry priority
// (update_frequency 2), as Istio does.
func retryExtras(rp *routev3.RetryPolicy, r *networking.HTTPRetry) {
	if r.Backoff != nil {
		rp.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: r.Backoff}
	}
	if v := r.RetryIgnorePreviousHosts; v != nil && !v.GetValue() {
		rp.RetryHostPredicate = nil
		rp.HostSelectionRetryMaxAttempts = 0
	}
	if r.GetRetryRemoteLocalities().GetValue() {
		rp.RetryPriority = &routev3.RetryPolicy_RetryPriority{Name: PreviousPriorities,
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: previousPrioritiesAny}}
	}
}
