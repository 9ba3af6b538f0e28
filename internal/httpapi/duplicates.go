package httpapi

import (
	"errors"

	"github.com/sextant-mesh/sextant/internal/jsonkeys"
)

// duplicateKeys is the 400 of a JSON body that gives a key twice in one
// object (encoding/json would keep the last without a word), naming the
// key and its line; nil if it gives none.
func duplicateKeys(body []byte) error {
	var de *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(body), &de) {
		return badRequest(de.Field(), "key %q given twice (line %d): give each key once", de.Key, de.Line)
	}
	return nil
}
