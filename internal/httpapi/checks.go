package httpapi

import (
	"net/http"
	"strconv"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/instance"
)

// checkBody is the body of PUT /v1/instances/{id}/checks/{check}.
type checkBody struct {
	Status string `json:"status"`
	Output string `json:"output"`
}

// setCheck sets the status of an instance's check: a ttl check's update
// (its client passes it), or any check's status by hand until its next
// probe. Written only when the status or output changes.
func (a *API) setCheck(w http.ResponseWriter, r *http.Request, reg *backend) error {
	id, check := r.PathValue("id"), r.PathValue("check")
	if !instance.ValidID(id) {
		return badRequest("id", "%q is not a valid id: 1..128 chars of [A-Za-z0-9._:-]", id)
	}
	var body checkBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	if a.acl.Enabled() {
		if in := reg.inst.Instances().Get(id); in != nil {
			if err := acl.Require(r, instancesWrite(in.Namespace)); err != nil {
				return err
			}
		}
	}
	rev, err := reg.inst.SetCheck(r.Context(), id, check, body.Status, body.Output)
	if err != nil {
		return err
	}
	writeJSON(w, rev, func(b []byte) []byte {
		b = append(b, `{"revision":`...)
		b = strconv.AppendInt(b, rev, 10)
		return append(b, '}')
	})
	return nil
}
