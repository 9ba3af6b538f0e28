// Package xds owns Sextant's side of the xDS protocol: translating registry
// endpoints and routing config (internal/config) into Envoy v3 resources
// (go-control-plane's protos), a cache that encodes each resource once per
// version and shares the bytes with every subscriber, per-subscriber
// coalescing queues, and the Aggregated Discovery Service over gRPC in both
// variants (state of the world and delta), with ACK/NACK tracking and the
// data behind push status.
//
// It does not decide when or what to recompute: internal/push follows the
// registry and config and calls the translators and Cache.Apply. It keeps
// its own cache and server rather than go-control-plane's SnapshotCache,
// which holds a snapshot per node (go-control-plane #597).
package xds
