package consulapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// Consul's sessions, kept by the KV kind (internal/kv/session.go), each of
// the served namespace, locking its keys alone. A session's health is its
// TTL and the checks it is bound to (session_checks.go): serfHealth, the
// default, is the serving server's own liveness (it passes while the
// server answers); a node check or a service check of its node
// invalidates it when it turns critical or is removed. Sessions are guarded by the kv resource of the
// served namespace, as the keys they lock: Consul's session:read is kv
// read, session:write kv write.
func (a *API) sessionRoutes() {
	if a.opts.KV == nil {
		return // unsupported answers 501
	}
	a.handle("PUT /v1/session/create", a.sessionCreate)
	a.handle("PUT /v1/session/destroy/{id}", a.sessionDestroy)
	a.handle("PUT /v1/session/renew/{id}", a.sessionRenew)
	a.handle("GET /v1/session/info/{id}", a.sessionInfo)
	a.handle("GET /v1/session/list", a.sessionList)
	a.handle("GET /v1/session/node/{node}", a.sessionNode)
}

// serfHealth is the check Consul ties a session to by default.
const serfHealth = "serfHealth"

// sessionRequest is the body of /v1/session/create.
type sessionRequest struct {
	Name          string
	Node          string
	LockDelay     json.RawMessage
	Behavior      string
	TTL           string
	Checks        []string
	NodeChecks    []string
	ServiceChecks []serviceCheckJSON
}

// parseLockDelay reads Consul's LockDelay: a duration string, or a number
// of nanoseconds (of seconds under 1000, as Consul reads it).
func parseLockDelay(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return kv.DefaultLockDelay, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("LockDelay: %q is not a duration", s)
		}
		return d, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("LockDelay: %s is neither a duration nor a number", raw)
	}
	if n < 1000 {
		return time.Duration(n) * time.Second, nil
	}
	return time.Duration(n), nil
}

// parseSessionRequest reads a create body (empty: every default).
func (a *API) parseSessionRequest(body []byte) (kv.Session, error) {
	var req sessionRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		d := json.NewDecoder(strings.NewReader(string(body)))
		if err := d.Decode(&req); err != nil {
			return kv.Session{}, badRequest("decoding the session: " + err.Error())
		}
	}
	s := kv.Session{Namespace: a.opts.Namespace, Name: req.Name, Node: req.Node, Behavior: req.Behavior}
	if s.Node == "" {
		s.Node = a.opts.Node
	}
	if s.Behavior == "" {
		s.Behavior = kv.BehaviorRelease
	}
	var err error
	if s.LockDelay, err = parseLockDelay(req.LockDelay); err != nil {
		return kv.Session{}, badRequest(err.Error())
	}
	if req.TTL != "" {
		if s.TTL, err = time.ParseDuration(req.TTL); err != nil {
			return kv.Session{}, badRequest(fmt.Sprintf("TTL: %q is not a duration", req.TTL))
		}
		s.TTLText = req.TTL
	}
	checks := append(req.Checks, req.NodeChecks...)
	if req.Checks == nil && req.NodeChecks == nil {
		checks = []string{serfHealth} // Consul's default
	}
	// Bound checks must exist and not be critical, as Consul decides:
	// a session bound to a failing check would be invalidated at once.
	for _, c := range checks {
		if c == serfHealth {
			continue // the server's own liveness: passing while it answers
		}
		if err := boundCheckState(a.nodeChecks(s.Node), s.Node, c); err != nil {
			return kv.Session{}, err
		}
	}
	var svcChecks []healthCheck
	if len(req.ServiceChecks) > 0 {
		svcChecks = a.nodeServiceChecks(s.Node)
	}
	for _, c := range req.ServiceChecks {
		if c.Namespace != "" && c.Namespace != "default" {
			return kv.Session{}, badRequest(fmt.Sprintf("ServiceChecks %q: namespace %q is not served: Consul Enterprise namespaces are not supported", c.ID, c.Namespace))
		}
		if err := boundCheckState(svcChecks, s.Node, c.ID); err != nil {
			return kv.Session{}, err
		}
		s.ServiceChecks = append(s.ServiceChecks, c.ID)
	}
	s.NodeChecks = dedupe(checks)
	if err := kv.CheckSession(&s, a.opts.SessionTTLMin); err != nil {
		return kv.Session{}, kvError(err)
	}
	return s, nil
}

