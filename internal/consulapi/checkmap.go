package consulapi

import (
	"net/http"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// applyChecks sets the checks of a registration on in. The registry has no
// server-run checks yet: a registration with checks is refused rather than
// registered without them.
func (a *API) applyChecks(in *instance.Instance, checks []CheckDefinition) error {
	if len(checks) > 0 {
		return badRequest("Check/Checks: " + checks[0].Type + " checks are not supported yet by this Sextant server; register without checks")
	}
	return nil
}

// checkUpdate serves /v1/agent/check/pass|warn|fail|update/{id}; status ""
// takes it from the body (update).
func (a *API) checkUpdate(status string) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		return notFound("Unknown check ID " + r.PathValue("id") + ": this Sextant server runs no checks yet")
	}
}

// checksOf are the checks of in as Consul shows them.
func (a *API) checksOf(in *instance.Instance, tags []string) []healthCheck {
	return a.baseChecks(in, tags)
}
