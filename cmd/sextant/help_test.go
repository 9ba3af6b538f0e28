package main

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The help of every command speaks a user's words: no reference to the
// project's internal design notes ("seed 001", "the race's providers"),
// which a user cannot look up.
func TestHelpHasNoInsiderWords(t *testing.T) {
	insider := regexp.MustCompile(`(?i)\bseeds? 0\d\d|\(seed|the race's|the 2019 race|message-store race`)
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		n++
		for _, text := range []string{c.Short, c.Long, c.Example} {
			if m := insider.FindString(text); m != "" {
				t.Errorf("%q: help says %q", c.CommandPath(), m)
			}
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if m := insider.FindString(f.Usage); m != "" {
				t.Errorf("%q --%s: help says %q", c.CommandPath(), f.Name, m)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
	if n < 30 {
		t.Fatalf("walked only %d commands", n)
	}
}

// TestHelpFitsATerminal: every prose line of every command's long help
// fits 80 columns (cobra prints it as written: a long line wraps in the
// reader's terminal mid-word). Indented lines (commands, tables) may be
// longer, as kubectl's examples are.
func TestHelpFitsATerminal(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range strings.Split(c.Long, "\n") {
			if n := utf8.RuneCountInString(line); n > 80 && !strings.HasPrefix(line, " ") {
				t.Errorf("%q: a help line of %d columns: %q", c.CommandPath(), n, line)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)
}
