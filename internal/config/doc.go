// Package config owns Sextant's routing configuration: Istio's own
// VirtualService and DestinationRule (networking.istio.io/v1) decoded from
// YAML or JSON into istio.io/api's types, held to a documented subset of
// their fields, validated with field paths, mapped onto registry services
// (the host mapping), encoded canonically for the store, and indexed by host
// (Index) so that a change finds the rules it touches without scanning.
//
// It does not own storage, revisions, translation to xDS or pushing: the
// store keeps an object's canonical encoding as a record of kind "config"
// under its Key; internal/push and internal/xds turn the indexed objects into
// resources.
package config
