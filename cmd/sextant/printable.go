package main

import (
	"strconv"
	"strings"
	"unicode"
)

// printable is s with every control character (a NUL, an escape, a line
// break, C1) written as a Go escape (\x00, \x1b, \n, \u009b), so that a
// value stored before the server refused them cannot move the terminal's
// cursor, colour it or cut a table row when the CLI prints it.
func printable(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	var sb strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRuneToASCII(r)
			sb.WriteString(q[1 : len(q)-1])
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
