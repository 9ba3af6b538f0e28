package xds

import (
	"slices"
	"time"
)

// SubscriberStatus is one stream as push status shows it (like istioctl
// proxy-status).
type SubscriberStatus struct {
	ID             uint64       `json:"id"`
	NodeID         string       `json:"node_id"`
	Cluster        string       `json:"cluster,omitempty"`
	Namespace      string       `json:"namespace"`
	Address        string       `json:"address"`
	ConnectedSince time.Time    `json:"connected_since"`
	Protocol       string       `json:"protocol"` // "sotw" or "delta"
	Types          []TypeStatus `json:"types"`
}

// TypeStatus is a subscriber's state for one resource type it asked for.
type TypeStatus struct {
	Type         string    `json:"type"`
	Wildcard     bool      `json:"wildcard"`
	Resources    int       `json:"resources"`
	Pending      int       `json:"pending"`
	Responses    uint64    `json:"responses"`
	VersionSent  string    `json:"version_sent"`
	SentAt       time.Time `json:"sent_at,omitzero"`
	VersionAcked string    `json:"version_acked"`
	AckedAt      time.Time `json:"acked_at,omitzero"`
	// AwaitingAnswer: the last response has not been answered (ACK or NACK)
	// yet.
	AwaitingAnswer bool   `json:"awaiting_answer,omitempty"`
	NACKs          []NACK `json:"nacks,omitempty"`
}

// Status returns every open stream, oldest first.
func (s *Server) Status() []SubscriberStatus {
	s.mu.Lock()
	subs := make([]*subscriber, 0, len(s.subs))
	for _, sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	slices.SortFunc(subs, func(a, b *subscriber) int { return int(a.id) - int(b.id) })
	out := make([]SubscriberStatus, 0, len(subs))
	for _, sub := range subs {
		out = append(out, sub.status())
	}
	return out
}

func (s *subscriber) status() SubscriberStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SubscriberStatus{ID: s.id, NodeID: s.node, Cluster: s.clust, Namespace: s.ns, Address: s.addr,
		ConnectedSince: s.since, Protocol: "sotw"}
	if s.delta {
		st.Protocol = "delta"
	}
	for t := range numTypes {
		ts := &s.t[t]
		if !ts.requested {
			continue
		}
		pending := int(ts.pending.Count())
		if ts.full && pending == 0 {
			pending = 1 // the whole list is due (a new subscription)
		}
		st.Types = append(st.Types, TypeStatus{
			Type: t.String(), Wildcard: ts.wildcard, Resources: s.c.types[t].count(ts),
			Pending: pending, Responses: ts.responses,
			VersionSent: ts.versionSent, SentAt: ts.sentAt, VersionAcked: ts.versionAcked, AckedAt: ts.ackedAt,
			AwaitingAnswer: ts.awaiting != "", NACKs: slices.Clone(ts.nacks),
		})
	}
	return st
}

// count returns how many existing resources st subscribes to.
func (tc *typeCache) count(st *subType) int {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	n := 0
	if st.wildcard {
		n = tc.visible
	}
	for id, ok := st.subs.NextSet(0); ok; id, ok = st.subs.NextSet(id + 1) {
		if int(id) < len(tc.entries) {
			if e := tc.entries[id]; e != nil && !(st.wildcard && !e.hidden) {
				n++
			}
		}
	}
	return n
}
