package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/store"
)

// TestStoreDiskErrors: a write refused for lack of space is 507 (nothing
// written) naming the data directory; a write the store failed is 503
// (outcome unknown), as the engine wraps them.
func TestStoreDiskErrors(t *testing.T) {
	full := fmt.Errorf("commit: commit: %w", &store.SpaceError{Dir: "/var/lib/sextant", Free: 1 << 20, Reserve: 256 << 20})
	if code, msg := StatusOf(full); code != http.StatusInsufficientStorage || !strings.Contains(msg, "/var/lib/sextant") || !strings.Contains(msg, "nothing was written") {
		t.Fatalf("no space: %d %q", code, msg)
	}
	failed := fmt.Errorf("commit: commit: %w", fmt.Errorf("%w: the data directory /d: sync the log: no space left on device", store.ErrWriteFailed))
	if code, msg := StatusOf(failed); code != http.StatusServiceUnavailable || !strings.Contains(msg, "may or may not") || !strings.Contains(msg, "/d") {
		t.Fatalf("write failed: %d %q", code, msg)
	}
}
