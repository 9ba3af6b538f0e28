package config

import (
	"regexp"
	"strconv"
)

// placeholderRE finds what a template or a sample leaves for the user to
// fill in: a shell variable ($CREDENTIAL_NAME, ${NAME}) or a Go template
// action ({{.Revision}}). No field Sextant reads takes either literally (a
// regex's "$" is not followed by a capital), so such a document is refused
// as a whole, naming the placeholder, rather than field by field.
var placeholderRE = regexp.MustCompile(`\$\{?[A-Z_][A-Z0-9_]*\}?|\{\{[^}]*\}\}`)

// placeholders reports each string of v, keys included, that holds a
// placeholder; it returns whether it found one.
func placeholders(c errs, path string, v any) bool {
	found := false
	switch v := v.(type) {
	case string:
		if p := placeholderRE.FindString(v); p != "" {
			c.add(path, ErrInvalid, "%q holds the placeholder %s: fill it in (envsubst, helm template) before applying", v, p)
			found = true
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if p := placeholderRE.FindString(k); p != "" {
				c.add(path, ErrInvalid, "the key %q holds the placeholder %s: fill it in (envsubst, helm template) before applying", k, p)
				found = true
			}
			found = placeholders(c, join(path, k), v[k]) || found
		}
	case []any:
		for i, x := range v {
			found = placeholders(c, path+"["+strconv.Itoa(i)+"]", x) || found
		}
	}
	return found
}
