package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/ingress"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// The calls a policy change would start denying (config:apply with
// dry_run=true, docs/security.md "Dry run against recorded calls"). The
// server computes the RBAC filters every Gateway listener port would carry
// with the config as it would be after the apply (ingress.GatewayRBAC) and
// asks each registered gateway (instances with metadata
// sextant.role=gateway; admin API at sextant.admin) to replay its recorded
// calls through them (POST /v1/rbac:dry-run).
//
// The server asks, not the CLI: an API user gets the same answer from the
// one request the CLI makes, the candidate is computed where the config
// is, and the registry that names the gateways is here. The caller's
// token is not forwarded: a registered instance names its own admin
// address, so forwarding would hand the token to whoever registered one.
// A gateway whose admin API requires a token (--admin-acl) is listed as
// not asked.

// DryRunCallsNote says what the dry run cannot see.
const DryRunCallsNote = "calls recorded by gateways in the last hour; proxyless gRPC calls are not recorded and not covered"

// Bounds of asking the gateways.
const (
	maxDryRunGateways = 64
	gatewayDryRunWait = 20 * time.Second // the gateway's own scan stops at 10 s
	dryRunSamples     = 10
)

// callsDryRun is the calls part of a dry run's answer.
type callsDryRun struct {
	Note  string   `json:"note"`
	Ports []uint32 `json:"ports"`
	// NotAsked says why no gateway was asked (the caller may not read
	// every service's calls).
	NotAsked string          `json:"not_asked,omitempty"`
	Gateways []gatewayDryRun `json:"gateways"`
}

