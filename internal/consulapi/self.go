package consulapi

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/store"
)

// SelfService is the service every server serving this API is an
// instance of, as every Consul server lists itself as the service consul:
// tools find the servers through the catalog, /v1/health/service/consul
// or DNS (consul.service.consul).
const SelfService = "consul"

// selfTTL is the self instance's ttl_seconds: a server that dies without
// deregistering turns critical (and leaves DNS) after 3 x selfTTL.
const selfTTL = 10

// SelfID is the instance id of the server whose Consul API answers at
// host:port (ids are global in Sextant, so each server's is its own).
func SelfID(host string, port int) string {
	return SelfService + ":" + net.JoinHostPort(host, strconv.Itoa(port))
}

// KeepSelf lists this server as an instance of SelfService at host:port
// (the address its Consul API answers on) until ctx ends, then removes
// it. It registers at once, heartbeats every selfTTL/2 and registers
// again if the instance went missing (removed, or the registry lost it).
// The caller (the server's lifecycle) owns the goroutine that runs it.
// isSelf reports whether in is a server's own instance of service consul.
func isSelf(in *instance.Instance) bool {
	if in.Service != SelfService {
		return false
	}
	role, _ := in.Metadata.Get("sextant.role")
	return role == "server"
}

func (a *API) KeepSelf(ctx context.Context, host string, port int) error {
	id := SelfID(host, port)
	in := &instance.Instance{ID: id, Namespace: a.opts.Namespace, Service: SelfService, Host: host, Port: port,
		Weight: instance.DefaultWeight, TTLSeconds: selfTTL, Metadata: label.FromMap(map[string]string{"sextant.role": "server", labelNode: a.opts.Node})}
	if err := instance.Prepare(-1, in); err != nil {
		return fmt.Errorf("consulapi: the server's own instance %q: %w", id, err)
	}
	ns := a.opts.Namespace
	guard := func(cur *instance.Instance) error {
		if cur.Namespace != ns {
			return fmt.Errorf("consulapi: id %q is an instance of namespace %q: %w", id, cur.Namespace, store.ErrConflict)
		}
		return nil
	}
	register := func() bool {
		if _, err := a.reg.RegisterGuarded(ctx, []*instance.Instance{in.Clone()}, guard); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("could not list this server as service consul; retrying", "id", id, "err", err)
			}
			return false
		}
		return true
	}
	registered := register()
	t := time.NewTicker(selfTTL * time.Second / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Even if no register was answered: one may have been written.
			// The registry still runs: it stops after this part.
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, _, err := a.reg.DeregisterGuarded(dctx, []string{id}, guard); err != nil {
				return fmt.Errorf("consulapi: remove the server's own instance %q: %w", id, err)
			}
			return nil
		case <-t.C:
			if registered {
				missing, err := a.reg.Heartbeat(ctx, []string{id})
				if err == nil && len(missing) == 0 {
					continue
				}
			}
			registered = register()
		}
	}
}
