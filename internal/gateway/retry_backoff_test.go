package gateway

import (
	"strings"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRetryBackoff: retry_back_off is read (Envoy's 25 ms base and ten
// times that at most without it), each retry waits a random time below
// base·2^(n-1) capped at the max, a retry whose wait would pass the call's
// deadline is not made, and a bad back-off is refused naming the field.
func TestRetryBackoff(t *testing.T) {
	s, err := decodeRetry(&route.RetryPolicy{RetryOn: "5xx"}, "r")
	if err != nil || s.backoffBase != 25*time.Millisecond || s.backoffMax != 250*time.Millisecond {
		t.Fatalf("default: %v %v %v", s.backoffBase, s.backoffMax, err)
	}
	s, err = decodeRetry(&route.RetryPolicy{RetryOn: "5xx", RetryBackOff: &route.RetryPolicy_RetryBackOff{
		BaseInterval: durationpb.New(100 * time.Millisecond), MaxInterval: durationpb.New(300 * time.Millisecond)}}, "r")
	if err != nil || s.backoffBase != 100*time.Millisecond || s.backoffMax != 300*time.Millisecond {
		t.Fatalf("set: %v %v %v", s.backoffBase, s.backoffMax, err)
	}
	for n, ceil := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 300 * time.Millisecond, 9: 300 * time.Millisecond} {
		var most time.Duration
		for range 2000 {
			d := s.backoffWait(n)
			if d < 0 || d >= ceil {
				t.Fatalf("retry %d waits %v, want [0, %v)", n, d, ceil)
			}
			most = max(most, d)
		}
		if most < ceil/2 {
			t.Errorf("retry %d: the longest of 2000 waits is %v, want them spread up to %v", n, most, ceil)
		}
	}
	long := retrySpec{backoffBase: time.Second, backoffMax: 10 * time.Second}
	k := call{retry: &long, deadline: time.Now().Add(-time.Millisecond)}
	if k.backoff(1) {
		t.Error("a retry past the call's deadline was made")
	}
	for _, tc := range []struct {
		name, want string
		bo         *route.RetryPolicy_RetryBackOff
	}{
		{"no base", "retry_back_off.base_interval: required", &route.RetryPolicy_RetryBackOff{}},
		{"base under 1ms", "at least 1ms", &route.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Microsecond)}},
		{"max under base", "less than base_interval", &route.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Second), MaxInterval: durationpb.New(time.Millisecond)}},
	} {
		if _, err := decodeRetry(&route.RetryPolicy{RetryBackOff: tc.bo}, "r"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}
