package consulapi

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sextant-mesh/sextant/internal/kv"
	"github.com/sextant-mesh/sextant/internal/store"
)

// A session bound to checks (Consul's NodeChecks and ServiceChecks) is
// invalidated when one of them turns critical or is removed, as Consul's
// servers invalidate it. The checks are those the API shows: a node's
// (registered through the catalog, or a TTL check of the agent's node,
// whose expiry is decided when read) and those of its services.

// nodeServiceChecks are the checks of the services on node.
func (a *API) nodeServiceChecks(node string) []healthCheck {
	var out []healthCheck
	for _, in := range a.nodeServices(node) {
		tags, _ := tagsAndMeta(in)
		out = append(out, a.checksOf(in, tags)...)
	}
	return out
}

// boundCheckState refuses to bind a session to check id of node when it
// is not among checks or is critical, in Consul's words.
func boundCheckState(checks []healthCheck, node, id string) error {
	for _, c := range checks {
		if c.CheckID == id {
			if c.Status == "critical" {
				return badRequest(fmt.Sprintf("Check '%s' is in critical state", id))
			}
			return nil
		}
	}
	return badRequest(fmt.Sprintf("Missing check '%s' registration on node %q", id, node))
}

// failedCheck is the first check s is bound to that is critical or gone
// ("" if none).
func (a *API) failedCheck(s *kv.Session) string {
	var nodeChecks, svcChecks []healthCheck
	for _, id := range s.NodeChecks {
		if id == serfHealth {
			continue
		}
		if nodeChecks == nil {
			nodeChecks = a.nodeChecks(s.Node)
		}
		if boundCheckState(nodeChecks, s.Node, id) != nil {
			return id
		}
	}
	for _, id := range s.ServiceChecks {
		if svcChecks == nil {
			svcChecks = a.nodeServiceChecks(s.Node)
		}
		if boundCheckState(svcChecks, s.Node, id) != nil {
			return id
		}
	}
	return ""
}

// bound reports whether s names a check other than serfHealth.
func bound(s *kv.Session) bool {
	if len(s.ServiceChecks) > 0 {
		return true
	}
	for _, c := range s.NodeChecks {
		if c != serfHealth {
			return true
		}
	}
	return false
}

// RunSessionChecks invalidates the served namespace's sessions whose bound
// checks turn critical or are removed, until ctx ends: at each change of
// the instances or the KV kind (where node records and their checks are),
// and every tick for what turns critical with time (a TTL check past its
// TTL). Every server runs it; an invalidation of a session already gone
// changes nothing. The caller (the server's lifecycle) owns the goroutine.
func (a *API) RunSessionChecks(ctx context.Context, tick time.Duration) error {
	if a.opts.KV == nil {
		return nil
	}
	cat := a.reg.Catalog()
	for {
		s, err := cat.Subscribe(cat.Revision(), store.Instances, store.KV)
		if err != nil {
			return fmt.Errorf("consulapi: follow the catalog for sessions' checks: %w", err)
		}
		for {
			a.invalidateFailed(ctx)
			wctx, cancel := context.WithTimeout(ctx, tick)
			_, err := s.Next(wctx, 1024)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil && wctx.Err() == nil {
				break // compacted past the subscription: subscribe again
			}
		}
	}
}

func (a *API) invalidateFailed(ctx context.Context) {
	type failure struct{ session, check string }
	var failed []failure
	a.opts.KV.Sessions(a.opts.Namespace, func(s *kv.Session) bool {
		if bound(s) {
			if c := a.failedCheck(s); c != "" {
				failed = append(failed, failure{s.ID, c})
			}
		}
		return true
	})
	for _, f := range failed {
		if _, err := a.opts.KV.DestroySession(ctx, a.opts.Namespace, f.session); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("invalidating a session whose check failed", "session", f.session, "check", f.check, "err", err)
			}
			continue
		}
		a.log.Info("session invalidated: a check it is bound to failed", "session", f.session, "check", f.check)
	}
}

// dedupe keeps the first of each string, in order.
func dedupe(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
