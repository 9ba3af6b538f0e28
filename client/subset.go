package client

// The only file of the client that uses internal/subset: when the subset
// package's types change, only this adapter changes.

import (
	"errors"
	"net"
	"strconv"
	"time"
	"unsafe"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
	"github.com/sextant-mesh/sextant/internal/subset"
)

// host is one instance as the subset balancer sees it. subset keeps a
// *subset.Host; h is the first field so that the picked *subset.Host leads
// back to its instance without a lookup (see instanceOf).
type host struct {
	h    subset.Host
	inst *Instance
}

func newHost(in *Instance) *host {
	w := in.EffectiveWeight()
	md := in.Metadata
	if in.Version != "" {
		md = in.Labels().Map()
	}
	return &host{
		h: subset.Host{
			ID:     in.ID,
			Addr:   net.JoinHostPort(in.Host, strconv.Itoa(in.Port)),
			Weight: uint32(max(w, 0)),
			Labels: label.FromMap(md), // one string per host version
		},
		inst: in,
	}
}

// instanceOf returns the instance of a host picked by a subsetLB. Every
// *subset.Host the LB holds is the h field of a *host (upsert only takes
// those), at offset 0.
func instanceOf(h *subset.Host) *Instance { return (*host)(unsafe.Pointer(h)).inst }

// subsetLB is a subset load balancer over one service's hosts.
type subsetLB struct{ lb *subset.LB }

func newSubsetLB(cfg subset.Config, policy balancer.Policy) (subsetLB, error) {
	lb, err := subset.New(cfg, policy, nil)
	return subsetLB{lb}, err
}

// update applies one change of the service: hosts replaced or added, ids
// removed, then each upserted host's health (a replaced host keeps its old
// health otherwise). Writer only (the service's watch goroutine, or a pick
// building a variant, under service.mu).
func (l subsetLB) update(upserts []*host, removed []string) {
	if len(upserts) > 0 {
		hs := make([]*subset.Host, len(upserts))
		for i, h := range upserts {
			hs[i] = &h.h
		}
		// Only checkHost (list and label on one key) can fail; the
		// client never sets lists.
		_ = l.lb.Upsert(hs...)
	}
	if len(removed) > 0 {
		l.lb.Remove(removed...)
	}
	for _, h := range upserts {
		_ = l.lb.SetHealth(h.h.ID, pickable(h.inst))
	}
}

// subsetResult is a host picked by a subsetLB, to report its outcome to.
type subsetResult = subset.Result

// pick picks for a request naming md, allocating nothing.
func (l subsetLB) pick(md map[string]string) (*Instance, string, subsetResult, error) {
	r, err := l.lb.Pick(md)
	if err != nil {
		return nil, "", r, subsetError(err)
	}
	return instanceOf(r.Host), r.Host.Addr, r, nil
}

// subsetRequest is a match encoded once (label.Labels), for repeated picks.
type subsetRequest = subset.Request

func (l subsetLB) prepare(md map[string]string) subsetRequest {
	return subset.Request{Metadata: label.FromMap(md)}
}

// pickRequest is pick for a prepared match: no map work.
func (l subsetLB) pickRequest(req *subsetRequest) (*Instance, string, subsetResult, error) {
	r, err := l.lb.PickRequest(req)
	if err != nil {
		return nil, "", r, subsetError(err)
	}
	return instanceOf(r.Host), r.Host.Addr, r, nil
}

func doneSubset(r subsetResult, latency time.Duration, o Outcome) {
	r.Done(latency, balancer.Outcome(o))
}

// subsetError maps the subset package's errors to the client's, without
// allocating.
func subsetError(err error) error {
	switch {
	case errors.Is(err, subset.ErrNoSubset):
		return ErrNoSubset
	case errors.Is(err, subset.ErrNoHealthyHost), errors.Is(err, balancer.ErrNoEndpoint):
		return ErrNoInstance
	case errors.Is(err, balancer.ErrShed):
		return ErrShed
	}
	return err
}

// subsetConfig converts and validates the public configuration.
func subsetConfig(c SubsetConfig) (subset.Config, error) {
	out := subset.Config{
		FallbackPolicy: subset.Fallback(c.FallbackPolicy),
		DefaultSubset:  c.DefaultSubset,
		PanicModeAny:   c.PanicModeAny,
	}
	for _, s := range c.Selectors {
		out.Selectors = append(out.Selectors, subset.Selector{
			Keys:                s.Keys,
			FallbackPolicy:      subset.Fallback(s.FallbackPolicy),
			FallbackKeysSubset:  s.FallbackKeysSubset,
			SingleHostPerSubset: s.SingleHostPerSubset,
		})
	}
	if err := out.Validate(); err != nil {
		return subset.Config{}, err
	}
	return out, nil
}

// withFallback returns cfg with another cluster-wide fallback policy.
func withFallback(cfg subset.Config, fb Fallback) subset.Config {
	cfg.FallbackPolicy = subset.Fallback(fb)
	return cfg
}
