package gateway

import (
	"math/rand/v2"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// Envoy's retry back-off when a policy gives none: 25 ms base, ten times
// that at most.
const (
	defaultBackoffBase = 25 * time.Millisecond
	backoffMaxFactor   = 10
)

// decodeBackoff reads a retry policy's retry_back_off into s: base_interval
// (required when set, at least 1 ms) and max_interval (at least the base;
// default ten times it), Envoy's defaults without it.
func decodeBackoff(s *retrySpec, rp *route.RetryPolicy, path string) error {
	s.backoffBase, s.backoffMax = defaultBackoffBase, backoffMaxFactor*defaultBackoffBase
	bo := rp.GetRetryBackOff()
	if bo == nil {
		return nil
	}
	if bo.GetBaseInterval() == nil {
		return fieldErr(path+".retry_back_off.base_interval", "required")
	}
	base, err := duration(bo.GetBaseInterval(), path+".retry_back_off.base_interval")
	if err != nil {
		return err
	}
	if base < time.Millisecond {
		return fieldErr(path+".retry_back_off.base_interval", "%v: at least 1ms", base)
	}
	s.backoffBase, s.backoffMax = base, backoffMaxFactor*base
	if bo.GetMaxInterval() != nil {
		m, err := duration(bo.GetMaxInterval(), path+".retry_back_off.max_interval")
		if err != nil {
			return err
		}
		if m < base {
			return fieldErr(path+".retry_back_off.max_interval", "%v: less than base_interval %v", m, base)
		}
		s.backoffMax = m
	}
	return nil
}

// backoffWait is how long retry n (1: the first) waits, as Envoy's
// jittered exponential back-off: a random time below base·2^(n-1), capped
// at the max interval.
func (s *retrySpec) backoffWait(n int) time.Duration {
	if s.backoffBase <= 0 {
		return 0
	}
	ceil := s.backoffBase << min(n-1, 20)
	if ceil <= 0 || ceil > s.backoffMax {
		ceil = s.backoffMax
	}
	return rand.N(ceil)
}

// backoff waits before retry n of call k, never past its deadline: false
// when the deadline comes first (the retry is not made).
func (k *call) backoff(n int) bool {
	d := k.retry.backoffWait(n)
	if d <= 0 {
		return true
	}
	if !k.deadline.IsZero() && time.Until(k.deadline) <= d {
		return false
	}
	time.Sleep(d)
	return true
}
