package push

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// CatalogSource is the Source of a server: the catalog's instance table and
// the config table, followed through a catalog subscription, so a slow
// engine never slows the registry and catches up from the change log.
type CatalogSource struct {
	cat  *catalog.Catalog
	inst *catalog.Groups[*instance.Instance] // the instance kind's table (registry.Instances)
	cfg  *config.Table
}

var _ Source = (*CatalogSource)(nil)

// NewCatalogSource returns the Source over cat, its instance table and its
// config table.
func NewCatalogSource(cat *catalog.Catalog, cfg *config.Table) (*CatalogSource, error) {
	inst, ok := cat.Table(store.Instances).(*catalog.Groups[*instance.Instance])
	if !ok {
		return nil, fmt.Errorf("push: the catalog has no instance table (it has a %T)", cat.Table(store.Instances))
	}
	return &CatalogSource{cat: cat, inst: inst, cfg: cfg}, nil
}

// Snapshot implements Source. The state read may be newer than the
// revision answered; the changes after it are then delivered again, which
// the engine applies idempotently.
func (s *CatalogSource) Snapshot(context.Context) (Snapshot, error) {
	rev := s.cat.Revision()
	snap := Snapshot{Revision: rev}
	for _, svc := range s.inst.Snapshot().Groups("") {
		snap.Services = append(snap.Services, svc.Key)
	}
	entries, _ := s.cfg.List("", "")
	for _, e := range entries {
		snap.Configs = append(snap.Configs, e.Object)
	}
	return snap, nil
}

// Follow implements Source.
func (s *CatalogSource) Follow(_ context.Context, since int64) (Changes, error) {
	sub, err := s.cat.Subscribe(since, store.Instances, store.Config)
	if errors.Is(err, catalog.ErrCompacted) {
		return nil, ErrCompacted
	}
	if err != nil {
		return nil, err
	}
	return &catalogChanges{sub: sub}, nil
}

// Instances implements Source.
func (s *CatalogSource) Instances(svc naming.ServiceKey, sel label.Selector, fn func(*instance.Instance)) {
	v := s.inst.Lookup(svc)
	if v == nil {
		return
	}
	for _, in := range v.Select(sel, false) {
		fn(in)
	}
}

// InstancesIn implements Source.
func (s *CatalogSource) InstancesIn(ns string, sel label.Selector, fn func(*instance.Instance)) {
	for _, g := range s.inst.Snapshot().Groups(ns) {
		for _, in := range g.Select(sel, false) {
			fn(in)
		}
	}
}

type catalogChanges struct{ sub *catalog.Subscription }

func (c *catalogChanges) Next(ctx context.Context) ([]Change, error) {
	chs, err := c.sub.Next(ctx, 4096)
	if errors.Is(err, catalog.ErrCompacted) {
		return nil, ErrCompacted
	}
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(chs))
	for _, ch := range chs {
		pc := Change{Revision: ch.Revision}
		if ch.Committed != 0 {
			pc.Committed = time.Unix(0, ch.Committed)
		}
		switch ch.Kind {
		case store.Instances:
			pc.Service = ch.Key
			pc.ID = ch.ID
			pc.Op = InstanceDelete
			if ch.Value != nil {
				pc.Op = InstanceUpsert
			}
		case store.Config:
			k, err := config.ParseKey(ch.ID)
			if err != nil {
				continue
			}
			pc.ConfigKey = k
			pc.Op = ConfigDelete
			if e, ok := ch.Value.(*config.Entry); ok {
				pc.Op = ConfigUpsert
				pc.Config = e.Object
			}
		default:
			continue
		}
		out = append(out, pc)
	}
	return out, nil
}

var _ AddressFinder = (*CatalogSource)(nil)

// InstanceAt implements AddressFinder by scanning the instances of every
// service (the catalog has no address index): it runs once per server
// listener a subscriber asks for and once per change of its workload's
// service, not per request.
func (s *CatalogSource) InstanceAt(ap netip.AddrPort) *instance.Instance {
	for _, g := range s.inst.Snapshot().Groups("") {
		for _, in := range g.Items() {
			if instanceAt(in, ap) {
				return in
			}
		}
	}
	return nil
}

// instanceAt reports whether in listens at ap.
func instanceAt(in *instance.Instance, ap netip.AddrPort) bool {
	if in.Port != int(ap.Port()) {
		return false
	}
	a, err := netip.ParseAddr(in.Host)
	return err == nil && a.Unmap() == ap.Addr().Unmap()
}
