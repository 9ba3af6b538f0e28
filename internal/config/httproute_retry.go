package config

import (
	"time"

	networking "istio.io/api/networking/v1"
)

// HTTPRoute retries beyond attempts, perTryTimeout and retryOn: the wait
// before each retry (backoff, Envoy's retry_back_off base interval),
// whether a retry may go to an endpoint already tried, and whether retries
// move on to localities not yet tried (retryRemoteLocalities, Envoy's
// previous_priorities retry priority).
func init() {
	allow(&networking.HTTPRetry{}, "backoff", "retry_ignore_previous_hosts", "retry_remote_localities")
}

func validateRetryExtras(c errs, path string, rt *networking.HTTPRetry) {
	if rt.Backoff != nil {
		p := join(path, "backoff")
		validateDuration(c, p, rt.Backoff, true)
		if rt.Backoff.CheckValid() == nil && rt.Backoff.AsDuration() > 0 && rt.Backoff.AsDuration() < time.Millisecond {
			c.add(p, ErrInvalid, "%v: at least 1ms (Envoy's least)", rt.Backoff.AsDuration())
		}
	}
	// Istio refuses it on retries that are off, as a policy that says
	// nothing.
	if rt.RetryRemoteLocalities != nil && rt.Attempts == 0 {
		c.add(join(path, "retryRemoteLocalities"), ErrInvalid, "set with attempts 0 (retries off)")
	}
}
