// Package ingress owns the translation of Istio Gateways into what a
// gateway serves: for each Gateway server port a Listener (plaintext, or TLS
// with one filter chain per server matched by SNI and a DownstreamTlsContext
// whose certificates come by SDS), a RouteConfiguration of the
// VirtualServices bound to the Gateway (spec.gateways), and the SDS Secrets
// of the servers' credentialNames and of DestinationRules' tls
// credentialNames (TLS to the endpoints), published into the xDS cache beside the
// push engine's resources. Gateways and the secrets are few and change
// rarely: every change recomputes the whole set and publishes what differs.
//
// It does not own the clusters and endpoints routes name (the push engine
// publishes those for every service), the config kinds (internal/config)
// or the secrets (internal/secret).
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/secret"
	"github.com/sextant-mesh/sextant/internal/store"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// Publisher keeps the cache's Gateway resources current. Run owns its
// goroutine.
type Publisher struct {
	cat     *catalog.Catalog
	cfg     *config.Table
	secrets *secret.Table
	cache   *xds.Cache
	log     *slog.Logger
	// proxyPort, when set (SetProxyListener), makes the publisher also
	// publish the proxies' listener with the mesh's Telemetry.
	proxyPort uint32

	// Run's goroutine only: what was published per type, name -> encoding.
	published [3]map[string][]byte
	// Run's goroutine only: whether a Gateway has an AUTO_PASSTHROUGH
	// server, and the services and ports the last publish exposed.
	auto bool
	svcs []ServicePorts
	// warnings of the last publish, for push status.
	warnings atomic.Pointer[[]string]
	// done is the catalog revision up to which Gateways are published;
	// wake is closed and replaced at each publish (WaitPublished).
	done atomic.Int64
	wake atomic.Pointer[chan struct{}]
}

// Warnings returns what the last recomputation left out or found wrong
// (see Build), and each certificate that has expired. Safe from any
// goroutine.
func (p *Publisher) Warnings() []string {
	if w := p.warnings.Load(); w != nil {
		return slices.Clone(*w)
	}
	return nil
}

// New returns a publisher of the Gateways in cfg and the secrets they name
// into cache, following cat's changes. log nil discards.
func New(cat *catalog.Catalog, cfg *config.Table, secrets *secret.Table, cache *xds.Cache, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{cat: cat, cfg: cfg, secrets: secrets, cache: cache, log: log}
	for i := range p.published {
		p.published[i] = map[string][]byte{}
	}
	wake := make(chan struct{})
	p.wake.Store(&wake)
	return p
}

// SetProxyListener makes the publisher also publish the proxies' listener
// (xds.ProxyName, the push engine's, on port) with the mesh's Telemetry
// written in; without a Telemetry it is the same bytes as the engine's, so
// nobody is woken. Call before Run.
func (p *Publisher) SetProxyListener(port uint32) { p.proxyPort = port }

// WaitPublished waits until the Gateways' resources reflect every change
// up to catalog revision rev (config apply answers then), or ctx ends.
// Safe from any goroutine.
func (p *Publisher) WaitPublished(ctx context.Context, rev int64) error {
	for {
		ch := *p.wake.Load() // before the check: a publish after it closes it
		if p.done.Load() >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ingress: revision %d not published yet: %w", rev, ctx.Err())
		}
	}
}

// publishedUpTo records that everything up to rev is published.
func (p *Publisher) publishedUpTo(rev int64) {
	p.done.Store(rev)
	ch := make(chan struct{})
	close(*p.wake.Swap(&ch))
}

var types = [3]xds.Type{xds.TypeSecret, xds.TypeListener, xds.TypeRoute}

// Run publishes the current Gateways, then follows config and secret
// changes, and instance changes that change a service's ports while a
// Gateway has an AUTO_PASSTHROUGH server, until ctx ends (nil) or the
// catalog fails. It also recomputes when
// a certificate a Gateway names expires, so the warning (push status) comes
// then, not at the next change.
func (p *Publisher) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		rev := p.cat.Revision()
		// Instances too: an AUTO_PASSTHROUGH server's chains follow the
		// services' ports (a batch that changes none of them publishes
		// nothing).
		sub, err := p.cat.Subscribe(rev, store.Config, store.Secrets, store.Instances)
		if err != nil {
			return fmt.Errorf("ingress: subscribe: %w", err)
		}
		expiry := p.publish(rev)
		p.publishedUpTo(rev)
		for {
			wait, cancel := ctx, context.CancelFunc(func() {})
			if !expiry.IsZero() {
				wait, cancel = context.WithDeadline(ctx, expiry.Add(time.Second))
			}
			changes, err := sub.Next(wait, 1024)
			cancel()
			if err != nil {
				if errors.Is(err, catalog.ErrCompacted) {
					break // read the whole state again
				}
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, context.DeadlineExceeded) {
					rev = sub.Revision()
					expiry = p.publish(rev)
					p.publishedUpTo(rev)
					continue
				}
				return fmt.Errorf("ingress: follow: %w", err)
			}
			rev = sub.Revision()
			if !instancesOnly(changes) || p.auto && p.portsChanged(changes) {
				expiry = p.publish(rev)
			}
			p.publishedUpTo(rev)
		}
	}
	return nil
}

func instancesOnly(changes []catalog.Change) bool {
	for _, c := range changes {
		if c.Kind != store.Instances {
			return false
		}
	}
	return true
}

