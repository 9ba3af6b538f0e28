package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestDocsCommandLines is the cheap check of every page's commands that
// TestReadme does not run: each sextant command in a code block of README.md,
// examples/README.md, docs/*.md and docs/perf/*.md (a ```sh line, or a "$ "
// line of another block) names a real subcommand, and its flags exist and
// take the values given, checked against the binary's own command tree
// without running it.
func TestDocsCommandLines(t *testing.T) {
	// The check itself: what it must refuse, and a line's parsing.
	for _, bad := range []string{
		"sextant gateway --registy http://127.0.0.1:7400",   // a misspelt flag
		"sextant config aply -f examples/routing.yaml",      // no such subcommand
		"sextant calls stats --service orders --since 5x",   // a bad duration
		"cat x | sextant instances deregister > out.txt",    // an id is required
		"sextant watch a/b c/d   # watch takes one service", // too many arguments
	} {
		inv := sextantInvocations(bad)
		if len(inv) != 1 || checkInvocation(inv[0]) == nil {
			t.Errorf("%q: %q passed the check", bad, inv)
		}
	}
	var pages []string
	for _, glob := range []string{"../../docs/*.md", "../../docs/perf/*.md"} {
		found, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		if len(found) == 0 {
			t.Fatalf("no page matches %s", glob)
		}
		pages = append(pages, found...)
	}
	pages = append(pages, "../../README.md", "../../examples/README.md")
	checked := 0
	for _, page := range pages {
		for _, c := range docCommands(t, page) {
			for _, args := range sextantInvocations(c.line) {
				checked++
				if err := checkInvocation(args); err != nil {
					t.Errorf("%s:%d: sextant %s: %v", strings.TrimPrefix(page, "../../"), c.n, strings.Join(args, " "), err)
				}
			}
		}
	}
	t.Logf("%d sextant commands of %d pages checked", checked, len(pages))
	if checked < 50 {
		t.Fatalf("only %d sextant commands found in the docs; is the parsing broken?", checked)
	}
}

type docCommand struct {
	n    int // line number of its first line
	line string
	sh   bool // from a sh block
}

// docCommands returns the command lines of a page's fenced blocks: every
// line of a sh block (continuations joined, here-document bodies skipped),
// and the "$ " lines of other blocks.
func docCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		cmds       []docCommand
		inBlock    bool
		sh         bool
		heredocEnd string
		cont       *docCommand
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		trim := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trim, "```"):
			inBlock, sh = !inBlock, trim == "```sh" || trim == "```bash"
			continue
		case !inBlock:
			continue
		case heredocEnd != "":
			if trim == heredocEnd {
				heredocEnd = ""
			}
			continue
		}
		if cont != nil {
			cont.line += " " + trim
		} else if sh || strings.HasPrefix(trim, "$ ") {
			cont = &docCommand{n: n, line: strings.TrimPrefix(trim, "$ "), sh: sh}
		} else {
			continue
		}
		if strings.HasSuffix(cont.line, "\\") {
			cont.line = strings.TrimSuffix(cont.line, "\\")
			continue
		}
		if i := strings.Index(cont.line, "<<"); i >= 0 {
			heredocEnd = strings.Trim(strings.Fields(cont.line[i+2:] + " x")[0], `'"-`)
		}
		cmds = append(cmds, *cont)
		cont = nil
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if inBlock || cont != nil || heredocEnd != "" {
		t.Fatalf("%s: a code block, continued line or here-document does not end", path)
	}
	return cmds
}

// sextantInvocations splits a shell line into its simple commands (at |,
// ;, &, &&, ||, redirections and comments, quotes honoured) and returns the
// arguments of those that run sextant.
func sextantInvocations(line string) [][]string {
	var (
		out   [][]string
		words []string
		w     strings.Builder
		inW   bool
		quote rune
	)
	endWord := func() {
		if inW {
			words = append(words, w.String())
		}
		w.Reset()
		inW = false
	}
	endCmd := func() {
		endWord()
		for i, w := range words { // a synopsis: [--flag value] is optional
			words[i] = strings.TrimSuffix(strings.TrimPrefix(w, "["), "]")
		}
		if len(words) > 1 {
			switch words[0] {
			case "sextant", "bin/sextant", "./bin/sextant":
				out = append(out, words[1:])
			}
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inW = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			w.WriteRune(rs[i])
			inW = true
		case r == '#' && !inW:
			endCmd()
			return out
		case r == ' ' || r == '\t':
			endWord()
		case strings.ContainsRune("|;&()", r):
			endCmd()
		case r == '<' && placeholderAt(rs[i:]) > 0: // <id>: a word the reader fills in
			n := placeholderAt(rs[i:])
			w.WriteString(string(rs[i : i+n]))
			inW = true
			i += n - 1
		case r == '<' || r == '>':
			endCmd()
			words = []string{"redirect"} // the target word is not a command
		default:
			w.WriteRune(r)
			inW = true
		}
	}
	endCmd()
	return out
}

// placeholderAt is the length of the <placeholder> rs starts with, or 0.
func placeholderAt(rs []rune) int {
	for i := 1; i < len(rs); i++ {
		switch r := rs[i]; {
		case r == '>':
			if i > 1 {
				return i + 1
			}
			return 0
		case r != '-' && (r < 'a' || r > 'z'):
			return 0
		}
	}
	return 0
}

// checkInvocation finds args' subcommand in the binary's tree and parses
// its flags into copies of them (the tree's own flags keep their values).
func checkInvocation(args []string) error {
	cmd, rest, err := rootCmd.Find(args)
	if err != nil {
		return err
	}
	if !cmd.Runnable() && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return fmt.Errorf("%q is not a subcommand of %q", rest[0], cmd.CommandPath())
	}
	fs := pflag.NewFlagSet(cmd.CommandPath(), pflag.ContinueOnError)
	fs.SetOutput(discard{})
	add := func(f *pflag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.AddFlag(&pflag.Flag{Name: f.Name, Shorthand: f.Shorthand, NoOptDefVal: f.NoOptDefVal,
				Value: &flagCheck{typ: f.Value.Type()}})
		}
	}
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	add(&pflag.Flag{Name: "help", Shorthand: "h", NoOptDefVal: "true", Value: &flagCheck{typ: "bool"}})
	if cmd == rootCmd {
		add(&pflag.Flag{Name: "version", Shorthand: "v", NoOptDefVal: "true", Value: &flagCheck{typ: "bool"}})
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	return cmd.ValidateArgs(fs.Args())
}

// flagCheck stands in for a flag's value: it checks the text parses as the
// flag's type and keeps nothing.
type flagCheck struct{ typ string }

func (f *flagCheck) String() string { return "" }
func (f *flagCheck) Type() string   { return f.typ }
func (f *flagCheck) Set(s string) error {
	var err error
	switch f.typ {
	case "bool":
		_, err = strconv.ParseBool(s)
	case "int", "int64", "int32":
		_, err = strconv.ParseInt(s, 0, 64)
	case "uint", "uint64", "uint32", "uint16":
		_, err = strconv.ParseUint(s, 0, 64)
	case "float64", "float32":
		_, err = strconv.ParseFloat(s, 64)
	case "duration":
		_, err = time.ParseDuration(s)
	}
	return err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
