package httpapi

import (
	"net/http"

	"github.com/sextant-mesh/sextant/internal/browserguard"
)

// BrowserGuard serves h the requests g lets through, and answers the
// others 403 permission_denied naming why (a web page's cross-origin
// write, a Host that is not this machine's: docs/security.md, "Threat
// model"), before any handler reads them.
func BrowserGuard(h http.Handler, g *browserguard.Guard) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.Check(r); err != nil {
			writeError(w, &apiError{http.StatusForbidden, "permission_denied", err.Error(), ""})
			return
		}
		h.ServeHTTP(w, r)
	})
}
