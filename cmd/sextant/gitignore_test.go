package main

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"testing"
)

// The files docs/security.md's walkthrough writes in the repository's root
// (certificates and keys under --dir ./..., bootstraps redirected to
// ./NAME.json) are ignored by git: a key left untracked is one "git add ."
// away from a commit.
func TestWalkthroughFilesIgnored(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on this machine")
	}
	if out, err := exec.Command("git", "-C", "../..", "rev-parse", "--is-inside-work-tree").Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Skip("not a git checkout: nothing to ignore files in")
	}
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range regexp.MustCompile(`--dir \./(\S+)`).FindAllStringSubmatch(string(doc), -1) {
		for _, f := range []string{"cert.pem", "key.pem", "ca.pem"} {
			paths = append(paths, path.Join(m[1], f))
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^bin/sextant .*> (\S+)$`).FindAllStringSubmatch(string(doc), -1) {
		paths = append(paths, m[1])
	}
	if len(paths) < 6 {
		t.Fatalf("found only %v in the walkthrough", paths)
	}
	for _, p := range paths {
		err := exec.Command("git", "-C", "../..", "check-ignore", "-q", "--no-index", p).Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.ExitCode() == 1:
			t.Errorf("%s, which the walkthrough writes, is not ignored by .gitignore", p)
		case err != nil:
			t.Fatalf("git check-ignore %s: %v", p, err)
		}
	}
}
