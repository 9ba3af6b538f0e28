package push

import (
	"context"
	"errors"
	"time"

	"github.com/sextant-mesh/sextant/internal/config"
	"github.com/sextant-mesh/sextant/internal/instance"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/naming"
)

// Op says what a Change did.
type Op uint8

const (
	InstanceUpsert Op = iota + 1
	InstanceDelete
	ConfigUpsert
	ConfigDelete
)

// Change is one committed change, as the catalog's change log holds it.
type Change struct {
	Revision int64
	// Committed is when the store committed the change; push latency is
	// measured from it. Zero: when the engine received it.
	Committed time.Time
	Op        Op

	// Instance changes: the service and id of the instance (the engine
	// reads the service's instances again through Source.Instances).
	Service naming.ServiceKey
	ID      string

	// Config changes: the object's key, and for an upsert the object.
	ConfigKey config.Key
	Config    *config.Object
}

// Snapshot is the state at one revision: the services that have instances
// and every config object.
type Snapshot struct {
	Revision int64
	Services []naming.ServiceKey
	Configs  []*config.Object
}

// ErrCompacted is returned by Changes.Next when the changes after the last
// one returned are no longer kept; the engine then starts again from a new
// Snapshot.
var ErrCompacted = errors.New("push: changes compacted")

// Source is the registry and routing config the engine pushes from. The
// server implements it over the catalog.
type Source interface {
	// Snapshot returns the current state. Called from Run's goroutine at
	// start and after ErrCompacted; may block.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Follow returns the changes committed after revision since. Called
	// from Run's goroutine, once per Snapshot.
	Follow(ctx context.Context, since int64) (Changes, error)
	// Instances calls fn with each current instance of svc that matches
	// sel (nil: every instance), healthy or not, with a state at least as
	// recent as every change Follow has delivered. Called from the engine's
	// endpoint and config goroutines, concurrently; must not wait for
	// writers. The instance is immutable; fn must not keep it past the call
	// (its next version may be read instead).
	Instances(svc naming.ServiceKey, sel label.Selector, fn func(*instance.Instance))
	// InstancesIn is Instances for every service of namespace ns: a
	// ServiceEntry's workloadSelector selects across services
	// (selected.go). The same callers and rules.
	InstancesIn(ns string, sel label.Selector, fn func(*instance.Instance))
}

// Changes is a stream of committed changes in revision order.
type Changes interface {
	// Next blocks until at least one change is available and returns those
	// available (in revision order), ErrCompacted when the changes after
	// the last one returned are gone, or ctx's error. Called from Run's
	// goroutine only; a slow caller must not slow the registry (the catalog
	// catches it up from its change log).
	Next(ctx context.Context) ([]Change, error)
}
