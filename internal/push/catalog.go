package push

import (
	"context"
	"errors"
	"time"

	"github.com/sextant-mesh/sextant/internal/catalog"
	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
	"github.com/sextant-mesh/sextant/internal/store"
)

// CatalogSource is the Source of a server: the catalog's instance table and
// the config table, followed through a catalog subscription, so a slow
// engine never slows the registry and catches up from the change log.
type CatalogSource struct {
	cat *catalog.Catalog
	cfg *config.Table
}

var _ Source = (*CatalogSource)(nil)

// NewCatalogSource returns the Source over cat and its config table.
func NewCatalogSource(cat *catalog.Catalog, cfg *config.Table) *CatalogSource {
	return &CatalogSource{cat: cat, cfg: cfg}
}

// Snapshot implements Source. The state read may be newer than the
// revision answered; the changes after it are then delivered again, which
// the engine applies idempotently.
func (s *CatalogSource) Snapshot(context.Context) (Snapshot, error) {
	rev := s.cat.Revision()
	snap := Snapshot{Revision: rev}
	for _, svc := range s.cat.Instances().Snapshot().Services("") {
		snap.Services = append(snap.Services, naming.ServiceKey{Namespace: svc.Key.Namespace, Name: svc.Key.Name})
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
func (s *CatalogSource) Instances(svc naming.ServiceKey, sel label.Selector, fn func(*Instance)) {
	v := s.cat.Instances().Service(naming.ServiceKey{Namespace: svc.Namespace, Name: svc.Name})
	if v == nil {
		return
	}
	var pi Instance
	for _, in := range v.Select(sel, false) {
		pi = Instance{ID: in.ID, Namespace: in.Namespace, Service: in.Service, Host: in.Host, Port: in.Port,
			Weight: in.Weight, Healthy: in.Healthy, Isolated: in.Isolated, Metadata: in.Labels()}
		fn(&pi)
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
			pc.Service = naming.ServiceKey{Namespace: ch.Key.Namespace, Name: ch.Key.Name}
			pc.ID = ch.ID
			pc.Op = InstanceDelete
			if in := ch.Instance(); in != nil {
				pc.Op = InstanceUpsert
				pc.Instance = &Instance{ID: in.ID, Namespace: in.Namespace, Service: in.Service, Host: in.Host, Port: in.Port,
					Weight: in.Weight, Healthy: in.Healthy, Isolated: in.Isolated, Metadata: in.Labels()}
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
