package embedded

import (
	"testing"

	"github.com/sextant-mesh/sextant/internal/store/storetest"
)

// TestContract runs the contract every backend keeps (the MySQL store runs
// the same one), so that the two agree.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) storetest.Backend {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}
