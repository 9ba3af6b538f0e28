package trace

import (
	"testing"

	"go.uber.org/goleak"
)

// The exporter owns a goroutine, and its gRPC and HTTP clients theirs;
// Close must stop them all.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