func (a *API) sessionCreate(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Require(r, kvWrite(a.opts.Namespace)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return badRequest("reading the session: " + err.Error())
	}
	s, err := a.parseSessionRequest(body)
	if err != nil {
		return err
	}
	created, err := a.opts.KV.CreateSession(r.Context(), s)
	if err != nil {
		return kvError(err)
	}
	return writeJSON(w, map[string]string{"ID": created.ID})
}

func (a *API) sessionDestroy(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Require(r, kvWrite(a.opts.Namespace)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	// Consul answers true for a session that does not exist too.
	if _, err := a.opts.KV.DestroySession(r.Context(), a.opts.Namespace, r.PathValue("id")); err != nil {
		return kvError(err)
	}
	return writeValue(w, "true")
}

func (a *API) sessionRenew(w http.ResponseWriter, r *http.Request) error {
	if err := acl.Require(r, kvWrite(a.opts.Namespace)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	s, err := a.opts.KV.RenewSession(r.Context(), a.opts.Namespace, id)
	if err != nil {
		return kvError(err)
	}
	if s == nil {
		return &httpError{http.StatusNotFound, fmt.Sprintf("Session id '%s' not found", id)}
	}
	return writeBytes(w, appendSessions(nil, []*kv.Session{s}))
}

// sessionRead answers the sessions fn selects, with the table's index.
func (a *API) sessionRead(w http.ResponseWriter, r *http.Request, keep func(*kv.Session) bool) error {
	if err := acl.Require(r, kvRead(a.opts.Namespace)); err != nil {
		return err
	}
	if err := a.checkScope(r); err != nil {
		return err
	}
	b, err := parseBlocking(r.URL.Query())
	if err != nil {
		return err
	}
	// A blocking read waits for a change of the namespace's sessions.
	tns, prefix := kv.SessionsWatch(a.opts.Namespace)
	index, err := a.kvPrefixIn(r, tns, prefix, b)
	if err != nil {
		return err
	}
	var out []*kv.Session
	a.opts.KV.Sessions(a.opts.Namespace, func(s *kv.Session) bool {
		if keep(s) {
			out = append(out, s)
		}
		return true
	})
	a.setMeta(w, index)
	return writeBytes(w, appendSessions(nil, out))
}

func (a *API) sessionInfo(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	return a.sessionRead(w, r, func(s *kv.Session) bool { return s.ID == id })
}

func (a *API) sessionList(w http.ResponseWriter, r *http.Request) error {
	return a.sessionRead(w, r, func(*kv.Session) bool { return true })
}

func (a *API) sessionNode(w http.ResponseWriter, r *http.Request) error {
	node := r.PathValue("node")
	return a.sessionRead(w, r, func(s *kv.Session) bool { return s.Node == node })
}

// sessionJSON is Consul's api.SessionEntry as the server writes it.
type sessionJSON struct {
	ID            string
	Name          string
	Node          string
	LockDelay     time.Duration
	Behavior      string
	TTL           string
	NodeChecks    []string
	ServiceChecks []serviceCheckJSON `json:",omitempty"`
	CreateIndex   int64
	ModifyIndex   int64
}

// serviceCheckJSON is Consul's api.ServiceCheck.
type serviceCheckJSON struct{ ID, Namespace string }

func appendSessions(b []byte, ss []*kv.Session) []byte {
	out := make([]sessionJSON, 0, len(ss))
	for _, s := range ss {
		j := sessionJSON{ID: s.ID, Name: s.Name, Node: s.Node, LockDelay: s.LockDelay, Behavior: s.Behavior,
			NodeChecks: s.NodeChecks, CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex}
		if j.NodeChecks == nil {
			j.NodeChecks = []string{}
		}
		for _, c := range s.ServiceChecks {
			j.ServiceChecks = append(j.ServiceChecks, serviceCheckJSON{ID: c})
		}
		if s.TTL != 0 {
			j.TTL = s.TTLText
			if j.TTL == "" {
				j.TTL = s.TTL.String()
			}
		}
		out = append(out, j)
	}
	v, _ := json.Marshal(out) // plain fields: cannot fail
	return append(b, v...)
}

// sessionError turns an acquire naming no valid session into Consul's
// refusal (a client error here, not Consul's 500).
func sessionError(err error) error {
	if errors.Is(err, kv.ErrNoSession) {
		return badRequest("invalid session " + strings.TrimPrefix(err.Error(), "kv: no such session: "))
	}
	return kvError(err)
}