// portsChanged reports whether the services the instance changes touch
// listen on other ports than the last publish exposed: only the touched
// services' groups are read, not the whole registry.
func (p *Publisher) portsChanged(changes []catalog.Change) bool {
	inst, ok := p.cat.Table(store.Instances).(*catalog.Groups[*instance.Instance])
	if !ok {
		return false
	}
	seen := map[naming.ServiceKey]bool{}
	for _, c := range changes {
		if seen[c.Key] {
			continue
		}
		seen[c.Key] = true
		var was []uint32
		if i, ok := slices.BinarySearchFunc(p.svcs, c.Key, func(sp ServicePorts, k naming.ServiceKey) int { return sp.Service.Compare(k) }); ok {
			was = p.svcs[i].Ports
		}
		var now []uint32
		if g := inst.Lookup(c.Key); g != nil {
			now = groupPorts(g)
		}
		if !slices.Equal(was, now) {
			return true
		}
	}
	return false
}

// servicePorts lists the registry's services with instances and the ports
// they listen on, in key order (nil without the instance table).
func (p *Publisher) servicePorts() []ServicePorts {
	inst, ok := p.cat.Table(store.Instances).(*catalog.Groups[*instance.Instance])
	if !ok {
		return nil
	}
	var out []ServicePorts
	for _, g := range inst.Snapshot().Groups("") {
		if ports := groupPorts(g); len(ports) > 0 {
			out = append(out, ServicePorts{Service: g.Key, Ports: ports})
		}
	}
	return out
}

// groupPorts is the ports a service's instances listen on, sorted, each
// once (nil: none).
func groupPorts(g *catalog.Group[*instance.Instance]) []uint32 {
	var ports []uint32
	for _, in := range g.Items() {
		if in.Port > 0 && in.Port <= 65535 {
			ports = append(ports, uint32(in.Port))
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// publish computes every Gateway resource and applies what changed. It
// returns when the next certificate a Gateway names expires (zero: none
// will).
func (p *Publisher) publish(rev int64) time.Time {
	gws, _ := p.cfg.List(config.KindGateway, "")
	vss, _ := p.cfg.List(config.KindVirtualService, "")
	aps, _ := p.cfg.List(config.KindAuthorizationPolicy, "")
	pas, _ := p.cfg.List(config.KindPeerAuthentication, "")
	ras, _ := p.cfg.List(config.KindRequestAuthentication, "")
	var policies []*config.Object
	for _, e := range append(append(aps, pas...), ras...) {
		policies = append(policies, e.Object)
	}
	var expiry time.Time
	start := time.Now()
	secretOf := func(ns, name string) *secret.Secret {
		s := p.secrets.Get(ns, name)
		if s != nil {
			if na := s.Info().NotAfter; na.After(start) && (expiry.IsZero() || na.Before(expiry)) {
				expiry = na
			}
		}
		return s
	}
	drs, _ := p.cfg.List(config.KindDestinationRule, "")
	p.auto, p.svcs = hasAuto(gws), nil
	if p.auto {
		p.svcs = p.servicePorts()
	}
	out, warnings := BuildWithServices(gws, vss, drs, config.NewSecurity(p.cfg.RootNamespace(), policies), secretOf, p.svcs, p.cfg.RootNamespace())
	tms, _ := p.cfg.List(config.KindTelemetry, "")
	var tobjs []*config.Object
	for _, e := range tms {
		tobjs = append(tobjs, e.Object)
	}
	tel := config.NewTelemetries(p.cfg.RootNamespace(), tobjs)
	warnings = append(warnings, WithTelemetry(out, gws, tel)...)
	if p.proxyPort != 0 {
		if l, err := ProxyListener(p.proxyPort, tel); err != nil {
			warnings = append(warnings, err.Error())
		} else {
			out[1][xds.ProxyName] = l
		}
	}
	warnings = append(warnings, UpstreamSecrets(drs, secretOf, out[0])...)
	for _, w := range warnings {
		p.log.Warn("ingress: " + w)
	}
	p.warnings.Store(&warnings)
	version := strconv.FormatInt(rev, 10)
	now := time.Now()
	for i, t := range types {
		var set []xds.Resource
		var remove []string
		next := map[string][]byte{}
		for name, m := range out[i] {
			var b []byte
			var err error
			if name == xds.ProxyName && t == xds.TypeListener {
				b, err = xds.Encode(m) // as the push engine encodes it: the same bytes wake nobody
			} else {
				b, err = proto.MarshalOptions{Deterministic: true}.Marshal(m)
			}
			if err != nil {
				p.log.Error("ingress: encode", "name", name, "err", err)
				continue
			}
			next[name] = b
			if old, ok := p.published[i][name]; !ok || string(old) != string(b) {
				set = append(set, xds.Resource{Name: name, Version: version, Value: b})
			}
		}
		for name := range p.published[i] {
			if _, ok := next[name]; !ok {
				remove = append(remove, name)
			}
		}
		if len(set)+len(remove) == 0 {
			continue
		}
		slices.SortFunc(set, func(a, b xds.Resource) int { return compare(a.Name, b.Name) })
		slices.Sort(remove)
		if _, err := p.cache.Apply(t, set, remove, version, now); err != nil {
			p.log.Error("ingress: publish", "type", t, "err", err)
			continue
		}
		p.published[i] = next
	}
	return expiry
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
