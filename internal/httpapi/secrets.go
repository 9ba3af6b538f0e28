package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/store"
)

// TLS secrets (docs/api.md, "Secrets"): written whole, answered as
// metadata only. The private key and the PEM never leave the server but
// over xDS (SDS), to streams whose token holds secret:read on the
// secret's namespace (acl.SDS).

func secretTable(reg *backend) (*secret.Table, error) {
	t, _ := reg.Catalog().Table(store.Secrets).(*secret.Table)
	if t == nil {
		return nil, &apiError{http.StatusNotFound, "not_found", "secrets are not enabled on this server", ""}
	}
	return t, nil
}

// secretError maps the secret package's errors to API errors.
func secretError(err error) error {
	var fe *secret.FieldError
	msg := func() string { return strings.TrimPrefix(err.Error(), "secret: ") }
	switch {
	case errors.As(err, &fe):
		return badRequest(fe.Field, "%s", fe.Msg)
	case errors.Is(err, secret.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", msg(), ""}
	case errors.Is(err, secret.ErrExists):
		return &apiError{http.StatusConflict, "already_exists", msg(), "name"}
	case errors.Is(err, secret.ErrStale):
		return &apiError{http.StatusConflict, "conflict", msg(), "revision"}
	}
	return err
}

type secretBody struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	Cert      string `json:"cert"`
	Key       string `json:"key"`
	CA        string `json:"ca"`
}

type secretAnswer struct {
	Revision int64       `json:"revision"`
	Action   string      `json:"action"`
	Secret   secret.Info `json:"secret"`
}

// putSecret creates a secret (POST), or replaces one with ?replace=true.
func (a *API) putSecret(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := secretTable(reg)
	if err != nil {
		return err
	}
	replace := false
	if s := r.URL.Query().Get("replace"); s != "" {
		if replace, err = strconv.ParseBool(s); err != nil {
			return badRequest("replace", "%q is not a boolean (true or false)", s)
		}
	}
	ifRev, err := optRevision(r)
	if err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var b secretBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return badRequest(strings.Trim(f, `"`), "unknown field %s (namespace, name, type, cert, key, ca)", f)
		}
		return badRequest("", "the body is not a secret: %v", err)
	}
	if err := duplicateKeys(body); err != nil {
		return err
	}
	if b.Type != "" && b.Type != secret.TypeTLS && b.Type != secret.TypeCA {
		return badRequest("type", "%q: want %q (certificate and key) or %q (CA certificates only)", b.Type, secret.TypeTLS, secret.TypeCA)
	}
	if b.Namespace == "" {
		b.Namespace = "default"
	}
	if err := acl.Require(r, acl.Permission{Resource: acl.Secrets, Access: acl.Write, Namespace: b.Namespace}); err != nil {
		return err
	}
	var s *secret.Secret
	if b.Type == secret.TypeCA {
		s, err = secret.NewCA(b.Namespace, b.Name, []byte(b.CA), time.Now())
		if err == nil && b.Cert+b.Key != "" {
			err = &secret.FieldError{Field: "cert", Msg: "a ca secret holds CA certificates only (create a tls secret for a certificate and key)"}
		}
	} else {
		s, err = secret.New(b.Namespace, b.Name, []byte(b.Cert), []byte(b.Key), []byte(b.CA), time.Now())
	}
	if err != nil {
		return secretError(err)
	}
	pw := &secret.PutWrite{Secret: s, Create: !replace, IfRevision: ifRev, Keys: t.Keys()}
	rev, err := reg.Submit(r.Context(), pw)
	if err != nil {
		return secretError(err)
	}
	info := s.Info()
	if cur := t.Get(s.Namespace, s.Name); cur != nil {
		info = cur.Info()
	}
	ans, _ := json.Marshal(secretAnswer{Revision: rev, Action: pw.Action, Secret: info})
	writeBody(w, rev, append(ans, '\n'))
	return nil
}

func (a *API) getSecret(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := secretTable(reg)
	if err != nil {
		return err
	}
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if err := acl.Require(r, acl.Permission{Resource: acl.Secrets, Access: acl.Read, Namespace: ns}); err != nil {
		return err
	}
	s := t.Get(ns, name)
	if s == nil {
		return &apiError{http.StatusNotFound, "not_found", "no secret " + ns + "/" + name, ""}
	}
	b, _ := json.Marshal(s.Info())
	writeBody(w, reg.Catalog().Revision(), append(b, '\n'))
	return nil
}

func (a *API) listSecrets(w http.ResponseWriter, r *http.Request, reg *backend) error {
	t, err := secretTable(reg)
	if err != nil {
		return err
	}
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := checkName("namespace", ns); err != nil {
			return err
		}
	}
	readable, err := readableFilter(r, acl.Secrets, ns)
	if err != nil {
		return err
	}
	rev := reg.Catalog().Revision()
	list := t.List(ns)
	if readable != nil {
		list = slices.DeleteFunc(list, func(s *secret.Secret) bool { return !readable.Allows(s.Namespace) })
	}
	items := make([]secret.Info, len(list))
	for i, s := range list {
		items[i] = s.Info()
	}
	b, _ := json.Marshal(struct {
		Revision int64         `json:"revision"`
		Items    []secret.Info `json:"items"`
	}{rev, items})
	writeBody(w, rev, append(b, '\n'))
	return nil
}

func (a *API) deleteSecret(w http.ResponseWriter, r *http.Request, reg *backend) error {
	if _, err := secretTable(reg); err != nil {
		return err
	}
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if err := acl.Require(r, acl.Permission{Resource: acl.Secrets, Access: acl.Write, Namespace: ns}); err != nil {
		return err
	}
	rev, err := reg.Submit(r.Context(), &secret.DeleteWrite{ID: ns + "/" + name})
	if err != nil {
		return secretError(err)
	}
	writeBody(w, rev, []byte(`{"revision":`+strconv.FormatInt(rev, 10)+"}\n"))
	return nil
}