// gatewayDryRun is one gateway's answer (Result, its /v1/rbac:dry-run
// answer), or why it could not be asked (Error).
type gatewayDryRun struct {
	ID      string          `json:"id"`
	Service string          `json:"service"`
	Admin   string          `json:"admin"`
	Error   string          `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// touchesGatewayRBAC reports whether an apply may change the RBAC filters
// of Gateway listeners (an AuthorizationPolicy, or a Gateway).
func touchesGatewayRBAC(objs []*config.Object) bool {
	return slices.ContainsFunc(objs, func(o *config.Object) bool {
		return o.Key.Kind == config.KindAuthorizationPolicy || o.Key.Kind == config.KindGateway
	})
}

// candidateEntries is the config of kind as it would be after applying
// objs, in key order.
func candidateEntries(t *config.Table, objs []*config.Object, kind string) []*config.Entry {
	cur, _ := t.List(kind, "")
	out := slices.Clone(cur)
	for _, o := range objs {
		if o.Key.Kind != kind {
			continue
		}
		e := &config.Entry{Object: o}
		if i := slices.IndexFunc(out, func(c *config.Entry) bool { return c.Object.Key == o.Key }); i >= 0 {
			out[i] = e
		} else {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *config.Entry) int { return a.Object.Key.Compare(b.Object.Key) })
	return out
}

// candidateRBAC is the dry run request for the gateways: every Gateway
// listener port's RBAC filters after the apply.
func candidateRBAC(t *config.Table, objs []*config.Object) ([]byte, []uint32, error) {
	gws := candidateEntries(t, objs, config.KindGateway)
	var policies []*config.Object
	for _, k := range []string{config.KindAuthorizationPolicy, config.KindPeerAuthentication} {
		for _, e := range candidateEntries(t, objs, k) {
			policies = append(policies, e.Object)
		}
	}
	vss := candidateEntries(t, objs, config.KindVirtualService)
	byPort := ingress.GatewayRBAC(gws, vss, config.NewSecurity(t.RootNamespace(), policies)) // as the ingress publisher does
	type listener struct {
		Port        uint32            `json:"port"`
		HTTPFilters []json.RawMessage `json:"http_filters"`
	}
	req := struct {
		Listeners []listener `json:"listeners"`
		Samples   int        `json:"samples"`
	}{Listeners: []listener{}, Samples: dryRunSamples}
	ports := make([]uint32, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	for _, p := range ports {
		l := listener{Port: p, HTTPFilters: []json.RawMessage{}}
		for _, f := range byPort[p] {
			b, err := protojson.Marshal(f)
			if err != nil {
				return nil, nil, fmt.Errorf("httpapi: encode filter %s: %w", f.GetName(), err)
			}
			l.HTTPFilters = append(l.HTTPFilters, b)
		}
		req.Listeners = append(req.Listeners, l)
	}
	b, err := json.Marshal(req)
	return b, ports, err
}

// gatewayAdmin is where a gateway's admin API answers: its sextant.admin
// metadata, an unspecified host replaced by the instance's (as the
// console's gatewayAddr does).
func gatewayAdmin(in *instance.Instance) (string, bool) {
	admin, _ := in.Metadata.Get("sextant.admin")
	host, port, err := net.SplitHostPort(admin)
	if err != nil || port == "" {
		return "", false
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = in.Host
	}
	return "http://" + net.JoinHostPort(host, port), true
}

// registeredGateways lists the gateways of the registry, in service and id
// order.
func registeredGateways(reg *backend) []*instance.Instance {
	var out []*instance.Instance
	for _, g := range reg.inst.Instances().Snapshot().GroupsFrom("", naming.ServiceKey{}) {
		for _, in := range g.Items() {
			if role, _ := in.Metadata.Get("sextant.role"); role == "gateway" {
				out = append(out, in)
			}
		}
	}
	return out
}

// dryRunCalls asks every registered gateway, at once, which of its
// recorded calls the apply would start denying. It returns nil when the
// apply changes no Gateway RBAC (no AuthorizationPolicy or Gateway in it).
// The goroutines are the request's: each ends by ctx or gatewayDryRunWait
// and dryRunCalls waits for them.
func dryRunCalls(r *http.Request, reg *backend, t *config.Table, objs []*config.Object) (*callsDryRun, error) {
	if !touchesGatewayRBAC(objs) {
		return nil, nil
	}
	ctx := r.Context()
	body, ports, err := candidateRBAC(t, objs)
	if err != nil {
		return nil, err
	}
	out := &callsDryRun{Note: DryRunCallsNote, Ports: ports, Gateways: []gatewayDryRun{}}
	if len(ports) == 0 {
		return out, nil // no Gateway listener: nothing a gateway enforces
	}
	// The answers show every service's calls (callers, paths): what a
	// gateway's admin asks for its own dry run (push:read on every
	// namespace), not just the config write the apply needs.
	if err := acl.Require(r, acl.Permission{Resource: acl.Push, Access: acl.Read}); err != nil {
		out.NotAsked = "the recorded calls of every service need push:read on every namespace: " + err.Error()
		return out, nil
	}
	gws := registeredGateways(reg)
	out.Gateways = make([]gatewayDryRun, len(gws))
	ctx, cancel := context.WithTimeout(ctx, gatewayDryRunWait)
	defer cancel()
	var wg sync.WaitGroup
	for i, in := range gws {
		g := &out.Gateways[i]
		g.ID, g.Service = in.ID, in.Namespace+"/"+in.Service
		addr, ok := gatewayAdmin(in)
		g.Admin = addr
		switch {
		case !ok:
			g.Error = "no admin address (metadata sextant.admin)"
			continue
		case i >= maxDryRunGateways:
			g.Error = fmt.Sprintf("not asked: more than %d gateways", maxDryRunGateways)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.Result, g.Error = askGateway(ctx, addr, body)
		}()
	}
	wg.Wait()
	return out, nil
}

// askGateway posts the dry run to one gateway's admin API.
func askGateway(ctx context.Context, addr string, body []byte) (json.RawMessage, string) {
	req, err := http.NewRequestWithContext(ctx, "POST", addr+"/v1/rbac:dry-run", bytes.NewReader(body))
	if err != nil {
		return nil, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return nil, "read the answer: " + err.Error()
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if res.StatusCode == http.StatusNotFound {
			msg += " (a gateway without a call log, or older than the dry run)"
		}
		return nil, fmt.Sprintf("status %d: %s", res.StatusCode, msg)
	}
	if !json.Valid(b) {
		return nil, "the answer is not JSON"
	}
	return b, ""
}
