package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/store"
)

// The /v1/acl routes: bootstrap, the caller's own token, and the tokens and
// policies, which need admin. The guard (internal/acl) does the work; this
// file only speaks HTTP.

func (a *API) aclRoutes() {
	a.handleOpen("POST", "/v1/acl/bootstrap", a.aclBootstrap)
	a.handle("GET", "/v1/acl/self", a.aclSelf)
	a.handle("POST", "/v1/acl/tokens", a.admin(a.aclCreateToken))
	a.handle("GET", "/v1/acl/tokens", a.admin(a.aclListTokens))
	a.handle("GET", "/v1/acl/tokens/{accessor}", a.admin(a.aclGetToken))
	a.handle("DELETE", "/v1/acl/tokens/{accessor}", a.admin(a.aclDeleteToken))
	a.handle("POST", "/v1/acl/policies", a.admin(a.aclCreatePolicy))
	a.handle("GET", "/v1/acl/policies", a.admin(a.aclListPolicies))
	a.handle("GET", "/v1/acl/policies/{name}", a.admin(a.aclGetPolicy))
	a.handle("PUT", "/v1/acl/policies/{name}", a.admin(a.aclReplacePolicy))
	a.handle("DELETE", "/v1/acl/policies/{name}", a.admin(a.aclDeletePolicy))
}

// admin guards h with the admin permission and checks that the guard's
// tables follow this registry's store (else token writes could not apply).
func (a *API) admin(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, reg *backend) error {
		if err := a.aclReady(reg); err != nil {
			return err
		}
		if err := acl.Require(r, acl.Admin); err != nil {
			return err
		}
		return h(w, r, reg)
	}
}

func (a *API) aclReady(reg *backend) error {
	if reg.Catalog().Table(store.Tokens) != a.acl.Tables()[store.Tokens] {
		return &apiError{http.StatusInternalServerError, "internal", "the ACL tables are not registered with the write engine (commit.Options.Tables)", ""}
	}
	return nil
}

// tokenOut is a token as answered; Secret only at creation.
type tokenOut struct {
	*acl.Token
	Secret string `json:"secret,omitempty"`
}

func writeValue(w http.ResponseWriter, rev int64, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	writeJSON(w, rev, func(dst []byte) []byte { return append(dst, b...) })
	return nil
}

func (a *API) aclBootstrap(w http.ResponseWriter, r *http.Request, reg *backend) error {
	if err := a.aclReady(reg); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var req struct {
		Description string `json:"description"`
	}
	if len(body) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
	}
	tok, secret, err := a.acl.Bootstrap(r.Context(), reg, req.Description)
	if err != nil {
		return err
	}
	return writeValue(w, tok.Revision, tokenOut{tok, secret})
}

func (a *API) aclSelf(w http.ResponseWriter, r *http.Request, reg *backend) error {
	tok, err := acl.Self(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		*acl.Token
		Anonymous  bool `json:"anonymous"`
		ACLEnabled bool `json:"acl_enabled"`
	}{tok, tok == nil, a.acl.Enabled()}
	return writeValue(w, reg.Catalog().Revision(), out)
}

func (a *API) aclCreateToken(w http.ResponseWriter, r *http.Request, reg *backend) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	req, err := acl.ParseTokenRequest(body)
	if err != nil {
		return err
	}
	tok, secret, err := a.acl.CreateToken(r.Context(), reg, req)
	if err != nil {
		return err
	}
	return writeValue(w, tok.Revision, tokenOut{tok, secret})
}

func (a *API) aclListTokens(w http.ResponseWriter, r *http.Request, reg *backend) error {
	rev := reg.Catalog().Revision()
	return writeValue(w, rev, struct {
		Revision int64        `json:"revision"`
		Tokens   []*acl.Token `json:"tokens"`
	}{rev, a.acl.Tokens()})
}

func (a *API) aclGetToken(w http.ResponseWriter, r *http.Request, reg *backend) error {
	acc := r.PathValue("accessor")
	tok, ok := a.acl.Token(acc)
	if !ok {
		return &apiError{http.StatusNotFound, "not_found", "no token with accessor " + strconv.Quote(acc), "accessor"}
	}
	return writeValue(w, tok.Revision, tok)
}

func (a *API) aclDeleteToken(w http.ResponseWriter, r *http.Request, reg *backend) error {
	rev, err := a.acl.DeleteToken(r.Context(), reg, r.PathValue("accessor"))
	if err != nil {
		return err
	}
	return writeValue(w, rev, map[string]int64{"revision": rev})
}

func (a *API) aclCreatePolicy(w http.ResponseWriter, r *http.Request, reg *backend) error {
	return a.putPolicy(w, r, reg, "", true)
}

func (a *API) aclReplacePolicy(w http.ResponseWriter, r *http.Request, reg *backend) error {
	return a.putPolicy(w, r, reg, r.PathValue("name"), false)
}

func (a *API) putPolicy(w http.ResponseWriter, r *http.Request, reg *backend, name string, create bool) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	// Before the body is rewritten below, which would keep the last.
	if err := duplicateKeys(body); err != nil {
		return err
	}
	if !create {
		// The name is in the path; the body may repeat it or leave it out.
		var probe struct {
			Name *string `json:"name"`
		}
		if json.Unmarshal(body, &probe) == nil && probe.Name == nil {
			var m map[string]json.RawMessage
			if json.Unmarshal(body, &m) == nil {
				m["name"], _ = json.Marshal(name)
				body, _ = json.Marshal(m)
			}
		}
	}
	p, err := acl.ParsePolicy(body)
	if err != nil {
		return err
	}
	if !create && p.Name != name {
		return badRequest("name", "the body names policy %q but the path names %q", p.Name, name)
	}
	rev, err := a.acl.PutPolicy(r.Context(), reg, p, create)
	if err != nil {
		return err
	}
	stored, _ := a.acl.Policy(p.Name)
	return writeValue(w, rev, struct {
		Revision int64       `json:"revision"`
		Policy   *acl.Policy `json:"policy"`
	}{rev, stored})
}

func (a *API) aclListPolicies(w http.ResponseWriter, r *http.Request, reg *backend) error {
	rev := reg.Catalog().Revision()
	return writeValue(w, rev, struct {
		Revision int64         `json:"revision"`
		Policies []*acl.Policy `json:"policies"`
	}{rev, a.acl.Policies()})
}

func (a *API) aclGetPolicy(w http.ResponseWriter, r *http.Request, reg *backend) error {
	name := r.PathValue("name")
	p, ok := a.acl.Policy(name)
	if !ok {
		return &apiError{http.StatusNotFound, "not_found", "no policy named " + strconv.Quote(name), "name"}
	}
	return writeValue(w, p.Revision, p)
}

func (a *API) aclDeletePolicy(w http.ResponseWriter, r *http.Request, reg *backend) error {
	rev, err := a.acl.DeletePolicy(r.Context(), reg, r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeValue(w, rev, map[string]int64{"revision": rev})
}
