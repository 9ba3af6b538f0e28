package subset

import (
	"testing"

	"go.uber.org/goleak"
)

// Tests start pickers on goroutines (TestConcurrentPicksAndUpdates); none
// may be left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
