// Package push owns the push engine: it follows the registry's changes and
// the routing config (internal/config) in revision order and keeps the xDS
// cache (internal/xds) current, so that every subscriber receives what
// changed.
//
// Two paths, each its own goroutine, never waiting for each other:
//   - the endpoint path: an instance change of service S recomputes only S's
//     endpoint sets (the whole service, each subset, selected through the
//     registry's label index) and publishes them at once, never debounced,
//     whatever config work is in flight (seed 001: EDS waited 1m20s behind
//     a full push);
//   - the config path: a VirtualService or DestinationRule change finds the
//     services it touches through config.Index (host -> rules, no services x
//     rules scan) and recomputes their clusters and routes, optionally
//     debounced.
//
// The package declares what it needs from the registry (Source); it does not
// own the registry, the catalog or the store, nor the xDS protocol.
package push
