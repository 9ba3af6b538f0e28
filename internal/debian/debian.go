// Package debian installs, for tests, the Debian packages that hold the
// real tools they run beside Sextant (Chromium, Prometheus, dig), when a
// tool is missing and this process may (root, apt-get present). Test
// binaries of several packages run at once: one lock file makes their
// installs take turns (the second finds the tool installed), and apt's own
// lock is waited for rather than failed on.
package debian

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Ensure returns the path of tool (an absolute path, or a name looked up
// in PATH), installing it first with `apt-get install -y -qq install...`
// (packages, and options such as --no-install-recommends) when it is
// missing. Its error says what is missing and why it could not be
// installed.
func Ensure(tool string, install ...string) (string, error) {
	if path, err := find(tool); err == nil {
		return path, nil
	}
	pkgs := strings.Join(install, " ")
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("debian: %s is missing and installing it needs root: apt-get install %s", tool, pkgs)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("debian: %s is missing and there is no apt-get to install %s with", tool, pkgs)
	}
	unlock, err := lock(filepath.Join(os.TempDir(), "sextant-apt-install.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if path, err := find(tool); err == nil {
		return path, nil // another test binary installed it meanwhile
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{
		{"-o", "DPkg::Lock::Timeout=300", "update", "-qq"},
		append([]string{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq"}, install...),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			if len(out) > 2000 {
				out = out[len(out)-2000:]
			}
			return "", fmt.Errorf("debian: apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	path, err := find(tool)
	if err != nil {
		return "", fmt.Errorf("debian: apt-get installed %s but %s is missing", pkgs, tool)
	}
	return path, nil
}

func find(tool string) (string, error) {
	if filepath.IsAbs(tool) {
		_, err := os.Stat(tool)
		return tool, err
	}
	return exec.LookPath(tool)
}
