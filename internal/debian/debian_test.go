package debian

import (
	"os/exec"
	"testing"
)

// TestEnsureFindsWhatIsThere: a tool that is installed is answered as it
// is, by name or by absolute path, with nothing installed.
func TestEnsureFindsWhatIsThere(t *testing.T) {
	want, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"sh", want} {
		got, err := Ensure(tool, "dash")
		if err != nil || got != want {
			t.Fatalf("Ensure(%q) = %q, %v; want %q", tool, got, err, want)
		}
	}
}
