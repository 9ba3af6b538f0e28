package push

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestRunPolicySmall runs the policy scenario at a small scale: every
// policy and cluster change reaches every server and the figures are
// filled in.
func TestRunPolicySmall(t *testing.T) {
	var out bytes.Buffer
	res, err := RunPolicy(context.Background(), PolicyConfig{Subscribers: 5, Duration: 700 * time.Millisecond, ConfigEvery: 50 * time.Millisecond}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var printed PolicyResult
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed.Subscribers != 5 {
		t.Fatalf("printed %q: %v", out.String(), err)
	}
	if res.Undelivered != 0 || res.PolicyChanges == 0 || res.ClusterChanges == 0 || res.PolicyAllP99MS == 0 || res.ClusterAllP99MS == 0 {
		t.Fatalf("%+v", res)
	}
}
