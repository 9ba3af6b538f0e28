package main

import (
	"strings"
	"testing"
)

// TestSidecarCaptureCommands: the iptables commands "sidecar capture"
// runs (its --dry-run), and the flags it refuses, naming them.
func TestSidecarCaptureCommands(t *testing.T) {
	got, err := captureFlags{outboundPort: 15001, include: []string{"10.96.0.1/12", "*"}, excludeUID: 1337}.commands()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, strings.Join(c, " "))
	}
	want := []string{
		"-t nat -N SEXTANT_OUTPUT",
		"-t nat -A OUTPUT -p tcp -j SEXTANT_OUTPUT",
		"-t nat -A SEXTANT_OUTPUT -m owner --uid-owner 1337 -j RETURN",
		"-t nat -A SEXTANT_OUTPUT -d 127.0.0.0/8 -j RETURN",
		"-t nat -A SEXTANT_OUTPUT -p tcp -d 10.96.0.0/12 -j REDIRECT --to-ports 15001",
		"-t nat -A SEXTANT_OUTPUT -p tcp -j REDIRECT --to-ports 15001",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range []struct {
		f    captureFlags
		want string
	}{
		{captureFlags{outboundPort: 15001, excludeUID: -1}, "--include-cidrs: required"},
		{captureFlags{outboundPort: 15001, include: []string{"*"}, excludeUID: -1}, `--include-cidrs "*": needs --exclude-uid`},
		{captureFlags{outboundPort: 15001, include: []string{"10.96.0.0"}, excludeUID: -1}, `--include-cidrs "10.96.0.0": want an IPv4 CIDR`},
		{captureFlags{outboundPort: 0, include: []string{"10.96.0.0/12"}, excludeUID: -1}, "--outbound-port 0"},
	} {
		if _, err := c.f.commands(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
}
